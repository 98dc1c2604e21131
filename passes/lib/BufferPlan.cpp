//===- BufferPlan.cpp - the step's tensors in two arenas ------------------===//

#include "BufferPlan.h"

#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::moe;

namespace {

/// One tensor of the plan.
struct Buffer {
  Value value;
  int64_t bytes, first, last, arena, offset = -1;
};

/// Greedy-by-size placement: largest first, lowest aligned offset that
/// overlaps no placed buffer with an intersecting lifetime. Returns the peak.
int64_t place(SmallVectorImpl<Buffer *> &buffers, int64_t alignment) {
  llvm::stable_sort(buffers, [](Buffer *a, Buffer *b) { return a->bytes > b->bytes; });
  // The placed buffers in address order (offset, then end), so the first
  // fit scans them without sorting per buffer: thousands of layers' buffers
  // made that sort most of the compile time.
  auto range = [](const Buffer *p) { return std::make_pair(p->offset, p->offset + p->bytes); };
  SmallVector<Buffer *> placed;
  int64_t peak = 0;
  for (Buffer *b : buffers) {
    int64_t offset = 0;
    for (Buffer *p : placed) {
      if (p->first > b->last || b->first > p->last)
        continue; // not live at the same time
      if (offset + b->bytes <= p->offset)
        break;
      offset = std::max(offset, (p->offset + p->bytes + alignment - 1) / alignment * alignment);
    }
    b->offset = offset;
    peak = std::max(peak, offset + b->bytes);
    placed.insert(
        llvm::upper_bound(placed, b,
                          [&](const Buffer *x, const Buffer *y) { return range(x) < range(y); }),
        b);
  }
  return peak;
}

/// A replica sum whose input nothing else reads sums in place: its result
/// is the input's buffer (without replicated experts it would otherwise
/// copy the whole shard every step).
bool inPlace(ReplicaSumOp sum) { return sum.getInput().hasOneUse(); }

/// So does an all-reduce over a group of one member (the grid's degrees of
/// its axes are 1: a scale, without a codec), whose input nothing else
/// reads: the scale then reads and writes one buffer instead of copying.
bool inPlace(AllReduceOp reduce) {
  auto module = reduce->getParentOfType<ModuleOp>();
  auto grid = module ? module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName) : GridAttr();
  return !reduce.getCodecAttr() && reduce.getInput().hasOneUse() &&
         (!grid || grid.getGroupSize(reduce.getAxes().getValue()) == 1);
}

/// The value whose buffer `v` shares, or null.
Value aliasOf(Value v) {
  if (auto sum = v.getDefiningOp<ReplicaSumOp>(); sum && inPlace(sum))
    return sum.getInput();
  if (auto reduce = v.getDefiningOp<AllReduceOp>(); reduce && inPlace(reduce))
    return reduce.getInput();
  if (auto wait = v.getDefiningOp<WaitOp>())
    return wait.getInputs()[cast<OpResult>(v).getResultNumber()];
  return Value();
}

} // namespace

int64_t mlir::moe::tensorBytes(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return 0;
  int64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  return tensor.getNumElements() * std::max<int64_t>(bits / 8, 1);
}

void mlir::moe::planBuffers(func::FuncOp fn, BufferPeaks &peaks, int64_t alignment) {
  Block &body = fn.getBody().front();
  DenseMap<Value, unsigned> index;
  std::vector<Buffer> buffers;
  DenseSet<Value> gradients;
  // Parameter gradients: consumed by optimiser launches or returned as
  // such, possibly through the wait of their async all-reduce.
  auto gradient = [&](Value v) {
    for (; v; v = aliasOf(v))
      gradients.insert(v);
  };
  for (Operation &op : body) {
    if (auto launch = dyn_cast<LaunchOp>(op); launch && launch.getUpdates())
      gradient(launch.getOperands().front());
  }
  Operation *terminator = body.getTerminator();
  for (unsigned i = 0; i < terminator->getNumOperands(); ++i)
    if (fn.getResultAttr(i, MoEDialect::kGradOfAttrName))
      gradient(terminator->getOperand(i));

  // Positions of the waits: an async all-reduce reads its input until then.
  DenseMap<Operation *, int64_t> waitAt;
  int64_t position = 1;
  for (Operation &op : body) {
    if (auto wait = dyn_cast<WaitOp>(op))
      for (Value input : wait.getInputs())
        waitAt[input.getDefiningOp()] = position;
    ++position;
  }

  // Views: a value's byte offset within its buffer (a moe.chunk of it, or
  // an input of a moe.concat, which lives in the concat's buffer).
  DenseMap<Value, int64_t> within;
  // The concats' inputs, through their waits to the values that define
  // them: (concat, byte offset in its result).
  DenseMap<Value, std::pair<ConcatOp, int64_t>> concatInput;
  for (Operation &op : body)
    if (auto concat = dyn_cast<ConcatOp>(op))
      for (auto [i, input] : llvm::enumerate(concat.getInputs())) {
        concatInput[WaitOp::source(input)] = {concat, static_cast<int64_t>(i) *
                                                          tensorBytes(input.getType())};
      }
  DenseMap<Operation *, unsigned> concatBuffer;
  auto add = [&](Value v, int64_t first) {
    int64_t bytes = tensorBytes(v.getType());
    if (!bytes)
      return;
    if (auto it = concatInput.find(v); it != concatInput.end()) {
      // In the concat's buffer, made by its first input.
      auto [concat, offset] = it->second;
      auto [slot, made] = concatBuffer.try_emplace(concat, buffers.size());
      if (made)
        buffers.push_back({concat.getResult(), tensorBytes(concat.getType()), first, first,
                           gradients.contains(concat.getResult()) ? 1 : 0});
      index[v] = slot->second;
      within[v] = offset;
      return;
    }
    index[v] = buffers.size();
    buffers.push_back({v, bytes, first, first, gradients.contains(v) ? 1 : 0});
  };
  for (BlockArgument arg : body.getArguments())
    add(arg, 0);
  position = 1;
  for (Operation &op : body) {
    int64_t until = position;
    if (auto it = waitAt.find(&op); it != waitAt.end())
      until = it->second;
    for (Value operand : op.getOperands()) {
      auto it = index.find(operand);
      if (it != index.end())
        buffers[it->second].last = std::max(buffers[it->second].last, until);
    }
    Value alias = op.getNumResults() == 1 && !isa<WaitOp>(op) ? aliasOf(op.getResult(0)) : Value();
    if (auto wait = dyn_cast<WaitOp>(op)) {
      // The results are the operands' buffers.
      for (auto [input, result] : llvm::zip(wait.getInputs(), wait.getResults()))
        if (auto it = index.find(input); it != index.end()) {
          index[result] = it->second;
          within[result] = within.lookup(input);
        }
    } else if (auto chunk = dyn_cast<ChunkOp>(op)) {
      // A view of its input (none of a parameter's).
      if (auto it = index.find(chunk.getInput()); it != index.end()) {
        index[chunk.getResult()] = it->second;
        within[chunk.getResult()] =
            within.lookup(chunk.getInput()) + chunk.getIndex() * tensorBytes(chunk.getType());
      }
    } else if (auto concat = dyn_cast<ConcatOp>(op)) {
      // Its inputs were placed in its buffer.
      if (auto it = concatBuffer.find(concat); it != concatBuffer.end())
        index[concat.getResult()] = it->second;
    } else if (auto it = alias ? index.find(alias) : index.end(); it != index.end()) {
      index[op.getResult(0)] = it->second;
    } else if (!isa<GetParamOp>(op)) {
      for (Value result : op.getResults())
        add(result, position);
    }
    ++position;
  }
  SmallVector<Buffer *> arenas[2];
  for (Buffer &b : buffers)
    arenas[b.arena].push_back(&b);
  peaks.activation = std::max(peaks.activation, place(arenas[0], alignment));
  peaks.gradient = std::max(peaks.gradient, place(arenas[1], alignment));

  Builder builder(fn.getContext());
  for (Operation &op : body) {
    if (auto launch = dyn_cast<LaunchOp>(op); launch && launch.getUpdates())
      peaks.state +=
          2 * 4 * cast<RankedTensorType>(launch.getOperands().front().getType()).getNumElements();
    if (op.getNumResults() == 0 || isa<GetParamOp>(op))
      continue;
    SmallVector<int64_t> plan;
    for (Value result : op.getResults()) {
      auto it = index.find(result);
      if (it == index.end()) {
        plan.append({0, 0, 0});
        continue;
      }
      const Buffer &b = buffers[it->second];
      plan.append({b.arena, b.offset + within.lookup(result), tensorBytes(result.getType())});
    }
    if (auto launch = dyn_cast<LaunchOp>(op))
      launch.setBuffers(plan);
    else
      op.setAttr(MoEDialect::kBuffersAttrName, builder.getDenseI64ArrayAttr(plan));
  }
}

void mlir::moe::replanBuffers(ModuleOp module, ArrayRef<func::FuncOp> fns) {
  auto plan = module->getAttrOfType<BufferPlanAttr>(MoEDialect::kBufferPlanAttrName);
  if (!plan)
    return;
  BufferPeaks peaks;
  for (func::FuncOp fn : fns)
    planBuffers(fn, peaks, std::max<int64_t>(plan.getAlignment(), 64));
  int64_t params = plan.getParameterBytes();
  module->setAttr(
      MoEDialect::kBufferPlanAttrName,
      BufferPlanAttr::get(module.getContext(), peaks.activation, peaks.gradient, params,
                          peaks.state, peaks.activation + peaks.gradient + params + peaks.state,
                          plan.getNumKernels(), plan.getNumLaunches(), plan.getAlignment()));
}

SmallVector<func::FuncOp> mlir::moe::stepFunctions(ModuleOp module) {
  SmallVector<func::FuncOp> fns;
  for (auto fn : module.getOps<func::FuncOp>())
    if (!fn.isExternal())
      fns.push_back(fn);
  return fns;
}

int64_t mlir::moe::nextBucketId(ModuleOp module) {
  int64_t next = 0;
  module.walk([&](Operation *op) {
    if (auto id = op->getAttrOfType<IntegerAttr>(MoEDialect::kBucketAttrName))
      next = std::max(next, id.getInt() + 1);
  });
  return next;
}
