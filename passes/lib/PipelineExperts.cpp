//===- PipelineExperts.cpp - the moe-pipeline-experts pass ----------------===//
//
// An expert phase of a partitioned step is a ragged dispatch all_to_all, a
// grouped expert kernel and a ragged combine all_to_all:
//
//   %r, %rc = moe.all_to_all %buf over [ep] split 0 concat 1 counts %c
//   %y:3 = moe.launch @expert_ffn_0(%r, %wu, %wd, %wg, %rc)
//   %o, %oc = moe.all_to_all %y#0 over [ep] split 1 concat 0 counts %rc
//
// Each expert computes its own rows, so the phase splits into C chunks of
// whole local experts that run as a pipeline: every chunk's dispatch
// starts at once (async, on the rank's exchange channel, in order), and
// chunk j's kernel runs as soon as its rows have arrived, while later
// chunks are still on the wire, then starts its combine:
//
//   %r0, %rc0 = moe.all_to_all async %buf0 ...   // chunk 0 of %buf, %c
//   %r1, %rc1 = moe.all_to_all async %buf1 ...
//   %r0w, %rc0w = moe.wait %r0, %rc0
//   %y0:3 = moe.launch @expert_ffn_1(%r0w, %wu0, ...)   // experts [0, E/C)
//   %o0, %oc0 = moe.all_to_all async %y0#0 ... counts %rc0w
//   ... chunk 1 ...
//   %o0w, %oc0w = moe.wait %o0, %oc0
//   %o = moe.concat %o0w, %o1w
//
// For chunk j's dispatch to be one leading slice of the dispatch buffer,
// the layer's moe.place_slots lays its blocks out chunk by chunk (its
// `chunks` and `ranks`): block j P G + q G + l holds rank q's local
// position j G + l (G = E/C local experts per chunk, P ranks), where it
// held block q E + j G + l. Which expert sits at which position (the
// placement, replicas, online rebalancing) is unchanged, and so is every
// value: the kernels compute each expert's rows as before, so the losses
// equal the unpipelined step's (bit for bit with Halide's contractions;
// OpenBLAS products are cut into blocks by the call's rows, and its last
// bits follow the blocks, so large experts may differ by rounding). Chunks
// and concats are views in the buffer plan (nothing is copied), which is
// planned again.
//
// A layer is pipelined when every expert phase fed by its place_slots (the
// forward's and the backward's) has that shape, its kernels compute routed
// rows only (moe-routed-rows; not `--dense-experts`) and its ranks hold at
// least 2 expert positions; C is the largest divisor of them up to
// `chunks`.
//
//===----------------------------------------------------------------------===//

#include "BufferPlan.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::moe {
#define GEN_PASS_DEF_PIPELINEEXPERTSPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// One expert phase: dispatch, expert kernel, combine.
struct Phase {
  AllToAllOp dispatch;
  LaunchOp kernel;
  AllToAllOp combine;
};

bool isRagged(AllToAllOp op, int64_t split) {
  return op.getSendCounts() && !op.getAsync() && !op.getCodecAttr() &&
         static_cast<int64_t>(op.getSplitDim()) == split &&
         static_cast<int64_t>(op.getConcatDim()) == 1 - split;
}

StringRef familyOf(LaunchOp launch) {
  auto module = launch->getParentOfType<ModuleOp>();
  auto kernel = module.lookupSymbol<KernelOp>(launch.getKernelAttr());
  return kernel ? kernel.getFamily() : StringRef();
}

bool isExpertKernel(Operation *op) {
  auto launch = dyn_cast<LaunchOp>(op);
  if (!launch)
    return false;
  StringRef family = familyOf(launch);
  return family == "expert_ffn" || family == "expert_ffn_grad";
}

RankedTensorType chunked(Type type, int64_t count) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[0] /= count;
  return tensor.clone(shape);
}

/// The expert phase a dispatch starts, if it has the shape above and its
/// tensors cut into `count` chunks of whole experts.
std::optional<Phase> phaseOf(AllToAllOp dispatch, int64_t count) {
  if (!isRagged(dispatch, 0))
    return std::nullopt;
  Operation *first = nullptr;
  for (Operation *user : dispatch.getResult().getUsers())
    if (isExpertKernel(user) && user->getBlock() == dispatch->getBlock() &&
        (!first || user->isBeforeInBlock(first)))
      first = user;
  if (!first)
    return std::nullopt;
  auto kernel = cast<LaunchOp>(first);
  AllToAllOp combine;
  for (Operation *user : kernel.getResult(0).getUsers())
    if (auto c = dyn_cast<AllToAllOp>(user);
        c && isRagged(c, 1) && c.getInput() == kernel.getResult(0))
      combine = c;
  if (!combine || !kernel.getResult(0).hasOneUse())
    return std::nullopt;
  // Every tensor of the kernel is expert-major: [E, ...] or E x P counts.
  int64_t experts = cast<RankedTensorType>(dispatch.getResult().getType()).getDimSize(0);
  if (experts % count)
    return std::nullopt;
  auto expertMajor = [&](Type type) {
    auto tensor = dyn_cast<RankedTensorType>(type);
    return tensor && tensor.getRank() >= 1 &&
           (tensor.getDimSize(0) == experts ||
            tensor.getDimSize(0) ==
                cast<RankedTensorType>(dispatch.getRecvCounts().getType()).getDimSize(0));
  };
  if (!llvm::all_of(kernel.getOperandTypes(), expertMajor) ||
      !llvm::all_of(kernel.getResultTypes(), expertMajor) || kernel.getUpdates())
    return std::nullopt;
  // Routed rows (moe-routed-rows): each expert's kernel work is its rows
  // (a dense expert phase computes every slot; not worth pipelining).
  if (!llvm::any_of(kernel.getOperandTypes(), [](Type t) {
        return cast<RankedTensorType>(t).getElementType().isInteger(32);
      }))
    return std::nullopt;
  return Phase{dispatch, kernel, combine};
}

/// The place_slots launch whose slots laid out a dispatch buffer: an
/// operand of the launch that made it (permute, unpermute_grad).
LaunchOp placementOf(AllToAllOp dispatch) {
  auto producer = dispatch.getInput().getDefiningOp<LaunchOp>();
  if (!producer)
    return nullptr;
  for (Value operand : producer.getOperands())
    if (auto place = operand.getDefiningOp<LaunchOp>(); place && familyOf(place) == "place_slots")
      return place;
  return nullptr;
}

class Pipeliner {
public:
  Pipeliner(ModuleOp module, int64_t &nextId) : module(module), nextId(nextId) {}

  /// Pipelines the layers of `fn`; returns how many phases.
  int64_t run(func::FuncOp fn, int64_t chunks) {
    // The phases of each placement, in program order.
    llvm::MapVector<Operation *, SmallVector<AllToAllOp>> dispatches;
    fn.walk([&](AllToAllOp op) {
      if (LaunchOp place = placementOf(op); place && isRagged(op, 0))
        dispatches[place].push_back(op);
    });
    int64_t made = 0;
    for (auto &[op, list] : dispatches) {
      auto place = cast<LaunchOp>(op);
      auto spec = module.lookupSymbol<KernelOp>(place.getKernelAttr());
      auto order = spec.getConfig().getAs<DenseI64ArrayAttr>("order");
      int64_t ep = groupSize(list.front());
      if (!order || spec.getConfig().get("chunks") || ep < 2 || order.size() % ep)
        continue;
      int64_t local = static_cast<int64_t>(order.size()) / ep, count = chunks;
      while (count > 1 && local % count)
        --count;
      if (count < 2)
        continue;
      SmallVector<Phase> phases;
      for (AllToAllOp dispatch : list)
        if (std::optional<Phase> phase = phaseOf(dispatch, count);
            phase && groupSize(dispatch) == ep)
          phases.push_back(*phase);
      // Every dispatch of the placement, each with its combine, or none.
      if (phases.size() != list.size() || !llvm::all_of(phases, [&](Phase p) {
            return cast<RankedTensorType>(p.dispatch.getResult().getType()).getDimSize(0) == local;
          }))
        continue;
      // Positions chunk by chunk (moe.place_slots' chunks and ranks).
      NamedAttrList config(spec.getConfig());
      Builder b(module.getContext());
      config.set("chunks", b.getI64IntegerAttr(count));
      config.set("ranks", b.getI64IntegerAttr(ep));
      place.setKernelAttr(
          kernelLike(spec, spec.getSignature(), config.getDictionary(module.getContext())));
      for (Phase &phase : phases)
        pipeline(phase, count);
      made += static_cast<int64_t>(phases.size());
    }
    return made;
  }

private:
  int64_t groupSize(AllToAllOp op) {
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    return grid ? grid.getGroupSize(op.getAxes().getValue()) : 1;
  }

  /// Chunk j of `v` (of `count`): a concat's input j, else a moe.chunk
  /// view made at `b`.
  Value chunkOf(OpBuilder &b, Value v, int64_t j, int64_t count) {
    if (auto concat = v.getDefiningOp<ConcatOp>();
        concat && static_cast<int64_t>(concat.getInputs().size()) == count)
      return concat.getInputs()[j];
    return ChunkOp::create(b, v.getLoc(), chunked(v.getType(), count), v, j, count);
  }

  /// The kernel of `kernel`'s family and settings on chunks of its tensors.
  FlatSymbolRefAttr chunkKernel(LaunchOp kernel, int64_t count) {
    auto spec = module.lookupSymbol<KernelOp>(kernel.getKernelAttr());
    SmallVector<Type> ins, outs;
    for (Type t : spec.getSignature().getInputs())
      ins.push_back(chunked(t, count));
    for (Type t : spec.getSignature().getResults())
      outs.push_back(chunked(t, count));
    return kernelLike(spec, FunctionType::get(module.getContext(), ins, outs), spec.getConfig());
  }

  /// A kernel of `spec`'s family and epilogue with this signature and
  /// config: an existing one, else a new one after `spec`.
  FlatSymbolRefAttr kernelLike(KernelOp spec, FunctionType signature, DictionaryAttr config) {
    for (auto other : module.getOps<KernelOp>())
      if (other.getFamily() == spec.getFamily() && other.getSignature() == signature &&
          other.getConfig() == config && other.getEpilogue() == spec.getEpilogue())
        return FlatSymbolRefAttr::get(other.getSymNameAttr());
    std::string name;
    for (int64_t n = 0;; ++n) {
      name = (spec.getFamily() + "_" + std::to_string(n)).str();
      if (!module.lookupSymbol(name))
        break;
    }
    OpBuilder top(spec);
    top.setInsertionPointAfter(spec);
    auto made = KernelOp::create(top, spec.getLoc(), name, spec.getFamily(), signature, config,
                                 spec.getEpilogue());
    return FlatSymbolRefAttr::get(made.getSymNameAttr());
  }

  AllToAllOp start(OpBuilder &b, AllToAllOp like, Value input, Value counts, int64_t count) {
    SmallVector<Type> types = {chunked(like.getResult().getType(), count),
                               chunked(like.getRecvCounts().getType(), count)};
    auto op = AllToAllOp::create(b, like.getLoc(), types, input, counts, like.getAxesAttr(),
                                 like.getSplitDimAttr(), like.getConcatDimAttr(), CodecAttr());
    op.setAsync(true);
    op->setAttr(MoEDialect::kBucketAttrName, b.getI64IntegerAttr(nextId++));
    return op;
  }

  /// `whole`'s users read the concat of `parts` instead.
  static void joinInto(OpBuilder &b, Location loc, Value whole, ArrayRef<Value> parts) {
    whole.replaceAllUsesWith(ConcatOp::create(b, loc, whole.getType(), parts));
  }

  void pipeline(Phase &p, int64_t count) {
    Location loc = p.kernel.getLoc();
    // 1. Every chunk's dispatch starts where the dispatch was.
    OpBuilder b(p.dispatch);
    SmallVector<AllToAllOp> sends;
    for (int64_t j = 0; j < count; ++j)
      sends.push_back(start(b, p.dispatch, chunkOf(b, p.dispatch.getInput(), j, count),
                            chunkOf(b, p.dispatch.getSendCounts(), j, count), count));
    // 2. Chunk by chunk where the kernel was: its rows, its kernel, its combine.
    b.setInsertionPoint(p.kernel);
    FlatSymbolRefAttr kernel = chunkKernel(p.kernel, count);
    SmallVector<Value> rows, rowCounts;
    SmallVector<SmallVector<Value>> results(p.kernel.getNumResults());
    SmallVector<AllToAllOp> backs;
    for (int64_t j = 0; j < count; ++j) {
      auto got = WaitOp::create(b, loc, sends[j]->getResults());
      rows.push_back(got.getResult(0));
      rowCounts.push_back(got.getResult(1));
      SmallVector<Value> operands;
      for (Value operand : p.kernel.getOperands())
        operands.push_back(operand == p.dispatch.getResult()       ? rows.back()
                           : operand == p.dispatch.getRecvCounts() ? rowCounts.back()
                                                                   : chunkOf(b, operand, j, count));
      SmallVector<Type> types;
      for (Type t : p.kernel.getResultTypes())
        types.push_back(chunked(t, count));
      auto launch =
          LaunchOp::create(b, loc, types, kernel, operands,
                           b.getDenseI64ArrayAttr(SmallVector<int64_t>(3 * types.size(), 0)),
                           p.kernel.getUpdatesAttr(), p.kernel.getShardAxesAttr());
      for (auto [k, r] : llvm::enumerate(launch.getResults()))
        results[k].push_back(r);
      Value backCounts = p.combine.getSendCounts() == p.dispatch.getRecvCounts()
                             ? rowCounts.back()
                             : chunkOf(b, p.combine.getSendCounts(), j, count);
      backs.push_back(start(b, p.combine, launch.getResult(0), backCounts, count));
    }
    // The kernel's other results and the dispatch's, whole again.
    joinInto(b, loc, p.dispatch.getResult(), rows);
    joinInto(b, loc, p.dispatch.getRecvCounts(), rowCounts);
    for (unsigned k = 1; k < p.kernel.getNumResults(); ++k)
      if (!p.kernel.getResult(k).use_empty())
        joinInto(b, loc, p.kernel.getResult(k), results[k]);
    // 3. The combines are waited for where the combine was.
    b.setInsertionPoint(p.combine);
    SmallVector<Value> back, backCounts;
    for (AllToAllOp op : backs) {
      auto got = WaitOp::create(b, loc, op->getResults());
      back.push_back(got.getResult(0));
      backCounts.push_back(got.getResult(1));
    }
    joinInto(b, loc, p.combine.getResult(), back);
    joinInto(b, loc, p.combine.getRecvCounts(), backCounts);
    p.combine.erase();
    p.kernel.erase();
    p.dispatch.erase();
  }

  ModuleOp module;
  int64_t &nextId;
};

struct PipelineExpertsPass : public moe::impl::PipelineExpertsPassBase<PipelineExpertsPass> {
  using PipelineExpertsPassBase::PipelineExpertsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (chunks < 1) {
      module.emitError() << "moe-pipeline-experts: chunks must be >= 1, got "
                         << static_cast<int64_t>(chunks);
      return signalPassFailure();
    }
    if (chunks == 1)
      return;
    int64_t nextId = nextBucketId(module);
    SmallVector<func::FuncOp> fns = stepFunctions(module);
    Pipeliner pipeliner(module, nextId);
    int64_t made = 0;
    for (func::FuncOp fn : fns)
      made += pipeliner.run(fn, chunks);
    pipelinedPhases += made;
    if (!made)
      return;
    // The whole-phase kernels no longer launched.
    for (auto kernel : llvm::make_early_inc_range(module.getOps<KernelOp>()))
      if (SymbolTable::symbolKnownUseEmpty(kernel, module))
        kernel.erase();
    replanBuffers(module, fns);
  }
};

} // namespace
