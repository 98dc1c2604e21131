//===- Builders.cpp - builders that infer result types --------------------===//
//
// The frontend and the passes build ops through these, so a caller states
// operands and settings, never a result shape it could get wrong.
//
//===----------------------------------------------------------------------===//

#include "VerifyUtils.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::checks;

/// `shape` with its last dimension replaced by `last` (appended if empty).
static SmallVector<int64_t> replaceLast(ArrayRef<int64_t> shape, int64_t last) {
  SmallVector<int64_t> out(shape.empty() ? shape : shape.drop_back());
  out.push_back(last);
  return out;
}

void EmbeddingOp::build(OpBuilder &builder, OperationState &state, Value ids, Value table) {
  RankedTensorType t = tensorType(table);
  SmallVector<int64_t> shape(tensorType(ids).getShape());
  shape.push_back(t.getShape().back());
  build(builder, state, RankedTensorType::get(shape, t.getElementType()), ids, table);
}

void LinearOp::build(OpBuilder &builder, OperationState &state, Value x, Value weight, Value bias) {
  RankedTensorType xt = tensorType(x);
  auto shape = replaceLast(xt.getShape(), tensorType(weight).getShape().back());
  build(builder, state, RankedTensorType::get(shape, xt.getElementType()), x, weight, bias);
}

void CrossEntropyOp::build(OpBuilder &builder, OperationState &state, Value logits, Value targets) {
  build(builder, state, RankedTensorType::get({}, builder.getF32Type()), logits, targets,
        builder.getF64FloatAttr(1.0));
}

void RouterOp::build(OpBuilder &builder, OperationState &state, Scoring scoring, Value x,
                     Value weight, Value bias, int64_t topK) {
  RankedTensorType xt = tensorType(x);
  auto choices = replaceLast(xt.getShape(), topK);
  build(builder, state, RankedTensorType::get(choices, xt.getElementType()),
        RankedTensorType::get(choices, builder.getI32Type()),
        RankedTensorType::get({}, builder.getF32Type()), scoring, x, weight, bias,
        static_cast<uint64_t>(topK), /*renormalize=*/false,
        /*capacity_factor=*/FloatAttr(), APFloat(0.0f), APFloat(0.0f), APFloat(1.0f),
        /*bias_update_rate=*/FloatAttr(), /*expert_groups=*/1, /*topk_groups=*/1);
}

void DispatchOp::build(OpBuilder &builder, OperationState &state, Value x, Value experts,
                       int64_t numExperts, int64_t capacity) {
  RankedTensorType xt = tensorType(x);
  build(builder, state,
        RankedTensorType::get({numExperts, capacity, xt.getShape().back()}, xt.getElementType()), x,
        experts);
}

void CombineOp::build(OpBuilder &builder, OperationState &state, Value y, Value gates,
                      Value experts) {
  RankedTensorType yt = tensorType(y);
  auto shape = replaceLast(tensorType(gates).getShape(), yt.getShape().back());
  build(builder, state, RankedTensorType::get(shape, yt.getElementType()), y, gates, experts);
}
