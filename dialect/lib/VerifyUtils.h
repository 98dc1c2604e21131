//===- VerifyUtils.h - helpers shared by moe verifiers ----------*- C++ -*-===//
//
// Shape and type checks that several ops share, so that one constraint reads
// the same wherever it appears.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_LIB_VERIFYUTILS_H
#define MOE_DIALECT_LIB_VERIFYUTILS_H

#include "moe/Dialect/MoE/MoEOps.h"

#include <string>

namespace mlir::moe::checks {

/// The ranked tensor type of `value` (every moe tensor operand is ranked).
inline RankedTensorType tensorType(Value value) { return cast<RankedTensorType>(value.getType()); }

/// "2x16x64" for a shape; "scalar" for rank 0.
std::string formatShape(ArrayRef<int64_t> shape);

/// Checks that `value` (named `name` in messages) has exactly `expected`.
LogicalResult checkShape(Operation *op, StringRef name, Value value, ArrayRef<int64_t> expected);

/// Checks that `value` has rank `rank`; `layout` (e.g. "[D, E]") explains it.
LogicalResult checkRank(Operation *op, StringRef name, Value value, int64_t rank, StringRef layout);

/// Checks that every named value has the element type of the first.
LogicalResult checkSameElementType(Operation *op,
                                   ArrayRef<std::pair<StringRef, Value>> namedValues);

/// A clamp's limit: finite and > 0 (moe.clamp, moe.clamp_grad).
LogicalResult checkClampLimit(Operation *op, float limit);

/// A sigmoid gate's logits: `x`'s shape with a last dimension of 1, `x`'s
/// element type (moe.sigmoid_gate, moe.sigmoid_gate_grad).
LogicalResult checkSigmoidGate(Operation *op, Value x, Value gate);

/// The operands of a latent attention (moe.latent_attention and its
/// gradient): q [B, S, H (dn + dr)], k [B, S, H dn], k_rope [B, S, dr], v
/// [B, S, H dv], one element type; an even dr and theta > 0 with rope.
LogicalResult checkLatentAttention(Operation *op, Value q, Value k, Value kRope, Value v,
                                   int64_t heads, std::optional<APFloat> theta);

/// A balancing loss per sequence (`aux_per_sequence`) needs the sequences:
/// `x` of rank >= 3, [B, S, ..., D].
LogicalResult checkAuxPerSequence(Operation *op, bool perSequence, Value x);

/// `rows` of an expert FFN (absent, or `[E * G]` with `G` dividing the
/// buffer's `C` slots), for a `[E, C, D]` buffer `x`.
LogicalResult checkExpertRows(Operation *op, Value rows, Value x);

/// Checks the weights of a feed-forward block with input width `d`:
/// up [G..., D, F], down [G..., F, D], and a gate shaped like up exactly when
/// the activation is swiglu. `group` holds leading expert dimensions.
LogicalResult verifyFFNWeights(Operation *op, Activation activation, ArrayRef<int64_t> group,
                               int64_t d, Value up, Value down, Value gate);

/// Checks what a router and a fused gate share: x [..., D], weight [D, E],
/// bias [E], 1 <= top_k <= E, gates and experts [..., top_k], one float
/// element type. Sets `experts` and `choices` ([..., top_k]).
LogicalResult verifyRouting(Operation *op, Value x, Value weight, Value bias, int64_t topK,
                            Value gates, Value expertIds, int64_t &experts,
                            SmallVectorImpl<int64_t> &choices);

/// Checks the group-limited selection of a router, fused gate or router
/// gradient: `expert_groups >= 1` dividing the `experts`, `1 <= topk_groups
/// <= expert_groups`, and `top_k` within the experts of `topk_groups`
/// groups.
LogicalResult checkExpertGroups(Operation *op, int64_t experts, int64_t topK, int64_t groups,
                                int64_t topkGroups);

/// Checks routing `groups`: >= 1 and dividing x's leading (batch) dimension
/// (groups are whole sequences).
LogicalResult checkRoutingGroups(Operation *op, int64_t groups, DenseI64ArrayAttr groupSizes,
                                 Value x);

/// Checks a collective's axes against the module grid and returns the group
/// size through `groupSize`.
LogicalResult verifyGroup(Operation *op, ArrayAttr axes, int64_t &groupSize);

/// Checks that `codec` may compress a collective of `kind` (a name for
/// messages) over `input`; `elementwiseOnly` restricts to fp16/bf16/int8.
LogicalResult verifyCodecUse(Operation *op, CodecAttr codec, Value input, bool elementwiseOnly);

} // namespace mlir::moe::checks

#endif // MOE_DIALECT_LIB_VERIFYUTILS_H
