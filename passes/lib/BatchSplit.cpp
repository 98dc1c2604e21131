//===- BatchSplit.cpp - a step's batch split, its gates regrouped ---------===//

#include "BatchSplit.h"
#include "DispatchBuffers.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::moe;

static RankedTensorType withDim(Type type, unsigned dim, int64_t size) {
  auto tensor = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(tensor.getShape());
  shape[dim] = size;
  return RankedTensorType::get(shape, tensor.getElementType());
}

LogicalResult moe::splitBatch(func::FuncOp fn, int64_t parts, int64_t local, bool splitGates,
                              StringRef what) {
  Block &body = fn.getBody().front();
  DenseSet<Value> batched;
  int64_t batch = -1;
  for (BlockArgument arg : body.getArguments()) {
    auto kind = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "moe.input");
    if (!kind || (kind.getValue() != "tokens" && kind.getValue() != "targets"))
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    if (type.getRank() < 2)
      return fn.emitError() << "the " << kind.getValue() << " input needs a batch dimension";
    batch = type.getShape()[0];
    if (local < 0 && batch % parts != 0)
      return fn.emitError() << "the batch (" << batch << " sequences) does not split over " << parts
                            << " " << what;
    if (local < 0)
      local = batch / parts;
    arg.setType(withDim(type, 0, local));
    batched.insert(arg);
  }
  if (batch < 0)
    return fn.emitError("the step has no tokens input");
  for (Operation &op : body.without_terminator()) {
    if (llvm::none_of(op.getOperands(), [&](Value v) { return batched.contains(v); }))
      continue;
    if (isa<RouterOp, DispatchOp, CombineOp>(op))
      return op.emitOpError("splitting the batch needs fused gating: run moe-fuse-gating first");
    if (auto gate = dyn_cast<FusedGateOp>(op); gate && splitGates) {
      if (gate.getGroups() % parts != 0)
        return gate.emitOpError() << "routes in " << gate.getGroups() << " groups, which do not "
                                  << "split over " << parts << " " << what
                                  << " (run moe-routing-groups first)";
      gate.setGroupsAttr(OpBuilder(gate).getI64IntegerAttr(gate.getGroups() / parts));
      gate.removeGroupSizesAttr(); // a replica routes its share as one group
    }
    if (auto permute = dyn_cast<PermuteOp>(op)) {
      // Without splitGates, routeInGroups sizes the buffer after the split.
      auto type = cast<RankedTensorType>(permute.getType());
      if (splitGates &&
          failed(retypeDispatchBuffer(permute.getResult(), type.getShape()[1] / parts)))
        return failure();
      continue;
    }
    for (Value result : op.getResults()) {
      auto type = dyn_cast<RankedTensorType>(result.getType());
      if (!type || type.getRank() < 2 || type.getShape()[0] != batch)
        continue;
      result.setType(withDim(type, 0, local));
      batched.insert(result);
    }
  }
  fn.setFunctionType(
      FunctionType::get(fn.getContext(), body.getArgumentTypes(), fn.getResultTypes()));
  return success();
}

LogicalResult moe::routeInGroups(FusedGateOp gate, int64_t groups, DenseI64ArrayAttr shares) {
  auto x = cast<RankedTensorType>(gate.getX().getType());
  int64_t batch = x.getRank() > 1 ? x.getShape().front() : 1;
  int64_t tokens = x.getNumElements() / x.getShape().back();
  int64_t perGroup = tokens / groups;
  OpBuilder b(gate);
  if (shares) {
    int64_t sum = 0, largest = 0;
    for (int64_t n : shares.asArrayRef())
      sum += n, largest = std::max(largest, n);
    if (sum != batch)
      return gate.emitOpError() << "cannot route in the module's moe.token_shares: they sum to "
                                << sum << " sequences, the batch has " << batch;
    int64_t sequence = tokens / batch;
    SmallVector<int64_t> sizes;
    for (int64_t n : shares.asArrayRef())
      sizes.push_back(n * sequence);
    perGroup = largest * sequence;
    gate.setGroupSizesAttr(b.getDenseI64ArrayAttr(sizes));
  } else {
    if (batch % groups != 0)
      return gate.emitOpError() << "cannot route in " << groups << " groups: the batch (" << batch
                                << " sequences) does not divide into whole-sequence groups";
    gate.removeGroupSizesAttr();
  }
  int64_t experts = cast<RankedTensorType>(gate.getCounts().getType()).getShape()[0];
  int64_t capacity;
  if (auto factor = gate.getCapacityFactor())
    capacity = static_cast<int64_t>(std::ceil(static_cast<double>(factor->convertToFloat()) *
                                              perGroup * gate.getTopK() / experts));
  else // dropless: a group's token count
    capacity = perGroup;
  // As the frontend sizes it: at least 1, at most the group's tokens.
  capacity = std::clamp<int64_t>(capacity, 1, perGroup);
  gate.setGroupsAttr(b.getI64IntegerAttr(groups));
  gate.setCapacityAttr(b.getI64IntegerAttr(capacity));
  for (Operation *user : gate.getSlots().getUsers())
    if (auto permute = dyn_cast<PermuteOp>(user))
      if (failed(retypeDispatchBuffer(permute.getResult(), groups * capacity)))
        return failure();
  return success();
}
