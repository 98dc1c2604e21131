//===- moe-translate.cpp - model and cluster files to moe IR --------------===//
//
//   moe-translate --import-model examples/models/tiny.json
//   moe-translate --import-hf-config config.json --seq-len 4096 --batch-size 1
//   ... --cluster examples/clusters/local-cpu.json -o model.mlir
//   moe-translate --emit-step-program lowered.mlir [--gemm auto|halide|blas]
//
// The last form is the back end's emission alone: lowered moe IR (moec
// --emit=mlir) to its C++ step program. The import and emission are the
// driver library's (driver/include/moe/Driver/Driver.h), as moec's.
//
// Errors are `file:line:col: error: /json/pointer: message` on stderr with a
// non-zero exit; the output file is only written when everything succeeded.
//
//===----------------------------------------------------------------------===//

#include "moe/Driver/Driver.h"
#include "moe/InitAllDialects.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace moec::frontend;

namespace {

/// moe-translate's flags, bound by main().
struct TranslateOptions {
  moec::driver::ImportOptions import;
  std::string hfFile, output = "-", stepProgram;
  bool emitModelJson = false, warningsAsErrors = false;
  moec::codegen::Gemm gemm = moec::codegen::Gemm::Auto;
};

int error(const Twine &message, int rc) {
  errs() << "moe-translate: error: " << message << "\n";
  return rc;
}

/// Writes -o (created only when `write` is called); returns the exit status.
int writeOutput(StringRef path, function_ref<void(raw_ostream &)> write) {
  if (Error e = moec::driver::writeOutput(path, write))
    return error(toString(std::move(e)), 1);
  return 0;
}

/// Prints diagnostics (under -Werror warnings as errors); true on errors.
bool report(const DiagnosticList &diags, bool warningsAsErrors) {
  const DiagnosticList &shown = warningsAsErrors ? diags.warningsAsErrors() : diags;
  errs() << shown.str();
  return shown.hasErrors();
}

/// Lowered IR to the C++ step program.
int emitStepProgram(const TranslateOptions &o, mlir::MLIRContext &context) {
  std::optional<std::string> text = moec::driver::stepProgramOf(o.stepProgram, o.gemm, context);
  if (!text)
    return 1;
  return writeOutput(o.output, [&](raw_ostream &out) { out << *text; });
}

/// The model (and cluster) to moe IR, or to a MoEC model JSON.
int importModel(TranslateOptions &o, mlir::MLIRContext &context) {
  DiagnosticList diags;
  std::optional<ModelSpec> spec = moec::driver::importModelSpec(o.import, diags);
  if (o.emitModelJson) {
    if (report(diags, o.warningsAsErrors) || !spec)
      return 1;
    return writeOutput(o.output,
                       [&](raw_ostream &os) { os << modelSpecToJson(*spec).dump(2) << "\n"; });
  }
  std::optional<ClusterSpec> cluster;
  if (!o.import.cluster.empty())
    cluster = moec::driver::importCluster(o.import.cluster, diags);
  if (report(diags, o.warningsAsErrors) || !spec || (!o.import.cluster.empty() && !cluster))
    return 1;
  auto module = moec::driver::buildModule(*spec, cluster ? &*cluster : nullptr, context);
  if (!module || mlir::failed(mlir::verify(*module)))
    return error("the generated IR does not verify (an internal error: please report this "
                 "with the input file)",
                 3);
  return writeOutput(o.output, [&](raw_ostream &os) { module->print(os), os << "\n"; });
}

/// The flags, bound to `o`.
void bindOptions(moec::driver::OptionsBinder &binder, TranslateOptions &o) {
  binder.opt("import-model", o.import.model, cl::desc("MoEC JSON model description"),
             cl::value_desc("model.json"));
  binder.opt("import-hf-config", o.hfFile,
             cl::desc("HuggingFace config.json of a supported MoE family"),
             cl::value_desc("config.json"));
  o.import.bindHFOptions(binder, "--import-hf-config");
  binder.opt("emit-model-json", o.emitModelJson,
             cl::desc("Write the imported model as a MoEC model JSON (editable), not moe IR"));
  binder.opt("cluster", o.import.cluster,
             cl::desc("JSON cluster description to attach as moe.cluster"),
             cl::value_desc("cluster.json"));
  binder.opt("o", o.output, cl::desc("Output file"), cl::value_desc("file"));
  binder.opt("emit-step-program", o.stepProgram,
             cl::desc("Lowered moe IR (moec --emit=mlir) to its C++ step program"),
             cl::value_desc("lowered.mlir"));
  moec::driver::bindGemmOption(binder, o.gemm,
                               "With --emit-step-program: who computes the contractions");
  binder.opt("Werror", o.warningsAsErrors, cl::desc("Treat warnings as errors"));
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  cl::OptionCategory category("moe-translate options");
  TranslateOptions o;
  moec::driver::OptionsBinder binder(category);
  bindOptions(binder, o);
  binder.hideOtherOptions();
  cl::ParseCommandLineOptions(argc, argv, "MoEC translator: model and cluster files to moe IR\n");

  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  if (!o.stepProgram.empty()) {
    if (!o.import.model.empty() || !o.hfFile.empty() || !o.import.cluster.empty())
      return error("--emit-step-program takes lowered IR alone", 2);
    return emitStepProgram(o, context);
  }
  if (o.import.model.empty() == o.hfFile.empty())
    return error("give one model: --import-model FILE or --import-hf-config FILE", 2);
  if (Error e = moec::driver::checkImportOptions(o.import))
    return error(toString(std::move(e)), 2);
  if (o.hfFile.empty() && binder.given("capacity-factor"))
    return error("--capacity-factor applies to --import-hf-config (for a MoEC model, "
                 "--override moe.capacity_factor=F)",
                 2);
  o.import.hf = !o.hfFile.empty();
  if (o.import.hf)
    o.import.model = o.hfFile;
  return importModel(o, context);
}
