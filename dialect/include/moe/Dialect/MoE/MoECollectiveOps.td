//===- MoECollectiveOps.td - collectives over the grid -----*- tablegen -*-===//

#ifndef MOE_COLLECTIVE_OPS_TD
#define MOE_COLLECTIVE_OPS_TD

include "moe/Dialect/MoE/MoEAttributes.td"
include "moe/Dialect/MoE/MoEInterfaces.td"

// Collectives have no `Pure` trait: they synchronise ranks and must not be
// removed, duplicated or reordered by generic transforms.
class MoE_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : MoE_Op<mnemonic, traits> {
  code commonDescription = [{
    The group is every set of ranks that differ only in the grid axes listed
    after `over` (of `dp`, `ep`, `tp`; see `#moe.grid`); its size is the
    product of those degrees. An optional `codec` compresses the payload on
    the wire.
  }];
  let hasVerifier = 1;
}

def MoE_AllReduceOp : MoE_CollectiveOp<"all_reduce", [
    AllTypesMatch<["input", "result"]>]> {
  let summary = "sums (or averages) a tensor over a group";
  let description = commonDescription # [{
    The reduced tensor is multiplied by `scale` (default 1): gradient
    synchronisation states its normalisation on the op (for example expert
    gradients are summed over `dp` and scaled by `1 / (dp * ep)`).

    ```mlir
    %g = moe.all_reduce mean %grad over [dp, ep] codec <int8, block_size = 256>
        : tensor<64x64xf32>
    ```

    With `async` (set by `moe-schedule`), the op only starts the reduction:
    it runs in the background while the ops after it execute, and its
    result may be read only through the `moe.wait` that completes it. The
    input must stay unchanged until that wait.

    ```mlir
    %s = moe.all_reduce async sum %grad over [dp] : tensor<64x64xf32>
    // ... more of the backward ...
    %g = moe.wait %s : tensor<64x64xf32>
    ```

    Constraints:
    - the enclosing module has a `moe.grid`; axes are distinct grid axes;
    - `codec` compresses: no `fp16` codec on f16 data, no `bf16` on bf16;
    - `powersgd` needs a tensor of rank >= 2;
    - an `async` reduction has no codec, and its one user is a `moe.wait`
      in the same block.
  }];
  let arguments = (ins MoE_Reduction:$reduction, MoE_FloatTensor:$input,
                       StrArrayAttr:$axes, OptionalAttr<MoE_CodecAttr>:$codec,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale, UnitAttr:$async);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    (`async` $async^)? $reduction $input `over` custom<GridAxes>($axes) (`codec` $codec^)?
    attr-dict `:` type($input)
  }];
}

def MoE_ReduceScatterOp : MoE_CollectiveOp<"reduce_scatter"> {
  let summary = "reduces over a group and leaves each rank one slice";
  let description = commonDescription # [{
    With `dim`, rank `i` of the group keeps slice `i` of the reduced tensor
    along `dim`. Without it (the flat form, ZeRO's gradient shards), the
    input is read as one row-major vector of `n` elements, padded with zeros
    to `P * S` where `S = ceil(n / P)`, and rank `i` keeps elements
    `[i S, (i + 1) S)`. `scale` multiplies the reduced result.

    ```mlir
    %s = moe.reduce_scatter sum %grad over [dp] dim 0
        : tensor<64x64xf32> -> tensor<32x64xf32>
    %z = moe.reduce_scatter mean %grad over [dp, ep]
        : tensor<64x30xf32> -> tensor<640xf32>
    ```

    Constraints:
    - the enclosing module has a `moe.grid`; axes are distinct grid axes;
    - with `dim`: `0 <= dim < rank`; the input's `dim` is divisible by the
      group size `P` and the result is the input with that dimension
      divided by `P`;
    - flat: the result is `tensor<S>` with `S = ceil(n / P)`;
    - `scale` is finite and > 0;
    - `codec`, when present, is `fp16`, `bf16` or `int8` and compresses;
    - `async` (started in the background by `moe-schedule`, completed by a
      `moe.wait`): flat, no codec, its result's one user a `moe.wait` in
      its block.
  }];
  let arguments = (ins MoE_Reduction:$reduction, MoE_FloatTensor:$input,
                       StrArrayAttr:$axes, OptionalAttr<I64Attr>:$dim,
                       OptionalAttr<MoE_CodecAttr>:$codec,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale, UnitAttr:$async);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    (`async` $async^)? $reduction $input `over` custom<GridAxes>($axes) (`dim` $dim^)?
    (`codec` $codec^)? attr-dict `:` type($input) `->` type($result)
  }];
}

def MoE_TpEnterOp : MoE_Op<"tp_enter", [Pure, AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "enters a tensor-parallel region: identity forward, sum backward";
  let description = [{
    Megatron's `f`: the input, identical on every rank of the group, feeds
    column-parallel products whose input gradients are partial sums; the
    gradient of this op sums them over the group. Forward it is the
    identity (`moe-insert-collectives` removes it after `moe-autodiff`).

    ```mlir
    %x1 = moe.tp_enter %x over [tp] : tensor<4x64x64xf32>
    ```

    Constraints: the enclosing module has a `moe.grid`; axes are distinct
    grid axes.
  }];
  let arguments = (ins MoE_FloatTensor:$input, StrArrayAttr:$axes);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$input `over` custom<GridAxes>($axes) attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def MoE_TpExitOp : MoE_Op<"tp_exit", [AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "leaves a tensor-parallel region: sum forward, identity backward";
  let description = [{
    Megatron's `g`: the partial outputs of a row-parallel product are summed
    over the group, after which every rank holds the same tensor and
    computes the same loss; the gradient passes through unchanged (each
    rank's partial output contributed to the one sum the loss saw).
    `moe-insert-collectives` turns it into `moe.all_reduce sum` after
    `moe-autodiff`.

    ```mlir
    %y = moe.tp_exit %partial over [tp] : tensor<4x64x64xf32>
    ```

    Constraints: the enclosing module has a `moe.grid`; axes are distinct
    grid axes.
  }];
  let arguments = (ins MoE_FloatTensor:$input, StrArrayAttr:$axes);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$input `over` custom<GridAxes>($axes) attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def MoE_ShardSliceOp : MoE_Op<"shard_slice", [Pure]> {
  let summary = "this rank's ZeRO shard of a tensor every member of a group holds";
  let description = [{
    No communication: the input, read as a row-major vector of `n`
    elements padded with zeros to `P * S` (`S = ceil(n / P)`, `P` the size
    of the group of `axes`, as in `moe.reduce_scatter`'s flat form), gives
    rank `i` of the group its elements `[i S, (i + 1) S)`. ZeRO takes a
    compressed all-reduce's result this way (the codecs reduce whole
    tensors).

    ```mlir
    %s = moe.shard_slice %g over [dp, ep] : tensor<64x30xf32> -> tensor<480xf32>
    ```

    Constraints: the enclosing module has a `moe.grid`; axes are distinct
    grid axes; the result is `tensor<S>` of the input's element type.
  }];
  let arguments = (ins MoE_FloatTensor:$input, StrArrayAttr:$axes);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `over` custom<GridAxes>($axes) attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_GatherParamOp : MoE_CollectiveOp<"gather_param", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "puts a parameter's ZeRO shards back together on every rank";
  let description = commonDescription # [{
    After a sharded `moe.adamw_update` (ZeRO), rank `i` of the group holds
    the current elements `[i S, (i + 1) S)` of the parameter read as a
    row-major vector of `n` elements (`S = ceil(n / P)`); this all-gather
    leaves every rank the whole updated parameter.

    ```mlir
    moe.gather_param @l0.wq over [dp, ep]
    ```

    Constraints: the enclosing module has a `moe.grid`; axes are distinct
    grid axes; `param` names a `moe.param`; no codec (the weights travel
    exactly).
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, StrArrayAttr:$axes);
  let assemblyFormat = "$param `over` custom<GridAxes>($axes) attr-dict";
}

def MoE_AllGatherOp : MoE_CollectiveOp<"all_gather"> {
  let summary = "concatenates every rank's tensor along a dimension";
  let description = commonDescription # [{
    ```mlir
    %w = moe.all_gather %shard over [tp] dim 1 : tensor<64x32xf32> -> tensor<64x64xf32>
    ```

    Constraints:
    - the enclosing module has a `moe.grid`; axes are distinct grid axes;
    - `0 <= dim < rank`; the result is the input with `dim` multiplied by the
      group size;
    - `codec`, when present, is `fp16`, `bf16` or `int8` and compresses.
  }];
  let arguments = (ins MoE_FloatTensor:$input, StrArrayAttr:$axes,
                       I64Attr:$dim, OptionalAttr<MoE_CodecAttr>:$codec);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `over` custom<GridAxes>($axes) `dim` $dim (`codec` $codec^)?
    attr-dict `:` type($input) `->` type($result)
  }];
}

def MoE_AllToAllOp : MoE_CollectiveOp<"all_to_all", [
    DeclareOpInterfaceMethods<MoE_GradientOpInterface>]> {
  let summary = "exchanges slices among a group (dispatch and combine)";
  let description = commonDescription # [{
    The input is cut into `P` equal chunks along `split_dim`; chunk `p` goes
    to group rank `p`; the chunks received are concatenated in source-rank
    order along `concat_dim`. The result shape is the input's with
    `split_dim` divided by `P` and `concat_dim` multiplied by `P`.

    Ragged dispatch form: on a rank-3 dispatch buffer `[E, C, D]` with
    `split 0 concat 1` (to the experts' owners, `[E/P, P*C, D]`) or `split 1
    concat 0` (back), `counts %n` (`tensor<E x i32>`) gives the valid leading
    rows of each block of `C` rows (capped at `C`): block `e` of the input for
    split 0, block `(a, q)` at index `a * P + q` for split 1. Only valid rows
    travel (with the counts first); the other rows of the result are zero,
    and `recv` gives the valid rows of the result's blocks in the same
    indexing. When the rows beyond the counts are zero (as `moe.permute`
    leaves them), the result equals the dense form's.

    Gradient: the all_to_all over the same axes with `split_dim` and
    `concat_dim` swapped; the ragged dispatch form sends back along the
    blocks it received (counts = its `recv`).

    Ragged form (token dispatch without padding on the wire): with
    `counts %send` (`tensor<P x i32>`), `split_dim` and `concat_dim` are 0,
    only the first `send[p]` rows of chunk `p` are valid and sent, and the
    op also returns `recv` (`tensor<P x i32>`): the valid rows received from
    each source, placed at the start of its chunk. Padding rows of the result
    are zero.

    ```mlir
    %y = moe.all_to_all %buf over [ep] split 0 concat 1
        : (tensor<8x10x64xf32>) -> tensor<4x20x64xf32>
    %rows, %recv = moe.all_to_all %packed over [ep] split 0 concat 0 counts %send
        codec <bf16> : (tensor<64x64xf32>, tensor<2xi32>) -> (tensor<64x64xf32>, tensor<2xi32>)
    ```

    With `async` (set by `moe-pipeline-experts` on the chunks of a ragged
    dispatch), the op only starts the exchange: it runs on the rank's
    background exchange channel, in start order, while the ops after it
    execute, and its results may be read only through the `moe.wait` that
    completes it. The input and counts must stay unchanged until that wait.

    ```mlir
    %r, %n = moe.all_to_all async %chunk over [ep] split 0 concat 1 counts %c
        : (tensor<4x80x64xf32>, tensor<4xi32>) -> (tensor<2x160x64xf32>, tensor<4xi32>)
    %rw, %nw = moe.wait %r, %n : tensor<2x160x64xf32>, tensor<4xi32>
    ```

    Constraints:
    - the enclosing module has a `moe.grid`; axes are distinct grid axes;
    - `split_dim` and `concat_dim` are dimensions of the input; the input's
      `split_dim` is divisible by `P`; the result shape follows the rule
      above with the input's element type;
    - `counts` and the `recv` result come together: both `tensor<P x i32>`
      with `split_dim == concat_dim == 0`, or both `tensor<E x i32>` on a
      rank-3 `[E, C, D]` / `[E/P, P*C, D]` buffer with `split 0 concat 1` /
      `split 1 concat 0`;
    - `codec`, when present, is `fp16`, `bf16` or `int8` and compresses;
    - an `async` exchange is the ragged dispatch form without a codec, and
      its results' only users are one `moe.wait` in the same block.
  }];
  let arguments = (ins MoE_FloatTensor:$input, Optional<MoE_IndexTensor>:$send_counts,
                       StrArrayAttr:$axes, I64Attr:$split_dim, I64Attr:$concat_dim,
                       OptionalAttr<MoE_CodecAttr>:$codec, UnitAttr:$async);
  let results = (outs MoE_FloatTensor:$result,
                      Optional<MoE_IndexTensor>:$recv_counts);
  let assemblyFormat = [{
    (`async` $async^)? $input `over` custom<GridAxes>($axes) `split` $split_dim `concat` $concat_dim
    (`counts` $send_counts^)? (`codec` $codec^)? attr-dict
    `:` functional-type(operands, results)
  }];
}

def MoE_ReplicaSumOp : MoE_CollectiveOp<"replica_sum", [
    AllTypesMatch<["input", "result"]>]> {
  let summary = "sums each row of an expert shard over the replicas of its expert";
  let description = commonDescription # [{
    `input` is one ep rank's block of a placed expert tensor (`[S, ...]`,
    row `j` at position `r * S + j` of the MoE layer `layer`'s placement,
    for the rank `r` of the group). Each row of an expert held at several
    positions (replicas, see `moe.place_slots`) becomes the sum of that
    expert's rows over all of them; the other rows are unchanged. The
    placement is the runtime's table for `layer` (it starts as the order of
    that layer's `moe.place_slots` and online rebalancing changes it), so
    replicas' gradients add up to the gradient of the one expert they
    compute, and their AdamW updates stay identical.

    ```mlir
    %g = moe.replica_sum %grad over [ep] layer 0 : tensor<3x64x32xf32>
    ```

    Constraints: the enclosing module has a `moe.grid`; axes are distinct
    grid axes; `layer >= 0`; the input has rank >= 1.
  }];
  let arguments = (ins MoE_FloatTensor:$input, StrArrayAttr:$axes, I64Attr:$layer);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = [{
    $input `over` custom<GridAxes>($axes) `layer` $layer attr-dict `:` type($input)
  }];
}

def MoE_WaitOp : MoE_Op<"wait", [
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "completes asynchronous collectives";
  let description = [{
    Waits until the `async` `moe.all_reduce`, `moe.reduce_scatter` or
    `moe.all_to_all` producing each operand has finished and returns its
    result: each result is the matching operand (same type, same buffer).
    Ops after the wait read the reduced or exchanged values through its
    results; `moe-schedule` and `moe-pipeline-experts` place it just before
    the first of them.

    ```mlir
    %a, %b = moe.wait %ra, %rb : tensor<64x64xf32>, tensor<64xf32>
    ```

    Constraints: at least one operand; each operand is a result of an
    `async` `moe.all_reduce`, `moe.reduce_scatter` or `moe.all_to_all` in
    the same block (an all_to_all's results both, in one wait); result
    types equal operand types.
  }];
  let arguments = (ins Variadic<MoE_DataTensor>:$inputs);
  let results = (outs Variadic<MoE_DataTensor>:$results);
  let extraClassDeclaration = [{
    /// The value `v` reads through waits: the async collective's result a
    /// chain of moe.wait results stands for (`v` itself when no wait made it).
    static ::mlir::Value source(::mlir::Value v);
  }];
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs)
  }];
  let hasVerifier = 1;
}

#endif // MOE_COLLECTIVE_OPS_TD
