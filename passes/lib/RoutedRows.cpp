//===- RoutedRows.cpp - the moe-routed-rows pass --------------------------===//
//
// Tells each expert FFN (forward and backward) which of its slots hold
// routed tokens, so that its kernels compute those rows only: at capacity
// factor 1.25 with balanced routing about 20% of the slots are empty, and
// while routing is collapsed 60-80% of token-slots are dropped, every
// capacity slot still computed.
//
//===----------------------------------------------------------------------===//

#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::moe {
#define GEN_PASS_DEF_ROUTEDROWSPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The fused gate behind a permutation's slots (through moe.place_slots)
/// and the per-position counts of those slots; null when the gate routes
/// in several groups (its counts are then summed over the groups, which
/// says nothing about each group's segment).
std::pair<FusedGateOp, Value> gateCounts(Value slots) {
  Value counts;
  if (auto place = slots.getDefiningOp<PlaceSlotsOp>()) {
    counts = place.getResultCounts();
    slots = place.getSlots();
  }
  auto gate = slots.getDefiningOp<FusedGateOp>();
  if (!gate || gate.getGroups() != 1)
    return {};
  return {gate, counts ? counts : gate.getCounts()};
}

/// The routed rows of a dispatch buffer `x` (`[E, C, D]`), in
/// moe.expert_ffn's `rows` form, when its producer zeroes the other slots:
/// moe.permute of fused gating in one group (one segment per expert, the
/// gate's or the placement's counts), or the ragged moe.all_to_all that
/// brings such buffers to their experts' owners (one segment per source
/// rank, its `recv` counts). Null otherwise.
Value routedRows(Value x) {
  int64_t experts = cast<RankedTensorType>(x.getType()).getShape()[0];
  auto sized = [&](Value rows) -> Value {
    if (!rows)
      return {};
    int64_t n = cast<RankedTensorType>(rows.getType()).getNumElements();
    return n % experts == 0 ? rows : Value();
  };
  if (auto permute = x.getDefiningOp<PermuteOp>()) {
    auto [gate, counts] = gateCounts(permute.getSlots());
    return gate ? sized(counts) : Value();
  }
  if (auto exchange = x.getDefiningOp<AllToAllOp>()) {
    if (!exchange.getRecvCounts() || exchange.getSplitDim() != 0 || exchange.getConcatDim() != 1)
      return {};
    auto permute = exchange.getInput().getDefiningOp<PermuteOp>();
    if (!permute || !gateCounts(permute.getSlots()).first)
      return {};
    return sized(exchange.getRecvCounts());
  }
  return {};
}

/// Whether `dy`'s producer leaves the non-routed slots zero: the gradient
/// of the weighted combine, or a ragged all_to_all of it.
bool zeroOutsideRoutedRows(Value dy) {
  if (dy.getDefiningOp<UnpermuteGradOp>())
    return true;
  auto exchange = dy.getDefiningOp<AllToAllOp>();
  return exchange && exchange.getRecvCounts() &&
         exchange.getInput().getDefiningOp<UnpermuteGradOp>();
}

struct RoutedRowsPass : public moe::impl::RoutedRowsPassBase<RoutedRowsPass> {
  void runOnOperation() override {
    getOperation().walk([](Operation *op) {
      if (auto ffn = dyn_cast<ExpertFFNOp>(op); ffn && !ffn.getRows()) {
        if (Value rows = routedRows(ffn.getX()))
          ffn.getRowsMutable().assign(rows);
      } else if (auto grad = dyn_cast<ExpertFFNGradOp>(op); grad && !grad.getRows()) {
        if (Value rows = routedRows(grad.getX()); rows && zeroOutsideRoutedRows(grad.getDy()))
          grad.getRowsMutable().assign(rows);
      }
    });
  }
};

} // namespace
