//===- CompressCollectives.cpp - the moe-compress-collectives pass --------===//
//
// Attaches codecs to the gradient all-reduces of a partitioned step (after
// moe-insert-collectives). The runtime runs them compressed after
// `warmup-steps` uncompressed steps (runtime/lib/StepComm.cpp).
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/CostModel.h"
#include "moe/Transforms/Passes.h"
#include "moec/contract/Abi.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <algorithm>
#include <cstdlib>

namespace mlir::moe {
#define GEN_PASS_DEF_COMPRESSCOLLECTIVESPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// "none", or a codec: fp16, bf16, sign, int8[:block], topk[:ratio],
/// powersgd[:rank]. Null with an error for anything else.
FailureOr<CodecAttr> parseCodec(ModuleOp module, StringRef option, StringRef text,
                                bool errorFeedback) {
  auto [name, arg] = text.split(':');
  MLIRContext *ctx = module.getContext();
  auto bad = [&](const Twine &why) -> FailureOr<CodecAttr> {
    mlir::emitError(module.getLoc())
        << "moe-compress-collectives: " << option << "=" << text << ": " << why;
    return failure();
  };
  double value = 0;
  bool hasArg = text.contains(':');
  if (hasArg) {
    std::string s = arg.str();
    char *end = nullptr;
    value = std::strtod(s.c_str(), &end);
    if (s.empty() || *end)
      return bad("the parameter after ':' must be a number");
  }
  auto integer = [&](int64_t fallback) -> int64_t {
    return hasArg ? static_cast<int64_t>(value) : fallback;
  };
  auto emitError = [&]() {
    return mlir::emitError(module.getLoc()) << "moe-compress-collectives: ";
  };
  if (name == "fp16" || name == "bf16" || name == "sign") {
    if (hasArg)
      return bad("this codec takes no parameter");
    CodecKind kind = name == "fp16"   ? CodecKind::fp16
                     : name == "bf16" ? CodecKind::bf16
                                      : CodecKind::sign;
    return CodecAttr::get(ctx, kind, 0, 0.0, 0, kind == CodecKind::sign && errorFeedback);
  }
  if (name == "int8") {
    if (hasArg && (value < 1 || value != static_cast<double>(integer(0))))
      return bad("int8:BLOCK needs a whole block size >= 1");
    return CodecAttr::getChecked(emitError, ctx, CodecKind::int8, integer(256), llvm::APFloat(0.0),
                                 int64_t(0), false);
  }
  if (name == "topk") {
    if (hasArg && !(value > 0 && value <= 1))
      return bad("topk:RATIO needs a ratio in (0, 1]");
    return CodecAttr::getChecked(emitError, ctx, CodecKind::topk, int64_t(0),
                                 llvm::APFloat(hasArg ? value : 0.01), int64_t(0), errorFeedback);
  }
  if (name == "powersgd") {
    if (hasArg && (value < 1 || value != static_cast<double>(integer(0))))
      return bad("powersgd:RANK needs a whole rank >= 1");
    return CodecAttr::getChecked(emitError, ctx, CodecKind::powersgd, int64_t(0),
                                 llvm::APFloat(0.0), integer(4), errorFeedback);
  }
  return bad("unknown codec (expected none, fp16, bf16, int8[:block], topk[:ratio], sign "
             "or powersgd[:rank])");
}

/// `auto`: the cost model's choice for one collective of `elems` f32 values
/// over `axes` of the grid. Candidates go from exact to lossier (none,
/// bf16, int8 with blocks of 256); a lossier codec is taken only when its
/// predicted time (wire bytes on the group's links plus the encode/decode
/// kernels, CostModel.h) beats the incumbent's by at least 10%. Sparsifying
/// codecs (topk, sign, powersgd) change convergence and stay opt-in.
struct CodecChooser {
  const cost::Cluster &cluster;
  GridAttr grid;

  CodecAttr choose(Operation *op, ArrayAttr axes, int64_t elems, bool allReduce) const {
    SmallVector<StringRef> names;
    for (Attribute a : axes)
      names.push_back(cast<StringAttr>(a).getValue());
    cost::Group group = cost::gridGroup(grid.getDp(), grid.getEp(), grid.getTp(), names);
    if (group.size() <= 1)
      return {}; // nothing travels
    // The slowest memory of the group runs the codec kernels.
    const cost::DeviceKind *kind = &cluster.kindOf(group.front());
    for (int64_t r : group)
      if (cluster.kindOf(r).memoryBandwidth < kind->memoryBandwidth)
        kind = &cluster.kindOf(r);
    double n = static_cast<double>(elems);
    auto wire = [&](double bytes) {
      return allReduce ? cost::allReduceTime(cluster, group, bytes)
                       : cost::allToAllTime(cluster, group, bytes);
    };
    MLIRContext *ctx = op->getContext();
    double plain = wire(4 * n), best = plain;
    CodecAttr chosen;
    for (CodecKind k : {CodecKind::bf16, CodecKind::int8}) {
      double bytes = static_cast<double>(moert_codec_encoded_bytes(
          static_cast<int>(k), k == CodecKind::int8 ? 256 : 0, 0.0, 0, elems, 0, 0));
      double t = wire(bytes) + cost::codecTime(*kind, n, bytes, allReduce ? 4 : 2);
      if (t < 0.9 * best) {
        best = t;
        chosen = CodecAttr::get(ctx, k, k == CodecKind::int8 ? 256 : 0, 0.0, 0, false);
      }
    }
    op->setAttr(MoEDialect::kCodecChoiceAttrName,
                CodecChoiceAttr::get(ctx, chosen ? stringifyCodecKind(chosen.getKind()) : "none",
                                     plain, best));
    return chosen;
  }
};

struct CompressCollectivesPass
    : public moe::impl::CompressCollectivesPassBase<CompressCollectivesPass> {
  using CompressCollectivesPassBase::CompressCollectivesPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (warmupSteps < 0) {
      mlir::emitError(module.getLoc())
          << "moe-compress-collectives: warmup-steps must be >= 0, got " << warmupSteps;
      return signalPassFailure();
    }
    // Per parameter group: replicated parameters, expert shards, and the
    // vocabulary matrices (token embedding table and the LM head).
    FailureOr<CodecAttr> codecs[3];
    StringRef dense = denseGrad.empty() ? StringRef(grad) : StringRef(denseGrad);
    StringRef texts[3] = {dense, expertGrad.empty() ? StringRef(grad) : StringRef(expertGrad),
                          embeddingGrad.empty() ? dense : StringRef(embeddingGrad)};
    StringRef names[3] = {denseGrad.empty() ? "grad" : "dense-grad",
                          expertGrad.empty() ? "grad" : "expert-grad",
                          !embeddingGrad.empty() ? "embedding-grad"
                          : denseGrad.empty()    ? "grad"
                                                 : "dense-grad"};
    bool automatic[3] = {texts[0] == "auto", texts[1] == "auto", texts[2] == "auto"};
    for (int g = 0; g < 3; ++g) {
      if (texts[g] == "none" || automatic[g]) {
        codecs[g] = CodecAttr();
        continue;
      }
      codecs[g] = parseCodec(module, names[g], texts[g], errorFeedback);
      if (failed(codecs[g]))
        return signalPassFailure();
    }
    // `auto` asks the cost model, on the module's cluster and grid.
    std::optional<cost::Cluster> cluster;
    GridAttr grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    if (automatic[0] || automatic[1] || automatic[2] || dispatch == "auto") {
      auto attr = module->getAttrOfType<DictionaryAttr>(MoEDialect::kClusterAttrName);
      if (!attr || !grid) {
        module.emitError("moe-compress-collectives: 'auto' chooses codecs with the cost "
                         "model and needs the module's moe.cluster and moe.grid (moec "
                         "--cluster, or moe-translate --cluster and moe-plan-sharding)");
        return signalPassFailure();
      }
      FailureOr<cost::Cluster> read =
          cost::Cluster::fromAttr(attr, [&] { return mlir::emitError(module.getLoc()); });
      if (failed(read))
        return signalPassFailure();
      if (read->numRanks() < grid.getNumRanks()) {
        mlir::emitError(module.getLoc())
            << "moe-compress-collectives: the grid has " << grid.getNumRanks()
            << " ranks but the cluster only " << read->numRanks();
        return signalPassFailure();
      }
      cluster = std::move(*read);
    }
    std::optional<CodecChooser> chooser;
    if (cluster)
      chooser.emplace(CodecChooser{*cluster, grid});
    int compressed = 0, tooSmall = 0;
    if (dispatch == "auto") {
      module.walk([&](AllToAllOp exchange) {
        auto type = cast<RankedTensorType>(exchange.getInput().getType());
        if (CodecAttr codec =
                chooser->choose(exchange, exchange.getAxes(), type.getNumElements(), false)) {
          exchange.setCodecAttr(codec);
          ++compressed;
        }
      });
    } else if (dispatch != "none") {
      FailureOr<CodecAttr> codec = parseCodec(module, "dispatch", dispatch, false);
      if (failed(codec))
        return signalPassFailure();
      if (!codec->isElementwise()) {
        mlir::emitError(module.getLoc()) << "moe-compress-collectives: dispatch=" << dispatch
                                         << ": token payloads take fp16, bf16 or int8";
        return signalPassFailure();
      }
      module.walk([&](AllToAllOp exchange) {
        exchange.setCodecAttr(*codec);
        ++compressed;
      });
    }
    // The vocabulary matrices: tables of moe.embedding, and weights of the
    // linears whose logits feed moe.cross_entropy.
    llvm::DenseSet<StringAttr> vocabulary;
    auto paramOf = [](Value v) -> StringAttr {
      if (auto copy = v.getDefiningOp<CastOp>()) // a mixed-precision copy
        v = copy.getInput();
      auto get = v.getDefiningOp<GetParamOp>();
      return get ? get.getNameAttr().getAttr() : StringAttr();
    };
    module.walk([&](Operation *op) {
      StringAttr name;
      if (auto e = dyn_cast<EmbeddingOp>(op))
        name = paramOf(e.getTable());
      else if (auto ce = dyn_cast<CrossEntropyOp>(op))
        if (auto head = ce.getLogits().getDefiningOp<LinearOp>())
          name = paramOf(head.getWeight());
      if (name)
        vocabulary.insert(name);
    });
    for (auto fn : module.getOps<func::FuncOp>())
      fn.walk([&](AdamWUpdateOp update) {
        auto reduce = update.getGrad().getDefiningOp<AllReduceOp>();
        if (!reduce || reduce.getCodecAttr())
          return;
        // Over a group of one nothing travels: a codec would only lose
        // precision (expert shards when dp = 1).
        if (grid && grid.getGroupSize(reduce.getAxes().getValue()) <= 1)
          return;
        auto param = module.lookupSymbol<ParamOp>(update.getParamAttr());
        int g = param && param->hasAttr(MoEDialect::kShardAttrName)    ? 1
                : vocabulary.contains(update.getParamAttr().getAttr()) ? 2
                                                                       : 0;
        CodecAttr codec = *codecs[g];
        if (automatic[g])
          codec = chooser->choose(reduce, reduce.getAxes(),
                                  cast<RankedTensorType>(reduce.getType()).getNumElements(), true);
        if (!codec)
          return;
        // Vectors (norm gains, biases) stay exact under the factorising and
        // sparsifying codecs: PowerSGD has no matrix to factor, and top-k or
        // sign would send a sliver of a tensor that is a rounding error of
        // the step's bytes (DGC leaves normalisation layers uncompressed).
        if ((codec.getKind() == CodecKind::powersgd || codec.getKind() == CodecKind::topk ||
             codec.getKind() == CodecKind::sign) &&
            cast<RankedTensorType>(reduce.getType()).getRank() < 2)
          return;
        // PowerSGD factors a matrix [numel / last, last] into rank-r
        // factors: where they would not be at most half its size (a small
        // side, or a rank near it), it sends more than it saves and adds
        // its error for nothing. Such matrices stay exact, as PyTorch's
        // PowerSGD hook leaves them (min_compression_rate 2).
        if (codec.getKind() == CodecKind::powersgd) {
          auto type = cast<RankedTensorType>(reduce.getType());
          int64_t cols = type.getShape().back(), rows = type.getNumElements() / cols;
          int64_t r = std::max<int64_t>(1, std::min({codec.getRank(), rows, cols}));
          if (2 * r * (rows + cols) > rows * cols) {
            ++tooSmall;
            return;
          }
        }
        reduce.setCodecAttr(codec);
        ++compressed;
      });
    if (compressed == 0 && tooSmall > 0) {
      module.emitWarning() << "moe-compress-collectives: PowerSGD compresses none of the "
                           << tooSmall
                           << " gradient matrices: at this rank its factors would be more than "
                              "half of each (a smaller rank compresses them)";
    } else if (compressed == 0 && (*codecs[0] || *codecs[1] || *codecs[2] ||
                                   (dispatch != "none" && dispatch != "auto"))) {
      module.emitError("moe-compress-collectives: no collective to compress (run after "
                       "moe-insert-collectives on a partitioned step; reductions over a "
                       "group of one rank, such as expert shards at dp = 1, send nothing "
                       "and stay exact)");
      return signalPassFailure();
    }
    module->setAttr(MoEDialect::kCompressionAttrName,
                    CompressionAttr::get(module.getContext(), warmupSteps, compressed));
  }
};

} // namespace
