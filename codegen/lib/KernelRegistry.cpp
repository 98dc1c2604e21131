//===- KernelRegistry.cpp - kernel specs to generator calls ---------------===//

#include "moe/Codegen/KernelRegistry.h"

using namespace mlir;
using namespace mlir::moe;
using namespace moec::codegen;

KernelSpec::KernelSpec(KernelOp kernel)
    : family(kernel.getFamily()), signature(kernel.getSignature()), config(kernel.getConfig()),
      epilogue(kernel.getEpilogue()) {}

ArrayRef<int64_t> KernelSpec::in(unsigned i) const {
  return cast<RankedTensorType>(signature.getInput(i)).getShape();
}

ArrayRef<int64_t> KernelSpec::out(unsigned i) const {
  return cast<RankedTensorType>(signature.getResult(i)).getShape();
}

int64_t KernelSpec::numel(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

double KernelSpec::number(StringRef key, double fallback) const {
  Attribute a = config.get(key);
  if (auto f = dyn_cast_or_null<FloatAttr>(a))
    return f.getValueAsDouble();
  if (auto i = dyn_cast_or_null<IntegerAttr>(a))
    return static_cast<double>(i.getValue().getSExtValue());
  return fallback;
}

bool KernelSpec::flag(StringRef key) const {
  auto b = config.getAs<BoolAttr>(key);
  return b && b.getValue();
}

bool KernelSpec::has(StringRef key) const { return static_cast<bool>(config.get(key)); }

bool KernelSpec::hasEpilogue(StringRef name) const {
  for (Attribute e : epilogue)
    if (cast<StringAttr>(e).getValue() == name)
      return true;
  return false;
}

int64_t GeneratorParams::operator()(StringRef key) const {
  StringRef value = text(key);
  if (value == "true")
    return 1;
  int64_t v = 0;
  return value.getAsInteger(10, v) ? 0 : v;
}

StringRef GeneratorParams::text(StringRef key) const {
  for (const std::string &p : params) {
    StringRef entry(p);
    if (entry.consume_front(key) && entry.consume_front("="))
      return entry;
  }
  return {};
}

int64_t moec::codegen::scratchBound(StringRef generator, const std::vector<std::string> &params) {
  int64_t elements = 0;
  for (const KernelFamily &row : kernelFamilies())
    if (row.generator == generator && row.scratch) {
      elements = row.scratch(GeneratorParams(params));
      break;
    }
  // Per block, the pool's 128-byte header and rounding to 128 bytes
  // (runtime/lib/ScratchPool.cpp) and Halide's padding of heap allocations
  // (a few vectors): 512 bytes for each of up to 16 intermediates.
  constexpr int64_t kBlockSlack = 512, kMaxBlocks = 16;
  return 4 * elements + kBlockSlack * kMaxBlocks;
}

/// `row`'s generator arguments filled from `n` operands and `r` results:
/// the row's arguments function, else the operands then the results.
static SmallVector<KernelArg> generatorArguments(const KernelSpec &spec, const KernelFamily &row,
                                                 unsigned n, unsigned r) {
  if (row.arguments)
    return row.arguments(spec, n, r);
  SmallVector<KernelArg> args;
  for (unsigned i = 0; i < n; ++i)
    args.push_back(KernelArg{KernelArg::Operand, i, row.view});
  for (unsigned i = 0; i < r; ++i)
    args.push_back(KernelArg{KernelArg::Result, i, row.view});
  return args;
}

/// Appends `bf16_args=...` and `f16_args=...` (the generator's arguments
/// stored in bf16 or f16, from the kernel's signature; every other float
/// argument is f32) to `params`. Returns the elements of those arguments.
static int64_t storageParams(const KernelSpec &spec, const KernelFamily &row,
                             std::vector<std::string> &params) {
  unsigned n = spec.numInputs(), r = spec.numResults();
  SmallVector<KernelArg> args = generatorArguments(spec, row, n, r);
  std::string bf16, f16;
  int64_t elements = 0;
  for (auto [i, arg] : llvm::enumerate(args)) {
    if (i >= row.signature.size() ||
        (arg.source != KernelArg::Operand && arg.source != KernelArg::Result))
      continue;
    bool operand = arg.source == KernelArg::Operand;
    if (arg.index >= (operand ? n : r))
      continue;
    auto type = cast<RankedTensorType>(operand ? spec.signature.getInput(arg.index)
                                               : spec.signature.getResult(arg.index));
    std::string *list = type.getElementType().isBF16()  ? &bf16
                        : type.getElementType().isF16() ? &f16
                                                        : nullptr;
    if (!list)
      continue;
    if (!list->empty())
      *list += ",";
    *list += row.signature[i].str();
    elements += type.getNumElements();
  }
  if (!bf16.empty())
    params.push_back("bf16_args=" + bf16);
  if (!f16.empty())
    params.push_back("f16_args=" + f16);
  return elements;
}

FailureOr<KernelCall> moec::codegen::lookupKernel(KernelOp kernel, Gemm gemm) {
  const KernelFamily *row = lookupFamily(kernel.getFamily());
  if (!row)
    return kernel.emitOpError() << "has no kernel generator for family '" << kernel.getFamily()
                                << "' yet (the default pipeline fuses router/dispatch/combine into "
                                   "fused_gate/permute/unpermute)";
  KernelCall call;
  call.row = row;
  if (row->generator.empty()) {
    call.runtimeRoutine = row->family.str(); // scalar work, done by the runtime
  } else {
    call.generator = row->generator.str();
    KernelSpec spec(kernel);
    call.params = row->params(spec, gemm);
    int64_t staged = storageParams(spec, *row, call.params);
    call.scratchBytes = scratchBound(call.generator, call.params);
    // An extern GEMM reads and writes f32: the kernel stages f32 copies of
    // its low-precision arguments (at most all of them).
    if (GeneratorParams(call.params)("blas"))
      call.scratchBytes += 4 * staged;
    return call;
  }
  call.scratchBytes = scratchBound(call.generator, call.params);
  return call;
}

FailureOr<SmallVector<KernelArg>> moec::codegen::argumentsOf(LaunchOp launch, KernelOp kernel) {
  const KernelFamily *row = lookupFamily(kernel.getFamily());
  if (!row || row->generator.empty())
    return launch.emitOpError() << "launches '" << kernel.getFamily()
                                << "', which has no generated kernel";
  unsigned n = launch.getOperands().size(), r = launch.getResults().size();
  SmallVector<KernelArg> args = generatorArguments(KernelSpec(kernel), *row, n, r);
  if (args.size() != row->signature.size())
    return launch.emitOpError() << "fills " << args.size() << " arguments of generator '"
                                << row->generator << "', which takes " << row->signature.size();
  for (const KernelArg &a : args)
    if ((a.source == KernelArg::Operand && a.index >= n) ||
        (a.source == KernelArg::Result && a.index >= r))
      return launch.emitOpError() << "has too few operands or results for generator '"
                                  << row->generator << "'";
  return args;
}
