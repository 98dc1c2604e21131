//===- EmitProgram.cpp - the step program as C++ --------------------------===//

#include "EmitProgram.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
using namespace mlir::moe;

namespace {

/// How a tensor is presented to a kernel (Halide extents, innermost first).
enum class ViewKind { Rows2, Rows3, Reversed, Flat, Vector };

struct Arg {
  enum Source { Operand, Result, Dummy, Param, MomentM, MomentV } source;
  unsigned index = 0;
  ViewKind view = ViewKind::Rows2;
  unsigned dummyRank = 1;
};

ViewKind defaultView(StringRef family) {
  if (family == "attention" || family == "attention_grad" ||
      family == "expert_ffn" || family == "expert_ffn_grad")
    return ViewKind::Reversed;
  if (family == "ffn" || family == "ffn_grad")
    return ViewKind::Rows3;
  if (family == "add")
    return ViewKind::Vector; // 1-d even for scalars (loss terms)
  if (family == "adamw_update")
    return ViewKind::Flat;
  return ViewKind::Rows2;
}

/// The generator's argument order in terms of the launch's operands and
/// results.
SmallVector<Arg> argumentsOf(LaunchOp launch, KernelOp kernel) {
  StringRef family = kernel.getFamily();
  ViewKind view = defaultView(family);
  unsigned n = launch.getOperands().size(), r = launch.getResults().size();
  auto op = [&](unsigned i, ViewKind v) { return Arg{Arg::Operand, i, v}; };
  auto res = [&](unsigned i, ViewKind v) { return Arg{Arg::Result, i, v}; };
  auto dummy = [&](unsigned rank) {
    Arg a{Arg::Dummy};
    a.dummyRank = rank;
    return a;
  };
  SmallVector<Arg> args;
  if (family == "embedding" || family == "embedding_grad" ||
      family == "cross_entropy" || family == "cross_entropy_grad") {
    // ids / targets are flat; the rest are rows.
    bool idsFirst = family.starts_with("embedding");
    for (unsigned i = 0; i < n; ++i)
      args.push_back(op(i, (idsFirst ? i == 0 : i == 1) ? ViewKind::Flat : view));
    args.push_back(res(0, view));
  } else if (family == "linear") {
    bool residual = false;
    for (Attribute e : kernel.getEpilogue())
      residual |= cast<StringAttr>(e).getValue() == "residual_add";
    bool bias = n - (residual ? 1 : 0) == 3;
    args = {op(0, view), op(1, view)};
    args.push_back(bias ? op(2, ViewKind::Flat) : dummy(1));
    args.push_back(residual ? op(n - 1, view) : dummy(2));
    args.push_back(res(0, view));
  } else if (family == "ffn" || family == "expert_ffn") {
    // Results: y, then the saved pre-activations (x Wu, x Wg) if any.
    args = {op(0, view), op(1, view), op(2, view), n == 4 ? op(3, view) : dummy(3),
            res(0, view), r >= 2 ? res(1, view) : dummy(3),
            r == 3 ? res(2, view) : dummy(3)};
  } else if (family == "ffn_grad" || family == "expert_ffn_grad") {
    // Operands: x, up, down, dy, [gate], then the saved pre-activations.
    bool gated = r == 4;
    unsigned base = gated ? 5 : 4;
    bool saved = n > base;
    args = {op(0, view), op(1, view), op(2, view), gated ? op(4, view) : dummy(3),
            op(3, view), saved ? op(base, view) : dummy(3),
            saved && gated ? op(base + 1, view) : dummy(3), res(0, view),
            res(1, view), res(2, view), gated ? res(3, view) : dummy(3)};
  } else if (family == "fused_gate") {
    args = {op(0, view), op(1, view), n == 3 ? op(2, ViewKind::Flat) : dummy(1)};
    for (unsigned i = 0; i < r; ++i)
      args.push_back(res(i, i == 3 ? ViewKind::Flat : view));
  } else if (family == "router_grad") {
    args = {op(0, view), op(1, view), n == 5 ? op(4, ViewKind::Flat) : dummy(1),
            op(2, view), op(3, view), res(0, view), res(1, view)};
  } else if (family == "unpermute") {
    args = {op(0, view), op(1, view), n == 3 ? op(2, view) : dummy(2), res(0, view)};
  } else if (family == "adamw_update") {
    args = {Arg{Arg::Param, 0, view}, Arg{Arg::MomentM, 0, view},
            Arg{Arg::MomentV, 0, view}, op(0, view), op(1, view), op(2, view),
            op(3, view), Arg{Arg::Param, 0, view}, Arg{Arg::MomentM, 0, view},
            Arg{Arg::MomentV, 0, view}};
  } else {
    for (unsigned i = 0; i < n; ++i)
      args.push_back(op(i, view));
    for (unsigned i = 0; i < r; ++i)
      args.push_back(res(i, view));
  }
  return args;
}

/// Halide extents of `type` presented as `view`.
SmallVector<int64_t> extents(RankedTensorType type, ViewKind view) {
  ArrayRef<int64_t> shape = type.getShape();
  if (view == ViewKind::Vector)
    return {type.getNumElements()};
  if (shape.empty())
    return {};
  int64_t numel = type.getNumElements(), last = shape.back();
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

/// MOERT_AXIS_* bits of a list of grid axis names.
int axesMask(ArrayAttr axes) {
  int mask = 0;
  for (Attribute a : axes) {
    StringRef name = cast<StringAttr>(a).getValue();
    mask |= name == "dp" ? 1 : name == "ep" ? 2 : 4;
  }
  return mask;
}

/// The bytes one member sends in a compressed all-reduce over `p` members
/// (runtime/lib/StepComm.cpp): fp16/bf16/int8 an all-to-all of encoded
/// chunks and an all-gather of encoded sums; topk/sign an all-gather of the
/// encoding; powersgd ring all-reduces of P [rows, r] and Q [cols, r].
int64_t codecAllReduceBytes(CodecAttr codec, int64_t n, int64_t rows, int64_t cols,
                            int64_t p) {
  if (p <= 1)
    return 0;
  auto encoded = [&](int64_t count) -> int64_t {
    switch (codec.getKind()) {
    case CodecKind::fp16:
    case CodecKind::bf16:
      return 2 * count;
    case CodecKind::int8: {
      int64_t block = std::max<int64_t>(codec.getBlockSize(), 1);
      return count + 4 * ((count + block - 1) / block);
    }
    case CodecKind::topk: {
      double ratio = codec.getRatio().convertToDouble();
      return 8 * std::min<int64_t>(count, std::max<int64_t>(1, static_cast<int64_t>(
                                                                   std::floor(ratio * count))));
    }
    case CodecKind::sign:
      return 4 + (count + 7) / 8;
    case CodecKind::powersgd:
      return 0;
    }
    return 0;
  };
  switch (codec.getKind()) {
  case CodecKind::fp16:
  case CodecKind::bf16:
  case CodecKind::int8:
    return 2 * (p - 1) * encoded((n + p - 1) / p);
  case CodecKind::topk:
  case CodecKind::sign:
    return (p - 1) * encoded(n);
  case CodecKind::powersgd: {
    int64_t r = std::max<int64_t>(1, std::min({codec.getRank(), rows, cols}));
    return 2 * (p - 1) * rows * r * 4 / p + 2 * (p - 1) * cols * r * 4 / p;
  }
  }
  return 0;
}

class Emitter {
public:
  Emitter(ModuleOp module, const std::map<std::string, moec::KernelCall> &calls,
          raw_ostream &os)
      : module(module), calls(calls), os(os) {}

  LogicalResult run();

private:
  LogicalResult emitFunction(func::FuncOp fn, StringRef name, bool training);
  std::string pointer(Value v) { return storage.lookup(v); }
  LogicalResult launch(LaunchOp op);
  LogicalResult collective(Operation *op);
  LogicalResult bucket(ArrayRef<AllReduceOp> reduces);
  void setStorage(Operation *op, ArrayRef<int64_t> plan);

  ModuleOp module;
  const std::map<std::string, moec::KernelCall> &calls;
  raw_ostream &os;
  llvm::DenseMap<Value, std::string> storage;
  llvm::StringMap<unsigned> paramIndex;
  unsigned viewCounter = 0;
  bool training = false;
  /// Analytical bytes one rank sends per training step: all_reduce (ring:
  /// 2 (p-1)/p of the buffer) and all_to_all ((p-1)/p of it).
  int64_t allReduceBytes = 0, allToAllBytes = 0;
  /// Ragged all_to_alls: the bytes with every block full (counts included).
  int64_t raggedBound = 0;
  /// Compressed all-reduces: what they send, what they replace, how many.
  int64_t codecBytes = 0, codecUncompressed = 0, codecWarmup = 0;
  int codecSites = 0;
  int64_t groupSize(ArrayAttr axes) {
    auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
    return grid ? grid.getGroupSize(axes.getValue()) : 1;
  }
  /// (experts, capacity) of every fused_gate of the training step, in order.
  SmallVector<std::pair<int64_t, int64_t>> moeLayers;
};

void Emitter::setStorage(Operation *op, ArrayRef<int64_t> plan) {
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    int64_t arena = plan[3 * i], offset = plan[3 * i + 1];
    storage[result] = "((" +
                      std::string(cast<RankedTensorType>(result.getType())
                                          .getElementType()
                                          .isInteger(32)
                                      ? "int32_t"
                                      : "float") +
                      " *)(" + (arena ? "G" : "A") + " + " +
                      std::to_string(offset) + "))";
  }
}

LogicalResult Emitter::launch(LaunchOp op) {
  auto kernel = module.lookupSymbol<KernelOp>(op.getKernelAttr());
  const moec::KernelCall &call = calls.at(kernel.getSymName().str());
  setStorage(op, op.getBuffers());
  StringRef family = kernel.getFamily();
  auto numel = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getNumElements();
  };
  if (family == "lr_schedule") {
    auto c = kernel.getConfig();
    StringRef sched = c.getAs<StringAttr>("schedule").getValue();
    os << "  *" << pointer(op.getResult(0)) << " = moert_lr_schedule(step, "
       << llvm::format("%.17g", c.getAs<FloatAttr>("lr").getValueAsDouble()) << ", "
       << llvm::format("%.17g", c.getAs<FloatAttr>("min_lr").getValueAsDouble())
       << ", " << c.getAs<IntegerAttr>("warmup_steps").getInt() << ", "
       << c.getAs<IntegerAttr>("total_steps").getInt() << ", "
       << (sched == "cosine" ? 0 : sched == "linear" ? 1 : 2) << ");\n";
    return success();
  }
  if (family == "global_norm") {
    unsigned n = op.getOperands().size();
    os << "  {\n    const float *g[] = {";
    llvm::interleaveComma(op.getOperands(), os, [&](Value v) { os << pointer(v); });
    os << "};\n    const int64_t sizes[] = {";
    llvm::interleaveComma(op.getOperands(), os, [&](Value v) { os << numel(v); });
    os << "};\n";
    auto sharded = kernel.getConfig().getAs<DenseBoolArrayAttr>("sharded");
    auto axes = kernel.getConfig().getAs<ArrayAttr>("shard_axes");
    if (sharded && axes) {
      // Expert shards: their squares are summed over the shard group.
      if (training)
        if (int64_t p = groupSize(axes); p > 1)
          allReduceBytes += 2 * (p - 1) * 2 * 4 / p; // the shards' squares
      os << "    const unsigned char sharded[] = {";
      llvm::interleaveComma(sharded.asArrayRef(), os, [&](bool b) { os << (b ? 1 : 0); });
      os << "};\n    if (int rc = moert_step_global_norm(ctx, g, sizes, sharded, " << n
         << ", " << axesMask(axes) << ", " << pointer(op.getResult(0))
         << ")) return rc;\n  }\n";
      return success();
    }
    os << "    *" << pointer(op.getResult(0)) << " = moert_global_norm(g, sizes, "
       << n << ");\n  }\n";
    return success();
  }
  if (call.generator.empty())
    return op.emitOpError() << "has no kernel and no runtime routine";
  SmallVector<std::string> names;
  os << "  {\n";
  for (const Arg &arg : argumentsOf(op, kernel)) {
    std::string name = "v" + std::to_string(viewCounter++);
    names.push_back(name);
    if (arg.source == Arg::Dummy) {
      os << "    View " << name << " = view(dummy, f32, {";
      for (unsigned i = 0; i < arg.dummyRank; ++i)
        os << (i ? ", " : "") << "1";
      os << "});\n";
      continue;
    }
    Value value;
    std::string ptr;
    if (arg.source == Arg::Operand)
      value = op.getOperands()[arg.index];
    else if (arg.source == Arg::Result)
      value = op.getResults()[arg.index];
    else
      value = op.getOperands()[0]; // the gradient: the parameter's type
    if (arg.source == Arg::Param || arg.source == Arg::MomentM ||
        arg.source == Arg::MomentV) {
      unsigned idx = paramIndex.lookup(*op.getUpdates());
      ptr = arg.source == Arg::Param ? "ctx->params[" + std::to_string(idx) + "]"
            : "ctx->moments[" + std::to_string(2 * idx + (arg.source == Arg::MomentV)) + "]";
    } else {
      ptr = pointer(value);
    }
    auto type = cast<RankedTensorType>(value.getType());
    os << "    View " << name << " = view(" << ptr << ", "
       << (type.getElementType().isInteger(32) ? "i32" : "f32") << ", {";
    llvm::interleaveComma(extents(type, arg.view), os);
    os << "});\n";
  }
  os << "    int rc = " << kernel.getSymName() << "(";
  llvm::interleaveComma(names, os, [&](const std::string &n) { os << "&" << n << ".b"; });
  os << ");\n    if (rc) return rc;\n";
  if (training && family == "fused_gate") {
    // Routed token-slots per expert, for load metrics.
    int64_t experts = cast<RankedTensorType>(op.getResult(3).getType()).getNumElements();
    int64_t offset = 0;
    for (auto &layer : moeLayers)
      offset += layer.first;
    moeLayers.push_back(
        {experts, kernel.getConfig().getAs<IntegerAttr>("capacity").getInt()});
    os << "    if (ctx->expert_counts)\n      for (int e = 0; e < " << experts
       << "; ++e) ctx->expert_counts[" << offset << " + e] = "
       << pointer(op.getResult(3)) << "[e];\n";
    // Dropped token-slots are the slots -1 (exact with routing groups).
    os << "    if (ctx->dropped_slots) {\n      int32_t n = 0;\n      for (int64_t i = 0; i < "
       << numel(op.getResult(2)) << "; ++i) n += " << pointer(op.getResult(2))
       << "[i] < 0;\n      ctx->dropped_slots[" << moeLayers.size() - 1 << "] = n;\n    }\n";
  }
  if (!training && family == "cross_entropy") {
    // Sampling reads the next-token logits of the evaluation step.
    Value logits = op.getOperands()[0];
    os << "    if (logits)\n      std::memcpy(logits, " << pointer(logits) << ", "
       << numel(logits) * 4 << ");\n";
  }
  os << "  }\n";
  return success();
}

LogicalResult Emitter::bucket(ArrayRef<AllReduceOp> reduces) {
  int64_t total = 0;
  std::string outs, ins, counts;
  for (AllReduceOp r : reduces) {
    auto plan = r->getAttrOfType<DenseI64ArrayAttr>("moe.buffers");
    if (!plan)
      return r.emitOpError("has no planned buffer (run moe-lower-to-kernels)");
    setStorage(r, plan.asArrayRef());
    int64_t n = cast<RankedTensorType>(r.getType()).getNumElements();
    total += n;
    outs += (outs.empty() ? "" : ", ") + pointer(r.getResult());
    ins += (ins.empty() ? "" : ", ") + pointer(r.getInput());
    counts += (counts.empty() ? "" : ", ") + std::to_string(n);
  }
  AllReduceOp first = reduces.front();
  int64_t p = groupSize(first.getAxes());
  if (training && p > 1)
    allReduceBytes += 2 * (p - 1) * total * 4 / p;
  os << "  {\n    float *const outs[] = {" << outs << "};\n    const float *const ins[] = {"
     << ins << "};\n    const int64_t counts[] = {" << counts
     << "};\n    if (int rc = moert_step_all_reduce_bucket(ctx, " << reduces.size()
     << ", outs, ins, counts, " << axesMask(first.getAxes()) << ", "
     << (first.getReduction() == Reduction::mean ? 1 : 0) << ", "
     << llvm::format("%.17g", first.getScale().convertToDouble())
     << ")) return rc;\n  }\n";
  return success();
}

LogicalResult Emitter::collective(Operation *op) {
  auto plan = op->getAttrOfType<DenseI64ArrayAttr>("moe.buffers");
  if (!plan)
    return op->emitOpError("has no planned buffer (run moe-lower-to-kernels)");
  setStorage(op, plan.asArrayRef());
  auto type = cast<RankedTensorType>(op->getOperand(0).getType());
  if (auto reduce = dyn_cast<AllReduceOp>(op)) {
    int64_t p = groupSize(reduce.getAxes()), n = type.getNumElements();
    int64_t ring = p > 1 ? 2 * (p - 1) * n * 4 / p : 0;
    if (CodecAttr codec = reduce.getCodecAttr()) {
      if (!training)
        return op->emitOpError("compressed all_reduce runs in the training step only");
      // Compressed after the warm-up steps. moe.all_reduce views a tensor
      // of rank >= 2 as [numel / last, last] for powersgd.
      int64_t cols = type.getShape().empty() ? 1 : type.getShape().back(), rows = n / cols;
      codecUncompressed += ring;
      codecBytes += codecAllReduceBytes(codec, n, rows, cols, p);
      os << "  {\n    static const moert_codec codec = {" << static_cast<int>(codec.getKind())
         << ", " << codec.getBlockSize() << ", "
         << llvm::format("%.17g", codec.getRatio().convertToDouble()) << ", "
         << codec.getRank() << ", " << (codec.getErrorFeedback() ? 1 : 0) << "};\n"
         << "    int rc = step < " << codecWarmup << " ? moert_step_all_reduce(ctx, "
         << pointer(reduce.getResult()) << ", " << pointer(reduce.getInput()) << ", " << n
         << ", " << axesMask(reduce.getAxes()) << ", "
         << (reduce.getReduction() == Reduction::mean ? 1 : 0) << ", "
         << llvm::format("%.17g", reduce.getScale().convertToDouble())
         << ")\n      : moert_step_all_reduce_codec(ctx, " << pointer(reduce.getResult()) << ", "
         << pointer(reduce.getInput()) << ", " << n << ", " << axesMask(reduce.getAxes())
         << ", " << (reduce.getReduction() == Reduction::mean ? 1 : 0) << ", "
         << llvm::format("%.17g", reduce.getScale().convertToDouble()) << ", &codec, "
         << codecSites++ << ", " << rows << ", " << cols << ");\n    if (rc) return rc;\n  }\n";
      return success();
    }
    if (training)
      allReduceBytes += ring;
    os << "  if (int rc = moert_step_all_reduce(ctx, " << pointer(reduce.getResult())
       << ", " << pointer(reduce.getInput()) << ", " << type.getNumElements() << ", "
       << axesMask(reduce.getAxes()) << ", "
       << (reduce.getReduction() == Reduction::mean ? 1 : 0) << ", "
       << llvm::format("%.17g", reduce.getScale().convertToDouble())
       << ")) return rc;\n";
    return success();
  }
  auto exchange = cast<AllToAllOp>(op);
  // fp16, bf16 or int8 on the wire (the verifier allows no other codec here).
  std::string codecArg = "nullptr";
  CodecAttr codec = exchange.getCodecAttr();
  if (codec) {
    os << "  static const moert_codec codec" << codecSites << " = {"
       << static_cast<int>(codec.getKind()) << ", " << codec.getBlockSize()
       << ", 0, 0, 0};\n";
    codecArg = "&codec" + std::to_string(codecSites++);
  }
  // Bytes of `elems` floats on the wire.
  auto wire = [&](int64_t elems) -> int64_t {
    if (!codec)
      return elems * 4;
    if (codec.getKind() == CodecKind::int8) {
      int64_t block = std::max<int64_t>(codec.getBlockSize(), 1);
      return elems + 4 * ((elems + block - 1) / block);
    }
    return elems * 2;
  };
  if (Value counts = exchange.getSendCounts()) {
    if (exchange.getSplitDim() == exchange.getConcatDim())
      return op->emitOpError("the ragged row form is not executable yet");
    // Ragged: the bytes depend on the routing; the dense volume bounds them.
    if (int64_t p = groupSize(exchange.getAxes()); training && p > 1)
      raggedBound += wire(type.getNumElements() / p) * (p - 1) +
                     (p - 1) * type.getShape()[0] * (exchange.getSplitDim() == 0 ? 1 : p) /
                         p * 4;
    os << "  {\n    const int64_t shape[] = {";
    llvm::interleaveComma(type.getShape(), os);
    os << "};\n    if (int rc = moert_step_all_to_all_ragged(ctx, "
       << pointer(exchange.getResult()) << ", " << pointer(exchange.getInput())
       << ", shape, " << exchange.getSplitDim() << ", " << exchange.getConcatDim() << ", "
       << axesMask(exchange.getAxes()) << ", " << pointer(counts) << ", "
       << pointer(exchange.getRecvCounts()) << ", " << codecArg << ")) return rc;\n  }\n";
    return success();
  }
  if (int64_t p = groupSize(exchange.getAxes()); training && p > 1)
    allToAllBytes += wire(type.getNumElements() / p) * (p - 1);
  os << "  {\n    const int64_t shape[] = {";
  llvm::interleaveComma(type.getShape(), os);
  os << "};\n    if (int rc = moert_step_all_to_all(ctx, " << pointer(exchange.getResult())
     << ", " << pointer(exchange.getInput()) << ", shape, " << type.getRank() << ", "
     << exchange.getSplitDim() << ", " << exchange.getConcatDim() << ", "
     << axesMask(exchange.getAxes()) << ", " << codecArg << ")) return rc;\n  }\n";
  return success();
}

LogicalResult Emitter::run() {
  if (auto compression = module->getAttrOfType<DictionaryAttr>("moe.compression"))
    if (auto warmup = compression.getAs<IntegerAttr>("warmup_steps"))
      codecWarmup = warmup.getInt();
  func::FuncOp step, eval;
  for (auto fn : module.getOps<func::FuncOp>()) {
    if (fn.isExternal())
      continue;
    (fn->hasAttr("moe.no_grad") ? eval : step) = fn;
  }
  if (!step)
    return module.emitError("moec: no training step function to emit");

  os << "// Generated by moec: the training step program. Do not edit.\n"
     << "#include \"HalideRuntime.h\"\n#include \"moert/Program.h\"\n#include \"moert/ScratchPool.h\"\n"
     << "#include <cstdio>\n#include <cstring>\n#include <initializer_list>\n\n";
  for (auto kernel : module.getOps<KernelOp>())
    if (!calls.at(kernel.getSymName().str()).generator.empty())
      os << "#include \"" << kernel.getSymName() << ".h\"\n";
  os << R"cpp(
namespace {
struct View {
  halide_buffer_t b;
  halide_dimension_t d[4];
};
const halide_type_t f32 = {halide_type_float, 32, 1};
const halide_type_t i32 = {halide_type_int, 32, 1};
float dummy[1];
// Kernel errors (bad ids, shapes) are reported, never aborts: the step
// returns the error code and the trainer stops with a message.
void reportKernelError(void *, const char *message) {
  std::fprintf(stderr, "kernel error: %s\n", message);
}
// Kernel scratch comes from the runtime's pool (reused blocks, counted).
void *poolMalloc(void *, size_t size) { return moert_scratch_alloc(size); }
void poolFree(void *, void *ptr) { moert_scratch_free(ptr); }
struct InstallHandler {
  InstallHandler() {
    halide_set_error_handler(reportKernelError);
    halide_set_custom_malloc(poolMalloc);
    halide_set_custom_free(poolFree);
  }
} installHandler;
View view(const void *p, halide_type_t t, std::initializer_list<int> extents) {
  View v = {};
  v.b.host = (uint8_t *)p;
  v.b.type = t;
  v.b.dimensions = (int)extents.size();
  v.b.dim = v.d;
  int stride = 1, i = 0;
  for (int e : extents) {
    v.d[i].min = 0;
    v.d[i].extent = e;
    v.d[i].stride = stride;
    stride *= e;
    ++i;
  }
  return v;
}
} // namespace

)cpp";
  // Parameter table.
  unsigned index = 0;
  os << "static const moert_param_info kParams[] = {\n";
  for (ParamOp p : module.getOps<ParamOp>()) {
    paramIndex[p.getSymName()] = index++;
    bool adamw = false;
    step.walk([&](LaunchOp l) {
      if (l.getUpdates() && *l.getUpdates() == p.getSymName())
        adamw = true;
    });
    InitAttr init = p.getInit();
    os << "  {\"" << p.getSymName() << "\", " << p.getTensorType().getRank() << ", {";
    llvm::interleaveComma(p.getTensorType().getShape(), os);
    int64_t parts = 1;
    if (p->hasAttr("moe.shard"))
      if (auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName))
        parts = grid.getEp();
    os << "}, " << static_cast<int>(init.getKind()) << ", "
       << llvm::format("%.17g", init.getScaleValue()) << ", " << adamw << ", " << parts
       << "},\n";
  }
  os << "};\n\n";
  if (failed(emitFunction(step, "trainStep", true)) ||
      (eval && failed(emitFunction(eval, "evalStep", false))))
    return failure();
  auto plan = module->getAttrOfType<DictionaryAttr>("moe.buffer_plan");
  auto tokensType = cast<RankedTensorType>(step.getArgument(0).getType());
  int64_t vocab = 0;
  if (auto emb = module.lookupSymbol<ParamOp>("tok_emb"))
    vocab = emb.getTensorType().getShape()[0];
  int64_t seed = 0;
  if (auto s = module->getAttrOfType<IntegerAttr>("moe.seed"))
    seed = s.getInt();
  auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName);
  int64_t scratch = 0;
  for (auto kernel : module.getOps<KernelOp>())
    scratch = std::max(scratch, calls.at(kernel.getSymName().str()).scratchBytes);
  os << "static const int32_t kLayerExperts[] = {0";
  for (auto &layer : moeLayers)
    os << ", " << layer.first;
  os << "};\nstatic const int32_t kLayerCapacity[] = {0";
  for (auto &layer : moeLayers)
    os << ", " << layer.second;
  os << "};\n";
  os << "extern \"C\" const moert_program moec_program = {\n  " << index
     << ", kParams, " << plan.getAs<IntegerAttr>("activation_bytes").getInt() << ", "
     << plan.getAs<IntegerAttr>("gradient_bytes").getInt() << ",\n  "
     << tokensType.getShape()[0] << ", " << tokensType.getNumElements() / tokensType.getShape()[0]
     << ", " << vocab << ", " << seed << "ull, trainStep, "
     << (eval ? "evalStep" : "nullptr") << ", " << moeLayers.size()
     << ", kLayerExperts + 1, kLayerCapacity + 1, " << scratch << ", "
     << (grid ? grid.getDp() : 1) << ", " << (grid ? grid.getEp() : 1) << ", "
     << (grid ? grid.getTp() : 1) << ",\n  {" << allReduceBytes << ", " << allToAllBytes
     << ", 0, 0, 0, 0}, " << raggedBound << ", " << codecWarmup << ", " << codecBytes << ", "
     << codecUncompressed << "};\n";
  return success();
}

LogicalResult Emitter::emitFunction(func::FuncOp step, StringRef name,
                                    bool isTraining) {
  storage.clear();
  training = isTraining;
  os << "static int " << name
     << "(moert_context *ctx, const int32_t *tokens, const int32_t *targets, "
     << (isTraining ? "int32_t step, float *loss) {\n" : "float *loss, float *logits) {\n")
     << "  char *A = ctx->activations, *G = ctx->gradients;\n  (void)A; (void)G;\n";
  for (BlockArgument arg : step.getArguments()) {
    auto kind = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "moe.input");
    if (!kind)
      return step.emitError("moec: step argument #")
             << arg.getArgNumber() << " is not a moe.input";
    storage[arg] = kind.getValue() == "tokens"    ? "tokens"
                   : kind.getValue() == "targets" ? "targets"
                                                  : "(&step)";
  }
  // The tokens and targets are read-only: views take const away.
  llvm::DenseSet<Operation *> bucketed;
  for (Operation &op : step.getBody().front()) {
    if (bucketed.contains(&op))
      continue;
    // Adjacent uncompressed all-reduces of one group, reduction and scale
    // (the gradients) go as one bucket: one collective instead of one per
    // tensor.
    if (auto first = dyn_cast<AllReduceOp>(op); first && !first.getCodecAttr()) {
      SmallVector<AllReduceOp> run = {first};
      // A bucket packs every input before it writes any output: a member
      // reading an earlier member's result ends it, and so does size (one
      // collective's count stays far below 2^31 floats).
      int64_t total = cast<RankedTensorType>(first.getType()).getNumElements();
      for (Operation *next = op.getNextNode(); next; next = next->getNextNode()) {
        auto r = dyn_cast<AllReduceOp>(next);
        if (!r || r.getCodecAttr() || r.getAxes() != first.getAxes() ||
            r.getReduction() != first.getReduction() || r.getScale() != first.getScale())
          break;
        Operation *producer = r.getInput().getDefiningOp();
        if (producer && llvm::any_of(run, [&](AllReduceOp member) {
              return member.getOperation() == producer;
            }))
          break;
        total += cast<RankedTensorType>(r.getType()).getNumElements();
        if (total > (int64_t(1) << 28))
          break;
        run.push_back(r);
      }
      if (run.size() > 1) {
        for (AllReduceOp r : run)
          bucketed.insert(r);
        if (failed(bucket(run)))
          return failure();
        continue;
      }
    }
    if (auto get = dyn_cast<GetParamOp>(op)) {
      storage[get.getResult()] =
          "ctx->params[" + std::to_string(paramIndex.lookup(get.getName())) + "]";
    } else if (auto fill = dyn_cast<FillOp>(op)) {
      auto plan = fill->getAttrOfType<DenseI64ArrayAttr>("moe.buffers");
      setStorage(fill, plan.asArrayRef());
      os << "  moert_fill(" << pointer(fill.getResult()) << ", "
         << cast<RankedTensorType>(fill.getType()).getNumElements() << ", "
         << "(float)" << llvm::format("%.17g", fill.getValue().convertToDouble())
         << ");\n";
    } else if (auto l = dyn_cast<LaunchOp>(op)) {
      if (failed(launch(l)))
        return failure();
    } else if (isa<AllReduceOp, AllToAllOp>(op)) {
      if (failed(collective(&op)))
        return failure();
    } else if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      os << "  *loss = *" << pointer(ret.getOperand(0)) << ";\n  return 0;\n}\n\n";
    } else {
      return op.emitOpError("moec cannot emit this op in a step program");
    }
  }
  return success();
}

} // namespace

LogicalResult moec::emitStepProgram(ModuleOp module,
                                    const std::map<std::string, KernelCall> &calls,
                                    raw_ostream &os) {
  return Emitter(module, calls, os).run();
}
