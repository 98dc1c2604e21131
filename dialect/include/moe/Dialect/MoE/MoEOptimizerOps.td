//===- MoEOptimizerOps.td - the optimiser step -------------*- tablegen -*-===//
//
// What moe-autodiff appends after the backward graph: the learning-rate
// schedule, global-norm clipping and one AdamW update per parameter. The
// update ops own the optimiser state (first and second moments, f32, the
// parameter's shape), so the state's size is known from the IR.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_OPTIMIZER_OPS_TD
#define MOE_OPTIMIZER_OPS_TD

include "moe/Dialect/MoE/MoEAttributes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"

def MoE_F32Scalar : 0DTensorOf<[F32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getF32Type())">;
def MoE_StepScalar : 0DTensorOf<[I32]>,
    BuildableType<"::mlir::RankedTensorType::get({}, $_builder.getI32Type())">;

def MoE_LRScheduleOp : MoE_Op<"lr_schedule", [Pure]> {
  let summary = "learning rate of a step: linear warmup, then decay";
  let description = [{
    With `t = step + 1` (steps count from 0):
    `t <= warmup`: `lr * t / warmup`; after it, with
    `p = min(1, (t - warmup) / max(1, total - warmup))`:
    `cosine`: `min_lr + (lr - min_lr) * (1 + cos(pi p)) / 2`,
    `linear`: `lr - (lr - min_lr) p`, `constant`: `lr`.
    ```mlir
    %lr = moe.lr_schedule %step {lr = 3.0e-4 : f64, min_lr = 3.0e-5 : f64, warmup_steps = 100 : i64, total_steps = 1000 : i64, schedule = "cosine"}
    ```
    Constraints: `0 < lr`, `0 <= min_lr <= lr`, `0 <= warmup_steps <=
    total_steps`, `total_steps >= 1`, schedule `cosine`, `linear` or
    `constant`.
  }];
  let arguments = (ins MoE_StepScalar:$step, F64Attr:$lr, F64Attr:$min_lr,
                       I64Attr:$warmup_steps, I64Attr:$total_steps,
                       StrAttr:$schedule);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "$step attr-dict";
  let hasVerifier = 1;
}

def MoE_GlobalNormOp : MoE_Op<"global_norm", [Pure]> {
  let summary = "L2 norm over every element of every gradient";
  let description = [{
    ```mlir
    %n = moe.global_norm %g0, %g1 : tensor<64x64xf32>, tensor<64xf32>
    %m = moe.global_norm %g0, %e1 {sharded = array<i1: false, true>, shard_axes = ["ep"]}
        : tensor<64x64xf32>, tensor<2x64x64xf32>
    ```
    On a partitioned step, `sharded` marks the operands that are one rank's
    shard of a larger gradient: their squares are summed over the group of
    `shard_axes` before the root; the other operands are identical on every
    rank and count once. `shard_layers`, when present, gives for each
    operand the MoE layer whose placement lays out its rows (-1: none): a
    row of an expert with `n` replicas (after `moe.replica_sum`, each holds
    the expert's gradient) counts `1/n` on each, an empty position not at
    all, so the norm is the one-rank model's.

    `shard_copies`, when present, gives for each operand how many members
    of the group hold the same values (a tensor-parallel slice is the same on
    every ep rank of its replica, a weight tp does not split the same on
    every tp rank): its squares count `1/copies` on each.

    Constraints: at least one operand; `sharded` and `shard_axes` come
    together, `sharded` has one entry per operand; `shard_layers` needs
    `sharded`, has one entry per operand, each >= -1, and >= 0 only on a
    sharded operand; `shard_copies` needs `sharded`, has one entry per
    operand, each >= 1.
  }];
  let arguments = (ins Variadic<MoE_FloatTensor>:$grads,
                       OptionalAttr<DenseBoolArrayAttr>:$sharded,
                       OptionalAttr<StrArrayAttr>:$shard_axes,
                       OptionalAttr<DenseI64ArrayAttr>:$shard_layers,
                       OptionalAttr<DenseI64ArrayAttr>:$shard_copies);
  let results = (outs MoE_F32Scalar:$result);
  let assemblyFormat = "$grads attr-dict `:` type($grads)";
  let hasVerifier = 1;
}

def MoE_SumSquaresOp : MoE_Op<"sum_squares", [Pure]> {
  let summary = "partial sums of squares of a gradient (a device's global norm)";
  let description = [{
    ```mlir
    %p = moe.sum_squares %g : tensor<8x64xf32> -> tensor<8x4xf32>
    ```
    Reads the input's N elements flat, as R rows of N / R elements, R the
    result's first dimension. Each row splits into J strided chunks, J the
    result's second dimension: `p[r, j]` is the sum of the squares of row
    r's elements j, j + J, j + 2 J, and so on. A row's sum of squares is the
    sum of its J entries.

    `moe-lower-to-kernels` with `device-norm` adds one before each gradient
    of a `moe.global_norm`: on a device target the step program then reads
    these sums back instead of the gradients (moert/Device.h). Neighbouring
    chunks read neighbouring elements, so the loads coalesce on a GPU.

    Constraints: the result is a 2-D f32 tensor; R divides N, and J
    divides N / R.
  }];
  let arguments = (ins StaticShapeTensorOf<[F32]>:$input);
  let results = (outs StaticShapeTensorOf<[F32]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def MoE_AdamWUpdateOp : MoE_Op<"adamw_update", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "one AdamW step of a parameter, with its moments";
  let description = [{
    With `t = step + 1`, the clipping factor
    `c = grad_clip > 0 ? min(1, grad_clip / (norm + 1e-6)) : 1` and `g = c * grad`:
    `m = beta1 m + (1 - beta1) g`, `v = beta2 v + (1 - beta2) g^2`,
    `w -= lr * (m / (1 - beta1^t) / (sqrt(v / (1 - beta2^t)) + eps) + weight_decay * w)`
    (decoupled weight decay; `moe-autodiff` sets `weight_decay = 0` for
    rank-1 parameters, the norm gains and biases). `m` and `v` start at zero
    and belong to this op (f32, the parameter's shape).
    ```mlir
    moe.adamw_update @w, %grad, %lr, %norm, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64}
        : tensor<64x64xf32>
    ```
    With `shard_axes` (ZeRO, `moe-shard-optimizer`), the gradient is this
    rank's flat shard (`moe.reduce_scatter` without `dim`): the update
    touches only the parameter's elements `[i S, (i + 1) S)` of the
    parameter read as a vector (`i` the rank's index in the group of
    `shard_axes`, `S = ceil(n / P)`), and the moments hold `S` elements;
    a `moe.gather_param` puts the parameter back together.

    Constraints: `param` names a `moe.param` of the gradient's type, or
    with `shard_axes` (distinct grid axes of the module's `moe.grid`) the
    gradient is `tensor<S>` of its element type;
    `0 <= beta1, beta2 < 1`; `eps > 0`; `weight_decay >= 0`;
    `grad_clip >= 0`.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, MoE_FloatTensor:$grad,
                       MoE_F32Scalar:$lr, MoE_F32Scalar:$norm,
                       MoE_StepScalar:$step, F64Attr:$beta1, F64Attr:$beta2,
                       F64Attr:$eps, F64Attr:$weight_decay, F64Attr:$grad_clip,
                       OptionalAttr<StrArrayAttr>:$shard_axes);
  let assemblyFormat = [{
    $param `,` $grad `,` $lr `,` $norm `,` $step attr-dict `:` type($grad)
  }];
  let hasVerifier = 1;
}

def MoE_BalanceBiasOp : MoE_Op<"balance_bias", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "auxiliary-loss-free load balancing: one step of a selection bias";
  let description = [{
    DeepSeek-V3's load rule for the selection bias of a router (the `bias`
    operand of `moe.router` / `moe.fused_gate`, which steers top-k selection
    and gets no gradient). With `load[e]` the token-slots `experts` routes to
    expert `e` (before capacity drops) and `mean` their average over the
    `E` experts:
    `bias[e] += rate * sign(mean - load[e])`
    (an overloaded expert's bias falls, an underloaded one's rises, a
    balanced one's stays). `moe-autodiff` appends one per biased router
    after the AdamW updates, with the router's `bias_update_rate`.

    On a partitioned step, `sum_axes` names the group whose ranks' loads are
    summed (exactly, in integers) before the rule, so every rank applies the
    same update: the one a single rank routing the whole batch applies.
    ```mlir
    moe.balance_bias @l0.router_bias, %experts {rate = 1.0e-03 : f64} : tensor<8x64x2xi32>
    moe.balance_bias @l0.router_bias, %experts {rate = 1.0e-03 : f64, sum_axes = ["dp", "ep"]} : tensor<4x64x2xi32>
    ```
    Constraints: `param` names a rank-1 f32 `moe.param` (`[E]`); `experts`
    is `[..., k]` expert indices; `rate >= 0` and finite; `sum_axes`, when
    present, is a valid group of grid axes.
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, MoE_IndexTensor:$experts, F64Attr:$rate,
                       OptionalAttr<StrArrayAttr>:$sum_axes);
  let assemblyFormat = "$param `,` $experts attr-dict `:` type($experts)";
  let hasVerifier = 1;
}

#endif // MOE_OPTIMIZER_OPS_TD
