//===- Schedule.cpp - the moe-schedule pass -------------------------------===//

#include "BufferPlan.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <map>
#include <tuple>

namespace mlir::moe {
#define GEN_PASS_DEF_SCHEDULEPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;

namespace {

/// The collectives moe-schedule starts in the background: gradient
/// all-reduces, and ZeRO's flat reduce-scatters.
bool isReduce(Operation *op) {
  if (auto scatter = dyn_cast<ReduceScatterOp>(op))
    return !scatter.getDim();
  return isa<AllReduceOp>(op);
}
Value inputOf(Operation *op) { return op->getOperand(0); }
Value resultOf(Operation *op) { return op->getResult(0); }
int64_t numel(Operation *op) {
  return cast<RankedTensorType>(inputOf(op).getType()).getNumElements();
}
bool isAsync(Operation *op) {
  auto r = dyn_cast<AllReduceOp>(op);
  return r ? r.getAsync() : cast<ReduceScatterOp>(op).getAsync();
}
void setAsync(Operation *op) {
  if (auto r = dyn_cast<AllReduceOp>(op))
    r.setAsync(true);
  else
    cast<ReduceScatterOp>(op).setAsync(true);
}

/// A gradient reduction that may run in the background: uncompressed, its
/// input computed by an op of the block other than a reduction, every user
/// in the block and none of them the terminator, and in a planned step its
/// result in the gradient arena (what the optimiser reads).
bool isCandidate(Operation *op) {
  if (!isReduce(op))
    return false;
  Operation *producer = inputOf(op).getDefiningOp();
  if (isAsync(op) || op->getAttr("codec") || !producer || producer->getBlock() != op->getBlock() ||
      isReduce(producer) || resultOf(op).use_empty())
    return false;
  if (auto plan = op->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName);
      plan && (plan.size() < 1 || plan[0] != 1))
    return false;
  return llvm::all_of(resultOf(op).getUsers(), [&](Operation *user) {
    return user->getBlock() == op->getBlock() && !user->hasTrait<OpTrait::IsTerminator>();
  });
}

/// Reductions that start together: one collective.
struct Bucket {
  SmallVector<Operation *> members;
  int64_t floats = 0;
  Operation *lastProducer = nullptr; ///< the start goes after it
  Operation *firstUser = nullptr;    ///< the wait goes before it
};

class Scheduler {
public:
  Scheduler(func::FuncOp fn, int64_t bucketFloats) : fn(fn), bucketFloats(bucketFloats) {}

  /// Returns the buckets made async.
  int64_t run(int64_t &nextBucketId) {
    Block &body = fn.getBody().front();
    int64_t pos = 0;
    for (Operation &op : body)
      position[&op] = pos++;
    SmallVector<Operation *> candidates;
    using Key = std::tuple<std::string, std::string, int, double>;
    auto keyOf = [](Operation *r) {
      std::string axes;
      for (Attribute a : cast<ArrayAttr>(r->getAttr("axes")))
        axes += cast<StringAttr>(a).getValue().str() + ",";
      auto reduction = cast<ReductionAttr>(r->getAttr("reduction")).getValue();
      auto scale = cast<FloatAttr>(r->getAttr("scale")).getValueAsDouble();
      return Key{r->getName().getStringRef().str(), axes, static_cast<int>(reduction), scale};
    };
    // Each kind of reduction (one group, reduction and scale) is cut into
    // buckets of its own: an eighth of its floats, so that large expert
    // gradients do not fold the replicated parameters' reductions into one
    // bucket at the end of the backward.
    std::map<Key, int64_t> totals;
    for (Operation &op : body)
      if (isCandidate(&op)) {
        candidates.push_back(&op);
        totals[keyOf(&op)] += numel(&op);
      }
    if (candidates.empty())
      return 0;
    auto capOf = [&](const Key &key) {
      return bucketFloats > 0
                 ? bucketFloats
                 : std::clamp<int64_t>(totals[key] / 8, int64_t(1) << 14, int64_t(1) << 22);
    };
    // In the order the gradients are computed.
    llvm::stable_sort(candidates, [&](Operation *a, Operation *b) {
      return position[inputOf(a).getDefiningOp()] < position[inputOf(b).getDefiningOp()];
    });
    std::map<Key, Bucket> open;
    SmallVector<Bucket> closed;
    for (Operation *r : candidates) {
      Key key = keyOf(r);
      Bucket &b = open[key];
      Operation *producer = inputOf(r).getDefiningOp();
      Operation *user = firstUser(r);
      if (!b.members.empty()) {
        Operation *last = later(b.lastProducer, producer);
        Operation *first = earlier(b.firstUser, user);
        if (b.floats + numel(r) > capOf(key) || position[last] >= position[first]) {
          closed.push_back(std::move(b));
          b = Bucket();
        }
      }
      b.members.push_back(r);
      b.floats += numel(r);
      b.lastProducer = b.lastProducer ? later(b.lastProducer, producer) : producer;
      b.firstUser = b.firstUser ? earlier(b.firstUser, user) : user;
    }
    for (auto &entry : open)
      if (!entry.second.members.empty())
        closed.push_back(std::move(entry.second));
    // Starts in the order their last gradient is computed: the same order
    // on every rank (the collectives' matching order).
    llvm::stable_sort(closed, [&](const Bucket &a, const Bucket &b) {
      return position[a.lastProducer] < position[b.lastProducer];
    });
    int64_t made = 0;
    OpBuilder builder(fn.getContext());
    DenseMap<Operation *, Operation *> insertAfter;
    SmallVector<std::pair<Bucket *, SmallVector<Value>>> started;
    for (Bucket &b : closed) {
      // Nothing between start and wait: keep it blocking.
      if (!hasWorkBetween(b.lastProducer, b.firstUser))
        continue;
      Operation *&after = insertAfter[b.lastProducer];
      if (!after)
        after = b.lastProducer;
      SmallVector<Value> results;
      for (Operation *r : b.members) {
        r->moveAfter(after);
        after = r;
        setAsync(r);
        r->setAttr(MoEDialect::kBucketAttrName, builder.getI64IntegerAttr(nextBucketId));
        results.push_back(resultOf(r));
      }
      ++nextBucketId;
      started.push_back({&b, results});
      ++made;
    }
    // The waits, once every start is in place. ZeRO's reduce-scatters keep
    // one bucket in flight: each is waited for where the next one starts
    // (or before its first reader), so the full gradients they read are
    // freed early, as stage 2 means, not at the optimiser.
    for (size_t i = 0; i < started.size(); ++i) {
      auto &[b, results] = started[i];
      Operation *before = b->firstUser;
      // (Buckets whose last gradients come from the same op fly together.)
      if (isa<ReduceScatterOp>(b->members.front()))
        for (size_t j = i + 1; j < started.size(); ++j)
          if (Bucket *c = started[j].first; isa<ReduceScatterOp>(c->members.front()) &&
                                            position[c->lastProducer] > position[b->lastProducer]) {
            if (position[c->lastProducer] < position[b->firstUser])
              before = c->members.front();
            break;
          }
      builder.setInsertionPoint(before);
      auto wait = WaitOp::create(builder, b->members.front()->getLoc(), results);
      for (auto [r, w] : llvm::zip(results, wait.getResults()))
        r.replaceAllUsesExcept(w, wait);
    }
    return made;
  }

private:
  Operation *firstUser(Operation *r) {
    Operation *first = nullptr;
    for (Operation *user : resultOf(r).getUsers())
      first = first ? earlier(first, user) : user;
    return first;
  }
  Operation *later(Operation *a, Operation *b) { return position[a] >= position[b] ? a : b; }
  Operation *earlier(Operation *a, Operation *b) { return position[a] <= position[b] ? a : b; }
  /// Whether an op other than all-reduces and waits lies strictly between.
  bool hasWorkBetween(Operation *from, Operation *to) {
    for (Operation *op = from->getNextNode(); op && op != to; op = op->getNextNode())
      if (!isReduce(op) && !isa<WaitOp>(op))
        return true;
    return false;
  }

  func::FuncOp fn;
  int64_t bucketFloats;
  DenseMap<Operation *, int64_t> position;
};

struct SchedulePass : public moe::impl::SchedulePassBase<SchedulePass> {
  using SchedulePassBase::SchedulePassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (bucketFloats < 0) {
      module.emitError("moe-schedule: bucket-floats must be >= 0");
      return signalPassFailure();
    }
    int64_t nextId = nextBucketId(module);
    SmallVector<func::FuncOp> fns = stepFunctions(module);
    int64_t made = 0;
    for (func::FuncOp fn : fns)
      made += Scheduler(fn, bucketFloats).run(nextId);
    // Inputs now live until their waits: plan again.
    if (made)
      replanBuffers(module, fns);
  }
};

} // namespace
