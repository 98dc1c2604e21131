//===- Partition.cpp - the moe-partition pass -----------------------------===//
//
// One rank's step of a dp x ep x tp grid: the batch split over the N = dp *
// ep data replicas, expert weights split over ep, the dispatch buffers sent
// to the experts' owners and back with all_to_all, and attention heads and
// FFN widths split over tp (Megatron). See docs/Partitioning.md.
//
//===----------------------------------------------------------------------===//

#include "BatchSplit.h"
#include "DispatchBuffers.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::moe {
#define GEN_PASS_DEF_PARTITIONPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

RankedTensorType withDim(Type type, unsigned dim, int64_t size) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, tensor.getElementType());
}

/// The moe.get_param a weight comes from, through the low-precision copy
/// of a mixed-precision step (moe.cast); null when none.
GetParamOp paramSource(Value w) {
  if (auto copy = w.getDefiningOp<CastOp>())
    w = copy.getInput();
  return w.getDefiningOp<GetParamOp>();
}

/// Gives the result of `get` the type `local`, and the copies of it
/// (moe.cast) the same shape.
void retypeParamRead(GetParamOp get, RankedTensorType local) {
  get.getResult().setType(local);
  for (Operation *user : get.getResult().getUsers())
    if (auto copy = dyn_cast<CastOp>(user))
      copy.getResult().setType(RankedTensorType::get(
          local.getShape(), cast<RankedTensorType>(copy.getType()).getElementType()));
}

/// The positions' rows of the placed weights of `ffn`, when another
/// function's FFN placed them already (null otherwise).
DenseI64ArrayAttr placedRows(ModuleOp module, ExpertFFNOp ffn) {
  for (Value w : ffn.getWeights())
    if (auto get = paramSource(w))
      if (auto param = module.lookupSymbol<ParamOp>(get.getNameAttr()))
        if (auto rows = param->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kShardRowsAttrName))
          return rows;
  return {};
}

/// Gives every rank its block of experts and routes the dispatch buffers of
/// `fn` to their owners.
LogicalResult shardExperts(ModuleOp module, func::FuncOp fn, int64_t ep, int64_t redundant,
                           llvm::MapVector<ParamOp, int64_t> &sharded) {
  OpBuilder b(fn.getContext());
  ArrayAttr axes = b.getStrArrayAttr({"ep"});
  SmallVector<ExpertFFNOp> ffns(fn.getOps<ExpertFFNOp>());
  // The MoE layer of each FFN: its index among the step's (that of its
  // fused gate among the gates, as the step program numbers layers).
  int64_t layer = 0;
  for (ExpertFFNOp ffn : ffns) {
    auto x = cast<RankedTensorType>(ffn.getX().getType());
    int64_t experts = x.getShape()[0], slots = x.getShape()[1];
    // Each ep rank's experts: the placement's lists, or equal contiguous
    // blocks. Ranks hold `local` positions each (the most any holds; the
    // others are padded with empty positions, -1), `order` lists the
    // experts position by position.
    SmallVector<SmallVector<int64_t>> held(ep);
    DenseI64ArrayAttr placedBefore = placedRows(module, ffn);
    if (auto placement = ffn->getAttrOfType<PlacementAttr>("placement")) {
      // The op's verifier checked it: ep lists holding every expert.
      for (int64_t r = 0; r < ep; ++r)
        held[r].assign(placement.getExpertsOf(r).begin(), placement.getExpertsOf(r).end());
    } else if (placedBefore) {
      // Another function of the step (evaluation) placed these weights.
      int64_t perRank = static_cast<int64_t>(placedBefore.size()) / ep;
      for (auto [p, e] : llvm::enumerate(placedBefore.asArrayRef()))
        if (e >= 0)
          held[p / perRank].push_back(e);
    } else {
      if (experts % ep != 0)
        return ffn.emitOpError() << experts << " experts do not split over ep = " << ep
                                 << " (give a placement with uneven counts)";
      for (int64_t e = 0; e < experts; ++e)
        held[e / (experts / ep)].push_back(e);
    }
    // A rank holds an expert at most once, so an expert has at most ep
    // copies: at most experts x (ep - 1) replicas in all.
    if (!placedBefore && redundant > experts * (ep - 1))
      return ffn.emitOpError() << "redundant-experts = " << redundant << " exceeds the "
                               << experts * (ep - 1) << " replicas " << ep << " ranks can hold of "
                               << experts << " experts (each expert at most once per rank)";
    // Spare positions for replicas (none when another function placed the
    // weights: that placement has them already).
    int64_t local = placedBefore ? static_cast<int64_t>(placedBefore.size()) / ep
                                 : (experts + redundant + ep - 1) / ep;
    for (auto &list : held)
      local = std::max<int64_t>(local, list.size());
    SmallVector<int64_t> order;
    for (auto &list : held) {
      order.append(list.begin(), list.end());
      order.append(local - list.size(), -1);
    }
    int64_t positions = local * ep;
    bool inOrder = positions == experts;
    for (int64_t p = 0; inOrder && p < positions; ++p)
      inOrder = order[p] == p;
    // The placement is now the shape of the shards: this op holds `local`.
    ffn->removeAttr("placement");
    for (Value w : ffn.getWeights()) {
      auto get = paramSource(w);
      if (!get)
        return ffn.emitOpError("expert weights must come from moe.get_param");
      auto param = module.lookupSymbol<ParamOp>(get.getNameAttr());
      if (!param)
        return get.emitOpError("refers to no moe.param");
      if (int64_t had = sharded.lookup(param); had && had != local)
        return ffn.emitOpError() << "'" << param.getSymName() << "' is placed by two MoE layers";
      sharded.insert({param, local});
    }
    FusedGateOp gate;
    if (auto permute = ffn.getX().getDefiningOp<PermuteOp>())
      gate = permute.getSlots().getDefiningOp<FusedGateOp>();
    Value gateCounts = gate ? gate.getCounts() : Value();
    if (!inOrder && !gate)
      return ffn.emitOpError("a placement other than equal blocks in expert order needs fused "
                             "gating (run moe-fuse-gating first)");
    if (gate) {
      // The dispatch buffer by positions: each rank's experts are one
      // block. Every user of the slots (permute, unpermute and, later,
      // their gradients) reads the placed ones. The order is the runtime's
      // table of this layer (`layer`), so experts can move between ranks
      // while training; it starts as the placement's (or expert order).
      b.setInsertionPointAfter(gate);
      auto countsType = RankedTensorType::get(
          {positions}, cast<RankedTensorType>(gate.getCounts().getType()).getElementType());
      auto placed = PlaceSlotsOp::create(b, gate.getLoc(), gate.getSlots().getType(), countsType,
                                         gate.getSlots(), gate.getCounts(),
                                         b.getDenseI64ArrayAttr(order), b.getI64IntegerAttr(slots),
                                         b.getI64IntegerAttr(layer), IntegerAttr(), IntegerAttr());
      gate.getSlots().replaceAllUsesExcept(placed.getResultSlots(), placed);
      gateCounts = placed.getResultCounts();
      if (positions != experts && failed(retypeDispatchBuffer(ffn.getX(), positions, 0)))
        return failure();
      for (Value w : ffn.getWeights()) {
        auto param = module.lookupSymbol<ParamOp>(paramSource(w).getNameAttr());
        if (auto had = param->getAttrOfType<IntegerAttr>(MoEDialect::kShardLayerAttrName);
            had && had.getInt() != layer)
          return ffn.emitOpError() << "'" << param.getSymName() << "' is placed by two MoE layers";
        param->setAttr(MoEDialect::kShardLayerAttrName, b.getI64IntegerAttr(layer));
        if (!inOrder)
          param->setAttr(MoEDialect::kShardRowsAttrName, b.getDenseI64ArrayAttr(order));
      }
    }
    x = cast<RankedTensorType>(ffn.getX().getType());
    ++layer;
    b.setInsertionPoint(ffn);
    auto local3 = withDim(withDim(x, 0, local), 1, slots * ep);
    // Ragged when the buffer holds one routing group: expert e's routed
    // token-slots are its leading min(counts[e], C) rows (the rest are
    // zero), so only those travel.
    Value counts;
    if (gate && gate.getGroups() == 1)
      counts = gateCounts;
    SmallVector<Type> inTypes = {local3}, backTypes = {x};
    if (counts) {
      inTypes.push_back(counts.getType());
      backTypes.push_back(counts.getType());
    }
    auto forth = AllToAllOp::create(b, ffn.getLoc(), inTypes, ffn.getX(), counts, axes,
                                    b.getI64IntegerAttr(0), b.getI64IntegerAttr(1), CodecAttr());
    ffn.getXMutable().assign(forth.getResult());
    Value y = ffn.getResult();
    y.setType(local3);
    b.setInsertionPointAfter(ffn);
    auto back =
        AllToAllOp::create(b, ffn.getLoc(), backTypes, y, counts ? forth.getRecvCounts() : Value(),
                           axes, b.getI64IntegerAttr(1), b.getI64IntegerAttr(0), CodecAttr());
    y.replaceAllUsesExcept(back.getResult(), back);
  }
  return success();
}

/// Megatron tensor parallelism over the `tp` ranks of a replica: attention
/// heads (q, k, v column-parallel with their biases, per-head norms and clamps if any; the
/// output projection row-parallel; latent attention's shared rotary key whole), the
/// dense FFNs' and every expert's FFN width (up and gate column-parallel,
/// down row-parallel). A column-parallel input enters through moe.tp_enter
/// (its gradient sums the partial input gradients over tp); a row-parallel
/// output leaves through moe.tp_exit (the partial outputs summed). Records
/// the split dimension of each weight in `tpDims`.
LogicalResult splitTensorParallel(ModuleOp module, func::FuncOp fn, int64_t tp,
                                  llvm::MapVector<ParamOp, int64_t> &tpDims) {
  OpBuilder b(fn.getContext());
  ArrayAttr axes = b.getStrArrayAttr({"tp"});
  auto split = [&](Operation *user, Value w, int64_t dim) -> LogicalResult {
    auto get = paramSource(w);
    auto param = get ? module.lookupSymbol<ParamOp>(get.getNameAttr()) : ParamOp();
    if (!param)
      return user->emitOpError("tensor-parallel weights must come from moe.get_param");
    int64_t size = cast<RankedTensorType>(w.getType()).getShape()[dim];
    if (size % tp != 0)
      return user->emitOpError() << "'" << param.getSymName() << "' dimension " << dim << " ("
                                 << size << ") does not split over tp = " << tp;
    auto [it, inserted] = tpDims.insert({param, dim});
    if (!inserted && it->second != dim)
      return user->emitOpError() << "'" << param.getSymName() << "' is split along two dimensions";
    return success();
  };
  auto shrink = [&](Value v, int64_t dim) {
    auto t = cast<RankedTensorType>(v.getType());
    v.setType(withDim(t, dim, t.getShape()[dim] / tp));
  };
  // One tp_enter per entering value, right after its definition.
  DenseMap<Value, Value> entered;
  auto enter = [&](Value x) -> Value {
    Value &e = entered[x];
    if (!e) {
      if (Operation *def = x.getDefiningOp())
        b.setInsertionPointAfter(def);
      else
        b.setInsertionPointToStart(x.getParentBlock());
      e = TpEnterOp::create(b, x.getLoc(), x.getType(), x, axes).getResult();
    }
    return e;
  };
  auto exit = [&](Operation *op) {
    Value y = op->getResult(0);
    b.setInsertionPointAfter(op);
    auto out = TpExitOp::create(b, op->getLoc(), y.getType(), y, axes);
    y.replaceAllUsesExcept(out.getResult(), out);
  };
  // The q, k and v projections column-parallel (each rank computes its
  // heads), with the norms and clamps between them and the attention.
  auto splitProjections = [&](Operation *att, ValueRange inputs) -> LogicalResult {
    for (Value in : inputs) {
      // A clamp (clip_qkv) is elementwise: it splits with its input.
      auto clip = in.getDefiningOp<ClampOp>();
      if (clip) {
        if (!clip->hasOneUse())
          return clip.emitOpError("tensor parallelism needs the clamped q, k or v read by the "
                                  "attention only");
        in = clip.getX();
      }
      // A q/k norm per head stays on the rank of its heads; its gain enters
      // (each rank's gradient of it is partial: summed over tp).
      auto norm = in.getDefiningOp<RMSNormOp>();
      if (norm) {
        int64_t width = cast<RankedTensorType>(in.getType()).getShape().back(),
                group = cast<RankedTensorType>(norm.getGamma().getType()).getShape()[0];
        if (!norm->hasOneUse())
          return norm.emitOpError("tensor parallelism needs the normalised q or k read by the "
                                  "attention only");
        if ((width / tp) % group != 0)
          return norm.emitOpError()
                 << "tensor parallelism splits the heads, and this norm's groups (" << group
                 << " wide) span the " << width / tp
                 << " columns of a tp rank (q/k norms per head split; over "
                    "the whole projection they do not)";
        in = norm.getX();
      }
      auto lin = in.getDefiningOp<LinearOp>();
      if (!lin || !lin->hasOneUse())
        return att->emitOpError("tensor parallelism needs q, k and v each from its own "
                                "moe.linear");
      // Column-parallel: the weight's columns and the bias (if any) split.
      if (failed(split(lin, lin.getWeight(), 1)) ||
          (lin.getBias() && failed(split(lin, lin.getBias(), 0))))
        return failure();
      lin.getXMutable().assign(enter(lin.getX()));
      shrink(lin.getResult(), cast<RankedTensorType>(lin.getType()).getRank() - 1);
      if (norm) {
        norm.getGammaMutable().assign(enter(norm.getGamma()));
        shrink(norm.getResult(), cast<RankedTensorType>(norm.getType()).getRank() - 1);
      }
      if (clip)
        shrink(clip.getResult(), cast<RankedTensorType>(clip.getType()).getRank() - 1);
    }
    return success();
  };
  // The output projection row-parallel: the partial outputs summed.
  auto splitOutput = [&](Operation *att) -> LogicalResult {
    Value result = att->getResult(0);
    shrink(result, cast<RankedTensorType>(result.getType()).getRank() - 1);
    auto out = att->hasOneUse() ? dyn_cast<LinearOp>(*att->user_begin()) : LinearOp();
    if (!out || out.getX() != result || out.getBias())
      return att->emitOpError("tensor parallelism needs the attention output read by one "
                              "bias-free moe.linear (the output projection)");
    if (failed(split(out, out.getWeight(), 0)))
      return failure();
    exit(out);
    return success();
  };
  for (AttentionOp att : llvm::to_vector(fn.getOps<AttentionOp>())) {
    int64_t heads = att.getNumHeads(), kv = att.getNumKvHeads();
    if (heads % tp != 0 || kv % tp != 0)
      return att.emitOpError() << "tensor parallelism splits the heads: heads (" << heads
                               << ") and kv_heads (" << kv << ") must be divisible by tp = " << tp
                               << " (replicated key/value heads are not supported yet)";
    if (failed(splitProjections(att, {att.getQ(), att.getK(), att.getV()})))
      return failure();
    att.setNumHeads(heads / tp);
    att.setNumKvHeads(kv / tp);
    if (failed(splitOutput(att)))
      return failure();
  }
  // Latent attention: the heads' q, content keys and values split; the
  // shared rotary key is computed whole on every rank and enters (each
  // rank's gradient of it sums its own heads only).
  for (LatentAttentionOp att : llvm::to_vector(fn.getOps<LatentAttentionOp>())) {
    int64_t heads = att.getNumHeads();
    if (heads % tp != 0)
      return att.emitOpError() << "tensor parallelism splits the heads: heads (" << heads
                               << ") must be divisible by tp = " << tp;
    if (failed(splitProjections(att, {att.getQ(), att.getK(), att.getV()})))
      return failure();
    att.getKRopeMutable().assign(enter(att.getKRope()));
    att.setNumHeads(heads / tp);
    if (failed(splitOutput(att)))
      return failure();
  }
  // FFNs: the width is up's and gate's last dimension, down's one before.
  auto splitFFN = [&](auto ffn, int64_t width) -> LogicalResult {
    if (failed(split(ffn, ffn.getWUp(), width)) || failed(split(ffn, ffn.getWDown(), width - 1)) ||
        (ffn.getWGate() && failed(split(ffn, ffn.getWGate(), width))))
      return failure();
    ffn.getXMutable().assign(enter(ffn.getX()));
    exit(ffn);
    return success();
  };
  for (FFNOp ffn : llvm::to_vector(fn.getOps<FFNOp>()))
    if (failed(splitFFN(ffn, 1)))
      return failure();
  for (ExpertFFNOp ffn : llvm::to_vector(fn.getOps<ExpertFFNOp>()))
    if (failed(splitFFN(ffn, 2)))
      return failure();
  return success();
}

/// Weighs replica `fn`'s losses by its share of the batch, `weight` (its
/// sequences x replicas / the batch's): the mean over replicas of the
/// weighted losses, and so of their gradients, is the batch's token mean.
void weighLosses(func::FuncOp fn, double weight) {
  OpBuilder b(fn.getContext());
  fn.walk([&](Operation *op) {
    if (auto ce = dyn_cast<CrossEntropyOp>(op))
      ce.setScaleAttr(b.getF64FloatAttr(ce.getScale().convertToDouble() * weight));
    if (auto gate = dyn_cast<FusedGateOp>(op)) {
      gate.setAuxLossCoefAttr(
          b.getF32FloatAttr(static_cast<float>(gate.getAuxLossCoef().convertToDouble() * weight)));
      gate.setZLossCoefAttr(
          b.getF32FloatAttr(static_cast<float>(gate.getZLossCoef().convertToDouble() * weight)));
    }
  });
}

struct PartitionPass : public moe::impl::PartitionPassBase<PartitionPass> {
  using PartitionPassBase::PartitionPassBase;

  void runOnOperation() override {
    if (redundantExperts < 0) {
      mlir::emitError(getOperation().getLoc())
          << "moe-partition: redundant-experts must be >= 0, got " << redundantExperts;
      return signalPassFailure();
    }
    ModuleOp module = getOperation();
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    if (!grid || grid.getNumRanks() == 1)
      return;
    int64_t replicas = grid.getDp() * grid.getEp();
    // Unequal shares: this module becomes replica `replica`'s step.
    int64_t local = -1, batch = 0;
    auto shares = module->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kTokenSharesAttrName);
    if (shares) {
      if (static_cast<int64_t>(shares.size()) != replicas) {
        mlir::emitError(module.getLoc())
            << "moe-partition: moe.token_shares has " << shares.size() << " entries for the "
            << replicas << " data replicas (dp * ep) of the grid";
        return signalPassFailure();
      }
      if (replica < 0 || replica >= replicas) {
        mlir::emitError(module.getLoc())
            << "moe-partition: with unequal moe.token_shares give the data replica to build, "
               "replica=0.."
            << replicas - 1 << " (got " << static_cast<int64_t>(replica) << ")";
        return signalPassFailure();
      }
      for (int64_t n : shares.asArrayRef())
        batch += n;
      local = shares[replica];
      module->setAttr(MoEDialect::kReplicaAttrName,
                      OpBuilder(module.getContext()).getI64IntegerAttr(replica));
    }
    llvm::MapVector<ParamOp, int64_t> sharded; // expert weights -> rows per rank
    llvm::MapVector<ParamOp, int64_t> tpDims;  // tensor-parallel weights -> split dimension
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>())) {
      if (fn.isExternal())
        continue;
      if (!fn.getBody().hasOneBlock())
        return signalPassFailure();
      for (Operation &op : fn.getBody().front())
        if (isa<RouterGradOp, ExpertFFNGradOp, AdamWUpdateOp, BalanceBiasOp>(op)) {
          op.emitOpError("moe-partition runs before moe-autodiff");
          return signalPassFailure();
        }
      if (shares)
        weighLosses(fn, static_cast<double>(local * replicas) / static_cast<double>(batch));
      if (failed(splitBatch(fn, replicas, local, /*splitGates=*/true)) ||
          (grid.getEp() > 1 &&
           failed(shardExperts(module, fn, grid.getEp(), redundantExperts, sharded))) ||
          (grid.getTp() > 1 && failed(splitTensorParallel(module, fn, grid.getTp(), tpDims))))
        return signalPassFailure();
    }
    // Expert weights: each rank's block along the expert dimension.
    OpBuilder b(module.getContext());
    for (auto [param, rows] : sharded) {
      RankedTensorType local = withDim(param.getTensorType(), 0, rows);
      param.setTypeAttr(TypeAttr::get(local));
      param->setAttr(MoEDialect::kShardAttrName, b.getStrArrayAttr({"ep"}));
      module.walk([&](GetParamOp get) {
        if (get.getName() == param.getSymName())
          retypeParamRead(get, local);
      });
    }
    // Tensor-parallel weights: each tp rank's slice along their dimension.
    for (auto [param, dim] : tpDims) {
      RankedTensorType full = param.getTensorType();
      RankedTensorType local = withDim(full, dim, full.getShape()[dim] / grid.getTp());
      param.setTypeAttr(TypeAttr::get(local));
      param->setAttr(MoEDialect::kTpDimAttrName, b.getI64IntegerAttr(dim));
      module.walk([&](GetParamOp get) {
        if (get.getName() == param.getSymName())
          retypeParamRead(get, local);
      });
    }
  }
};

} // namespace
