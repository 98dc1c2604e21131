//===- MoEGradOps.td - backward ops ------------------------*- tablegen -*-===//
//
// The gradients of the forward ops, emitted by moe-autodiff through each
// op's GradientOpInterface. Each takes the forward op's inputs (it
// recomputes what it needs) and the gradient of its output, and returns the
// gradients of the differentiable inputs, each with that input's type. One
// backward kernel per op.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_GRAD_OPS_TD
#define MOE_GRAD_OPS_TD

include "moe/Dialect/MoE/MoEAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class MoE_GradOp<string mnemonic, list<Trait> traits = []>
    : MoE_Op<mnemonic, !listconcat([Pure], traits)> {
  let hasVerifier = 1;
}

def MoE_EmbeddingGradOp : MoE_GradOp<"embedding_grad"> {
  let summary = "gradient of moe.embedding: scatter-add into the table";
  let description = [{
    `dtable[v, :] = sum over positions i with ids[i] == v of dy[i, :]`.
    ```mlir
    %dt = moe.embedding_grad %ids, %dy : tensor<2x16xi32>, tensor<2x16x64xf32> -> tensor<256x64xf32>
    ```
    Constraints: `dy` is `ids`' shape followed by `D`; the result is `[V, D]`.
  }];
  let arguments = (ins MoE_IndexTensor:$ids, MoE_FloatTensor:$dy);
  let results = (outs MoE_FloatTensor:$dtable);
  let assemblyFormat = "$ids `,` $dy attr-dict `:` type($ids) `,` type($dy) `->` type($dtable)";
}

def MoE_RMSNormGradOp : MoE_GradOp<"rms_norm_grad", [
    AllTypesMatch<["x", "dx", "dy"]>, AllTypesMatch<["gamma", "dgamma"]>]> {
  let summary = "gradient of moe.rms_norm";
  let description = [{
    ```mlir
    %dx, %dg = moe.rms_norm_grad %x, %g, %dy {epsilon = 1.0e-05 : f32} : tensor<2x16x64xf32>, tensor<64xf32>
    ```
    Groups as in moe.rms_norm. Constraints: `dy` and `dx` have `x`'s type;
    `dgamma` has `gamma`'s.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_FloatTensor:$gamma,
                       MoE_FloatTensor:$dy, F32Attr:$epsilon);
  let results = (outs MoE_FloatTensor:$dx, MoE_FloatTensor:$dgamma);
  let assemblyFormat = "$x `,` $gamma `,` $dy attr-dict `:` type($x) `,` type($gamma)";
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$gamma,
                                 "::mlir::Value":$dy, "::mlir::FloatAttr":$epsilon), [{
    build($_builder, $_state, x.getType(), gamma.getType(), x, gamma, dy, epsilon);
  }]>];
}

def MoE_ClampGradOp : MoE_GradOp<"clamp_grad", [AllTypesMatch<["x", "dx", "dy"]>]> {
  let summary = "gradient of moe.clamp";
  let description = [{
    `dx = dy` where `-limit <= x <= limit`, else 0 (PyTorch's clamp).

    ```mlir
    %dx = moe.clamp_grad %x, %dy {limit = 8.0 : f32} : tensor<2x16x64xf32>
    ```
    Constraints: `dy` and `dx` have `x`'s type; `limit` as moe.clamp's.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_FloatTensor:$dy, F32Attr:$limit);
  let results = (outs MoE_FloatTensor:$dx);
  let assemblyFormat = "$x `,` $dy attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def MoE_SigmoidGateGradOp : MoE_GradOp<"sigmoid_gate_grad", [
    AllTypesMatch<["x", "dx", "dy"]>, AllTypesMatch<["gate", "dgate"]>]> {
  let summary = "gradient of moe.sigmoid_gate";
  let description = [{
    `dx = dy * s`, `dgate[..., 0] = s (1 - s) sum_d dy[..., d] x[..., d]`,
    `s = sigmoid(gate[..., 0])`.

    ```mlir
    %dx, %dg = moe.sigmoid_gate_grad %x, %g, %dy : tensor<2x16x64xf32>, tensor<2x16x1xf32>
    ```
    Constraints: as moe.sigmoid_gate's; `dy` and `dx` have `x`'s type,
    `dgate` `gate`'s.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_FloatTensor:$gate, MoE_FloatTensor:$dy);
  let results = (outs MoE_FloatTensor:$dx, MoE_FloatTensor:$dgate);
  let assemblyFormat = "$x `,` $gate `,` $dy attr-dict `:` type($x) `,` type($gate)";
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$gate,
                                 "::mlir::Value":$dy), [{
    build($_builder, $_state, x.getType(), gate.getType(), x, gate, dy);
  }]>];
  let hasVerifier = 1;
}

def MoE_AttentionGradOp : MoE_GradOp<"attention_grad", [
    AllTypesMatch<["q", "dq", "dout"]>, AllTypesMatch<["k", "dk"]>,
    AllTypesMatch<["v", "dv"]>]> {
  let summary = "gradient of moe.attention (recomputes the scores)";
  let description = [{
    ```mlir
    %dq, %dk, %dv = moe.attention_grad %q, %k, %v, %do heads 8 kv_heads 2
        : tensor<2x16x64xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>
    ```
    Constraints: `dout` and `dq` have `q`'s type, `dk` `k`'s, `dv` `v`'s.
  }];
  let arguments = (ins MoE_FloatTensor:$q, MoE_FloatTensor:$k,
                       MoE_FloatTensor:$v, MoE_FloatTensor:$dout,
                       I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       OptionalAttr<F32Attr>:$rope_theta);
  let results = (outs MoE_FloatTensor:$dq, MoE_FloatTensor:$dk,
                      MoE_FloatTensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $dout `heads` $num_heads `kv_heads` $num_kv_heads
    attr-dict `:` type($q) `,` type($k) `,` type($v)
  }];
}

def MoE_LatentAttentionGradOp : MoE_GradOp<"latent_attention_grad", [
    AllTypesMatch<["q", "dq"]>, AllTypesMatch<["k", "dk"]>,
    AllTypesMatch<["k_rope", "dk_rope"]>, AllTypesMatch<["v", "dv", "dout"]>]> {
  let summary = "gradient of moe.latent_attention (recomputes the scores)";
  let description = [{
    `dk_rope` sums the shared rotary key's gradient over the heads.
    ```mlir
    %dq, %dk, %dkr, %dv = moe.latent_attention_grad %q, %k, %kr, %v, %do heads 4
        : tensor<2x16x48xf32>, tensor<2x16x32xf32>, tensor<2x16x4xf32>, tensor<2x16x24xf32>
    ```
    Constraints: `dout` and `dv` have `v`'s type, `dq` `q`'s, `dk` `k`'s,
    `dk_rope` `k_rope`'s; the shapes relate as `moe.latent_attention`'s.
  }];
  let arguments = (ins MoE_FloatTensor:$q, MoE_FloatTensor:$k,
                       MoE_FloatTensor:$k_rope, MoE_FloatTensor:$v,
                       MoE_FloatTensor:$dout, I64Attr:$num_heads,
                       OptionalAttr<F32Attr>:$rope_theta);
  let results = (outs MoE_FloatTensor:$dq, MoE_FloatTensor:$dk,
                      MoE_FloatTensor:$dk_rope, MoE_FloatTensor:$dv);
  let assemblyFormat = [{
    $q `,` $k `,` $k_rope `,` $v `,` $dout `heads` $num_heads attr-dict
    `:` type($q) `,` type($k) `,` type($k_rope) `,` type($v)
  }];
}

def MoE_LinearGradOp : MoE_GradOp<"linear_grad", [
    AllTypesMatch<["x", "dx"]>, AllTypesMatch<["weight", "dweight"]>]> {
  let summary = "gradient of moe.linear: dx = dy W^T, dW = x^T dy";
  let description = [{
    Sums `dW` over every leading dimension. The bias gradient is a
    separate `moe.bias_grad`.
    ```mlir
    %dx, %dw = moe.linear_grad %x, %w, %dy : tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<2x16x256xf32>
    ```
    Constraints: `dy` has the forward result's shape; `dx` has `x`'s type,
    `dw` `weight`'s.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_FloatTensor:$weight,
                       MoE_FloatTensor:$dy);
  let results = (outs MoE_FloatTensor:$dx, MoE_FloatTensor:$dweight);
  let assemblyFormat = "$x `,` $weight `,` $dy attr-dict `:` type($x) `,` type($weight) `,` type($dy)";
  let builders = [OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$weight,
                                 "::mlir::Value":$dy), [{
    build($_builder, $_state, x.getType(), weight.getType(), x, weight, dy);
  }]>];
}

def MoE_BiasGradOp : MoE_GradOp<"bias_grad"> {
  let summary = "sum of a gradient over all leading dimensions";
  let description = [{
    ```mlir
    %db = moe.bias_grad %dy : tensor<2x16x256xf32> -> tensor<256xf32>
    ```
    Constraints: the result is `[N]`, `dy`'s last dimension.
  }];
  let arguments = (ins MoE_FloatTensor:$dy);
  let results = (outs MoE_FloatTensor:$dbias);
  let assemblyFormat = "$dy attr-dict `:` type($dy) `->` type($dbias)";
}

def MoE_FFNGradOp : MoE_GradOp<"ffn_grad"> {
  let summary = "gradient of moe.ffn";
  let description = [{
    ```mlir
    %dx, %du, %dd, %dg = moe.ffn_grad swiglu %x, %up, %down, %dy gate %g
        : (tensor<2x16x64xf32>, tensor<64x128xf32>, tensor<128x64xf32>, tensor<2x16x64xf32>, tensor<64x128xf32>)
        -> (tensor<2x16x64xf32>, tensor<64x128xf32>, tensor<128x64xf32>, tensor<64x128xf32>)
    ```
    Constraints: results have the types of `x`, `w_up`, `w_down` (and
    `w_gate`, present exactly when the gate is).
  }];
  let arguments = (ins MoE_Activation:$activation, MoE_FloatTensor:$x,
                       MoE_FloatTensor:$w_up, MoE_FloatTensor:$w_down,
                       MoE_FloatTensor:$dy, Optional<MoE_FloatTensor>:$w_gate);
  let results = (outs MoE_FloatTensor:$dx, MoE_FloatTensor:$dw_up,
                      MoE_FloatTensor:$dw_down,
                      Optional<MoE_FloatTensor>:$dw_gate);
  let assemblyFormat = [{
    $activation $x `,` $w_up `,` $w_down `,` $dy (`gate` $w_gate^)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def MoE_ExpertFFNGradOp : MoE_GradOp<"expert_ffn_grad", [AttrSizedOperandSegments]> {
  let summary = "gradient of moe.expert_ffn";
  let description = [{
    As `moe.ffn_grad`, per expert, over `[E, C, D]` buffers. `rows`, as on
    `moe.expert_ffn`, marks the routed slots; `x` and `dy` are zero in the
    others, whose `dx` rows are then zero and which add nothing to the
    weight gradients.
  }];
  let arguments = (ins MoE_Activation:$activation, MoE_FloatTensor:$x,
                       MoE_FloatTensor:$w_up, MoE_FloatTensor:$w_down,
                       MoE_FloatTensor:$dy, Optional<MoE_FloatTensor>:$w_gate,
                       Optional<MoE_IndexTensor>:$rows);
  let results = (outs MoE_FloatTensor:$dx, MoE_FloatTensor:$dw_up,
                      MoE_FloatTensor:$dw_down,
                      Optional<MoE_FloatTensor>:$dw_gate);
  let assemblyFormat = [{
    $activation $x `,` $w_up `,` $w_down `,` $dy (`gate` $w_gate^)? (`rows` $rows^)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def MoE_RouterGradOp : MoE_GradOp<"router_grad"> {
  let summary = "gradient of moe.router through the selected gates and the losses";
  let description = [{
    Recomputes the routing; back-propagates `dgates` through the selected
    scores (renormalisation and scaling included) and `daux` through the
    load-balancing loss (the token fractions `f_e` are constants) and the
    z-loss. No gradient flows through the expert indices or to the
    selection bias. `groups` and `group_sizes` are those of the forward
    `fused_gate` (the balancing loss is the mean over groups of their
    losses, weighted by their token shares when the sizes are unequal).
    `expert_groups` and `topk_groups` are the forward's group-limited
    selection: the recomputed routing selects the same experts;
    `aux_per_sequence` the forward's balancing loss per sequence.
    ```mlir
    %dx, %dw = moe.router_grad softmax %x, %w, %dgates, %daux top_k 2 {renormalize = true}
        : (tensor<2x16x64xf32>, tensor<64x8xf32>, tensor<2x16x2xf32>, tensor<f32>)
        -> (tensor<2x16x64xf32>, tensor<64x8xf32>)
    ```
    Constraints: results have the types of `x` and `weight`; `dgates` is
    `[..., top_k]`; the expert groups as for `moe.router`.
  }];
  let arguments = (ins MoE_Scoring:$scoring, MoE_FloatTensor:$x,
                       MoE_FloatTensor:$weight, MoE_FloatTensor:$dgates,
                       MoE_LossTensor:$daux, Optional<MoE_FloatTensor>:$bias,
                       I64Attr:$top_k,
                       DefaultValuedAttr<BoolAttr, "false">:$renormalize,
                       DefaultValuedAttr<F32Attr, "0.0">:$aux_loss_coef,
                       DefaultValuedAttr<F32Attr, "0.0">:$z_loss_coef,
                       DefaultValuedAttr<F32Attr, "1.0">:$routed_scaling,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       OptionalAttr<DenseI64ArrayAttr>:$group_sizes,
                       DefaultValuedAttr<I64Attr, "1">:$expert_groups,
                       DefaultValuedAttr<I64Attr, "1">:$topk_groups,
                       DefaultValuedAttr<BoolAttr, "false">:$aux_per_sequence);
  let results = (outs MoE_FloatTensor:$dx, MoE_FloatTensor:$dweight);
  let assemblyFormat = [{
    $scoring $x `,` $weight `,` $dgates `,` $daux (`bias` $bias^)? `top_k` $top_k
    attr-dict `:` functional-type(operands, results)
  }];
}

def MoE_DispatchGradOp : MoE_GradOp<"dispatch_grad"> {
  let summary = "gradient of moe.dispatch: gather the slots back to tokens";
  let description = [{
    `dx[t] = sum over kept choices j of dbuf[experts[t, j], slot(t, j)]`.
    ```mlir
    %dx = moe.dispatch_grad %dbuf, %experts : (tensor<8x10x64xf32>, tensor<2x16x2xi32>) -> tensor<2x16x64xf32>
    ```
    Constraints: `dbuf` is `[E, C, D]`; the result is `[..., D]` with the
    experts' leading dimensions.
  }];
  let arguments = (ins MoE_FloatTensor:$dbuf, MoE_IndexTensor:$experts);
  let results = (outs MoE_FloatTensor:$dx);
  let assemblyFormat = "$dbuf `,` $experts attr-dict `:` functional-type(operands, results)";
}

def MoE_CombineGradOp : MoE_GradOp<"combine_grad"> {
  let summary = "gradient of moe.combine";
  let description = [{
    `dy[e, slot(t, j)] = gates[t, j] * dout[t]`, `dgates[t, j] = <y[e, slot(t, j)], dout[t]>`
    for kept choices (zero for dropped ones).
    ```mlir
    %dy, %dg = moe.combine_grad %y, %gates, %experts, %dout
        : (tensor<8x10x64xf32>, tensor<2x16x2xf32>, tensor<2x16x2xi32>, tensor<2x16x64xf32>)
        -> (tensor<8x10x64xf32>, tensor<2x16x2xf32>)
    ```
    Constraints: results have the types of `y` and `gates`.
  }];
  let arguments = (ins MoE_FloatTensor:$y, MoE_FloatTensor:$gates,
                       MoE_IndexTensor:$experts, MoE_FloatTensor:$dout);
  let results = (outs MoE_FloatTensor:$dy, MoE_FloatTensor:$dgates);
  let assemblyFormat = "$y `,` $gates `,` $experts `,` $dout attr-dict `:` functional-type(operands, results)";
}

def MoE_CrossEntropyGradOp : MoE_GradOp<"cross_entropy_grad", [
    AllTypesMatch<["logits", "dlogits"]>]> {
  let summary = "gradient of moe.cross_entropy: (softmax - onehot) * dloss * scale / T";
  let description = [{
    `scale` is that of the forward `moe.cross_entropy`.
    ```mlir
    %dl = moe.cross_entropy_grad %logits, %targets, %dloss : tensor<2x16x256xf32>, tensor<2x16xi32>, tensor<f32>
    ```
    Constraints: the result has the logits' type.
  }];
  let arguments = (ins MoE_FloatTensor:$logits, MoE_IndexTensor:$targets,
                       MoE_LossTensor:$dloss,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs MoE_FloatTensor:$dlogits);
  let assemblyFormat = "$logits `,` $targets `,` $dloss attr-dict `:` type($logits) `,` type($targets) `,` type($dloss)";
  let builders = [OpBuilder<(ins "::mlir::Value":$logits, "::mlir::Value":$targets,
                                 "::mlir::Value":$dloss, CArg<"double", "1.0">:$scale), [{
    build($_builder, $_state, logits.getType(), logits, targets, dloss,
          $_builder.getF64FloatAttr(scale));
  }]>];
}

#endif // MOE_GRAD_OPS_TD
