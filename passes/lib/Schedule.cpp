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

int64_t numel(AllReduceOp op) { return cast<RankedTensorType>(op.getType()).getNumElements(); }

/// A gradient reduction that may run in the background: uncompressed, its
/// input computed by an op of the block other than a reduction, every user
/// in the block and none of them the terminator, and in a planned step its
/// result in the gradient arena (what the optimiser reads).
bool isCandidate(AllReduceOp op) {
  Operation *producer = op.getInput().getDefiningOp();
  if (op.getAsync() || op.getCodecAttr() || !producer || producer->getBlock() != op->getBlock() ||
      isa<AllReduceOp>(producer) || op.getResult().use_empty())
    return false;
  if (auto plan = op->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName);
      plan && (plan.size() < 1 || plan[0] != 1))
    return false;
  return llvm::all_of(op.getResult().getUsers(), [&](Operation *user) {
    return user->getBlock() == op->getBlock() && !user->hasTrait<OpTrait::IsTerminator>();
  });
}

/// Reductions that start together: one collective.
struct Bucket {
  SmallVector<AllReduceOp> members;
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
    SmallVector<AllReduceOp> candidates;
    int64_t total = 0;
    for (Operation &op : body)
      if (auto r = dyn_cast<AllReduceOp>(op); r && isCandidate(r)) {
        candidates.push_back(r);
        total += numel(r);
      }
    if (candidates.empty())
      return 0;
    int64_t cap = bucketFloats > 0
                      ? bucketFloats
                      : std::clamp<int64_t>(total / 8, int64_t(1) << 14, int64_t(1) << 22);
    // In the order the gradients are computed.
    llvm::stable_sort(candidates, [&](AllReduceOp a, AllReduceOp b) {
      return position[a.getInput().getDefiningOp()] < position[b.getInput().getDefiningOp()];
    });
    std::map<std::tuple<std::string, int, double>, Bucket> open;
    SmallVector<Bucket> closed;
    for (AllReduceOp r : candidates) {
      std::string axes;
      for (Attribute a : r.getAxes())
        axes += cast<StringAttr>(a).getValue().str() + ",";
      Bucket &b = open[{axes, static_cast<int>(r.getReduction()), r.getScale().convertToDouble()}];
      Operation *producer = r.getInput().getDefiningOp();
      Operation *user = firstUser(r);
      if (!b.members.empty()) {
        Operation *last = later(b.lastProducer, producer);
        Operation *first = earlier(b.firstUser, user);
        if (b.floats + numel(r) > cap || position[last] >= position[first]) {
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
    for (Bucket &b : closed) {
      // Nothing between start and wait: keep it blocking.
      if (!hasWorkBetween(b.lastProducer, b.firstUser))
        continue;
      Operation *&after = insertAfter[b.lastProducer];
      if (!after)
        after = b.lastProducer;
      SmallVector<Value> results;
      for (AllReduceOp r : b.members) {
        r->moveAfter(after);
        after = r;
        r.setAsync(true);
        r->setAttr(MoEDialect::kBucketAttrName, builder.getI64IntegerAttr(nextBucketId));
        results.push_back(r.getResult());
      }
      ++nextBucketId;
      builder.setInsertionPoint(b.firstUser);
      auto wait = WaitOp::create(builder, b.members.front().getLoc(), results);
      for (auto [r, w] : llvm::zip(results, wait.getResults()))
        r.replaceAllUsesExcept(w, wait);
      ++made;
    }
    return made;
  }

private:
  Operation *firstUser(AllReduceOp r) {
    Operation *first = nullptr;
    for (Operation *user : r.getResult().getUsers())
      first = first ? earlier(first, user) : user;
    return first;
  }
  Operation *later(Operation *a, Operation *b) { return position[a] >= position[b] ? a : b; }
  Operation *earlier(Operation *a, Operation *b) { return position[a] <= position[b] ? a : b; }
  /// Whether an op other than all-reduces and waits lies strictly between.
  bool hasWorkBetween(Operation *from, Operation *to) {
    for (Operation *op = from->getNextNode(); op && op != to; op = op->getNextNode())
      if (!isa<AllReduceOp, WaitOp>(op))
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
    int64_t nextId = 0;
    module.walk([&](AllReduceOp op) {
      if (auto id = op->getAttrOfType<IntegerAttr>(MoEDialect::kBucketAttrName))
        nextId = std::max(nextId, id.getInt() + 1);
    });
    SmallVector<func::FuncOp> fns;
    for (auto fn : module.getOps<func::FuncOp>())
      if (!fn.isExternal())
        fns.push_back(fn);
    int64_t made = 0;
    for (func::FuncOp fn : fns)
      made += Scheduler(fn, bucketFloats).run(nextId);
    auto plan = module->getAttrOfType<DictionaryAttr>(MoEDialect::kBufferPlanAttrName);
    if (!made || !plan)
      return;
    // Inputs now live until their waits: plan again.
    BufferPeaks peaks;
    for (func::FuncOp fn : fns)
      planBuffers(fn, peaks);
    auto get = [&](StringRef key) {
      auto a = plan.getAs<IntegerAttr>(key);
      return a ? a.getInt() : 0;
    };
    int64_t params = get("parameter_bytes");
    Builder builder(module.getContext());
    NamedAttrList entries(plan);
    entries.set("activation_bytes", builder.getI64IntegerAttr(peaks.activation));
    entries.set("gradient_bytes", builder.getI64IntegerAttr(peaks.gradient));
    entries.set("optimizer_state_bytes", builder.getI64IntegerAttr(peaks.state));
    entries.set("total_bytes", builder.getI64IntegerAttr(peaks.activation + peaks.gradient +
                                                         params + peaks.state));
    module->setAttr(MoEDialect::kBufferPlanAttrName, entries.getDictionary(module.getContext()));
  }
};

} // namespace
