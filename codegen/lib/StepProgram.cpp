//===- StepProgram.cpp - the step program as C++ --------------------------===//

#include "moe/Codegen/StepProgram.h"
#include "MicroBatchSteps.h"

#include "moec/contract/Abi.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace mlir;
using namespace mlir::moe;
using namespace moec::codegen;

// The dialect's enums cross to the runtime as the ABI's integers.
static_assert(static_cast<int>(CodecKind::fp16) == MOERT_CODEC_FP16 &&
              static_cast<int>(CodecKind::bf16) == MOERT_CODEC_BF16 &&
              static_cast<int>(CodecKind::int8) == MOERT_CODEC_INT8 &&
              static_cast<int>(CodecKind::topk) == MOERT_CODEC_TOPK &&
              static_cast<int>(CodecKind::sign) == MOERT_CODEC_SIGN &&
              static_cast<int>(CodecKind::powersgd) == MOERT_CODEC_POWERSGD);
static_assert(static_cast<int>(InitKind::zeros) == MOERT_INIT_ZEROS &&
              static_cast<int>(InitKind::ones) == MOERT_INIT_ONES &&
              static_cast<int>(InitKind::normal) == MOERT_INIT_NORMAL &&
              static_cast<int>(InitKind::uniform) == MOERT_INIT_UNIFORM);
static_assert(static_cast<int>(Activation::swiglu) == MOERT_ACTIVATION_SWIGLU &&
              static_cast<int>(Activation::gelu) == MOERT_ACTIVATION_GELU &&
              static_cast<int>(Activation::relu) == MOERT_ACTIVATION_RELU);

namespace {

/// Halide extents of `type` presented as `view` (Rows2: rows of `rowWidth`
/// elements, 0 for the last dimension).
SmallVector<int64_t> extents(RankedTensorType type, ViewKind view, int64_t rowWidth) {
  ArrayRef<int64_t> shape = type.getShape();
  if (view == ViewKind::Vector)
    return {type.getNumElements()};
  if (shape.empty())
    return {};
  int64_t numel = type.getNumElements(), last = rowWidth ? rowWidth : shape.back();
  if (shape.size() == 1 && view == ViewKind::Rows2)
    return {numel}; // gains, biases, counts: 1-d
  switch (view) {
  case ViewKind::Flat:
  case ViewKind::Vector:
    return {numel};
  case ViewKind::Rows2:
    return {last, numel / last};
  case ViewKind::Rows3:
    return {last, numel / last, 1};
  case ViewKind::Reversed:
    return SmallVector<int64_t>(shape.rbegin(), shape.rend());
  }
  return {};
}

/// The ABI constant of a dialect enum case: `prefix` + the case's mnemonic
/// in upper case (the static_asserts above keep the values equal).
std::string abiName(StringRef prefix, StringRef mnemonic) {
  return (prefix + mnemonic.upper()).str();
}
std::string codecName(CodecKind kind) { return abiName("MOERT_CODEC_", stringifyCodecKind(kind)); }
std::string initName(InitKind kind) { return abiName("MOERT_INIT_", stringifyInitKind(kind)); }

/// MOERT_AXIS_* bits of a list of grid axis names.
int axesMask(ArrayAttr axes) {
  int mask = 0;
  for (Attribute a : axes) {
    StringRef name = cast<StringAttr>(a).getValue();
    mask |= name == "dp" ? MOERT_AXIS_DP : name == "ep" ? MOERT_AXIS_EP : MOERT_AXIS_TP;
  }
  return mask;
}

/// An unbuffered stream that writes to another, which can change: the
/// emitter writes a step function's ops to a string first, to cut it into
/// parts (Emitter::emitFunction).
class Redirect : public raw_ostream {
public:
  explicit Redirect(raw_ostream &target) : target(&target) { SetUnbuffered(); }
  void to(raw_ostream &next) { target = &next; }

private:
  void write_impl(const char *ptr, size_t size) override { target->write(ptr, size); }
  uint64_t current_pos() const override { return 0; }
  raw_ostream *target;
};

class Emitter {
public:
  Emitter(ModuleOp module, const KernelCalls &calls, raw_ostream &out,
          const StepProgramNames &names, const TargetBackend &target,
          std::vector<std::string> *units)
      : module(module), calls(calls), out(out), redirect(out), os(redirect), names(names),
        target(target), units(units) {}

  LogicalResult run();
  /// With separate units: where the preamble every unit repeats ends in
  /// `out` (the bytes before the first step function).
  uint64_t preambleEnd = 0;

private:
  LogicalResult emitFunction(func::FuncOp fn, StringRef name, bool training);
  /// Emits `op` (and, for a bucket or ZeRO run it starts, the run's other
  /// members, added to `bucketed`).
  LogicalResult emitOp(Operation &op, llvm::DenseSet<Operation *> &bucketed);
  std::string pointer(Value v) { return storage.lookup(v); }
  LogicalResult launch(LaunchOp op);
  LogicalResult collective(Operation *op);
  LogicalResult bucket(ArrayRef<AllReduceOp> reduces);
  LogicalResult balanceBias(BalanceBiasOp op);
  LogicalResult replicaSum(ReplicaSumOp op);
  /// The runtime call a bucket of `first`'s kind starts with: `blocking`,
  /// or for an async one (moe-schedule) `start` with its bucket id, counted
  /// in the program's background buckets.
  FailureOr<std::string> bucketCall(Operation *first, bool async, StringRef blocking,
                                    StringRef start);
  LogicalResult reduceScatter(ArrayRef<Operation *> run);
  LogicalResult gatherParams(ArrayRef<Operation *> run);
  int64_t zeroFloats(Operation *op);
  /// The most elements one ZeRO collective moves (its staging is bounded).
  static constexpr int64_t kZeroRunFloats = int64_t(1) << 20;
  /// The most ops one function of the step program holds (see emitFunction).
  static constexpr int64_t kOpsPerPart = 150;
  /// With separate units: the most parts one unit holds.
  static constexpr size_t kPartsPerUnit = 8;
  /// The placement table of MoE layer `layer` in the step program: the
  /// runtime's, or the program's own when the runtime gives none.
  std::string layerTable(int64_t layer) {
    return "(ctx->run.expert_order ? ctx->run.expert_order[" + std::to_string(layer) +
           "] : kLayerOrder" + std::to_string(layer) + ")";
  }
  void setStorage(Operation *op, ArrayRef<int64_t> plan);
  /// Device targets (moert/Device.h): host code reads `v` next (its
  /// device-newer bytes come back), or wrote it. Nothing on the host target.
  void hostRead(Value v, StringRef indent = "  ");
  void hostWrote(Value v, StringRef indent = "  ");
  /// The same for parameter `index`'s whole buffer (host code that updates
  /// a parameter in place, not through a result).
  void hostParam(unsigned index, bool wrote);
  /// Emits host code `emit` for `ops`: their operands read before (or only
  /// `reads` when given), their results (and `written`, updated in place)
  /// written after.
  LogicalResult hostCode(ArrayRef<Operation *> ops, llvm::function_ref<LogicalResult()> emit,
                         ArrayRef<Value> written = {},
                         std::optional<ArrayRef<Value>> reads = std::nullopt);

  ModuleOp module;
  const KernelCalls &calls;
  raw_ostream &out;  ///< the program
  Redirect redirect; ///< `out`, or a step function's part being written
  raw_ostream &os;
  const StepProgramNames &names;
  /// Where the kernels run: on a device, the arenas have device copies and
  /// host code brackets what it reads and writes (hostRead, hostWrote).
  const TargetBackend &target;
  /// Not null: the parts of a function cut into several go to translation
  /// units of their own (their bodies here; emitStepProgram adds the
  /// preamble).
  std::vector<std::string> *units;
  llvm::DenseMap<Value, std::string> storage;
  llvm::StringMap<unsigned> paramIndex;
  llvm::DenseMap<Attribute, unsigned> rowTables;
  unsigned viewCounter = 0;
  bool training = false;
  /// The step's moe.lr_schedule as a moert_lr_schedule_config initializer
  /// (empty: none), for moert_program.lr_schedule.
  std::string lrSchedule;
  static std::string scheduleConfig(DictionaryAttr c) {
    StringRef kind = c.getAs<StringAttr>("schedule").getValue();
    std::string text;
    llvm::raw_string_ostream os(text);
    os << "{" << llvm::format("%.17g", c.getAs<FloatAttr>("lr").getValueAsDouble()) << ", "
       << llvm::format("%.17g", c.getAs<FloatAttr>("min_lr").getValueAsDouble()) << ", "
       << c.getAs<IntegerAttr>("warmup_steps").getInt() << ", "
       << c.getAs<IntegerAttr>("total_steps").getInt() << ", "
       << (kind == "cosine"   ? "MOERT_LR_COSINE"
           : kind == "linear" ? "MOERT_LR_LINEAR"
                              : "MOERT_LR_CONSTANT")
       << "}";
    return text;
  }
  /// Analytical bytes one rank sends per training step: all_reduce (ring:
  /// 2 (p-1)/p of the buffer) and all_to_all ((p-1)/p of it).
  int64_t allReduceBytes = 0, allToAllBytes = 0;
  /// ZeRO's reduce-scatters and parameter all-gathers ((p-1) shards each).
  int64_t reduceScatterBytes = 0, allGatherBytes = 0;
  /// Ragged all_to_alls: the bytes with every block full (counts included).
  int64_t raggedBound = 0;
  /// Compressed all-reduces: what they send, what they replace, how many.
  int64_t codecBytes = 0, codecUncompressed = 0, codecWarmup = 0;
  int codecSites = 0;
  /// Background all-reduce buckets of the training step.
  int asyncBuckets = 0;
  /// The volume counters above, to repeat an op's per micro-batch.
  struct Volume {
    int64_t allReduce, allToAll, reduceScatter, allGather, ragged, codec, uncompressed;
  };
  Volume volume() const {
    return {allReduceBytes, allToAllBytes, reduceScatterBytes, allGatherBytes,
            raggedBound,    codecBytes,    codecUncompressed};
  }
  /// Counts what was added since `before` `times` more times.
  void repeatSince(const Volume &before, int64_t times) {
    allReduceBytes += (allReduceBytes - before.allReduce) * times;
    allToAllBytes += (allToAllBytes - before.allToAll) * times;
    reduceScatterBytes += (reduceScatterBytes - before.reduceScatter) * times;
    allGatherBytes += (allGatherBytes - before.allGather) * times;
    raggedBound += (raggedBound - before.ragged) * times;
    codecBytes += (codecBytes - before.codec) * times;
    codecUncompressed += (codecUncompressed - before.uncompressed) * times;
  }
  /// Micro-batches per step (moe.micro_batches); in the training step with
  /// more than one, what runs once and the gradients summed.
  int64_t microBatches = 1;
  std::optional<MicroBatchSteps> microSteps;
  int64_t accumulatorBytes = 0;
  /// The step function's loop over the micro-batches, calling `inner`.
  void microBatchLoop(func::FuncOp fn, StringRef name, StringRef inner, bool isTraining);
  int64_t groupSize(ArrayAttr axes) {
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    return grid ? grid.getGroupSize(axes.getValue()) : 1;
  }
  /// The placement (positions' experts) of each MoE layer with a
  /// moe.place_slots, and the layers whose gradients sum replicas.
  llvm::DenseMap<int64_t, SmallVector<int64_t>> layerOrders;
  llvm::DenseSet<int64_t> replicaLayers;
  /// (experts, capacity) of every fused_gate of the training step, in order.
  SmallVector<std::pair<int64_t, int64_t>> moeLayers;
  /// Their model layers: each router's parameter name without ".router".
  SmallVector<std::string> moeLayerNames;
};

/// The step program's halide_type_t constant of `element`.
static StringRef halideType(Type element) {
  return element.isInteger(32) ? "i32"
         : element.isBF16()    ? "bf16"
         : element.isF16()     ? "f16"
                               : "f32";
}

void Emitter::setStorage(Operation *op, ArrayRef<int64_t> plan) {
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    int64_t arena = plan[3 * i], offset = plan[3 * i + 1];
    Type element = cast<RankedTensorType>(result.getType()).getElementType();
    storage[result] = "((" +
                      std::string(element.isInteger(32) ? "int32_t"
                                  : element.isF32()     ? "float"
                                                        : "uint16_t") + // bf16, f16
                      " *)(" +
                      (arena ? "G" : "A") + " + " + std::to_string(offset) + "))";
  }
}

/// Whether a global_norm launch takes each gradient's partial sums of
/// squares after the gradients (moe-lower-to-kernels' device-norm).
static bool hasPartialSums(LaunchOp op) {
  auto operands = op.getOperands();
  if (operands.empty() || operands.size() % 2)
    return false;
  auto module = op->getParentOfType<ModuleOp>();
  return llvm::all_of(operands.take_back(operands.size() / 2), [&](Value v) {
    auto launch = v.getDefiningOp<LaunchOp>();
    return launch &&
           module.lookupSymbol<KernelOp>(launch.getKernelAttr()).getFamily() == "sum_squares";
  });
}

static int64_t byteSize(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return type.getNumElements() * ((type.getElementTypeBitWidth() + 7) / 8);
}

void Emitter::hostRead(Value v, StringRef indent) {
  if (!target.onDevice() || !storage.count(v))
    return;
  os << indent << "if (int rc = moert_device_host(ctx, " << pointer(v) << ", " << byteSize(v)
     << ")) return rc;\n";
}

void Emitter::hostWrote(Value v, StringRef indent) {
  if (!target.onDevice() || !storage.count(v))
    return;
  os << indent << "moert_device_wrote(ctx, " << pointer(v) << ", " << byteSize(v) << ");\n";
}

void Emitter::hostParam(unsigned index, bool wrote) {
  if (!target.onDevice())
    return;
  if (wrote)
    os << "  moert_device_wrote(ctx, ctx->run.params[" << index << "], -1);\n";
  else
    os << "  if (int rc = moert_device_host(ctx, ctx->run.params[" << index
       << "], -1)) return rc;\n";
}

LogicalResult Emitter::hostCode(ArrayRef<Operation *> ops, llvm::function_ref<LogicalResult()> emit,
                                ArrayRef<Value> written, std::optional<ArrayRef<Value>> reads) {
  if (reads)
    for (Value v : *reads)
      hostRead(v);
  else
    for (Operation *op : ops)
      for (Value v : op->getOperands())
        hostRead(v);
  if (failed(emit()))
    return failure();
  for (Operation *op : ops)
    for (Value v : op->getResults())
      hostWrote(v);
  for (Value v : written)
    hostWrote(v);
  return success();
}

LogicalResult Emitter::launch(LaunchOp op) {
  auto kernel = module.lookupSymbol<KernelOp>(op.getKernelAttr());
  const KernelCall &call = calls.at(kernel.getSymName());
  setStorage(op, op.getBuffers());
  StringRef family = kernel.getFamily();
  auto numel = [](Value v) { return cast<RankedTensorType>(v.getType()).getNumElements(); };
  if (family == "lr_schedule") {
    auto c = kernel.getConfig();
    // The schedule is the run's (ctx->run.lr_schedule: the compiled one,
    // emitted into the program below, with the trainer's flags applied).
    std::string config = scheduleConfig(c);
    if (!lrSchedule.empty() && lrSchedule != config)
      return op.emitError("moec: the step has two learning-rate schedules; the trainer sets one");
    lrSchedule = config;
    os << "  {\n    const moert_lr_schedule_config *s = &ctx->run.lr_schedule;\n    *"
       << pointer(op.getResult(0))
       << " = moert_lr_schedule(step, s->lr, s->min_lr, s->warmup_steps, s->total_steps, "
          "s->kind);\n  }\n  ctx->outputs.lr = *"
       << pointer(op.getResult(0)) << ";\n";
    return success();
  }
  if (family == "global_norm") {
    // With partial_sums (moe-lower-to-kernels' device-norm), each gradient's
    // partial sums of squares follow the gradients, and the runtime reads
    // those: R rows of J sums for a gradient of R rows.
    bool squares = hasPartialSums(op);
    unsigned n = op.getOperands().size() / (squares ? 2 : 1);
    auto grads = op.getOperands().take_front(n);
    auto data = op.getOperands().take_back(n);
    os << "  {\n    const float *g[] = {";
    llvm::interleaveComma(data, os, [&](Value v) { os << pointer(v); });
    os << "};\n    const int64_t sizes[] = {";
    llvm::interleaveComma(data, os, [&](Value v) { os << numel(v); });
    // Each gradient's parameter (the one its update launch updates), for the
    // trainer's per-group gradient norms.
    os << "};\n    const int param_of[] = {";
    llvm::interleaveComma(grads, os, [&](Value v) {
      int index = -1;
      for (Operation *user : v.getUsers())
        if (auto launch = dyn_cast<LaunchOp>(user); launch && launch.getUpdates())
          index = static_cast<int>(paramIndex.lookup(*launch.getUpdates()));
      os << index;
    });
    os << "};\n";
    // Expert shards: their squares are summed over the shard group.
    auto sharded = kernel.getConfig().getAs<DenseBoolArrayAttr>("sharded");
    auto axes = kernel.getConfig().getAs<ArrayAttr>("shard_axes");
    bool shards = sharded && axes;
    if (shards) {
      if (training)
        if (int64_t p = groupSize(axes); p > 1)
          allReduceBytes += 2 * (p - 1) * 2 * 4 / p; // the shards' squares
      os << "    const unsigned char sharded[] = {";
      llvm::interleaveComma(sharded.asArrayRef(), os, [&](bool b) { os << (b ? 1 : 0); });
      os << "};\n";
    }
    // Rows of a placement with replicas count once (moe.global_norm's
    // shard_layers).
    auto layers = kernel.getConfig().getAs<DenseI64ArrayAttr>("shard_layers");
    if (layers) {
      os << "    const int32_t *const tables[] = {";
      llvm::interleaveComma(layers.asArrayRef(), os, [&](int64_t l) {
        os << (l >= 0 ? layerTable(l) : std::string("nullptr"));
      });
      os << "};\n    const int32_t positions[] = {";
      llvm::interleaveComma(layers.asArrayRef(), os, [&](int64_t l) {
        os << (l >= 0 ? static_cast<int64_t>(layerOrders.lookup(l).size()) : 0);
      });
      os << "};\n    const int64_t rows[] = {";
      llvm::interleaveComma(grads, os, [&](Value v) {
        auto t = cast<RankedTensorType>(v.getType());
        os << (t.getRank() ? t.getShape()[0] : 1);
      });
      os << "};\n";
    }
    // Pieces several members hold (tensor parallelism) count 1/copies.
    auto copies = kernel.getConfig().getAs<DenseI64ArrayAttr>("shard_copies");
    if (copies) {
      os << "    const int64_t copies[] = {";
      llvm::interleaveComma(copies.asArrayRef(), os);
      os << "};\n";
    }
    os << "    if (int rc = moert_step_global_norm" << (squares ? "_squares" : "")
       << "(ctx, g, sizes, " << (shards ? "sharded" : "nullptr") << ", "
       << (copies ? "copies" : "nullptr") << ", param_of, " << n << ", "
       << (shards ? axesMask(axes) : 0) << ", "
       << (layers ? "tables, positions, rows, " : "nullptr, nullptr, nullptr, ")
       << pointer(op.getResult(0)) << ")) return rc;\n  }\n";
    return success();
  }
  if (family == "place_slots") {
    auto c = kernel.getConfig();
    auto order = c.getAs<DenseI64ArrayAttr>("order");
    std::string table = "order";
    os << "  {\n    static const int32_t order[] = {";
    llvm::interleaveComma(order.asArrayRef(), os);
    os << "};\n";
    if (auto layer = c.getAs<IntegerAttr>("layer"))
      table = layerTable(layer.getInt());
    os << "    if (moert_place_slots(ctx, " << pointer(op.getResult(0)) << ", "
       << pointer(op.getOperand(0)) << ", " << numel(op.getOperand(0)) << ", "
       << pointer(op.getResult(1)) << ", " << pointer(op.getOperand(1)) << ", "
       << numel(op.getOperand(1)) << ", " << table << ", " << order.size() << ", "
       << c.getAs<IntegerAttr>("block").getInt() << ")) return 1;\n";
    // moe-pipeline-experts: the blocks chunk by chunk.
    if (auto chunks = c.getAs<IntegerAttr>("chunks"))
      os << "    if (moert_chunk_positions(" << pointer(op.getResult(0)) << ", "
         << numel(op.getOperand(0)) << ", " << pointer(op.getResult(1)) << ", " << order.size()
         << ", " << c.getAs<IntegerAttr>("block").getInt() << ", "
         << c.getAs<IntegerAttr>("ranks").getInt() << ", " << chunks.getInt() << ")) return 1;\n";
    os << "  }\n";
    return success();
  }
  if (call.generator.empty())
    return op.emitOpError() << "has no kernel and no runtime routine";
  SmallVector<std::string> names, metricViews;
  os << "  {\n";
  FailureOr<SmallVector<KernelArg>> args = argumentsOf(op, kernel);
  if (failed(args))
    return failure();
  // The AdamW update of a placed expert tensor runs over the positions that
  // hold an expert in the placement in force, one launch per run of them:
  // an empty position (a rank with fewer experts than the most any rank
  // holds) is never read, and updating it cost such a rank as much as a
  // full one.
  int64_t placedRow = 0;
  if (family == "adamw_update" && !op.getShardAxesAttr())
    if (auto param = module.lookupSymbol<ParamOp>(*op.getUpdates()))
      if (auto layer = param->getAttrOfType<IntegerAttr>(MoEDialect::kShardLayerAttrName);
          layer && layerOrders.count(layer.getInt()) && param.getTensorType().getRank() > 0) {
        int64_t rows = param.getTensorType().getShape()[0];
        placedRow = param.getTensorType().getNumElements() / std::max<int64_t>(rows, 1);
        os << "    int64_t runs[" << 2 * rows
           << "];\n    const int placed = moert_step_placed_runs(ctx, "
           << layerTable(layer.getInt()) << ", " << layerOrders.lookup(layer.getInt()).size()
           << ", " << rows << ", runs);\n    for (int run = 0; run < placed; ++run) {\n"
           << "    const int64_t at = runs[2 * run] * " << placedRow
           << ", len = runs[2 * run + 1] * " << placedRow << ";\n";
      }
  for (auto [position, arg] : llvm::enumerate(*args)) {
    // Each view names the generator argument it fills.
    StringRef role = call.row->signature[position];
    std::string name = "v" + std::to_string(viewCounter++);
    names.push_back(name);
    if (arg.source == KernelArg::Dummy) {
      // The call's own element: a kernel may write an absent optional
      // output, and ranks run as threads.
      os << "    " << (arg.dummyInt ? "int32_t " : "float ") << name << "_dummy[1] = {};\n    View "
         << name << " = view(" << name << "_dummy, " << (arg.dummyInt ? "i32" : "f32") << ", {";
      for (unsigned i = 0; i < arg.dummyRank; ++i)
        os << (i ? ", " : "") << "1";
      os << "}); // " << role << "\n";
      continue;
    }
    if (arg.source == KernelArg::Metric) {
      os << "    float " << name << "_data[" << arg.index << "] = {};\n    View " << name
         << " = view(" << name << "_data, f32, {" << arg.index << "}); // " << role << "\n";
      metricViews.push_back(name + "_data");
      continue;
    }
    Value value;
    std::string ptr;
    if (arg.source == KernelArg::Operand)
      value = op.getOperands()[arg.index];
    else if (arg.source == KernelArg::Result)
      value = op.getResults()[arg.index];
    else
      value = op.getOperands()[0]; // the gradient: the parameter's type
    if (arg.source == KernelArg::Param || arg.source == KernelArg::MomentM ||
        arg.source == KernelArg::MomentV) {
      unsigned idx = paramIndex.lookup(*op.getUpdates());
      ptr = arg.source == KernelArg::Param
                ? "ctx->run.params[" + std::to_string(idx) + "]"
                : "ctx->run.moments[" +
                      std::to_string(2 * idx + (arg.source == KernelArg::MomentV)) + "]";
      // ZeRO: this rank's shard of the parameter (the moments hold only it).
      if (ArrayAttr axes = op.getShardAxesAttr(); axes && arg.source == KernelArg::Param)
        ptr = "(" + ptr + " + moert_step_shard_offset(ctx, " + std::to_string(axesMask(axes)) +
              ", " + std::to_string(numel(op.getOperand(0))) + "))";
    } else {
      ptr = pointer(value);
    }
    auto type = cast<RankedTensorType>(value.getType());
    if (placedRow && type.getRank() > 0) {
      // A run of placed rows of the flat tensor.
      os << "    View " << name << " = view((" << ptr << ") + at, "
         << halideType(type.getElementType()) << ", {(int)len}); // " << role << "\n";
      continue;
    }
    os << "    View " << name << " = view(" << ptr << ", " << halideType(type.getElementType())
       << ", {";
    llvm::interleaveComma(extents(type, arg.view, arg.rowWidth), os);
    os << "}); // " << role << "\n";
  }
  auto arguments = [&] {
    llvm::interleaveComma(names, os, [&](const std::string &n) { os << "&" << n << ".b"; });
  };
  // Loss scaling: an overflowed step (moert_step_global_norm) updates nothing.
  bool skippable = family == "adamw_update" && module->hasAttr(MoEDialect::kLossScaleAttrName);
  if (skippable)
    os << "    if (!ctx->outputs.skip_update) {\n";
  if (!target.onDevice()) {
    // --profile-kernels: the clock is 0 unless this rank is profiling.
    os << "    const double t0 = moert_kernel_profile_clock();\n    int rc = "
       << kernel.getSymName() << "(";
    arguments();
    os << ");\n    if (t0 > 0) moert_kernel_profile_since(\"" << kernel.getSymName()
       << "\", t0);\n    if (rc) return rc;\n";
  } else {
    // A device kernel: its arguments are crops of the arenas' device
    // copies (moert/Device.h).
    os << "    halide_buffer_t *const bufs[] = {";
    arguments();
    os << "};\n    if (int rc = moert_device_call(ctx, " << kernel.getSymName()
       << "_metadata(), bufs, " << names.size()
       << ")) return rc;\n    int rc = moert_device_called(ctx, " << kernel.getSymName() << "(";
    arguments();
    os << "), bufs, " << names.size() << ");\n    if (rc) return rc;\n";
  }
  if (skippable)
    os << "    }\n";
  if (placedRow)
    os << "    }\n";
  if (training && family == "fused_gate") {
    // Routed token-slots per expert, for load metrics.
    int64_t experts = cast<RankedTensorType>(op.getResult(3).getType()).getNumElements();
    int64_t offset = 0;
    for (auto &layer : moeLayers)
      offset += layer.first;
    moeLayers.push_back({experts, kernel.getConfig().getAs<IntegerAttr>("capacity").getInt()});
    // The router weight, or the parameter a mixed-precision step casts.
    Value weight = op.getOperand(1);
    if (auto copy = weight.getDefiningOp<LaunchOp>();
        copy && module.lookupSymbol<KernelOp>(copy.getKernelAttr()).getFamily() == "cast")
      weight = copy.getOperands()[0];
    auto router = weight.getDefiningOp<GetParamOp>();
    StringRef name = router ? router.getName() : StringRef();
    name.consume_back(".router");
    moeLayerNames.push_back(name.empty() ? "moe" + std::to_string(moeLayers.size() - 1)
                                         : name.str());
    hostRead(op.getResult(3), "    ");
    hostRead(op.getResult(2), "    ");
    // With micro-batches: summed over them (the losses: their mean).
    auto sum = [&](const std::string &at) -> std::string {
      return microBatches > 1 ? "(moert_step_first_micro_batch(ctx) ? 0 : " + at + ") + " : "";
    };
    os << "    if (ctx->buffers.expert_counts)\n      for (int e = 0; e < " << experts
       << "; ++e) ctx->buffers.expert_counts[" << offset
       << " + e] = " << sum("ctx->buffers.expert_counts[" + std::to_string(offset) + " + e]")
       << pointer(op.getResult(3)) << "[e];\n";
    // One pass over the slots: the dropped ones are -1 (exact with routing
    // groups); the kept ones count for the expert each routes to (the
    // gate's indices): the rows it computes.
    hostRead(op.getResult(1), "    ");
    std::string slots = pointer(op.getResult(2)), index = pointer(op.getResult(1));
    os << "    if (ctx->buffers.dropped_slots || ctx->buffers.kept_slots) {\n"
       << "      int32_t dropped = 0, kept[" << experts << "] = {};\n      for (int64_t i = 0; i < "
       << numel(op.getResult(2)) << "; ++i)\n        if (" << slots
       << "[i] < 0) ++dropped;\n        else if ((uint32_t)" << index << "[i] < " << experts
       << "u) ++kept[" << index << "[i]];\n"
       << "      if (ctx->buffers.dropped_slots) ctx->buffers.dropped_slots["
       << moeLayers.size() - 1
       << "] = " << sum("ctx->buffers.dropped_slots[" + std::to_string(moeLayers.size() - 1) + "]")
       << "dropped;\n";
    if (microBatches > 1)
      os << "      if (ctx->buffers.kept_slots)\n        for (int e = 0; e < " << experts
         << "; ++e) ctx->buffers.kept_slots[" << offset
         << " + e] = " << sum("ctx->buffers.kept_slots[" + std::to_string(offset) + " + e]")
         << "kept[e];\n";
    else
      os << "      if (ctx->buffers.kept_slots) std::memcpy(ctx->buffers.kept_slots + " << offset
         << ", kept, sizeof kept);\n";
    os << "    }\n";
    // The unweighted balancing and z-losses (the kernel's loss_parts).
    std::string at =
        "ctx->buffers.router_losses[" + std::to_string(2 * (moeLayers.size() - 1)) + " + i]";
    os << "    if (ctx->buffers.router_losses)\n"
       << "      for (int i = 0; i < 2; ++i) " << at << " = " << sum(at) << metricViews.back()
       << "[i]" << (microBatches > 1 ? " / " + std::to_string(microBatches) + ".0f" : "") << ";\n";
  }
  if (!training && family == "cross_entropy") {
    // Sampling reads the next-token logits of the evaluation step.
    Value logits = op.getOperands()[0];
    Type element = cast<RankedTensorType>(logits.getType()).getElementType();
    os << "    if (logits) {\n";
    hostRead(logits, "    ");
    os << "    }\n";
    if (element.isF32())
      os << "    if (logits)\n      std::memcpy(logits, " << pointer(logits) << ", "
         << numel(logits) * 4 << ");\n";
    else
      os << "    if (logits)\n      moert_widen(logits, " << pointer(logits) << ", "
         << numel(logits) << ", " << (element.isBF16() ? 1 : 0) << ");\n";
  }
  os << "  }\n";
  return success();
}

LogicalResult Emitter::bucket(ArrayRef<AllReduceOp> reduces) {
  AllReduceOp first = reduces.front();
  for (AllReduceOp r : reduces)
    if (!cast<RankedTensorType>(r.getInput().getType()).getElementType().isF32())
      return collective(r); // its message: all-reduces sum f32 only
  if (reduces.size() == 1 && !first.getAsync())
    return collective(first);
  int64_t total = 0;
  std::string outs, ins, counts;
  for (AllReduceOp r : reduces) {
    // One collective packs every input before it writes any output.
    Operation *producer = r.getInput().getDefiningOp();
    if (r.getCodecAttr() || r.getAsync() != first.getAsync() || r.getAxes() != first.getAxes() ||
        r.getReduction() != first.getReduction() || r.getScale() != first.getScale() ||
        (producer && llvm::is_contained(reduces, dyn_cast<AllReduceOp>(producer))))
      return r.emitOpError("cannot share a bucket with the all_reduce before it (a "
                           "bucket has one group, reduction and scale, no codec, and "
                           "no member reads another's result)");
    auto plan = r->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName);
    if (!plan)
      return r.emitOpError("has no planned buffer (run moe-lower-to-kernels)");
    setStorage(r, plan.asArrayRef());
    int64_t n = cast<RankedTensorType>(r.getType()).getNumElements();
    total += n;
    outs += (outs.empty() ? "" : ", ") + pointer(r.getResult());
    ins += (ins.empty() ? "" : ", ") + pointer(r.getInput());
    counts += (counts.empty() ? "" : ", ") + std::to_string(n);
  }
  int64_t p = groupSize(first.getAxes());
  if (training)
    allReduceBytes += moert_ring_all_reduce_bytes(total, p);
  FailureOr<std::string> call = bucketCall(first, first.getAsync(), "moert_step_all_reduce_bucket",
                                           "moert_step_all_reduce_start");
  if (failed(call))
    return failure();
  os << "  {\n    float *const outs[] = {" << outs << "};\n    const float *const ins[] = {" << ins
     << "};\n    const int64_t counts[] = {" << counts << "};\n    if (int rc = " << *call
     << reduces.size() << ", outs, ins, counts, " << axesMask(first.getAxes()) << ", "
     << (first.getReduction() == Reduction::mean ? 1 : 0) << ", "
     << llvm::format("%.17g", first.getScale().convertToDouble()) << ")) return rc;\n  }\n";
  return success();
}

LogicalResult Emitter::collective(Operation *op) {
  auto plan = op->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName);
  if (!plan)
    return op->emitOpError("has no planned buffer (run moe-lower-to-kernels)");
  setStorage(op, plan.asArrayRef());
  auto type = cast<RankedTensorType>(op->getOperand(0).getType());
  bool half = type.getElementType().isBF16() || type.getElementType().isF16();
  if (half && isa<AllReduceOp>(op))
    return op->emitOpError() << "sums " << type.getElementType()
                             << " data; the runtime's all-reduces sum f32 only (a "
                                "mixed-precision model trains with data and expert parallelism, "
                                "no tensor parallelism)";
  if (half) {
    // An all_to_all moves rows whole: 16-bit rows of even width travel as
    // f32 rows of half the width, uncompressed.
    if (cast<AllToAllOp>(op).getCodecAttr())
      return op->emitOpError() << "compresses " << type.getElementType()
                               << " data; the codecs compress f32 (no --compress-dispatch with a "
                                  "mixed-precision model)";
    if (type.getRank() < 2 || type.getShape().back() % 2 != 0)
      return op->emitOpError() << "moves " << type.getElementType()
                               << " rows of odd width; the runtime moves them in 32-bit words";
    SmallVector<int64_t> shape(type.getShape());
    shape.back() /= 2;
    type = RankedTensorType::get(shape, Float32Type::get(op->getContext()));
  }
  if (auto reduce = dyn_cast<AllReduceOp>(op)) {
    int64_t p = groupSize(reduce.getAxes()), n = type.getNumElements();
    int64_t ring = moert_ring_all_reduce_bytes(n, p);
    if (CodecAttr codec = reduce.getCodecAttr()) {
      if (!training)
        return op->emitOpError("compressed all_reduce runs in the training step only");
      // A codec's state (error-feedback residuals, PowerSGD's Q) would keep
      // a loss-scaled gradient across changes of the scale, and an
      // overflow's inf for good.
      if (module->hasAttr(MoEDialect::kLossScaleAttrName) &&
          (codec.getErrorFeedback() || codec.getKind() == CodecKind::powersgd))
        return op->emitOpError()
               << "compresses a loss-scaled (f16) gradient with a codec that keeps state (error "
                  "feedback or PowerSGD); give an f16 model a stateless codec (int8, fp16, bf16 "
                  "without error feedback), or train it in bf16";
      // Compressed after the warm-up steps. moe.all_reduce views a tensor
      // of rank >= 2 as [numel / last, last] for powersgd.
      int64_t cols = type.getShape().empty() ? 1 : type.getShape().back(), rows = n / cols;
      codecUncompressed += ring;
      codecBytes += moert_codec_all_reduce_bytes(
          static_cast<int>(codec.getKind()), codec.getBlockSize(),
          codec.getRatio().convertToDouble(), codec.getRank(), n, rows, cols, p);
      os << "  {\n    static const moert_codec codec = {" << codecName(codec.getKind()) << ", "
         << codec.getBlockSize() << ", "
         << llvm::format("%.17g", codec.getRatio().convertToDouble()) << ", " << codec.getRank()
         << ", " << (codec.getErrorFeedback() ? 1 : 0) << "};\n"
         << "    int rc = step < " << codecWarmup << " ? moert_step_all_reduce(ctx, "
         << pointer(reduce.getResult()) << ", " << pointer(reduce.getInput()) << ", " << n << ", "
         << axesMask(reduce.getAxes()) << ", " << (reduce.getReduction() == Reduction::mean ? 1 : 0)
         << ", " << llvm::format("%.17g", reduce.getScale().convertToDouble())
         << ")\n      : moert_step_all_reduce_codec(ctx, " << pointer(reduce.getResult()) << ", "
         << pointer(reduce.getInput()) << ", " << n << ", " << axesMask(reduce.getAxes()) << ", "
         << (reduce.getReduction() == Reduction::mean ? 1 : 0) << ", "
         << llvm::format("%.17g", reduce.getScale().convertToDouble()) << ", &codec, "
         << codecSites++ << ", " << rows << ", " << cols << ");\n    if (rc) return rc;\n  }\n";
      return success();
    }
    if (training)
      allReduceBytes += ring;
    os << "  if (int rc = moert_step_all_reduce(ctx, " << pointer(reduce.getResult()) << ", "
       << pointer(reduce.getInput()) << ", " << type.getNumElements() << ", "
       << axesMask(reduce.getAxes()) << ", " << (reduce.getReduction() == Reduction::mean ? 1 : 0)
       << ", " << llvm::format("%.17g", reduce.getScale().convertToDouble()) << ")) return rc;\n";
    return success();
  }
  auto exchange = cast<AllToAllOp>(op);
  // fp16, bf16 or int8 on the wire (the verifier allows no other codec here).
  std::string codecArg = "nullptr";
  CodecAttr codec = exchange.getCodecAttr();
  if (codec) {
    os << "  static const moert_codec codec" << codecSites << " = {" << codecName(codec.getKind())
       << ", " << codec.getBlockSize() << ", 0, 0, 0};\n";
    codecArg = "&codec" + std::to_string(codecSites++);
  }
  // Bytes of `elems` floats on the wire.
  auto wire = [&](int64_t elems) -> int64_t {
    return moert_all_to_all_wire_bytes(codec ? static_cast<int>(codec.getKind()) : -1,
                                       codec ? codec.getBlockSize() : 0, elems);
  };
  if (Value counts = exchange.getSendCounts()) {
    if (exchange.getSplitDim() == exchange.getConcatDim())
      return op->emitOpError("the ragged row form is not executable yet");
    // Ragged: the bytes depend on the routing; the dense volume bounds them.
    if (int64_t p = groupSize(exchange.getAxes()); training && p > 1)
      raggedBound += wire(type.getNumElements() / p) * (p - 1) +
                     (p - 1) * type.getShape()[0] * (exchange.getSplitDim() == 0 ? 1 : p) / p * 4;
    os << "  {\n    const int64_t shape[] = {";
    llvm::interleaveComma(type.getShape(), os);
    // async (moe-pipeline-experts): started on the exchange channel, its
    // moe.wait completes it.
    std::string call = "moert_step_all_to_all_ragged(ctx, ";
    if (exchange.getAsync()) {
      auto id = op->getAttrOfType<IntegerAttr>(MoEDialect::kBucketAttrName);
      if (!id)
        return op->emitOpError("is async without a moe.bucket id");
      call = "moert_step_all_to_all_ragged_start(ctx, " + std::to_string(id.getInt()) + ", ";
    }
    os << "};\n    if (int rc = " << call << "(float *)" << pointer(exchange.getResult())
       << ", (const float *)" << pointer(exchange.getInput()) << ", shape, "
       << exchange.getSplitDim() << ", " << exchange.getConcatDim() << ", "
       << axesMask(exchange.getAxes()) << ", " << pointer(counts) << ", "
       << pointer(exchange.getRecvCounts()) << ", " << codecArg << ")) return rc;\n  }\n";
    return success();
  }
  if (int64_t p = groupSize(exchange.getAxes()); training && p > 1)
    allToAllBytes += wire(type.getNumElements() / p) * (p - 1);
  os << "  {\n    const int64_t shape[] = {";
  llvm::interleaveComma(type.getShape(), os);
  os << "};\n    if (int rc = moert_step_all_to_all(ctx, (float *)" << pointer(exchange.getResult())
     << ", (const float *)" << pointer(exchange.getInput()) << ", shape, " << type.getRank() << ", "
     << exchange.getSplitDim() << ", " << exchange.getConcatDim() << ", "
     << axesMask(exchange.getAxes()) << ", " << codecArg << ")) return rc;\n  }\n";
  return success();
}

/// The selection bias's load rule: the runtime counts, sums the counts over
/// the group and updates the bias (moert_step_balance_bias).
LogicalResult Emitter::balanceBias(BalanceBiasOp op) {
  if (!training)
    return op.emitOpError("updates a parameter outside the training step");
  auto param = module.lookupSymbol<ParamOp>(op.getParamAttr());
  int64_t experts = param.getTensorType().getNumElements();
  int axes = 0;
  if (ArrayAttr group = op.getSumAxesAttr()) {
    axes = axesMask(group);
    if (int64_t p = groupSize(group); p > 1)
      allReduceBytes += moert_ring_all_reduce_bytes(2 * experts, p); // the counts, hi and lo
  }
  hostParam(paramIndex.lookup(op.getParam()), false);
  os << "  if (int rc = moert_step_balance_bias(ctx, ctx->run.params["
     << paramIndex.lookup(op.getParam()) << "], " << experts << ", " << pointer(op.getExperts())
     << ", " << cast<RankedTensorType>(op.getExperts().getType()).getNumElements() << ", "
     << llvm::format("%.17g", op.getRate().convertToDouble()) << ", " << axes << ")) return rc;\n";
  hostParam(paramIndex.lookup(op.getParam()), true);
  return success();
}

FailureOr<std::string> Emitter::bucketCall(Operation *first, bool async, StringRef blocking,
                                           StringRef start) {
  if (!async)
    return (blocking + "(ctx, ").str();
  // Started here, completed by the moe.wait of its results.
  auto id = first->getAttrOfType<IntegerAttr>(MoEDialect::kBucketAttrName);
  if (!id)
    return first->emitOpError("is async but has no moe.bucket (run moe-schedule)");
  if (training)
    ++asyncBuckets;
  return (start + "(ctx, " + Twine(id.getInt()) + ", ").str();
}

/// Elements a ZeRO collective moves (its input, or its parameter).
int64_t Emitter::zeroFloats(Operation *op) {
  if (auto scatter = dyn_cast<ReduceScatterOp>(op))
    return cast<RankedTensorType>(scatter.getInput().getType()).getNumElements();
  auto param = module.lookupSymbol<ParamOp>(cast<GatherParamOp>(op).getParamAttr());
  return param ? param.getTensorType().getNumElements() : 0;
}

/// Flat reduce-scatters of one group, reduction and scale (ZeRO's
/// gradients): one moert_step_reduce_scatter.
LogicalResult Emitter::reduceScatter(ArrayRef<Operation *> run) {
  auto first = cast<ReduceScatterOp>(run.front());
  std::string outs, ins, counts, shards;
  FailureOr<std::string> call = bucketCall(first, first.getAsync(), "moert_step_reduce_scatter",
                                           "moert_step_reduce_scatter_start");
  if (failed(call))
    return failure();
  int64_t p = groupSize(first.getAxes());
  for (Operation *op : run) {
    auto scatter = cast<ReduceScatterOp>(op);
    if (scatter.getDim() || scatter.getCodecAttr())
      return op->emitOpError("the step program runs the flat, uncompressed reduce_scatter only "
                             "(ZeRO's)");
    auto plan = op->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName);
    if (!plan)
      return op->emitOpError("has no planned buffer (run moe-lower-to-kernels)");
    setStorage(op, plan.asArrayRef());
    int64_t n = cast<RankedTensorType>(scatter.getInput().getType()).getNumElements();
    int64_t shard = cast<RankedTensorType>(scatter.getType()).getNumElements();
    if (training)
      reduceScatterBytes += (p - 1) * shard * 4;
    auto append = [](std::string &list, const std::string &item) {
      list += (list.empty() ? "" : ", ") + item;
    };
    append(outs, pointer(scatter.getResult()));
    append(ins, pointer(scatter.getInput()));
    append(counts, std::to_string(n));
    append(shards, std::to_string(shard));
  }
  os << "  {\n    float *const outs[] = {" << outs << "};\n    const float *const ins[] = {" << ins
     << "};\n    const int64_t counts[] = {" << counts << "};\n    const int64_t shards[] = {"
     << shards << "};\n    if (int rc = " << *call << run.size() << ", outs, ins, counts, shards, "
     << axesMask(first.getAxes()) << ", " << (first.getReduction() == Reduction::mean ? 1 : 0)
     << ", " << llvm::format("%.17g", first.getScale().convertToDouble()) << ")) return rc;\n  }\n";
  return success();
}

/// moe.gather_param of one group: every member's ZeRO shard of each
/// parameter to every member (moert_step_gather_params).
LogicalResult Emitter::gatherParams(ArrayRef<Operation *> run) {
  auto first = cast<GatherParamOp>(run.front());
  if (!training)
    return first.emitOpError("gathers a parameter outside the training step");
  int64_t p = groupSize(first.getAxes());
  std::string params, shards;
  for (Operation *op : run) {
    auto gather = cast<GatherParamOp>(op);
    int64_t shard = (zeroFloats(op) + p - 1) / p;
    allGatherBytes += (p - 1) * shard * 4;
    params += (params.empty() ? "" : ", ") + std::string("ctx->run.params[") +
              std::to_string(paramIndex.lookup(gather.getParam())) + "]";
    shards += (shards.empty() ? "" : ", ") + std::to_string(shard);
  }
  for (Operation *op : run)
    hostParam(paramIndex.lookup(cast<GatherParamOp>(op).getParam()), false);
  os << "  {\n    float *const params[] = {" << params << "};\n    const int64_t shards[] = {"
     << shards << "};\n    if (int rc = moert_step_gather_params(ctx, " << run.size()
     << ", params, shards, " << axesMask(first.getAxes()) << ")) return rc;\n  }\n";
  for (Operation *op : run)
    hostParam(paramIndex.lookup(cast<GatherParamOp>(op).getParam()), true);
  return success();
}

/// Replicas' gradient rows summed over the ep group, per the runtime's
/// placement (moert_step_replica_sum); its bytes depend on the placement in
/// force, so the trainer accounts them (moert_replica_sum_bytes).
LogicalResult Emitter::replicaSum(ReplicaSumOp op) {
  auto plan = op->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName);
  if (!plan)
    return op.emitOpError("has no planned buffer (run moe-lower-to-kernels)");
  int64_t layer = op.getLayerAttr().getInt();
  if (!layerOrders.count(layer))
    return op.emitOpError() << "layer " << layer << " has no moe.place_slots";
  setStorage(op, plan.asArrayRef());
  auto type = cast<RankedTensorType>(op.getType());
  int64_t rows = type.getShape()[0];
  replicaLayers.insert(layer);
  os << "  if (int rc = moert_step_replica_sum(ctx, " << pointer(op.getResult()) << ", "
     << pointer(op.getInput()) << ", " << rows << ", " << type.getNumElements() / rows << ", "
     << layerTable(layer) << ", " << layerOrders.lookup(layer).size() << ", "
     << axesMask(op.getAxes()) << ")) return rc;\n";
  return success();
}

LogicalResult Emitter::run() {
  if (auto compression = module->getAttrOfType<CompressionAttr>(MoEDialect::kCompressionAttrName))
    codecWarmup = compression.getWarmupSteps();
  func::FuncOp step, eval;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    (fn->hasAttr(MoEDialect::kNoGradAttrName) ? eval : step) = fn;
  }
  if (!step)
    return module.emitError("moec: no training step function to emit");

  os << "// Generated by moec: the training step program. Do not edit.\n"
     << "#include \"HalideRuntime.h\"\n#include \"moert/DeviceCopies.h\"\n#include "
        "\"moert/Program.h\"\n#include \"moert/ScratchPool.h\"\n#include \"moert/StepPrelude.h\"\n"
     << "#include <cstdio>\n#include <cstring>\n#include <initializer_list>\n\n";
  for (auto kernel : module.getOps<KernelOp>())
    if (!calls.at(kernel.getSymName()).generator.empty())
      os << "#include \"" << kernel.getSymName() << ".h\"\n";
  // A device target's runtime header and the device layer (moert/Device.h).
  for (StringRef header : target.preludeIncludes())
    os << "#include \"" << header << "\"\n";
  os << "\n";
  // Global rows of the shards of a pinned placement, one table each.
  for (ParamOp p : module.getOps<ParamOp>())
    if (auto rows = p->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kShardRowsAttrName))
      if (!rowTables.count(rows)) {
        unsigned id = rowTables.size();
        rowTables[rows] = id;
        os << "static const int32_t kShardRows" << id << "[] = {";
        llvm::interleaveComma(rows.asArrayRef(), os);
        os << "};\n";
      }
  // Each placed MoE layer's initial placement (the runtime's table starts
  // as it).
  for (auto kernel : module.getOps<KernelOp>())
    if (kernel.getFamily() == "place_slots")
      if (auto layer = kernel.getConfig().getAs<IntegerAttr>("layer");
          layer && !layerOrders.count(layer.getInt())) {
        auto order = kernel.getConfig().getAs<DenseI64ArrayAttr>("order").asArrayRef();
        layerOrders[layer.getInt()].assign(order.begin(), order.end());
        os << "static const int32_t kLayerOrder" << layer.getInt() << "[] = {";
        llvm::interleaveComma(order, os);
        os << "};\n";
      }
  // Parameter table.
  unsigned index = 0;
  os << "static const moert_param_info kParams[] = {\n";
  for (ParamOp p : module.getOps<ParamOp>()) {
    paramIndex[p.getSymName()] = index++;
    bool adamw = false;
    int64_t zeroParts = 1, zeroAxes = 0; // ZeRO: the group its moments are sharded over
    step.walk([&](LaunchOp l) {
      if (l.getUpdates() && *l.getUpdates() == p.getSymName()) {
        adamw = true;
        if (ArrayAttr axes = l.getShardAxesAttr())
          zeroParts = groupSize(axes), zeroAxes = axesMask(axes);
      }
    });
    InitAttr init = p.getInit();
    os << "  {\"" << p.getSymName() << "\", " << p.getTensorType().getRank() << ", {";
    llvm::interleaveComma(p.getTensorType().getShape(), os);
    int64_t parts = 1;
    if (p->hasAttr(MoEDialect::kShardAttrName))
      if (auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName))
        parts = grid.getEp();
    os << "}, " << initName(init.getKind()) << ", " << llvm::format("%.17g", init.getScaleValue())
       << ", " << adamw << ", " << parts << ", ";
    if (auto rows = p->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kShardRowsAttrName))
      os << "kShardRows" << rowTables.at(rows);
    else
      os << "nullptr";
    auto layer = p->getAttrOfType<IntegerAttr>(MoEDialect::kShardLayerAttrName);
    auto tpDim = p->getAttrOfType<IntegerAttr>(MoEDialect::kTpDimAttrName);
    os << ", " << (layer ? layer.getInt() : -1) << ", " << zeroParts << ", " << zeroAxes << ", "
       << (tpDim ? tpDim.getInt() : -1) << "},\n";
  }
  os << "};\n\n";
  if (auto m = module->getAttrOfType<IntegerAttr>(MoEDialect::kMicroBatchesAttrName))
    microBatches = std::max<int64_t>(1, m.getInt());
  if (failed(emitFunction(step, "trainStep", true)) ||
      (eval && failed(emitFunction(eval, "evalStep", false))))
    return failure();
  auto plan = module->getAttrOfType<BufferPlanAttr>(MoEDialect::kBufferPlanAttrName);
  auto tokensType = cast<RankedTensorType>(step.getArgument(0).getType());
  int64_t vocab = 0;
  if (auto emb = module.lookupSymbol<ParamOp>("tok_emb"))
    vocab = emb.getTensorType().getShape()[0];
  int64_t seed = 0;
  if (auto s = module->getAttrOfType<IntegerAttr>(MoEDialect::kSeedAttrName))
    seed = s.getInt();
  auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
  int64_t scratch = calls.scratchBytes();
  os << "static const int32_t kLayerExperts[] = {0";
  for (auto &layer : moeLayers)
    os << ", " << layer.first;
  os << "};\nstatic const int32_t kLayerCapacity[] = {0";
  for (auto &layer : moeLayers)
    os << ", " << layer.second;
  // Positions per layer: its placement's, or one per expert.
  os << "};\nstatic const int32_t kLayerPositions[] = {0";
  for (auto [l, layer] : llvm::enumerate(moeLayers))
    os << ", "
       << (layerOrders.count(l) ? static_cast<int64_t>(layerOrders.lookup(l).size()) : layer.first);
  os << "};\nstatic const int32_t kLayerReplicas[] = {0";
  for (size_t l = 0; l < moeLayers.size(); ++l)
    os << ", " << (replicaLayers.contains(static_cast<int64_t>(l)) ? 1 : 0);
  os << "};\nstatic const char *const kLayerNames[] = {nullptr";
  for (std::string name : moeLayerNames) {
    for (char &c : name) // a C string literal: names keep [A-Za-z0-9._-]
      if (!llvm::isAlnum(c) && c != '.' && c != '_' && c != '-')
        c = '_';
    os << ", \"" << name << "\"";
  }
  os << "};\n";
  // Unequal token shares: each data replica's batch and program.
  auto shares = module->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kTokenSharesAttrName);
  bool replicaTables = shares && !names.replicaPrograms.empty();
  if (replicaTables) {
    if (names.replicaPrograms.size() != static_cast<size_t>(shares.size()))
      return module.emitError("moec: ") << names.replicaPrograms.size() << " replica programs for "
                                        << shares.size() << " shares";
    os << "static const int64_t kReplicaBatches[] = {";
    llvm::interleaveComma(shares.asArrayRef(), os);
    os << "};\n";
    std::vector<std::string> declared;
    for (const std::string &symbol : names.replicaPrograms)
      if (!llvm::is_contained(declared, symbol)) {
        declared.push_back(symbol);
        os << "extern \"C\" const moert_program " << symbol << ";\n";
      }
    os << "static const moert_program *const kReplicaPrograms[] = {";
    llvm::interleaveComma(names.replicaPrograms, os,
                          [&](const std::string &symbol) { os << "&" << symbol; });
    os << "};\n";
  }
  double lossScale = 0;
  if (auto scale = module->getAttrOfType<FloatAttr>(MoEDialect::kLossScaleAttrName))
    lossScale = scale.getValueAsDouble();
  // The kernels' Halide target, from one generated kernel's metadata.
  std::string targetKernel;
  for (KernelOp kernel : module.getOps<KernelOp>())
    if (!calls.at(kernel.getSymName()).generator.empty()) {
      targetKernel = kernel.getSymName().str();
      break;
    }
  if (!targetKernel.empty())
    os << "extern \"C\" const struct halide_filter_metadata_t *" << targetKernel
       << "_metadata();\nstatic const char *kernelTarget() { return " << targetKernel
       << "_metadata()->target; }\n";
  if (!lrSchedule.empty())
    os << "static const moert_lr_schedule_config kLrSchedule = " << lrSchedule << ";\n";
  os << "extern \"C\" const moert_program " << names.symbol << " = {\n"
     << "    .abi_version = MOERT_ABI_VERSION,\n"
     << "    .num_params = " << index << ",\n"
     << "    .params = kParams,\n"
     << "    .activation_bytes = " << plan.getActivationBytes() << ",\n"
     << "    .gradient_bytes = " << plan.getGradientBytes() << ",\n"
     << "    .batch = " << tokensType.getShape()[0] * microBatches << ",\n"
     << "    .seq_len = " << tokensType.getNumElements() / tokensType.getShape()[0] << ",\n"
     << "    .vocab = " << vocab << ",\n"
     << "    .seed = " << seed << "ull,\n"
     << "    .train_step = trainStep,\n"
     << "    .eval_step = " << (eval ? "evalStep" : "nullptr") << ",\n"
     << "    .num_moe_layers = " << moeLayers.size() << ",\n"
     << "    .layer_experts = kLayerExperts + 1,\n"
     << "    .layer_capacity = kLayerCapacity + 1,\n"
     << "    .planned_scratch_bytes = " << scratch << ",\n"
     << "    .grid_dp = " << (grid ? grid.getDp() : 1) << ",\n"
     << "    .grid_ep = " << (grid ? grid.getEp() : 1) << ",\n"
     << "    .grid_tp = " << (grid ? grid.getTp() : 1) << ",\n"
     << "    .lr_schedule = " << (lrSchedule.empty() ? "nullptr" : "&kLrSchedule") << ",\n"
     << "    .step_comm_bytes = {" << allReduceBytes << ", " << allToAllBytes << ", "
     << allGatherBytes << ", " << reduceScatterBytes << ", 0, 0},\n"
     << "    .step_ragged_bound = " << raggedBound << ",\n"
     << "    .codec_warmup_steps = " << codecWarmup << ",\n"
     << "    .step_codec_bytes = " << codecBytes << ",\n"
     << "    .step_codec_uncompressed = " << codecUncompressed << ",\n"
     << "    .layer_positions = kLayerPositions + 1,\n"
     << "    .layer_replicas = kLayerReplicas + 1,\n"
     << "    .layer_names = kLayerNames + 1,\n"
     << "    .async_buckets = " << asyncBuckets << ",\n"
     << "    .replica_batches = " << (replicaTables ? "kReplicaBatches" : "nullptr") << ",\n"
     << "    .replica_programs = " << (replicaTables ? "kReplicaPrograms" : "nullptr") << ",\n"
     << "    .loss_scale = " << llvm::format("%.9g", lossScale) << ",\n";
  if (target.onDevice())
    os << "    .device_sync = moert_device_sync,\n"
       << "    .device_wrote = moert_device_wrote_all,\n"
       << "    .device_free = moert_device_free,\n";
  if (!targetKernel.empty())
    os << "    .kernel_target = kernelTarget,\n";
  if (auto model = module->getAttrOfType<StringAttr>(MoEDialect::kModelAttrName)) {
    os << "    .model_json = \"";
    for (unsigned char c : model.getValue()) // a C string literal
      if (c == '\\' || c == '"')
        os << '\\' << c;
      else if (c < 0x20 || c == 0x7f)
        os << llvm::format("\\%03o", c);
      else
        os << c;
    os << "\",\n";
  }
  os << "    .micro_batches = " << microBatches << ",\n"
     << "    .accumulator_bytes = " << accumulatorBytes << ",\n";
  os << "};\n";
  return success();
}

LogicalResult Emitter::emitFunction(func::FuncOp step, StringRef name, bool isTraining) {
  if (!preambleEnd)
    preambleEnd = out.tell();
  storage.clear();
  training = isTraining;
  microSteps.reset();
  if (microBatches > 1 && isTraining) {
    FailureOr<MicroBatchSteps> steps = MicroBatchSteps::analyse(step);
    if (failed(steps))
      return failure();
    microSteps = std::move(*steps);
    accumulatorBytes = microSteps->accumulatorFloats * 4;
  }
  // With micro-batches, `name` loops over them, calling `inner` on each.
  std::string inner = microBatches > 1 ? (name + "Micro").str() : name.str();
  // The ops go to parts of at most kOpsPerPart ops each, written to strings
  // first: one function of thousands of ops (a model of many layers) takes
  // the C++ compiler minutes and gigabytes, as its optimisations grow faster
  // than the function. Every op's code is self-contained (views in a block,
  // values in the activation and gradient arenas), so a part boundary can
  // fall between any two ops.
  std::vector<std::string> parts;
  std::string current;
  llvm::raw_string_ostream partStream(current);
  // Writes go to the current part until the function is done (or fails:
  // then the parts written so far go nowhere).
  redirect.to(partStream);
  llvm::scope_exit restore([&] { redirect.to(out); });
  int64_t opsInPart = 0;
  auto endPart = [&] {
    parts.push_back(std::move(current));
    current.clear();
  };
  auto finish = [&] {
    endPart();
    std::string params =
        "(moert_context *ctx, const int32_t *tokens, const int32_t *targets, " +
        std::string(isTraining ? "int32_t step, float *loss)" : "float *loss, float *logits)");
    std::string args =
        std::string("(ctx, tokens, targets, ") + (isTraining ? "step, loss)" : "loss, logits)");
    auto definition = [&](StringRef linkage, const Twine &fnName, const std::string &body) {
      return (linkage + fnName + params + " {\n" +
              "  char *A = ctx->run.activations, *G = ctx->run.gradients;\n  (void)A; (void)G;\n" +
              body + "  return 0;\n}\n\n")
          .str();
    };
    if (parts.size() == 1) {
      out << definition("static int ", inner, parts.front());
      return;
    }
    // In units of their own the parts have external linkage, named after
    // the program's symbol (a binary links several programs).
    std::string prefix = units ? names.symbol + "_" : "";
    std::string linkage = units ? "int " : "static int ";
    for (size_t k = 0; k < parts.size(); ++k)
      out << linkage << prefix << inner << "_part" << k << params << ";\n";
    out << "static int " << inner << params << " {\n";
    for (size_t k = 0; k < parts.size(); ++k)
      out << "  if (int rc = " << prefix << inner << "_part" << k << args << ") return rc;\n";
    out << "  return 0;\n}\n\n";
    for (size_t k = 0; k < parts.size(); ++k) {
      std::string part = definition(linkage, prefix + inner + "_part" + Twine(k), parts[k]);
      if (!units) {
        out << part;
        continue;
      }
      if (k % kPartsPerUnit == 0)
        units->emplace_back();
      units->back() += part;
    }
  };
  if (target.onDevice()) {
    auto plan = module->getAttrOfType<BufferPlanAttr>(MoEDialect::kBufferPlanAttrName);
    os << "  if (int rc = moert_device_attach(ctx, " << target.deviceInterface() << "(), \""
       << target.name() << "\", kParams, " << paramIndex.size() << ", " << plan.getActivationBytes()
       << ", " << plan.getGradientBytes() << ")) return rc;\n";
  }
  for (BlockArgument arg : step.getArguments()) {
    auto kind = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), MoEDialect::kInputAttrName);
    if (!kind)
      return step.emitError("moec: step argument #") << arg.getArgNumber() << " is not a moe.input";
    storage[arg] = kind.getValue() == "tokens"    ? "tokens"
                   : kind.getValue() == "targets" ? "targets"
                                                  : "(&step)";
  }
  // The tokens and targets are read-only: views take const away.
  llvm::DenseSet<Operation *> bucketed;
  for (Operation &op : step.getBody().front()) {
    if (bucketed.contains(&op))
      continue;
    if (opsInPart == kOpsPerPart) {
      endPart();
      opsInPart = 0;
    }
    ++opsInPart;
    // With micro-batches, what acts on the summed gradients runs in the
    // last; the rest runs in each, its collectives counted each time.
    bool once = microSteps && microSteps->once.contains(&op);
    if (once)
      os << "  if (moert_step_last_micro_batch(ctx)) {\n";
    Volume before = volume();
    if (failed(emitOp(op, bucketed)))
      return failure();
    if (once)
      os << "  }\n";
    else if (training && microBatches > 1 && !isa<BalanceBiasOp>(op)) // its counts: once
      repeatSince(before, microBatches - 1);
    if (!microSteps)
      continue;
    // The op and the members of a run it started (adjacent, bucketed).
    SmallVector<Operation *> emitted = {&op};
    for (Operation *next = op.getNextNode(); next && bucketed.contains(next);
         next = next->getNextNode())
      emitted.push_back(next);
    for (Operation *member : emitted) {
      if (microSteps->once.contains(member) != once)
        return member->emitOpError("shares a collective with an op that runs ")
               << (once ? "once a step" : "in every micro-batch")
               << " (moec --micro-batches cannot split it)";
      for (Value result : member->getResults())
        if (auto it = microSteps->accumulated.find(result); it != microSteps->accumulated.end()) {
          hostRead(result);
          os << "  if (int rc = moert_step_accumulate(ctx, " << pointer(result) << ", "
             << cast<RankedTensorType>(result.getType()).getNumElements() << ", " << it->second
             << ", " << microSteps->accumulatorFloats << ")) return rc;\n";
          hostWrote(result);
        }
    }
  }
  finish();
  if (microBatches > 1)
    microBatchLoop(step, name, inner, isTraining);
  return success();
}

void Emitter::microBatchLoop(func::FuncOp fn, StringRef name, StringRef inner, bool isTraining) {
  int64_t tokens = 0, logits = 0;
  for (BlockArgument arg : fn.getArguments())
    if (auto kind = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), MoEDialect::kInputAttrName);
        kind && kind.getValue() == "tokens")
      tokens = cast<RankedTensorType>(arg.getType()).getNumElements();
  fn.walk([&](LaunchOp l) {
    if (module.lookupSymbol<KernelOp>(l.getKernelAttr()).getFamily() == "cross_entropy")
      logits = cast<RankedTensorType>(l.getOperands()[0].getType()).getNumElements();
  });
  // Each micro-batch's loss is its tokens' mean: the step's is their mean.
  out << "static int " << name << "(moert_context *ctx, const int32_t *tokens, const int32_t "
      << "*targets, " << (isTraining ? "int32_t step, float *loss" : "float *loss, float *logits")
      << ") {\n  double sum = 0;\n  for (int32_t mb = 0; mb < " << microBatches << "; ++mb) {\n";
  if (isTraining)
    out << "    moert_step_micro_batch(ctx, mb, " << microBatches << ");\n";
  out << "    float part = 0;\n    int rc = " << inner << "(ctx, tokens + (int64_t)mb * " << tokens
      << ", targets + (int64_t)mb * " << tokens << ", "
      << (isTraining
              ? "step, &part"
              : "&part, logits ? logits + (int64_t)mb * " + std::to_string(logits) + " : nullptr")
      << ");\n";
  if (isTraining)
    out << "    if (rc) moert_step_micro_batch(ctx, 0, 1);\n";
  out << "    if (rc) return rc;\n    sum += part;\n  }\n";
  if (isTraining)
    out << "  moert_step_micro_batch(ctx, 0, 1);\n";
  out << "  *loss = (float)(sum / " << microBatches << ");\n  return 0;\n}\n\n";
}

LogicalResult Emitter::emitOp(Operation &op, llvm::DenseSet<Operation *> &bucketed) {
  // Adjacent all-reduces of one moe.bucket (moe-bucket-gradients) go as
  // one collective.
  if (auto first = dyn_cast<AllReduceOp>(op);
      first && (first->hasAttr(MoEDialect::kBucketAttrName) || first.getAsync())) {
    SmallVector<AllReduceOp> run = {first};
    Attribute id = first->getAttr(MoEDialect::kBucketAttrName);
    for (Operation *next = op.getNextNode(); next; next = next->getNextNode()) {
      auto r = dyn_cast<AllReduceOp>(next);
      if (!r || r->getAttr(MoEDialect::kBucketAttrName) != id)
        break;
      run.push_back(r);
    }
    for (AllReduceOp r : run)
      bucketed.insert(r);
    SmallVector<Operation *> ops(run.begin(), run.end());
    if (failed(hostCode(ops, [&] { return bucket(run); })))
      return failure();
    return success();
  }
  // ZeRO: adjacent reduce-scatters of one group, reduction and scale, and
  // adjacent parameter gathers of one group, go as one collective each
  // (up to kZeroRunFloats elements).
  if (isa<ReduceScatterOp, GatherParamOp>(op)) {
    SmallVector<Operation *> run = {&op};
    int64_t floats = zeroFloats(&op);
    Attribute bucketId = op.getAttr(MoEDialect::kBucketAttrName);
    for (Operation *next = op.getNextNode(); next; next = next->getNextNode()) {
      if (next->getName() != op.getName())
        break;
      // A background bucket (moe-schedule) is its members, whatever their size.
      if (bucketId || next->getAttr(MoEDialect::kBucketAttrName)) {
        if (next->getAttr(MoEDialect::kBucketAttrName) != bucketId)
          break;
        floats += zeroFloats(next);
        run.push_back(next);
        continue;
      }
      if (floats + zeroFloats(next) > kZeroRunFloats)
        break;
      if (auto a = dyn_cast<ReduceScatterOp>(&op)) {
        auto b = cast<ReduceScatterOp>(next);
        if (a.getAxes() != b.getAxes() || a.getReduction() != b.getReduction() ||
            a.getScale() != b.getScale())
          break;
      } else if (cast<GatherParamOp>(&op).getAxes() != cast<GatherParamOp>(next).getAxes()) {
        break;
      }
      floats += zeroFloats(next);
      run.push_back(next);
    }
    for (Operation *member : run)
      bucketed.insert(member);
    if (failed(hostCode(run, [&] {
          return isa<ReduceScatterOp>(op) ? reduceScatter(run) : gatherParams(run);
        })))
      return failure();
    return success();
  }
  if (auto wait = dyn_cast<WaitOp>(op)) {
    // Each bucket once, in operand order; results are the operands.
    SmallVector<int64_t> ids;
    for (auto [input, result] : llvm::zip(wait.getInputs(), wait.getResults())) {
      auto id = input.getDefiningOp()->getAttrOfType<IntegerAttr>(MoEDialect::kBucketAttrName);
      if (!id)
        return wait.emitOpError("waits for a collective without a moe.bucket");
      if (!llvm::is_contained(ids, id.getInt())) {
        ids.push_back(id.getInt());
        os << "  if (int rc = "
           << (isa<AllToAllOp>(input.getDefiningOp()) ? "moert_step_exchange_wait"
                                                      : "moert_step_wait")
           << "(ctx, " << id.getInt() << ")) return rc;\n";
      }
      storage[result] = pointer(input);
    }
    return success();
  }
  // Views (moe-pipeline-experts): a chunk is its input's rows from the
  // chunk's offset; a concat's inputs were planned in its buffer, one
  // after another, so it starts at its first input.
  if (isa<ChunkOp, ConcatOp>(op) && !target.expertChunks())
    return op.emitOpError("is a view into a planned buffer; device steps keep one copy per "
                          "value, so moe-pipeline-experts needs a host target");
  if (auto chunk = dyn_cast<ChunkOp>(op)) {
    storage[chunk.getResult()] =
        "(" + pointer(chunk.getInput()) + " + " +
        std::to_string(chunk.getIndex() * chunk.getType().getNumElements()) + ")";
    return success();
  }
  if (auto concat = dyn_cast<ConcatOp>(op)) {
    // The plan puts each input in the concat's buffer only if an op of
    // the step computes it (through the waits of async exchanges).
    for (Value input : concat.getInputs()) {
      Operation *def = WaitOp::source(input).getDefiningOp();
      if (!def || isa<GetParamOp, ChunkOp, ConcatOp>(def))
        return concat.emitOpError("joins in place only tensors the step computes (not a "
                                  "parameter, an argument or a view)");
    }
    storage[concat.getResult()] = pointer(concat.getInputs().front());
    return success();
  }
  if (auto get = dyn_cast<GetParamOp>(op)) {
    storage[get.getResult()] =
        "ctx->run.params[" + std::to_string(paramIndex.lookup(get.getName())) + "]";
    return success();
  }
  // A kernel: its arguments are on the device (moert/Device.h).
  if (auto l = dyn_cast<LaunchOp>(op);
      l &&
      !calls.at(module.lookupSymbol<KernelOp>(l.getKernelAttr()).getSymName()).generator.empty()) {
    if (failed(launch(l)))
      return failure();
    return success();
  }
  // Host code. With loss scaling, the global norm divides the gradients
  // in place (moert_step_global_norm).
  // With partial sums of squares it reads those, not the gradients.
  SmallVector<Value> inPlace;
  std::optional<SmallVector<Value>> reads;
  if (auto l = dyn_cast<LaunchOp>(op)) {
    KernelOp kernel = module.lookupSymbol<KernelOp>(l.getKernelAttr());
    if (kernel.getFamily() == "global_norm" && hasPartialSums(l))
      reads.emplace(l.getOperands().take_back(l.getOperands().size() / 2));
    else if (kernel.getFamily() == "global_norm" && module->hasAttr(MoEDialect::kLossScaleAttrName))
      inPlace.append(l.getOperands().begin(), l.getOperands().end());
  }
  if (failed(hostCode(
          {&op},
          [&]() -> LogicalResult {
            if (auto fill = dyn_cast<FillOp>(op)) {
              auto plan = fill->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName);
              setStorage(fill, plan.asArrayRef());
              auto type = cast<RankedTensorType>(fill.getType());
              bool scaled = fill->hasAttr(MoEDialect::kLossSeedAttrName) &&
                            module->hasAttr(MoEDialect::kLossScaleAttrName);
              if (type.getElementType().isF32()) {
                os << "  moert_fill(" << pointer(fill.getResult()) << ", " << type.getNumElements()
                   << ", "
                   << "(float)" << llvm::format("%.17g", fill.getValue().convertToDouble())
                   << (scaled ? " * ctx->inputs.loss_scale" : "") << ");\n";
              } else if (scaled) {
                return fill.emitOpError("seeds a loss-scaled backward, but is not f32");
              } else { // bf16, f16: the value's bits
                auto floatType = cast<FloatType>(type.getElementType());
                APFloat value = fill.getValue();
                bool lost = false;
                value.convert(floatType.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
                os << "  moert_fill_half(" << pointer(fill.getResult()) << ", "
                   << type.getNumElements() << ", " << value.bitcastToAPInt().getZExtValue()
                   << ");\n";
              }
            } else if (auto l = dyn_cast<LaunchOp>(op)) {
              if (failed(launch(l)))
                return failure();
            } else if (auto balance = dyn_cast<BalanceBiasOp>(op)) {
              if (failed(balanceBias(balance)))
                return failure();
            } else if (auto sum = dyn_cast<ReplicaSumOp>(op)) {
              if (failed(replicaSum(sum)))
                return failure();
            } else if (isa<AllReduceOp, AllToAllOp>(op)) {
              if (failed(collective(&op)))
                return failure();
            } else if (auto slice = dyn_cast<ShardSliceOp>(op)) {
              auto plan = slice->getAttrOfType<DenseI64ArrayAttr>(MoEDialect::kBuffersAttrName);
              if (!plan)
                return slice.emitOpError("has no planned buffer (run moe-lower-to-kernels)");
              setStorage(slice, plan.asArrayRef());
              os << "  moert_step_shard_slice(ctx, " << pointer(slice.getResult()) << ", "
                 << pointer(slice.getInput()) << ", "
                 << cast<RankedTensorType>(slice.getInput().getType()).getNumElements() << ", "
                 << cast<RankedTensorType>(slice.getType()).getNumElements() << ", "
                 << axesMask(slice.getAxes()) << ");\n";
            } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
              os << "  *loss = *" << pointer(ret.getOperand(0)) << ";\n";
            } else {
              return op.emitOpError("moec cannot emit this op in a step program");
            }
            return success();
          },
          inPlace, reads ? std::optional<ArrayRef<Value>>(*reads) : std::nullopt)))
    return failure();
  return success();
}

} // namespace

FailureOr<KernelCalls> KernelCalls::collect(ModuleOp module, Gemm gemm) {
  KernelCalls result;
  for (auto kernel : module.getOps<KernelOp>()) {
    FailureOr<KernelCall> call = lookupKernel(kernel, gemm);
    if (failed(call))
      return failure();
    result.calls.push_back({kernel.getSymName().str(), std::move(*call)});
  }
  return result;
}

const KernelCall &KernelCalls::at(StringRef kernel) const {
  for (const auto &entry : calls)
    if (entry.first == kernel)
      return entry.second;
  llvm::report_fatal_error("KernelCalls::at: no call for kernel " + kernel);
}

int64_t KernelCalls::scratchBytes() const {
  int64_t scratch = 0;
  for (const auto &entry : calls)
    scratch = std::max(scratch, entry.second.scratchBytes);
  return scratch;
}

LogicalResult moec::codegen::emitStepProgram(ModuleOp module, const KernelCalls &calls,
                                             raw_ostream &os, const StepProgramNames &names,
                                             const TargetBackend &target,
                                             std::vector<std::string> *units) {
  if (!units)
    return Emitter(module, calls, os, names, target, nullptr).run();
  // The program goes to a string first: each unit repeats its preamble
  // (includes, views, tables), which the parts use.
  std::string text;
  llvm::raw_string_ostream program(text);
  std::vector<std::string> bodies;
  Emitter emitter(module, calls, program, names, target, &bodies);
  if (failed(emitter.run()))
    return failure();
  std::string preamble = text.substr(0, emitter.preambleEnd);
  for (std::string &body : bodies)
    units->push_back(preamble + body);
  os << text;
  return success();
}
