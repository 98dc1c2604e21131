//===- MoERoutingOps.td - router, dispatch, experts, combine -*- tablegen -*-===//

#ifndef MOE_ROUTING_OPS_TD
#define MOE_ROUTING_OPS_TD

include "moe/Dialect/MoE/MoEAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "moe/Dialect/MoE/MoEInterfaces.td"

def MoE_RouterOp : MoE_Op<"router", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "scores experts per token and picks the top k";
  let description = [{
    For every token `x[t, :]` (any leading dimensions), computes
    `logits = x @ weight` (`[E]`), scores `s = softmax(logits)` or
    `sigmoid(logits)`, and selects the `top_k` experts with the largest
    `s + bias` (the optional per-expert `bias` steers selection only, as in
    DeepSeek-V3's auxiliary-loss-free balancing; a training step updates it
    by the load rule of `moe.balance_bias` at `bias_update_rate`, 1e-3 when
    absent, 0 keeping it fixed). `gates` are the selected
    scores, divided by their sum when `renormalize` is set, then multiplied
    by `routed_scaling`. Ties go to the lower expert index.

    Group-limited routing (DeepSeek-V2/V3's node-limited routing): with
    `expert_groups = G > 1` the experts split into `G` equal contiguous
    groups of `E / G`; each group is scored from the selection keys
    `s + bias` of its experts, and only the experts of the `topk_groups`
    best groups (ties to the lower group) compete for the top `top_k`; the
    others are masked out before the top-k. The group score follows the
    scoring: softmax takes the group's largest key (DeepSeek-V2's
    `group_limited_greedy`), sigmoid the sum of its two largest keys (the
    one key when a group has one expert; DeepSeek-V3's `noaux_tc`). The
    mask changes only which experts are selected: gates and losses are
    computed from the selected experts as without groups. The defaults
    (`1`, `1`) route over all experts.

    `aux_loss` is `aux_loss_coef * E * sum_e f_e * P_e` (Switch Transformer
    load-balancing loss: `f_e` the fraction of token-slots routed to `e`,
    `P_e` the mean score of `e`) plus `z_loss_coef * mean(logsumexp(logits)^2)`
    (ST-MoE router z-loss). With `aux_per_sequence` (DeepSeek's `seq_aux`)
    the balancing term is computed over each sequence, `x[b]` for every
    leading index `b`, and averaged over the sequences: `x` has rank >= 3.

    `capacity_factor`, when present, is the factor the frontend used to size
    the dispatch buffers (`C = ceil(capacity_factor * T * top_k / E)`);
    absent means dropless. Gradients flow through `gates`, not `experts`.

    ```mlir
    %gates, %experts, %aux = moe.router softmax %x, %w top_k 2
        {aux_loss_coef = 1.0e-02 : f32, capacity_factor = 1.25 : f32}
        : (tensor<2x16x64xf32>, tensor<64x8xf32>)
        -> (tensor<2x16x2xf32>, tensor<2x16x2xi32>, tensor<f32>)
    ```

    Constraints:
    - `x` is `[..., D]`; `weight` is `[D, E]`; `bias`, when present, is `[E]`;
    - `1 <= top_k <= E`;
    - `gates` and `experts` are `[..., top_k]` with `x`'s leading dimensions;
      `gates` and `weight` have `x`'s element type, `bias` that or f32;
    - `capacity_factor > 0` when present; `aux_loss_coef >= 0`;
      `z_loss_coef >= 0`; `routed_scaling > 0`;
    - `bias_update_rate`, only with a `bias`, is finite and `>= 0`;
    - `expert_groups >= 1` divides `E`; `1 <= topk_groups <= expert_groups`;
      `top_k <= topk_groups * E / expert_groups`;
    - `aux_per_sequence` only with `x` of rank >= 3.
  }];
  let arguments = (ins MoE_Scoring:$scoring, MoE_FloatTensor:$x,
                       MoE_FloatTensor:$weight, Optional<MoE_FloatTensor>:$bias,
                       I64Attr:$top_k,
                       DefaultValuedAttr<BoolAttr, "false">:$renormalize,
                       OptionalAttr<F32Attr>:$capacity_factor,
                       DefaultValuedAttr<F32Attr, "0.0">:$aux_loss_coef,
                       DefaultValuedAttr<F32Attr, "0.0">:$z_loss_coef,
                       DefaultValuedAttr<F32Attr, "1.0">:$routed_scaling,
                       OptionalAttr<F64Attr>:$bias_update_rate,
                       DefaultValuedAttr<I64Attr, "1">:$expert_groups,
                       DefaultValuedAttr<I64Attr, "1">:$topk_groups,
                       DefaultValuedAttr<BoolAttr, "false">:$aux_per_sequence);
  let results = (outs MoE_FloatTensor:$gates, MoE_IndexTensor:$experts,
                      MoE_LossTensor:$aux_loss);
  let assemblyFormat = [{
    $scoring $x `,` $weight (`bias` $bias^)? `top_k` $top_k attr-dict
    `:` functional-type(operands, results)
  }];
  let builders = [
    // Infers the result types; the other attributes take their defaults and
    // are set afterwards (setRenormalize, setCapacityFactorAttr, ...).
    OpBuilder<(ins "Scoring":$scoring, "::mlir::Value":$x,
                   "::mlir::Value":$weight, "::mlir::Value":$bias,
                   "int64_t":$topK)>];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The load rule's rate for the selection bias (moe.balance_bias).
    double getBiasRate() {
      return getBiasUpdateRateAttr() ? getBiasUpdateRateAttr().getValueAsDouble() : 1e-3;
    }
    /// Number of experts scored.
    int64_t getNumExperts() {
      return ::llvm::cast<::mlir::RankedTensorType>(getWeight().getType())
          .getShape()[1];
    }
  }];
}

def MoE_DispatchOp : MoE_Op<"dispatch", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "scatters tokens into per-expert capacity slots";
  let description = [{
    Builds the expert-major buffer `[E, C, D]`. Token-slots are visited in
    token order (flattened leading dimensions, then choice `0..k-1`); each
    takes the next free slot of its expert. A token-slot that finds its
    expert full is dropped (it contributes nothing in `moe.combine`; the
    residual path carries the token). Unused slots are zero. With
    `C >= T` no token is ever dropped (dropless).

    ```mlir
    %buf = moe.dispatch %x, %experts
        : (tensor<2x16x64xf32>, tensor<2x16x2xi32>) -> tensor<8x10x64xf32>
    ```

    Constraints:
    - `x` is `[..., D]`; `experts` is `[..., k]` with `x`'s leading
      dimensions;
    - the result is `[E, C, D]` with `E >= 1`, `C >= 1`, and `x`'s element
      type.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_IndexTensor:$experts);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$x `,` $experts attr-dict `:` functional-type(operands, results)";
  let builders = [
    // Builds the [numExperts, capacity, D] buffer type.
    OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$experts,
                   "int64_t":$numExperts, "int64_t":$capacity)>];
  let hasVerifier = 1;
}

def MoE_ExpertFFNOp : MoE_Op<"expert_ffn", [Pure, AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>,
    AllTypesMatch<["x", "result"]>]> {
  let summary = "the routed experts: one FFN per expert, grouped";
  let description = [{
    For every expert `e`, applies the FFN of `moe.ffn` with weights
    `w_up[e]`, `w_down[e]` (and `w_gate[e]`) to that expert's slots
    `x[e, :, :]`. An optional `placement` says which expert-parallel rank
    holds which experts; it is set by the sharding planner or by a user
    pinning experts.

    `rows`, when present (`moe-routed-rows` sets it), says which slots hold
    routed tokens: each expert's `C` slots are `G` segments of `C / G`
    (one per routing group or source rank, `G = size(rows) / E`), and
    segment `g` of expert `e` holds tokens in its first
    `min(rows[e * G + g], C / G)` slots only; its other slots are zero, as
    `moe.permute` and the ragged `moe.all_to_all` leave them. The result
    is unchanged (an FFN without bias maps a zero row to zero), so kernels
    may compute the routed rows only and write zeros elsewhere.

    ```mlir
    %y = moe.expert_ffn swiglu %buf, %up, %down gate %g
        : (tensor<8x10x64xf32>, tensor<8x64x32xf32>, tensor<8x32x64xf32>,
           tensor<8x64x32xf32>) -> tensor<8x10x64xf32>
    %y2 = moe.expert_ffn swiglu %buf, %up, %down gate %g rows %counts
        : (tensor<8x10x64xf32>, tensor<8x64x32xf32>, tensor<8x32x64xf32>,
           tensor<8x64x32xf32>, tensor<8xi32>) -> tensor<8x10x64xf32>
    ```

    Constraints:
    - `x` is `[E, C, D]`; `w_up` is `[E, D, F]`; `w_down` is `[E, F, D]`;
    - `swiglu` requires `gate` with `w_up`'s shape; `gelu` and `relu` take
      no `gate`;
    - all operands share one element type;
    - `rows`, when present, is `[E * G]` with `G >= 1` dividing `C`;
    - `placement`, when present, needs a `moe.grid` on the module, has one
      list per `ep` rank, names only experts `< E`, and places every expert.
  }];
  let arguments = (ins MoE_Activation:$activation, MoE_FloatTensor:$x,
                       MoE_FloatTensor:$w_up, MoE_FloatTensor:$w_down,
                       Optional<MoE_FloatTensor>:$w_gate,
                       Optional<MoE_IndexTensor>:$rows,
                       OptionalAttr<MoE_PlacementAttr>:$placement);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $activation $x `,` $w_up `,` $w_down (`gate` $w_gate^)? (`rows` $rows^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The expert weights: w_up, w_down (and w_gate).
    ::llvm::SmallVector<::mlir::Value, 3> getWeights() {
      ::llvm::SmallVector<::mlir::Value, 3> w = {getWUp(), getWDown()};
      if (getWGate())
        w.push_back(getWGate());
      return w;
    }
  }];
}

def MoE_CombineOp : MoE_Op<"combine", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "gathers expert outputs back to tokens, weighted by gates";
  let description = [{
    `result[t, :] = sum over kept choices j of gates[t, j] * y[experts[t, j], slot(t, j), :]`,
    where `slot` is the assignment `moe.dispatch` made for the same
    `experts` and capacity `C` (dropped token-slots contribute zero).

    ```mlir
    %out = moe.combine %y, %gates, %experts
        : (tensor<8x10x64xf32>, tensor<2x16x2xf32>, tensor<2x16x2xi32>)
        -> tensor<2x16x64xf32>
    ```

    Constraints:
    - `y` is `[E, C, D]`; `gates` and `experts` have one shape `[..., k]`;
    - the result is `[..., D]` with the gates' leading dimensions;
    - `y`, `gates` and the result share one element type.
  }];
  let arguments = (ins MoE_FloatTensor:$y, MoE_FloatTensor:$gates,
                       MoE_IndexTensor:$experts);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$y `,` $gates `,` $experts attr-dict `:` functional-type(operands, results)";
  let builders = [
    OpBuilder<(ins "::mlir::Value":$y, "::mlir::Value":$gates,
                   "::mlir::Value":$experts)>];
  let hasVerifier = 1;
}

#endif // MOE_ROUTING_OPS_TD
