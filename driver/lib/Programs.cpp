//===- Programs.cpp - the step programs of a binary, one per token share --===//

#include "moe/Codegen/Toolchain.h"
#include "moe/Driver/Driver.h"

#include "moe/Dialect/MoE/MoEDialect.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <limits>

using namespace llvm;
using namespace moec::driver;

namespace {

/// The positive sequence counts of --token-shares B0,B1,...
Expected<SmallVector<int64_t>> parseShares(StringRef text) {
  SmallVector<StringRef> parts;
  text.split(parts, ',');
  SmallVector<int64_t> shares;
  for (StringRef part : parts) {
    int64_t n;
    if (part.trim().getAsInteger(10, n) || n < 1)
      return createStringError("--token-shares takes positive sequence counts B0,B1,..., got '" +
                               part + "'");
    shares.push_back(n);
  }
  return shares;
}

/// Renames the kernels of `module` with `prefix` (another share's program
/// links beside the first's).
void prefixKernels(mlir::ModuleOp module, StringRef prefix) {
  for (auto kernel : llvm::to_vector(module.getOps<mlir::moe::KernelOp>())) {
    auto name = mlir::StringAttr::get(module.getContext(), prefix + kernel.getSymName());
    if (mlir::failed(mlir::SymbolTable::replaceAllSymbolUses(kernel, name, module)))
      continue;
    kernel.setSymName(name);
  }
}

/// The step program's C++, or nothing after a diagnostic. For an
/// executable, the parts of a long step go to `units` (translation units of
/// their own, which compile side by side); --emit=cpp writes one file.
std::optional<std::string> emitProgram(mlir::ModuleOp module,
                                       const moec::codegen::KernelCalls &calls,
                                       const moec::codegen::StepProgramNames &names,
                                       const CompileOptions &options,
                                       std::vector<std::string> &units) {
  std::string text;
  raw_string_ostream os(text);
  if (mlir::failed(moec::codegen::emitStepProgram(module, calls, os, names, *options.backend.target,
                                                  options.emit == Emit::Exe ? &units : nullptr)))
    return std::nullopt;
  return text;
}

/// Replica r's program: partitioned from `source` for replica r.
mlir::FailureOr<Program> replicaProgram(mlir::ModuleOp source, size_t r, std::string symbol,
                                        const CompileOptions &options) {
  Program p;
  p.owned = source.clone();
  if (mlir::failed(runPipeline(*p.owned, options, nullptr, static_cast<int64_t>(r))))
    return mlir::failure();
  prefixKernels(*p.owned, "r" + std::to_string(r) + "_");
  mlir::FailureOr<moec::codegen::KernelCalls> own =
      moec::codegen::KernelCalls::collect(*p.owned, options.backend.gemm);
  if (mlir::failed(own))
    return mlir::failure();
  moec::codegen::StepProgramNames variant;
  variant.symbol = std::move(symbol);
  std::optional<std::string> text = emitProgram(*p.owned, *own, variant, options, p.units);
  if (!text)
    return mlir::failure();
  p.module = *p.owned;
  p.calls = std::move(*own);
  p.text = std::move(*text);
  p.file = "step_r" + std::to_string(r) + ".cpp";
  return p;
}

} // namespace

Error moec::driver::applyTokenShares(mlir::ModuleOp module, CompileOptions &options) {
  ParallelOptions &p = options.parallel;
  if (p.tokenShares.empty())
    return Error::success();
  Expected<SmallVector<int64_t>> shares = parseShares(p.tokenShares);
  if (!shares)
    return shares.takeError();
  if (!options.import.cluster.empty())
    return createStringError(
        "--token-shares sets the shares of --ranks N (a --cluster plan sets its own)");
  int64_t replicas = p.ranks > 1 ? mlir::moe::dataReplicas(p.ranks, std::max(1u, p.tp)) : 1;
  if (p.ranks > 1 && static_cast<int64_t>(shares->size()) != replicas)
    return createStringError("--token-shares has " + Twine(shares->size()) + " entries for the " +
                             Twine(replicas) + " data replicas of --ranks " + Twine(p.ranks));
  if (p.routingGroups && p.routingGroups != shares->size())
    return createStringError("--routing-groups and --token-shares disagree on the groups");
  if (llvm::all_equal(*shares)) {
    // Equal shares are routing groups; they must still make the batch.
    int64_t batch = mlir::moe::batchSequences(module);
    int64_t count = static_cast<int64_t>(shares->size());
    if (batch > 0 && (batch % count != 0 || batch / count != shares->front()))
      return createStringError("--token-shares: " + Twine(count) + " shares of " +
                               Twine(shares->front()) + " sequences do not make the batch of " +
                               Twine(batch) + " sequences");
    p.routingGroups = shares->size();
    return Error::success();
  }
  module->setAttr(mlir::moe::MoEDialect::kTokenSharesAttrName,
                  mlir::Builder(module.getContext()).getDenseI64ArrayAttr(*shares));
  return Error::success();
}

namespace {

/// The attention kernels hold their probabilities at root, batch x heads x
/// S^2 in f32 (codegen/generators/AttentionGenerator.cpp), and Halide 14
/// refuses a buffer past 2^31 - 1 bytes at generation ("Allocation size
/// should be a positive number"): said here, located, with what to change.
mlir::LogicalResult checkAttentionBuffer(mlir::moe::KernelOp kernel, int64_t most) {
  StringRef family = kernel.getFamily();
  auto heads = kernel.getConfig().getAs<mlir::IntegerAttr>("num_heads");
  mlir::FunctionType signature = kernel.getSignature();
  if ((family != "attention" && family != "attention_grad" && family != "latent_attention" &&
       family != "latent_attention_grad") ||
      !heads || signature.getNumInputs() == 0)
    return mlir::success();
  auto q = dyn_cast<mlir::RankedTensorType>(signature.getInput(0));
  if (!q || q.getRank() != 3 || !q.hasStaticShape())
    return mlir::success();
  int64_t batch = q.getShape()[0], seq = q.getShape()[1], h = heads.getInt();
  double bytes = 4.0 * static_cast<double>(batch) * static_cast<double>(h) *
                 static_cast<double>(seq) * static_cast<double>(seq);
  if (bytes <= static_cast<double>(most))
    return mlir::success();
  char gb[32];
  std::snprintf(gb, sizeof gb, "%.2f", bytes / 1e9);
  return kernel.emitError() << family << " over " << seq << " tokens, " << h << " heads and "
                            << batch << " sequences holds " << gb
                            << " GB of f32 probabilities (batch x heads x tokens^2) in one "
                               "buffer, past the 2^31 - 1 bytes Halide 14 allocates at once; "
                               "lower --seq-len or the batch, or split the heads (--tp, "
                               "--ranks)";
}

} // namespace

mlir::LogicalResult moec::driver::checkKernelExtents(mlir::ModuleOp module) {
  constexpr int64_t kMost = std::numeric_limits<int32_t>::max();
  for (auto kernel : module.getOps<mlir::moe::KernelOp>())
    if (mlir::failed(checkAttentionBuffer(kernel, kMost)))
      return mlir::failure();
  mlir::WalkResult walked = module.walk([&](mlir::Operation *op) {
    for (mlir::Type type :
         llvm::concat<const mlir::Type>(op->getOperandTypes(), op->getResultTypes()))
      if (auto t = dyn_cast<mlir::RankedTensorType>(type);
          t && t.hasStaticShape() && t.getNumElements() > kMost) {
        op->emitError() << "a tensor of " << t.getNumElements() << " elements (" << t
                        << "): the kernels index with 32-bit integers, at most " << kMost
                        << " elements; lower the batch, the sequence length or the sizes it "
                           "multiplies, or partition the step (--ranks, --cluster)";
        return mlir::WalkResult::interrupt();
      }
    return mlir::WalkResult::advance();
  });
  return mlir::failure(walked.wasInterrupted());
}

mlir::LogicalResult moec::driver::emitPrograms(mlir::ModuleOp module, mlir::ModuleOp source,
                                               const codegen::KernelCalls &calls,
                                               const CompileOptions &options,
                                               std::vector<Program> &programs) {
  auto shares =
      module->getAttrOfType<mlir::DenseI64ArrayAttr>(mlir::moe::MoEDialect::kTokenSharesAttrName);
  auto grid = module->getAttrOfType<mlir::moe::GridAttr>(mlir::moe::MoEDialect::kGridAttrName);
  codegen::StepProgramNames names;
  // Replica r's program symbol when it is the first of its share.
  auto symbolOf = [&](size_t r) {
    return r == 0 ? names.symbol : "moec_program_r" + std::to_string(r);
  };
  if (shares && grid && grid.getDp() * grid.getEp() > 1)
    for (int64_t share : shares.asArrayRef()) // the first replica with that share
      names.replicaPrograms.push_back(
          symbolOf(llvm::find(shares.asArrayRef(), share) - shares.asArrayRef().begin()));
  std::vector<std::string> units;
  std::optional<std::string> text = emitProgram(module, calls, names, options, units);
  if (!text)
    return mlir::failure();
  programs.push_back({module, calls, *text, "step.cpp", {}, std::move(units)});
  for (size_t r = 1; r < names.replicaPrograms.size(); ++r) {
    std::string symbol = symbolOf(r);
    if (names.replicaPrograms[r] != symbol)
      continue;
    mlir::FailureOr<Program> p = replicaProgram(source, r, symbol, options);
    if (mlir::failed(p))
      return mlir::failure();
    programs.push_back(std::move(*p));
  }
  return mlir::success();
}

nlohmann::json moec::driver::kernelManifest(mlir::ModuleOp module,
                                            const codegen::KernelCalls &calls,
                                            const CompileOptions &options) {
  nlohmann::json manifest = moec::codegen::kernelManifest(module, calls);
  manifest["target"] = options.backend.target->name().str();
  manifest["host_target"] = options.backend.hostTarget;
  return manifest;
}

std::optional<std::string> moec::driver::stepProgramOf(StringRef path, codegen::Gemm gemm,
                                                       mlir::MLIRContext &context) {
  SourceMgr sources;
  mlir::SourceMgrDiagnosticHandler handler(sources, &context);
  std::string message;
  auto input = mlir::openInputFile(path, &message);
  if (!input) {
    errs() << "error: " << message << "\n";
    return std::nullopt;
  }
  sources.AddNewSourceBuffer(std::move(input), SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, &context);
  if (!module)
    return std::nullopt;
  auto calls = codegen::KernelCalls::collect(*module, gemm);
  std::string text;
  raw_string_ostream os(text);
  if (mlir::failed(calls) || mlir::failed(codegen::emitStepProgram(*module, *calls, os)))
    return std::nullopt;
  return text;
}
