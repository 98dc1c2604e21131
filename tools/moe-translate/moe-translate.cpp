//===- moe-translate.cpp - model and cluster files to moe IR --------------===//
//
//   moe-translate --import-model examples/models/tiny.json
//   moe-translate --import-hf-config config.json --seq-len 4096 --batch-size 1
//   ... --cluster examples/clusters/local-cpu.json -o model.mlir
//   moe-translate --emit-step-program lowered.mlir [--gemm auto|halide|blas]
//
// The last form is the back end's emission alone: lowered moe IR (moec
// --emit=mlir, or moe-opt --moe-train-pipeline) to its C++ step program.
//
// Errors are `file:line:col: error: /json/pointer: message` on stderr with a
// non-zero exit; the output file is only written when everything succeeded.
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/StepProgram.h"
#include "moe/Frontend/ClusterToMLIR.h"
#include "moe/Frontend/HFConfig.h"
#include "moe/Frontend/ModelToMLIR.h"
#include "moe/Dialect/MoE/MoEDialect.h"
#include "moe/InitAllDialects.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace moec::frontend;

static cl::OptionCategory category("moe-translate options");
static cl::opt<std::string> modelFile("import-model", cl::desc("MoEC JSON model description"),
                                      cl::value_desc("model.json"), cl::cat(category));
static cl::opt<std::string> hfFile("import-hf-config",
                                   cl::desc("HuggingFace config.json of a supported MoE family"),
                                   cl::value_desc("config.json"), cl::cat(category));
static cl::opt<int64_t> seqLen("seq-len",
                               cl::desc("Sequence length for --import-hf-config (default: "
                                        "min(max_position_embeddings, 4096))"),
                               cl::init(0), cl::cat(category));
static cl::opt<int64_t> batchSize("batch-size", cl::desc("Batch size for --import-hf-config"),
                                  cl::init(1), cl::cat(category));
static cl::opt<std::string> dtype("dtype",
                                  cl::desc("Element type for --import-hf-config: f32, bf16, f16"),
                                  cl::init("f32"), cl::cat(category));
static cl::opt<std::string>
    hfOverride("override",
               cl::desc("With --import-hf-config: set top-level config.json fields first, "
                        "KEY=VALUE,... (e.g. num_hidden_layers=2,hidden_size=256)"),
               cl::value_desc("list"), cl::cat(category));
static cl::opt<std::string>
    hfOptimizer("optimizer",
                cl::desc("With --import-hf-config: optimiser settings, KEY=VALUE,... (the "
                         "model JSON's optimizer fields: lr, warmup_steps, total_steps, ...)"),
                cl::value_desc("list"), cl::cat(category));
static cl::opt<std::string>
    hfCapacity("capacity-factor",
               cl::desc("With --import-hf-config: expert capacity factor, a number or "
                        "'dropless' (default: the family's own routing)"),
               cl::value_desc("F|dropless"), cl::init(""), cl::cat(category));
static cl::opt<bool> emitModelJson("emit-model-json",
                                   cl::desc("Write the imported model as a MoEC model JSON "
                                            "(editable) instead of moe IR"),
                                   cl::cat(category));
static cl::opt<std::string>
    clusterFile("cluster", cl::desc("JSON cluster description to attach as moe.cluster"),
                cl::value_desc("cluster.json"), cl::cat(category));
static cl::opt<std::string> outputFile("o", cl::desc("Output file"), cl::value_desc("file"),
                                       cl::init("-"), cl::cat(category));
static cl::opt<std::string>
    stepProgramFile("emit-step-program",
                    cl::desc("Lowered moe IR (moec --emit=mlir) to its C++ step program"),
                    cl::value_desc("lowered.mlir"), cl::cat(category));
static cl::opt<moec::codegen::Gemm>
    gemm("gemm", cl::desc("With --emit-step-program: who computes the contractions"),
         cl::values(clEnumValN(moec::codegen::Gemm::Auto, "auto", "OpenBLAS for large products"),
                    clEnumValN(moec::codegen::Gemm::Halide, "halide", "Halide schedules only"),
                    clEnumValN(moec::codegen::Gemm::Blas, "blas", "OpenBLAS extern stages")),
         cl::init(moec::codegen::Gemm::Auto), cl::cat(category));
static cl::opt<bool> warningsAsErrors("Werror", cl::desc("Treat warnings as errors"),
                                      cl::cat(category));

/// Writes -o (created only when `write` is called); returns the exit status.
static int writeOutput(llvm::function_ref<void(raw_ostream &)> write) {
  std::string errorMessage;
  auto output = mlir::openOutputFile(outputFile, &errorMessage);
  if (!output) {
    errs() << "moe-translate: error: " << errorMessage << "\n";
    return 1;
  }
  write(output->os());
  output->keep();
  return 0;
}

/// Prints diagnostics; true when there are errors. Under -Werror a warning
/// is printed as the error it becomes.
static bool report(const DiagnosticList &diags) {
  if (!warningsAsErrors) {
    errs() << diags.str();
    return diags.hasErrors();
  }
  DiagnosticList strict;
  for (const Diagnostic &d : diags.all())
    strict.error(d.file, d.pos,
                 d.kind == Diagnostic::Kind::Warning ? d.message + " [-Werror]" : d.message);
  errs() << strict.str();
  return strict.hasErrors();
}

/// Lowered IR to the C++ step program.
static int emitStepProgram() {
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  llvm::SourceMgr sources;
  mlir::SourceMgrDiagnosticHandler handler(sources, &context);
  std::string errorMessage;
  auto input = mlir::openInputFile(stepProgramFile, &errorMessage);
  if (!input) {
    errs() << "moe-translate: error: " << errorMessage << "\n";
    return 1;
  }
  sources.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, &context);
  if (!module)
    return 1;
  auto calls = moec::codegen::KernelCalls::collect(*module, gemm);
  if (mlir::failed(calls))
    return 1;
  std::string text;
  llvm::raw_string_ostream os(text);
  if (mlir::failed(moec::codegen::emitStepProgram(*module, *calls, os)))
    return 1;
  return writeOutput([&](raw_ostream &out) { out << text; });
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  // --help lists this tool's options; LLVM's and MLIR's stay usable and
  // are listed by --help-hidden.
  for (auto &entry : cl::getRegisteredOptions())
    if (entry.second->getOptionHiddenFlag() == cl::NotHidden &&
        !llvm::is_contained(entry.second->Categories, &category) &&
        !llvm::is_contained(ArrayRef<StringRef>{"help", "help-list", "version"}, entry.first))
      entry.second->setHiddenFlag(cl::Hidden);
  cl::ParseCommandLineOptions(argc, argv,
                              "MoEC translator: model and cluster descriptions to moe IR\n");

  if (!stepProgramFile.empty()) {
    if (!modelFile.empty() || !hfFile.empty() || !clusterFile.empty()) {
      errs() << "moe-translate: error: --emit-step-program takes lowered IR alone\n";
      return 2;
    }
    return emitStepProgram();
  }
  if (modelFile.empty() == hfFile.empty()) {
    errs() << "moe-translate: error: give one model: --import-model FILE or "
              "--import-hf-config FILE\n";
    return 2;
  }
  if (seqLen < 0 || seqLen > (1 << 20) || batchSize < 1 || batchSize > (1 << 20)) {
    errs() << "moe-translate: error: --seq-len must be in [1, 1048576] and "
              "--batch-size in [1, 1048576]\n";
    return 2;
  }
  if (dtype != "f32" && dtype != "bf16" && dtype != "f16") {
    errs() << "moe-translate: error: --dtype must be f32, bf16 or f16, got '" << dtype << "'\n";
    return 2;
  }

  DiagnosticList diags;
  std::optional<ModelSpec> spec;
  if (!modelFile.empty()) {
    if (std::shared_ptr<const JsonDoc> doc = JsonDoc::load(modelFile, diags))
      spec = readModelJson(doc, diags);
  } else if (std::shared_ptr<const JsonDoc> doc = JsonDoc::load(hfFile, diags)) {
    HFImportOptions options;
    options.seqLen = seqLen;
    options.batchSize = batchSize;
    options.dtype = dtype;
    if (parseHFOverrides(hfOverride, "--override", options.overrides, diags) &&
        parseHFOverrides(hfOptimizer, "--optimizer", options.optimizer, diags) &&
        (hfCapacity.empty() || parseHFCapacity(hfCapacity, options.capacityFactor, diags)))
      spec = importHFConfig(doc, options, diags);
  }
  if ((!hfOverride.empty() || !hfOptimizer.empty() || hfCapacity.getNumOccurrences()) &&
      hfFile.empty()) {
    errs() << "moe-translate: error: --override, --optimizer and --capacity-factor apply to "
              "--import-hf-config (edit a MoEC model JSON directly)\n";
    return 2;
  }
  if (emitModelJson) {
    if (report(diags) || !spec)
      return 1;
    return writeOutput([&](raw_ostream &os) { os << modelSpecToJson(*spec).dump(2) << "\n"; });
  }
  std::optional<ClusterSpec> cluster;
  if (!clusterFile.empty()) {
    std::shared_ptr<const JsonDoc> clusterDoc = JsonDoc::load(clusterFile, diags);
    if (clusterDoc)
      cluster = readClusterJson(clusterDoc, diags);
  }
  if (report(diags) || !spec || (!clusterFile.empty() && !cluster))
    return 1;

  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module = buildModule(*spec, context);
  if (module && cluster)
    (*module)->setAttr(mlir::moe::MoEDialect::kClusterAttrName, clusterAttr(*cluster, context));
  if (!module || mlir::failed(mlir::verify(*module))) {
    errs() << "moe-translate: internal error: the generated IR does not "
              "verify (please report this with the input file)\n";
    return 3;
  }

  return writeOutput([&](raw_ostream &os) {
    module->print(os);
    os << "\n";
  });
}
