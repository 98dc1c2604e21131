//===- Import.cpp - the model (and cluster) file to moe IR ----------------===//

#include "moe/Driver/Driver.h"
#include "moe/Frontend/ClusterToMLIR.h"
#include "moe/Frontend/HFConfig.h"

#include "moe/Dialect/MoE/MoEDialect.h"
#include "moec/contract/NestingDepth.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace moec::driver;
using namespace moec::frontend;

Stage::Stage(const char *name, bool verbose)
    : name(name), verbose(verbose), start(std::chrono::steady_clock::now()) {}

Stage::~Stage() {
  if (verbose)
    errs() << "moec: " << name << ": "
           << static_cast<long long>(std::chrono::duration<double, std::milli>(
                                         std::chrono::steady_clock::now() - start)
                                         .count())
           << " ms\n";
}

mlir::LogicalResult moec::driver::printDiagnostic(mlir::Diagnostic &diag) {
  auto print = [](mlir::Location loc, mlir::DiagnosticSeverity severity, const Twine &text) {
    if (auto file = dyn_cast<mlir::FileLineColLoc>(loc))
      errs() << file.getFilename().getValue() << ":" << file.getLine() << ":" << file.getColumn()
             << ": ";
    else
      errs() << "moec: ";
    errs() << (severity == mlir::DiagnosticSeverity::Error     ? "error: "
               : severity == mlir::DiagnosticSeverity::Warning ? "warning: "
                                                               : "note: ")
           << text << "\n";
  };
  print(diag.getLocation(), diag.getSeverity(), diag.str());
  for (mlir::Diagnostic &note : diag.getNotes())
    print(note.getLocation(), note.getSeverity(), note.str());
  return mlir::success();
}

std::optional<ModelSpec> moec::driver::importModelSpec(const ImportOptions &options,
                                                       DiagnosticList &diags) {
  std::shared_ptr<const JsonDoc> doc = JsonDoc::load(options.model, diags);
  if (!doc)
    return std::nullopt;
  if (!options.hf) {
    // --override FIELD=VALUE (OBJECT.FIELD inside one) and --optimizer
    // FIELD=VALUE set the description's fields before it is read.
    nlohmann::json fields = nlohmann::json::object(), optimizer = nlohmann::json::object();
    if (!parseHFOverrides(options.overrides, "--override", fields, diags, /*nested=*/true) ||
        !parseHFOverrides(options.optimizer, "--optimizer", optimizer, diags))
      return std::nullopt;
    if (!optimizer.empty()) {
      nlohmann::json &o = fields["optimizer"];
      if (!o.is_null() && !o.is_object()) {
        diags.error("--override", SourcePos(),
                    "optimizer=" + o.dump() +
                        " is not an object; set its fields with --optimizer KEY=VALUE or "
                        "--override optimizer.KEY=VALUE");
        return std::nullopt;
      }
      for (auto it = optimizer.begin(); it != optimizer.end(); ++it)
        o[it.key()] = it.value();
    }
    return readModelJson(withModelFields(doc, fields), diags);
  }
  HFImportOptions hf;
  hf.seqLen = options.seqLen;
  hf.batchSize = options.batchSize;
  hf.dtype = options.dtype;
  if (!parseHFOverrides(options.overrides, "--override", hf.overrides, diags) ||
      !parseHFOverrides(options.optimizer, "--optimizer", hf.optimizer, diags) ||
      (!options.capacityFactor.empty() &&
       !parseHFCapacity(options.capacityFactor, hf.capacityFactor, diags)))
    return std::nullopt;
  return importHFConfig(doc, hf, diags);
}

std::optional<ClusterSpec> moec::driver::importCluster(const std::string &path,
                                                       DiagnosticList &diags) {
  std::shared_ptr<const JsonDoc> doc = JsonDoc::load(path, diags);
  if (!doc)
    return std::nullopt;
  return readClusterJson(doc, diags);
}

mlir::OwningOpRef<mlir::ModuleOp> moec::driver::buildModule(const ModelSpec &spec,
                                                            const ClusterSpec *cluster,
                                                            mlir::MLIRContext &context) {
  mlir::OwningOpRef<mlir::ModuleOp> module = frontend::buildModule(spec, context);
  if (module && cluster)
    (*module)->setAttr(mlir::moe::MoEDialect::kClusterAttrName, clusterAttr(*cluster, context));
  return module;
}

namespace {

/// Halide 14's OpenCL back end has no bf16 (f16 needs cl_khr_fp16), and
/// its CUDA back end fails on bf16: low precision runs on a target with
/// 16-bit kernels. A target the cluster chose gives way to the host; one
/// --target named is an error.
void checkPrecisionOnTarget(const std::string &dtype, CompileOptions &options,
                            DiagnosticList &diags) {
  BackendOptions &backend = options.backend;
  if (dtype == "f32")
    return;
  bool backEnd = options.emitsKernels();
  if (backend.targetFromCluster) {
    if (backEnd)
      errs() << "moec: note: kernels for --target host after all: " << dtype
             << " models run on the host only (docs/Targets.md)\n";
    backend.target = &moec::codegen::defaultTarget();
    backend.gemm = backend.gemmGiven;
    backend.targetFromCluster = false;
  }
  if (!backEnd || backend.target->sixteenBitFloats())
    return;
  std::string target = backend.target->name().str();
  bool json = !isMlirInput(options.import);
  std::shared_ptr<const JsonDoc> doc = json ? JsonDoc::load(options.import.model, diags) : nullptr;
  diags.error(
      options.import.model, options.import.hf || !doc ? SourcePos() : doc->valuePos("/dtype"),
      "/dtype: \"" + dtype + "\" models run on --target host only (Halide 14's " + target +
          " back end does not generate 16-bit float kernels); train with dtype f32 on "
          "--target " +
          target);
}

/// The type a module's step computes in: its model's dtype (moe.model),
/// else the narrowest float type of its values.
std::string dtypeOf(mlir::ModuleOp module) {
  if (auto model = module->getAttrOfType<mlir::StringAttr>(mlir::moe::MoEDialect::kModelAttrName)) {
    nlohmann::json json = nlohmann::json::parse(model.getValue().str(), nullptr, false);
    if (json.is_object() && json.contains("spec") && json["spec"].is_object() &&
        json["spec"].contains("dtype") && json["spec"]["dtype"].is_string())
      return json["spec"]["dtype"].get<std::string>();
  }
  std::string dtype = "f32";
  module->walk([&](mlir::Operation *op) {
    for (mlir::Type type : op->getResultTypes()) {
      mlir::Type element = mlir::getElementTypeOrSelf(type);
      if (element.isBF16() || element.isF16())
        dtype = element.isBF16() ? "bf16" : "f16";
    }
  });
  return dtype;
}

/// A forward step in moe IR (as `moe-translate --import-model` writes it,
/// perhaps edited by hand or by other tools); errors are located.
mlir::OwningOpRef<mlir::ModuleOp> parseStepModule(const std::string &path,
                                                  mlir::MLIRContext &context) {
  std::string message;
  std::unique_ptr<MemoryBuffer> input = mlir::openInputFile(path, &message);
  if (!input) {
    errs() << "moec: error: " << message << "\n";
    return nullptr;
  }
  using moec::contract::kMaxMlirNesting;
  if (auto deep = moec::contract::findTooDeep(input->getBuffer(), kMaxMlirNesting,
                                              moec::contract::kMlirNesting)) {
    errs() << path << ":" << deep->line << ":" << deep->column
           << ": error: brackets nested deeper than " << kMaxMlirNesting << " levels\n";
    return nullptr;
  }
  SourceMgr sources;
  sources.AddNewSourceBuffer(std::move(input), SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, &context);
  if (!module)
    return nullptr;
  if ((*module)->hasAttr(mlir::moe::MoEDialect::kBufferPlanAttrName)) {
    errs() << path << ": error: this module is a lowered training step (it has a "
           << mlir::moe::MoEDialect::kBufferPlanAttrName
           << "); moec reads the forward step (moe-translate --import-model writes one), and "
              "moe-translate --emit-step-program turns a lowered step into C++\n";
    return nullptr;
  }
  if (!module->lookupSymbol("train_step")) {
    errs() << path << ": error: no func.func @train_step: moec reads a forward training step "
           << "(moe-translate --import-model writes one)\n";
    return nullptr;
  }
  return module;
}

/// A module from moe IR: the precision on the target checked, the cluster attached.
mlir::OwningOpRef<mlir::ModuleOp> importStepModule(CompileOptions &options,
                                                   mlir::MLIRContext &context) {
  mlir::OwningOpRef<mlir::ModuleOp> module = parseStepModule(options.import.model, context);
  if (!module)
    return nullptr;
  DiagnosticList diags;
  checkPrecisionOnTarget(dtypeOf(*module), options, diags);
  std::optional<ClusterSpec> cluster;
  if (!options.import.cluster.empty())
    cluster = importCluster(options.import.cluster, diags);
  errs() << diags.str();
  if (diags.hasErrors() || (!options.import.cluster.empty() && !cluster))
    return nullptr;
  if (cluster)
    (*module)->setAttr(mlir::moe::MoEDialect::kClusterAttrName, clusterAttr(*cluster, context));
  return module;
}

} // namespace

bool moec::driver::isMlirInput(const ImportOptions &options) {
  return !options.hf && StringRef(options.model).ends_with(".mlir");
}

mlir::OwningOpRef<mlir::ModuleOp> moec::driver::importModule(CompileOptions &options,
                                                             mlir::MLIRContext &context) {
  Stage stage("frontend", options.verbose);
  if (isMlirInput(options.import))
    return importStepModule(options, context);
  DiagnosticList diags;
  std::optional<ModelSpec> spec = importModelSpec(options.import, diags);
  if (spec)
    checkPrecisionOnTarget(spec->dtype, options, diags);
  std::optional<ClusterSpec> cluster;
  const std::string &clusterFile = options.import.cluster;
  if (!clusterFile.empty())
    cluster = importCluster(clusterFile, diags);
  errs() << diags.str();
  if (diags.hasErrors() || !spec || (!clusterFile.empty() && !cluster))
    return nullptr;
  return buildModule(*spec, cluster ? &*cluster : nullptr, context);
}
