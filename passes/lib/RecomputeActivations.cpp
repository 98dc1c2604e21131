//===- RecomputeActivations.cpp - the moe-recompute-activations pass ------===//
//
// Full activation recompute: each layer's forward values the backward reads
// are computed again just before that layer's backward, so only the layers'
// inputs and routing live from the forward to the backward. See
// docs/Partitioning.md.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

#include <map>

namespace mlir::moe {
#define GEN_PASS_DEF_RECOMPUTEACTIVATIONSPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The transformer layer `op` belongs to: K when it reads a parameter
/// named `lK.*` (through a low-precision copy too); -1 otherwise.
int64_t layerOf(Operation &op) {
  for (Value operand : op.getOperands()) {
    if (auto copy = operand.getDefiningOp<CastOp>())
      operand = copy.getInput();
    auto get = operand.getDefiningOp<GetParamOp>();
    if (!get)
      continue;
    StringRef name = get.getName();
    if (!name.consume_front("l"))
      continue;
    size_t dot = name.find('.');
    int64_t layer;
    if (dot != StringRef::npos && !name.take_front(dot).getAsInteger(10, layer))
      return layer;
  }
  return -1;
}

/// Recomputes the forward ops [begin, end) (one layer) in the backward,
/// which starts after position `seed`.
void recomputeLayer(ArrayRef<Operation *> ops, size_t begin, size_t end, size_t seed,
                    const DenseMap<Operation *, size_t> &position) {
  auto inLayer = [&](Operation *op) {
    auto it = op ? position.find(op) : position.end();
    return it != position.end() && it->second >= begin && it->second < end;
  };
  // Kept from the forward: values from outside the layer, the routing,
  // parameter reads, and what later forward ops read (the layer's output,
  // its auxiliary loss).
  auto kept = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!inLayer(def) || isa<FusedGateOp, GetParamOp>(def))
      return true;
    return llvm::any_of(v.getUsers(), [&](Operation *user) {
      size_t at = position.lookup(user);
      return at >= end && at <= seed;
    });
  };
  llvm::SetVector<Value> needed;
  Operation *first = nullptr; // the first backward op that reads one
  for (size_t i = begin; i < end; ++i)
    for (Value v : ops[i]->getResults()) {
      if (kept(v))
        continue;
      for (Operation *user : v.getUsers()) {
        auto it = position.find(user);
        if (it == position.end() || it->second <= seed)
          continue;
        needed.insert(v);
        if (!first || it->second < position.lookup(first))
          first = user;
      }
    }
  if (needed.empty())
    return;
  // The forward ops those need, back to kept values.
  llvm::DenseSet<Operation *> slice;
  SmallVector<Operation *> work;
  for (Value v : needed)
    work.push_back(v.getDefiningOp());
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    if (!slice.insert(op).second)
      continue;
    for (Value operand : op->getOperands())
      if (!kept(operand))
        work.push_back(operand.getDefiningOp());
  }
  OpBuilder b(first);
  IRMapping map;
  for (size_t i = begin; i < end; ++i)
    if (slice.contains(ops[i]))
      b.clone(*ops[i], map);
  for (Value v : needed)
    v.replaceUsesWithIf(map.lookup(v), [&](OpOperand &use) {
      auto it = position.find(use.getOwner());
      return it != position.end() && it->second > seed;
    });
}

LogicalResult recompute(func::FuncOp fn) {
  SmallVector<Operation *> ops;
  DenseMap<Operation *, size_t> position;
  std::optional<size_t> seed;
  for (Operation &op : fn.getBody().front()) {
    position[&op] = ops.size();
    if (!seed && op.hasAttr(MoEDialect::kLossSeedAttrName))
      seed = ops.size();
    ops.push_back(&op);
  }
  if (!seed)
    return fn.emitError("moe-recompute-activations: the step has no backward (its loss seed, "
                        "moe.fill {moe.loss_seed}); run moe-autodiff first");
  // Where each layer's forward starts, in step order.
  std::map<size_t, int64_t> starts;
  llvm::DenseSet<int64_t> seen;
  for (size_t i = 0; i < *seed; ++i)
    if (int64_t layer = layerOf(*ops[i]); layer >= 0 && seen.insert(layer).second)
      starts[i] = layer;
  // Every layer but the last: its backward follows its forward at once.
  if (starts.size() < 2)
    fn.emitWarning() << "moe-recompute-activations: fewer than two layers (parameters named "
                        "lK.*) in the step: nothing to recompute, it keeps its activations";
  for (auto it = starts.begin(); it != starts.end() && std::next(it) != starts.end(); ++it)
    recomputeLayer(ops, it->first, std::next(it)->first, *seed, position);
  return success();
}

struct RecomputeActivationsPass
    : public moe::impl::RecomputeActivationsPassBase<RecomputeActivationsPass> {
  using RecomputeActivationsPassBase::RecomputeActivationsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!enable && !module->hasAttr(MoEDialect::kRecomputeAttrName))
      return;
    if (enable)
      module->setAttr(MoEDialect::kRecomputeAttrName, UnitAttr::get(module.getContext()));
    for (auto fn : module.getOps<func::FuncOp>())
      if (!fn.isExternal() && !fn->hasAttr(MoEDialect::kNoGradAttrName) && failed(recompute(fn)))
        return signalPassFailure();
  }
};

} // namespace
