//===- MoEDialect.cpp - the moe dialect -----------------------------------===//

#include "moe/Dialect/MoE/MoEDialect.h"
#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/MoE/MoEDialect.cpp.inc"

void MoEDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "moe/Dialect/MoE/MoEOps.cpp.inc"
      >();
  registerAttributes();
}

GridAttr mlir::moe::getEnclosingGrid(Operation *op) {
  auto module = isa<ModuleOp>(op) ? cast<ModuleOp>(op) : op->getParentOfType<ModuleOp>();
  for (; module; module = module->getParentOfType<ModuleOp>())
    if (auto grid = module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName))
      return grid;
  return {};
}

/// The bytes of a statically shaped tensor type, or -1 when they exceed
/// kMaxTensorBytes (or do not fit in int64).
static int64_t boundedBytes(RankedTensorType type) {
  Type element = type.getElementType();
  int64_t bytes =
      element.isIntOrFloat() ? std::max<int64_t>(element.getIntOrFloatBitWidth() / 8, 1) : 8;
  for (int64_t dim : type.getShape()) {
    if (ShapedType::isDynamic(dim) || dim == 0)
      return 0;
    if (llvm::MulOverflow(bytes, dim, bytes) || bytes > kMaxTensorBytes)
      return -1;
  }
  return bytes;
}

LogicalResult mlir::moe::verifyBoundedTensors(Operation *op) {
  auto check = [&](Type type, StringRef what, unsigned index) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(type);
    if (!tensor || boundedBytes(tensor) >= 0)
      return success();
    return op->emitOpError() << what << " #" << index << " of type " << type
                             << " holds more than 2^48 bytes, the limit of one moe tensor";
  };
  for (auto [i, type] : llvm::enumerate(op->getOperandTypes()))
    if (failed(check(type, "operand", i)))
      return failure();
  for (auto [i, type] : llvm::enumerate(op->getResultTypes()))
    if (failed(check(type, "result", i)))
      return failure();
  // Types held as attributes (moe.param's tensor type).
  for (NamedAttribute attr : op->getAttrs())
    if (auto type = dyn_cast<TypeAttr>(attr.getValue()))
      if (auto tensor = dyn_cast<RankedTensorType>(type.getValue());
          tensor && boundedBytes(tensor) < 0)
        return op->emitOpError() << "attribute '" << attr.getName().getValue() << "' of type "
                                 << tensor
                                 << " holds more than 2^48 bytes, the limit of one moe tensor";
  return success();
}

/// A module attribute that must be a `#moe.<mnemonic>` of type AttrT.
template <typename AttrT>
static LogicalResult verifyModuleAttr(Operation *op, NamedAttribute attr) {
  if (isa<ModuleOp>(op) && isa<AttrT>(attr.getValue()))
    return success();
  return op->emitError() << "'" << attr.getName().getValue() << "' must be a #moe."
                         << AttrT::getMnemonic() << " on a builtin.module, got " << attr.getValue();
}

LogicalResult MoEDialect::verifyOperationAttribute(Operation *op, NamedAttribute attr) {
  if (attr.getName() == kGridAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << kGridAttrName
                             << "' may only be attached to a builtin.module";
    if (!isa<GridAttr>(attr.getValue()))
      return op->emitError() << "'" << kGridAttrName << "' must be a #moe.grid attribute";
    return success();
  }
  StringRef name = attr.getName().getValue();
  if (name == kBuffersAttrName) {
    if (!isa<DenseI64ArrayAttr>(attr.getValue()))
      return op->emitError("'moe.buffers' must be an array<i64> of "
                           "[arena, offset, bytes] per result");
    return success();
  }
  // What passes leave on the module for later stages: moe-compress-collectives'
  // settings, moe-lower-to-kernels' buffer plan, moe-plan-sharding's costs.
  if (name == kCompressionAttrName)
    return verifyModuleAttr<CompressionAttr>(op, attr);
  if (name == kBufferPlanAttrName)
    return verifyModuleAttr<BufferPlanAttr>(op, attr);
  if (name == kPlanAttrName)
    return verifyModuleAttr<PlanAttr>(op, attr);
  if (name == kCodecChoiceAttrName) {
    // moe-compress-collectives' cost-model judgement of a collective.
    if (!isa<AllReduceOp, AllToAllOp>(op) || !isa<CodecChoiceAttr>(attr.getValue()))
      return op->emitError() << "'" << kCodecChoiceAttrName
                             << "' must be a #moe.codec_choice on a moe.all_reduce or "
                                "moe.all_to_all, got "
                             << attr.getValue();
    return success();
  }
  if (name == kRecomputeAttrName) {
    if (!isa<ModuleOp>(op) || !isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a unit attribute on a builtin.module";
    return success();
  }
  if (name == kMicroBatchesAttrName) {
    auto count = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !count || count.getInt() < 1)
      return op->emitError() << "'" << name
                             << "' must be a positive integer (micro-batches per step) on a "
                                "builtin.module";
    return success();
  }
  if (name == kShardAttrName) {
    // A parameter holding one rank's block along dimension 0 (moe-partition).
    auto axes = dyn_cast<ArrayAttr>(attr.getValue());
    if (!isa<ParamOp>(op) || !axes || axes.size() != 1 ||
        axes[0] != StringAttr::get(op->getContext(), "ep"))
      return op->emitError("'moe.shard' must be [\"ep\"] on a moe.param");
    return success();
  }
  if (name == kTpDimAttrName) {
    // A parameter holding one tp rank's slice along a dimension.
    auto dim = dyn_cast<IntegerAttr>(attr.getValue());
    auto param = dyn_cast<ParamOp>(op);
    if (!param || !dim || dim.getValue().isNegative() ||
        dim.getInt() >= param.getTensorType().getRank())
      return op->emitError("'moe.tp_dim' must be a dimension of the moe.param it is on");
    return success();
  }
  if (name == kShardLayerAttrName) {
    auto layer = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<ParamOp>(op) || !layer || layer.getValue().isNegative() ||
        !op->hasAttr(kShardAttrName))
      return op->emitError("'moe.shard_layer' must be a non-negative integer on a moe.param "
                           "with 'moe.shard'");
    return success();
  }
  if (name == kShardRowsAttrName) {
    // Which global rows each ep rank's block holds (a pinned placement).
    auto param = dyn_cast<ParamOp>(op);
    auto rows = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!param || !rows || !op->hasAttr(kShardAttrName))
      return op->emitError("'moe.shard_rows' must be an array<i64> on a moe.param with "
                           "'moe.shard'");
    // One entry per position of the placement (ep x the block's rows): a
    // row of the full tensor, or -1 for an empty position. A row may be
    // held at several positions (replicas).
    int64_t local = param.getTensorType().getShape()[0];
    int64_t total = static_cast<int64_t>(rows.size());
    bool valid = local > 0 && total % local == 0 && total > 0;
    for (int64_t r : rows.asArrayRef())
      valid = valid && r >= -1;
    if (!valid)
      return op->emitError() << "'moe.shard_rows' must list a row of the full tensor (or -1, "
                                "empty) per position, a multiple of the block's "
                             << local << " rows";
    return success();
  }
  if (name == kTokenSharesAttrName) {
    auto shares = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !shares || shares.empty() ||
        llvm::any_of(shares.asArrayRef(), [](int64_t n) { return n < 1; }))
      return op->emitError() << "'" << name
                             << "' must be a non-empty array<i64> of positive sequence "
                                "counts on a builtin.module";
    return success();
  }
  if (name == kReplicaAttrName) {
    auto replica = dyn_cast<IntegerAttr>(attr.getValue());
    auto shares = op->getAttrOfType<DenseI64ArrayAttr>(kTokenSharesAttrName);
    if (!isa<ModuleOp>(op) || !replica || !shares || replica.getValue().isNegative() ||
        replica.getInt() >= static_cast<int64_t>(shares.size()))
      return op->emitError() << "'" << name
                             << "' must be an index into the module's 'moe.token_shares'";
    return success();
  }
  if (name == kBucketAttrName) {
    auto bucket = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<AllReduceOp, ReduceScatterOp, AllToAllOp>(op) || !bucket ||
        bucket.getValue().isNegative())
      return op->emitError() << "'" << name
                             << "' must be a non-negative integer on a moe.all_reduce, "
                                "moe.reduce_scatter or moe.all_to_all";
    return success();
  }
  if (name == kLossScaleAttrName) {
    auto scale = dyn_cast<FloatAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !scale || !(scale.getValueAsDouble() >= 1.0) ||
        !(scale.getValueAsDouble() <= 1e30))
      return op->emitError() << "'" << name << "' must be a float in [1, 1e30] on a builtin.module";
    return success();
  }
  if (name == kLossSeedAttrName) {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<FillOp>(op))
      return op->emitError() << "'" << name << "' must be a unit attribute on a moe.fill";
    return success();
  }
  if (name == kNoGradAttrName) {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<FunctionOpInterface>(op))
      return op->emitError("'moe.no_grad' must be a unit attribute on a "
                           "function");
    return success();
  }
  if (name == kPlanReportAttrName) {
    if (!isa<ModuleOp>(op) || !isa<DictionaryAttr>(attr.getValue()))
      return op->emitError() << "'" << kPlanReportAttrName
                             << "' must be a dictionary on a builtin.module";
    return success();
  }
  if (name == kModelAttrName || name == kPlanNeedsAttrName) {
    if (!isa<ModuleOp>(op) || !isa<StringAttr>(attr.getValue()))
      return op->emitError() << "'" << name << "' must be a string on a builtin.module";
    return success();
  }
  if (name == kOptimizerAttrName || name == kSeedAttrName || name == kClusterAttrName) {
    if (!isa<ModuleOp>(op))
      return op->emitError() << "'" << name << "' may only be attached to a builtin.module";
    if (name == kSeedAttrName) {
      auto seed = dyn_cast<IntegerAttr>(attr.getValue());
      if (!seed || seed.getValue().isNegative())
        return op->emitError() << "'" << name << "' must be a non-negative integer";
      return success();
    }
    auto dict = dyn_cast<DictionaryAttr>(attr.getValue());
    if (!dict)
      return op->emitError() << "'" << name << "' must be a dictionary";
    if (name == kOptimizerAttrName) {
      auto type = dict.getAs<StringAttr>("type");
      if (!type || type.getValue() != "adamw")
        return op->emitError() << "'" << name << "' must have type = \"adamw\"";
      auto lr = dict.getAs<FloatAttr>("lr");
      if (!lr || !(lr.getValueAsDouble() > 0.0))
        return op->emitError() << "'" << name << "' must have a learning rate lr > 0";
    }
    return success();
  }
  if (attr.getName() == kInputAttrName)
    return op->emitError() << "'" << kInputAttrName
                           << "' belongs on a function argument, not on an op";
  return op->emitError() << "unknown moe dialect attribute '" << attr.getName().getValue() << "'";
}

LogicalResult MoEDialect::verifyRegionArgAttribute(Operation *op, unsigned regionIndex,
                                                   unsigned argIndex, NamedAttribute attr) {
  if (attr.getName() != kInputAttrName)
    return op->emitError() << "unknown moe argument attribute '" << attr.getName().getValue()
                           << "'";
  auto kind = dyn_cast<StringAttr>(attr.getValue());
  if (!kind ||
      (kind.getValue() != "tokens" && kind.getValue() != "targets" && kind.getValue() != "step"))
    return op->emitError() << "'" << kInputAttrName << "' on argument #" << argIndex
                           << " must be \"tokens\", \"targets\" or \"step\", got "
                           << attr.getValue();
  if (!isa<FunctionOpInterface>(op))
    return op->emitError() << "'" << kInputAttrName << "' may only mark arguments of a function";
  Region &region = op->getRegion(regionIndex);
  if (region.empty())
    return success();
  Type type = region.getArgument(argIndex).getType();
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape() || !tensor.getElementType().isSignlessInteger(32))
    return op->emitError() << "step input #" << argIndex << " (" << kind.getValue()
                           << ") must be a static tensor of i32, got " << type;
  return success();
}
