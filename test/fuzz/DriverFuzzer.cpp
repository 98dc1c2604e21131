//===- DriverFuzzer.cpp - libFuzzer target: descriptions to moe IR --------===//
//
// Bytes as the JSON a user hands the driver: read as a model description, a
// HuggingFace config and a cluster description, and whatever the readers
// accept is built into moe IR as `moec` builds it. Contract: a description
// the frontend accepts (no error) always becomes IR that verifies, so the
// compiler never meets a malformed module or an overflowing shape that the
// frontend let through.
//
//===----------------------------------------------------------------------===//

#include "FuzzJson.h"
#include "FuzzMLIRContext.h"

#include "moe/Dialect/MoE/MoEDialect.h"
#include "moe/Frontend/ClusterToMLIR.h"
#include "moe/Frontend/HFConfig.h"
#include "moe/Frontend/ModelToMLIR.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

using namespace moec::frontend;

/// Builds `spec` into IR (with `cluster` attached when given) and checks
/// that it verifies.
static void build(const ModelSpec &spec, const ClusterSpec *cluster, const char *reader) {
  mlir::MLIRContext &ctx = moec::fuzz::context();
  moec::fuzz::lastDiagnostic.clear();
  mlir::OwningOpRef<mlir::ModuleOp> module = buildModule(spec, ctx);
  if (!module)
    moec::fuzz::broken(std::string("buildModule failed on a model ") + reader + " accepted");
  if (cluster)
    (*module)->setAttr(mlir::moe::MoEDialect::kClusterAttrName, clusterAttr(*cluster, ctx));
  if (mlir::failed(mlir::verify(*module)))
    moec::fuzz::broken(std::string("IR built from a model ") + reader +
                       " accepted does not verify: " + moec::fuzz::lastDiagnostic);
}

/// The smallest model, to carry a fuzzed cluster.
static const ModelSpec &smallModel() {
  static ModelSpec *spec = [] {
    DiagnosticList diags;
    std::shared_ptr<const JsonDoc> doc =
        JsonDoc::parse("small.json", R"({"vocab_size": 16, "d_model": 8, "n_layers": 1,
        "n_heads": 2, "seq_len": 4, "batch_size": 2, "moe": {"num_experts": 2, "top_k": 1, "expert_ffn_dim": 16}})",
                       diags);
    std::optional<ModelSpec> s;
    if (doc)
      s = readModelJson(doc, diags);
    if (!s)
      moec::fuzz::broken("the carrier model does not read");
    return new ModelSpec(*s);
  }();
  return *spec;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::shared_ptr<const JsonDoc> doc = moec::fuzz::parseJson("fuzz.json", data, size);
  if (!doc)
    return 0;
  {
    DiagnosticList diags;
    std::optional<ModelSpec> spec = readModelJson(doc, diags);
    if (moec::fuzz::acceptedModel(spec, diags, "readModelJson"))
      build(*spec, nullptr, "readModelJson");
  }
  {
    DiagnosticList diags;
    HFImportOptions options;
    options.seqLen = size % 2 ? 0 : 64;
    std::optional<ModelSpec> spec = importHFConfig(doc, options, diags);
    if (moec::fuzz::acceptedModel(spec, diags, "importHFConfig"))
      build(*spec, nullptr, "importHFConfig");
  }
  {
    DiagnosticList diags;
    std::optional<ClusterSpec> cluster = readClusterJson(doc, diags);
    moec::fuzz::checkReader(cluster.has_value(), diags, "readClusterJson");
    if (cluster && !diags.hasErrors())
      build(smallModel(), &*cluster, "readClusterJson");
  }
  return 0;
}
