//===- MoEModelOps.td - dense transformer ops --------------*- tablegen -*-===//

#ifndef MOE_MODEL_OPS_TD
#define MOE_MODEL_OPS_TD

include "moe/Dialect/MoE/MoEAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "moe/Dialect/MoE/MoEInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

def MoE_EmbeddingOp : MoE_Op<"embedding", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "looks up token embeddings";
  let description = [{
    `result[i..., :] = table[ids[i...], :]`. Ids outside `[0, V)` are a
    runtime error in the executor, not undefined behaviour.

    ```mlir
    %x = moe.embedding %ids, %table
        : tensor<2x16xi32>, tensor<256x64xf32> -> tensor<2x16x64xf32>
    ```

    Constraints:
    - `table` has rank 2, `[V, D]`;
    - the result shape is the shape of `ids` followed by `D`;
    - the result element type is the table's.
  }];
  let arguments = (ins MoE_IndexTensor:$ids, MoE_FloatTensor:$table);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $ids `,` $table attr-dict `:` type($ids) `,` type($table) `->` type($result)
  }];
  let builders = [
    // Infers the result type: ids shape followed by the table width.
    OpBuilder<(ins "::mlir::Value":$ids, "::mlir::Value":$table)>];
  let hasVerifier = 1;
}

def MoE_RMSNormOp : MoE_Op<"rms_norm", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>, AllTypesMatch<["x", "result"]>]> {
  let summary = "root-mean-square normalisation over groups of the last dimension";
  let description = [{
    `result = x / sqrt(mean(x^2, group) + epsilon) * gamma`, where a group is
    `G = size(gamma)` consecutive elements of `x`'s last dimension: the whole
    dimension when `G` is its size, each attention head's slice of a
    projection when `G` is the head width (Qwen3-MoE's per-head q/k norm).

    ```mlir
    %y = moe.rms_norm %x, %g {epsilon = 1.0e-06 : f32}
        : tensor<2x16x64xf32>, tensor<64xf32>
    %qn = moe.rms_norm %q, %gq {epsilon = 1.0e-06 : f32}   // 8 heads of 8
        : tensor<2x16x64xf32>, tensor<8xf32>
    ```

    Constraints:
    - `x` has rank >= 1; `gamma` has rank 1 and a size that divides `x`'s
      last dimension;
    - `gamma` has `x`'s element type;
    - `epsilon > 0`.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_FloatTensor:$gamma,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$x `,` $gamma attr-dict `:` type($x) `,` type($gamma)";
  let hasVerifier = 1;
}

def MoE_AttentionOp : MoE_Op<"attention", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>,
    AllTypesMatch<["q", "result"]>]> {
  let summary = "causal multi-head attention with grouped key/value heads";
  let description = [{
    Causal scaled-dot-product attention over already projected queries, keys
    and values. `q` is `[B, S, H * hd]`, `k` and `v` are `[B, S, KV * hd]`;
    query head `h` attends to key/value head `h / (H / KV)` (grouped-query
    attention; `KV == H` is multi-head, `KV == 1` multi-query). Scores are
    scaled by `1 / sqrt(hd)`. When `rope_theta` is present, rotary position
    embeddings with that base are applied to queries and keys first
    (rotate-half convention, as in Llama and Mixtral). The projections are
    separate `moe.linear` ops.

    ```mlir
    %o = moe.attention %q, %k, %v heads 8 kv_heads 2 {rope_theta = 1.0e+04 : f32}
        : tensor<2x16x64xf32>, tensor<2x16x16xf32>, tensor<2x16x16xf32>
    ```

    Constraints:
    - `q`, `k`, `v` have rank 3 with equal batch and sequence dimensions and
      one element type;
    - `heads >= 1`, `kv_heads >= 1`, `heads % kv_heads == 0`;
    - `q`'s last dimension is divisible by `heads`, giving `hd`;
    - `k`'s and `v`'s last dimension is `kv_heads * hd`;
    - `rope_theta`, when present, is > 0 and `hd` is even.
  }];
  let arguments = (ins MoE_FloatTensor:$q, MoE_FloatTensor:$k,
                       MoE_FloatTensor:$v, I64Attr:$num_heads,
                       I64Attr:$num_kv_heads, OptionalAttr<F32Attr>:$rope_theta);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v `heads` $num_heads `kv_heads` $num_kv_heads attr-dict
    `:` type($q) `,` type($k) `,` type($v)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Width of one head.
    int64_t getHeadDim() {
      return getQ().getType().getShape().back() / getNumHeads();
    }
  }];
}

def MoE_LatentAttentionOp : MoE_Op<"latent_attention", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "causal attention with a per-head and a shared rotary key part";
  let description = [{
    The attention of DeepSeek-V2/V3's multi-head latent attention, after its
    low-rank projections (which are `moe.linear` and `moe.rms_norm` ops).
    `q` is `[B, S, H * (dn + dr)]`: each head's first `dn` columns are its
    content part, its last `dr` its rotary part. `k` is `[B, S, H * dn]`,
    each head's content key; `k_rope` is `[B, S, dr]`, one rotary key per
    token shared by every head; `v` is `[B, S, H * dv]`. Query head `h`
    scores key `j` as `(q_h[:dn] . k_h + rope(q_h[dn:]) . rope(k_rope)) /
    sqrt(dn + dr)`, takes the causal softmax and sums `v_h`; the result is
    `[B, S, H * dv]`. With `rope_theta`, rotary embeddings (rotate-half over
    the `dr` columns, angle `pos * theta^(-2i / dr)`) rotate the rotary
    parts of the queries and the shared key; without, they are used as they
    are.

    ```mlir
    %o = moe.latent_attention %q, %k, %kr, %v heads 4 {rope_theta = 1.0e+04 : f32}
        : tensor<2x16x48xf32>, tensor<2x16x32xf32>, tensor<2x16x4xf32>,
          tensor<2x16x24xf32> -> tensor<2x16x24xf32>
    ```

    Constraints:
    - `q`, `k`, `k_rope`, `v` and the result have rank 3, equal batch and
      sequence dimensions and one element type;
    - `heads >= 1` divides `k`'s, `v`'s and the result's widths, giving `dn
      >= 1` and `dv`; the result is `v`'s type;
    - `k_rope`'s width `dr >= 1` (even with `rope_theta`, which is > 0), and
      `q`'s width is `heads * (dn + dr)`.
  }];
  let arguments = (ins MoE_FloatTensor:$q, MoE_FloatTensor:$k,
                       MoE_FloatTensor:$k_rope, MoE_FloatTensor:$v,
                       I64Attr:$num_heads, OptionalAttr<F32Attr>:$rope_theta);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $k_rope `,` $v `heads` $num_heads attr-dict
    `:` type($q) `,` type($k) `,` type($k_rope) `,` type($v) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Widths of one head's content key (dn), of the shared rotary key (dr)
    /// and of one head's value (dv).
    int64_t getContentDim() {
      return getK().getType().getShape().back() / getNumHeads();
    }
    int64_t getRopeDim() { return getKRope().getType().getShape().back(); }
    int64_t getValueDim() {
      return getV().getType().getShape().back() / getNumHeads();
    }
  }];
}

def MoE_LinearOp : MoE_Op<"linear", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "affine map over the last dimension";
  let description = [{
    `result = x @ weight (+ bias)`, with `weight` stored `[in, out]`.

    ```mlir
    %y = moe.linear %x, %w bias %b
        : tensor<2x16x64xf32>, tensor<64x256xf32>, tensor<256xf32>
        -> tensor<2x16x256xf32>
    ```

    Constraints:
    - `weight` has rank 2, `[K, N]`, and `x`'s last dimension is `K`;
    - the result shape is `x`'s shape with the last dimension `N`;
    - `bias`, when present, is `[N]`;
    - all operands and the result share one element type.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_FloatTensor:$weight,
                       Optional<MoE_FloatTensor>:$bias);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $x `,` $weight (`bias` $bias^)? attr-dict `:` type($x) `,` type($weight)
    (`,` type($bias)^)? `->` type($result)
  }];
  let builders = [
    // Infers the result type from x and weight.
    OpBuilder<(ins "::mlir::Value":$x, "::mlir::Value":$weight,
                   CArg<"::mlir::Value", "{}">:$bias)>];
  let hasVerifier = 1;
}

def MoE_AddOp : MoE_Op<"add", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>, Commutative, SameOperandsAndResultType]> {
  let summary = "elementwise sum (residuals, loss terms)";
  let description = [{
    ```mlir
    %h = moe.add %x, %attn : tensor<2x16x64xf32>
    %loss = moe.add %ce, %aux : tensor<f32>
    ```

    Constraints: both operands and the result have one type.
  }];
  let arguments = (ins RankedTensorOf<[F32, BF16, F16]>:$lhs,
                       RankedTensorOf<[F32, BF16, F16]>:$rhs);
  let results = (outs RankedTensorOf<[F32, BF16, F16]>:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def MoE_SigmoidGateOp : MoE_Op<"sigmoid_gate", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>, AllTypesMatch<["x", "result"]>]> {
  let summary = "scales each row by the sigmoid of its gate logit";
  let description = [{
    `result[..., d] = x[..., d] * sigmoid(gate[..., 0])`: Qwen2-MoE's gate on
    its shared expert's output, whose logit is a `moe.linear` of the
    layer's input to one column.

    ```mlir
    %y = moe.sigmoid_gate %shared, %logit : tensor<2x16x64xf32>, tensor<2x16x1xf32>
    ```

    Constraints:
    - `gate` has `x`'s shape with a last dimension of 1;
    - `gate` has `x`'s element type.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_FloatTensor:$gate);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$x `,` $gate attr-dict `:` type($x) `,` type($gate)";
  let hasVerifier = 1;
}

def MoE_ClampOp : MoE_Op<"clamp", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>, AllTypesMatch<["x", "result"]>]> {
  let summary = "clips every element to [-limit, limit]";
  let description = [{
    `result = min(max(x, -limit), limit)`: OLMoE's `clip_qkv` on its
    queries, keys and values.

    ```mlir
    %c = moe.clamp %q {limit = 8.0 : f32} : tensor<2x16x64xf32>
    ```

    Constraints: `limit` is finite and > 0.
  }];
  let arguments = (ins MoE_FloatTensor:$x, F32Attr:$limit);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$x attr-dict `:` type($x)";
  let hasVerifier = 1;
}

def MoE_CastOp : MoE_Op<"cast", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "element type conversion (mixed precision's weight copies)";
  let description = [{
    Converts every element to the result's element type, rounding to
    nearest, ties to even. A model with `dtype: bf16` or `f16` keeps its
    parameters in f32 (the master weights AdamW updates) and computes with
    a low-precision copy of each, made by this op every step; its gradient
    converts the copy's gradient back to f32.

    ```mlir
    %w16 = moe.cast %w : tensor<64x128xf32> -> tensor<64x128xbf16>
    ```

    Constraints: the operand and the result have one shape and different
    element types.
  }];
  let arguments = (ins MoE_FloatTensor:$input);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def MoE_FFNOp : MoE_Op<"ffn", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>, AllTypesMatch<["x", "result"]>]> {
  let summary = "dense feed-forward block (dense layers, shared experts)";
  let description = [{
    `swiglu`: `result = (silu(x @ w_gate) * (x @ w_up)) @ w_down`;
    `gelu`:   `result = gelu(x @ w_up) @ w_down` (tanh approximation);
    `relu`:   `result = relu(x @ w_up) @ w_down` (Switch Transformers).
    Dense layers use it, and so do shared experts: `n` shared experts of
    width `F` are one `moe.ffn` of width `n * F` whose output is added to the
    routed experts' combined output.

    ```mlir
    %y = moe.ffn swiglu %x, %up, %down gate %g
        : (tensor<2x16x64xf32>, tensor<64x128xf32>, tensor<128x64xf32>,
           tensor<64x128xf32>) -> tensor<2x16x64xf32>
    ```

    Constraints:
    - `x` is `[..., D]`; `w_up` is `[D, F]`; `w_down` is `[F, D]`;
    - `swiglu` requires `gate` with `w_up`'s shape; `gelu` and `relu` take
      no `gate`;
    - all operands share one element type.
  }];
  let arguments = (ins MoE_Activation:$activation, MoE_FloatTensor:$x,
                       MoE_FloatTensor:$w_up, MoE_FloatTensor:$w_down,
                       Optional<MoE_FloatTensor>:$w_gate);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $activation $x `,` $w_up `,` $w_down (`gate` $w_gate^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def MoE_CrossEntropyOp : MoE_Op<"cross_entropy", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "mean token cross-entropy of logits against targets";
  let description = [{
    `result = scale x mean over tokens t of (logsumexp(logits[t, :]) - logits[t, targets[t]])`,
    computed in f32 whatever the logits' type. `scale` (default 1) weighs a
    data replica's mean by its share of the batch when replicas take
    unequal shares (moe-partition): their average is then the batch's mean.

    ```mlir
    %loss = moe.cross_entropy %logits, %targets
        : tensor<2x16x256xf32>, tensor<2x16xi32> -> tensor<f32>
    ```

    Constraints:
    - `logits` is `[..., V]` with rank >= 2 and `targets` is `[...]`, the
      same leading dimensions.
  }];
  let arguments = (ins MoE_FloatTensor:$logits, MoE_IndexTensor:$targets,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale);
  let results = (outs MoE_LossTensor:$result);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` type($logits) `,` type($targets)
    `->` type($result)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$logits, "::mlir::Value":$targets)>];
  let hasVerifier = 1;
}

def MoE_FillOp : MoE_Op<"fill", [Pure]> {
  let summary = "a tensor with every element equal to one value";
  let description = [{
    Seeds and zero gradients of the backward graph.
    ```mlir
    %one = moe.fill 1.0 : tensor<f32>
    ```
    Constraints: the value is finite.
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs RankedTensorOf<[F32, BF16, F16]>:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 1;
}

#endif // MOE_MODEL_OPS_TD
