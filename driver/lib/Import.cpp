//===- Import.cpp - the model (and cluster) file to moe IR ----------------===//

#include "moe/Driver/Driver.h"
#include "moe/Frontend/ClusterToMLIR.h"
#include "moe/Frontend/HFConfig.h"

#include "moe/Dialect/MoE/MoEDialect.h"

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
  if (!options.hf)
    return readModelJson(doc, diags);
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
void checkPrecisionOnTarget(const ModelSpec &spec, CompileOptions &options, DiagnosticList &diags) {
  BackendOptions &backend = options.backend;
  if (spec.dtype == "f32")
    return;
  bool backEnd = options.emitsKernels();
  if (backend.targetFromCluster) {
    if (backEnd)
      errs() << "moec: note: kernels for --target host after all: " << spec.dtype
             << " models run on the host only (docs/Targets.md)\n";
    backend.target = &moec::codegen::defaultTarget();
    backend.gemm = backend.gemmGiven;
    backend.targetFromCluster = false;
  }
  if (!backEnd || backend.target->sixteenBitFloats())
    return;
  std::string target = backend.target->name().str();
  std::shared_ptr<const JsonDoc> doc = JsonDoc::load(options.import.model, diags);
  diags.error(
      options.import.model, options.import.hf || !doc ? SourcePos() : doc->valuePos("/dtype"),
      "/dtype: \"" + spec.dtype + "\" models run on --target host only (Halide 14's " + target +
          " back end does not generate 16-bit float kernels); train with dtype f32 on "
          "--target " +
          target);
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> moec::driver::importModule(CompileOptions &options,
                                                             mlir::MLIRContext &context) {
  Stage stage("frontend", options.verbose);
  DiagnosticList diags;
  std::optional<ModelSpec> spec = importModelSpec(options.import, diags);
  if (spec)
    checkPrecisionOnTarget(*spec, options, diags);
  std::optional<ClusterSpec> cluster;
  const std::string &clusterFile = options.import.cluster;
  if (!clusterFile.empty())
    cluster = importCluster(clusterFile, diags);
  errs() << diags.str();
  if (diags.hasErrors() || !spec || (!clusterFile.empty() && !cluster))
    return nullptr;
  return buildModule(*spec, cluster ? &*cluster : nullptr, context);
}
