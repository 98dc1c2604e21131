//===- MoEFusedOps.td - gating fused with its permutation --*- tablegen -*-===//
//
// What moe-fuse-gating produces: one op computing scores, top-k, gates,
// losses and the token -> slot permutation (one kernel), and the permute /
// unpermute ops that move tokens with that explicit permutation.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FUSED_OPS_TD
#define MOE_FUSED_OPS_TD

include "moe/Dialect/MoE/MoEAttributes.td"
include "moe/Dialect/MoE/MoEInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def MoE_FusedGateOp : MoE_Op<"fused_gate", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "router, top-k, gates, losses and slot assignment in one op";
  let description = [{
    Computes exactly what `moe.router` computes (same attributes and
    results, the group-limited selection of `expert_groups` and
    `topk_groups` included) plus the assignment `moe.dispatch` makes for `num_experts`
    experts of `capacity` slots: `slots[t, j] = e * capacity + c` for the
    slot `c` of expert `e = experts[t, j]`, or -1 when the token-slot is
    dropped (token order first, then choice order), and `counts[e]`, the
    token-slots routed to `e` before dropping (for load metrics and ragged
    exchanges).

    With `groups = G` (GShard's group dimension; default 1) the tokens split
    into `G` equal consecutive groups of whole sequences. Each group routes
    on its own: `capacity` is the slots per expert *per group*, the slot of
    group `g` is `e * (G * capacity) + g * capacity + c` (so the dispatch
    buffer is `[E, G * capacity, D]`), drops follow token order within the
    group, and the balancing loss is the mean of the groups' losses. A step
    partitioned over `dp * ep` ranks routes exactly as one rank with
    `G = dp * ep`.

    With `group_sizes` (tokens per group, `G` entries summing to the
    tokens, each whole sequences) the groups are unequal: the data replicas
    of a mixed cluster that take unequal shares of the batch. `capacity` is
    then common to every group (sized from the largest), and the balancing
    loss is the groups' losses weighted by their token shares. With
    `aux_per_sequence` (as on `moe.router`) the balancing loss is the mean
    over the sequences instead, whatever the groups.
    ```mlir
    %g, %e, %slots, %counts, %aux = moe.fused_gate softmax %x, %w top_k 2 capacity 10
        {renormalize = true, aux_loss_coef = 1.0e-02 : f32}
        : (tensor<2x16x64xf32>, tensor<64x8xf32>)
        -> (tensor<2x16x2xf32>, tensor<2x16x2xi32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<f32>)
    ```
    Constraints: those of `moe.router` (the expert groups' included); `capacity >= 1`; `slots` has the
    shape of `experts`; `counts` is `[E]` (summed
    over groups); `groups >= 1` divides the leading (batch) dimension.
  }];
  let extraClassDeclaration = [{
    /// The load rule's rate for the selection bias (moe.balance_bias).
    double getBiasRate() {
      return getBiasUpdateRateAttr() ? getBiasUpdateRateAttr().getValueAsDouble() : 1e-3;
    }
  }];
  let arguments = (ins MoE_Scoring:$scoring, MoE_FloatTensor:$x,
                       MoE_FloatTensor:$weight, Optional<MoE_FloatTensor>:$bias,
                       I64Attr:$top_k, I64Attr:$capacity,
                       DefaultValuedAttr<BoolAttr, "false">:$renormalize,
                       OptionalAttr<F32Attr>:$capacity_factor,
                       DefaultValuedAttr<F32Attr, "0.0">:$aux_loss_coef,
                       DefaultValuedAttr<F32Attr, "0.0">:$z_loss_coef,
                       DefaultValuedAttr<F32Attr, "1.0">:$routed_scaling,
                       DefaultValuedAttr<I64Attr, "1">:$groups,
                       OptionalAttr<F64Attr>:$bias_update_rate,
                       OptionalAttr<DenseI64ArrayAttr>:$group_sizes,
                       DefaultValuedAttr<I64Attr, "1">:$expert_groups,
                       DefaultValuedAttr<I64Attr, "1">:$topk_groups,
                       DefaultValuedAttr<BoolAttr, "false">:$aux_per_sequence);
  let results = (outs MoE_FloatTensor:$gates, MoE_IndexTensor:$experts,
                      MoE_IndexTensor:$slots, MoE_IndexTensor:$counts,
                      MoE_LossTensor:$aux_loss);
  let assemblyFormat = [{
    $scoring $x `,` $weight (`bias` $bias^)? `top_k` $top_k `capacity` $capacity
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def MoE_PermuteOp : MoE_Op<"permute", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "scatters tokens to their slots: the dispatch of fused gating";
  let description = [{
    `result[s / C, s % C, :] = x[t, :]` for every `slots[t, j] = s >= 0`;
    other slots are zero.
    ```mlir
    %buf = moe.permute %x, %slots : (tensor<2x16x64xf32>, tensor<2x16x2xi32>) -> tensor<8x10x64xf32>
    ```
    Constraints: `slots` is `[..., k]` with `x`'s leading dimensions; the
    result is `[E, C, D]` with `x`'s width and element type.
  }];
  let arguments = (ins MoE_FloatTensor:$x, MoE_IndexTensor:$slots);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$x `,` $slots attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_UnpermuteOp : MoE_Op<"unpermute", [Pure,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "gathers slots back to tokens, optionally weighted";
  let description = [{
    `result[t, :] = sum over j with slots[t, j] = s >= 0 of w[t, j] * buf[s / C, s % C, :]`,
    `w` = `weights` when given, else 1 (the combine of fused gating, and the
    gradient of `moe.permute`).
    ```mlir
    %out = moe.unpermute %y, %slots weights %gates
        : (tensor<8x10x64xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>) -> tensor<2x16x64xf32>
    ```
    Constraints: `buf` is `[E, C, D]`; `weights`, when present, has the
    shape of `slots`; the result is `[..., D]` with `slots`' leading
    dimensions.
  }];
  let arguments = (ins MoE_FloatTensor:$buf, MoE_IndexTensor:$slots,
                       Optional<MoE_FloatTensor>:$weights);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $buf `,` $slots (`weights` $weights^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def MoE_UnpermuteGradOp : MoE_Op<"unpermute_grad", [Pure]> {
  let summary = "gradient of a weighted moe.unpermute";
  let description = [{
    `dbuf[s] = w[t, j] * dout[t]`, `dweights[t, j] = <buf[s], dout[t]>` for
    kept slots `s = slots[t, j]`; zero elsewhere.
    ```mlir
    %dbuf, %dw = moe.unpermute_grad %y, %slots, %gates, %dout
        : (tensor<8x10x64xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<2x16x64xf32>)
        -> (tensor<8x10x64xf32>, tensor<2x16x2xf32>)
    ```
    Constraints: results have the types of `buf` and `weights`.
  }];
  let arguments = (ins MoE_FloatTensor:$buf, MoE_IndexTensor:$slots,
                       MoE_FloatTensor:$weights, MoE_FloatTensor:$dout);
  let results = (outs MoE_FloatTensor:$dbuf, MoE_FloatTensor:$dweights);
  let assemblyFormat = "$buf `,` $slots `,` $weights `,` $dout attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def MoE_PlaceSlotsOp : MoE_Op<"place_slots", [Pure]> {
  let summary = "moves fused gating's slots from expert order to a placement's positions";
  let description = [{
    A dispatch buffer holds `block` slots per expert, expert `e`'s at rows
    `[e * block, (e + 1) * block)`. On a step partitioned over a placement,
    the buffer is laid out by positions instead, so that each ep rank's
    experts are one contiguous block for the `all_to_all`: `order[p]` is the
    expert at position `p` (rank `r` holds positions `[r P/ep, (r+1) P/ep)`
    of the `P` positions), or -1 for an empty position (a rank that holds
    fewer experts than the most loaded one). Slot `s = e * block + i`
    (`s >= 0`) of an expert with one position `q` becomes `q * block + i`
    and `result_counts[q] = counts[e]`; -1, a dropped token-slot, stays -1;
    an empty position counts 0. A permutation of `[0, E)` is the plain
    reordering. An expert may hold several positions (replicas),
    `q_0 < ... < q_{n-1}`: its valid slots, `i < min(counts[e], block)`,
    are cut into `n` consecutive runs of `m_0, ..., m_{n-1}` slots, slot `i`
    in run `k` going to `q_k * block + (i - m_0 - ... - m_{k-1})`, and
    `result_counts[q_k] = m_k`. The runtime sizes the runs each step from
    the counts and the ep ranks' speeds so that the ranks finish their
    experts as evenly as possible; which replica computes a row does not
    change any result beyond the order of the replicas' gradient sums.
    ```mlir
    %s2, %c2 = moe.place_slots %slots, %counts {order = array<i64: 0, 2, 1, 3>, block = 6 : i64}
        : (tensor<4x3x2xi32>, tensor<4xi32>) -> (tensor<4x3x2xi32>, tensor<4xi32>)
    %s3, %c3 = moe.place_slots %slots, %counts {order = array<i64: 0, 1, 3, 0, 2, -1>, block = 6 : i64}
        : (tensor<4x3x2xi32>, tensor<4xi32>) -> (tensor<4x3x2xi32>, tensor<6xi32>)
    ```
    `layer`, when present, is the MoE layer (the index of its fused gate
    among the step's) whose placement the runtime may change between steps
    (online rebalancing moves and replicates experts): the step program
    then reads the order from the runtime's table for that layer, which
    starts as `order`; absent, the order is fixed.

    With `chunks = C` and `ranks = R` (set by `moe-pipeline-experts`), the
    dispatch buffer's blocks are laid out chunk by chunk instead of rank by
    rank: position `q E' + j G + l` (rank `q`'s local position `j G + l`,
    `E' = P/R` positions per rank, `G = E'/C`) goes to block
    `j R G + q G + l`, so that chunk `j` of the buffer holds every rank's
    positions `[j G, (j+1) G)`. Slots and `result_counts` follow their
    blocks.

    Constraints: `order` has `P` entries (the size of `result_counts`), each
    in `[-1, E)` with `E` the size of `counts` (`[E]`), and names every
    expert at least once; `block >= 1`; `layer >= 0`; `result_slots` has
    the type of `slots`; `chunks` and `ranks` come together, both >= 1,
    with `P` divisible by `chunks x ranks`.
  }];
  let arguments = (ins MoE_IndexTensor:$slots, MoE_IndexTensor:$counts,
                       DenseI64ArrayAttr:$order, I64Attr:$block,
                       OptionalAttr<I64Attr>:$layer, OptionalAttr<I64Attr>:$chunks,
                       OptionalAttr<I64Attr>:$ranks);
  let results = (outs MoE_IndexTensor:$result_slots, MoE_IndexTensor:$result_counts);
  let assemblyFormat = [{
    $slots `,` $counts attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // MOE_FUSED_OPS_TD
