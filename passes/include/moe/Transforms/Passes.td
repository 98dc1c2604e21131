//===- Passes.td - moe passes ------------------------------*- tablegen -*-===//

#ifndef MOE_TRANSFORMS_PASSES_TD
#define MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AutodiffPass : Pass<"moe-autodiff", "::mlir::ModuleOp"> {
  let summary = "Builds the backward graph of the training step";
  let description = [{
    For every `func.func` returning one `tensor<f32>` (the loss) and not
    marked `moe.no_grad` (an evaluation step), walks the
    step in reverse and asks each op whose results carry a gradient for its
    gradient rule (`GradientOpInterface`); gradients of a value used several
    times are summed with `moe.add`. Gradients reaching a `moe.get_param` are
    accumulated per parameter.

    With `optimizer=adamw` (the default), appends the optimiser step: a
    `step` input (`tensor<i32> {moe.input = "step"}`, counting from 0),
    `moe.lr_schedule`, `moe.global_norm` over all gradients, and one
    `moe.adamw_update` per parameter, with the settings of the module's
    `moe.optimizer` (defaults when absent); the step still returns the loss.
    With `optimizer=none` it returns the loss and the gradient of every
    parameter that receives one, in declaration order, each result marked
    `{moe.grad_of = @param}`.

    Gradients through top-k routing follow the selected gate values, not the
    expert indices; the selection bias of auxiliary-loss-free balancing has
    no gradient. An op without a gradient rule on the path from a parameter
    to the loss is an error at that op.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "Optimiser to append: adamw, or none to return the gradients">,
  ];
}

def FuseGatingPass : Pass<"moe-fuse-gating", "::mlir::ModuleOp"> {
  let summary = "Fuses routing with its slot assignment into one op";
  let description = [{
    `router(x, w) + dispatch + combine` becomes
    `fused_gate(x, w) -> (gates, experts, slots, counts, aux)`,
    `permute(x, slots)` and `unpermute(y, slots, gates)`: scoring, top-k,
    renormalisation, capacity, the losses and the token -> slot permutation
    are one op (one kernel), and the token movement uses the explicit
    permutation instead of recomputing it. The capacity comes from the
    dispatch buffers the router feeds (they must agree); a router feeding
    none gets dropless capacity (the token count). Drop policy: token order,
    then choice order; an overflowing token-slot is dropped (slot -1) and
    the residual path carries the token.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def PlanShardingPass : Pass<"moe-plan-sharding", "::mlir::ModuleOp"> {
  let summary = "Chooses data- and expert-parallel degrees and expert placement with the cost model";
  let description = [{
    Reads the module's `moe.cluster` and the training step, predicts for
    every candidate grid `dp x ep x tp` (tp a power of two up to 8 dividing
    the node size and the heads; ep at most the fewest experts of a layer),
    with the optimiser state replicated or sharded over the replicas
    (ZeRO-1), the step time (roofline compute of the busiest rank,
    dispatch/combine all-to-alls, gradient all-reduces, tensor-parallel
    all-reduces) and the memory per device (docs/CostModel.md), and picks
    the fastest plan that fits. On mixed clusters tokens are shared in proportion to each
    device's speed (equally with `equal-shares`, what the runtime executes)
    and faster devices hold more experts. Writes
    `moe.grid` (with the device kind of every rank on mixed clusters), a
    `placement` on every `moe.expert_ffn`, and `moe.plan` (the predicted
    costs); `report-table` and `report-json` write the candidates and why
    the winner won ("-" for stdout), `report-attr` attaches both to the
    module as `moe.plan_report`. `dp` / `ep` / `tp` force a degree;
    `pin=3@0,5@1` pins experts to ep ranks, `pin=3@0,3@1` replicates one
    (pinned experts first, the others fill each rank to its
    speed-proportional count; experts left when pins took more than a
    rank's share go to the ranks with the fewest for their count, so ranks
    may hold uneven counts; only grids with an ep rank for every pin are
    candidates).
  }];
  let options = [
    Option<"dpDegree", "dp", "int64_t", "0", "Force the data-parallel degree (0: choose)">,
    Option<"epDegree", "ep", "int64_t", "0", "Force the expert-parallel degree (0: choose)">,
    Option<"tpDegree", "tp", "int64_t", "0", "Force the tensor-parallel degree (0: choose)">,
    Option<"pinExperts", "pin", "std::string", "\"\"",
           "Pin experts to ep ranks: EXPERT@RANK,... (every MoE layer's expert of that "
           "index; an expert on several ranks is replicated)">,
    Option<"redundantExperts", "redundant-experts", "int64_t", "0",
           "Spare positions per MoE layer for replicas (moe-partition redundant-experts): "
           "with ep > 1 each rank holds ceil(R / ep) more expert rows (memory) and every "
           "step reduces the replicas' gradients over the ep group (time, all R replicated)">,
    Option<"equalShares", "equal-shares", "bool", "false",
           "Give every data-parallel coordinate the same token share; on mixed clusters "
           "faster devices still hold more experts">,
    Option<"tokenShares", "token-shares", "bool", "false",
           "On a mixed cluster, write the chosen plan's token shares as whole sequences of "
           "the batch (moe.token_shares, at least one per replica), which moe-partition and "
           "the runtime execute, instead of marking the grid with device kinds">,
    Option<"overlap", "overlap", "bool", "true",
           "Gradient all-reduces overlap the rest of the backward (moe-schedule): the "
           "step time counts only what the backward cannot hide">,
    Option<"reportTable", "report-table", "std::string", "\"\"",
           "Write the readable plan table here ('-': stdout)">,
    Option<"reportJson", "report-json", "std::string", "\"\"",
           "Write the JSON plan report here ('-': stdout)">,
    Option<"reportAttr", "report-attr", "bool", "false",
           "Attach both reports to the module as moe.plan_report = {json, table} "
           "(strings; for a driver, which removes it)">
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def RecomputeActivationsPass : Pass<"moe-recompute-activations", "::mlir::ModuleOp"> {
  let summary = "Recomputes each layer's activations in the backward (activation checkpointing)";
  let description = [{
    Full activation recompute, as Megatron's `--recompute-granularity full`:
    in the training step (after `moe-autodiff` and the collective passes,
    before `moe-lower-to-kernels`), the forward values of transformer layer
    `K` (the ops from the first reading a `lK.` parameter to the first
    reading a `lK+1.` one) that the backward reads are computed again just
    before the first backward op that reads one of them, by clones of the
    forward ops they need, and the backward reads the clones. What a layer
    keeps from its forward is then its input (the residual stream) and its
    routing (`moe.fused_gate`'s results: the selection is not repeated, so a
    selection bias updated during the step cannot change it); everything
    else lives for one layer at a time, at the price of one more forward
    of every layer but the last (whose backward follows its forward at
    once, so recomputing it would keep nothing less). Collectives in a
    layer's forward (dispatch and combine all-to-alls, tensor-parallel
    all-reduces) are repeated with it. The results are the same values:
    the same kernels on the same inputs.

    Runs with `enable=true` or on a module with `moe.recompute`
    (moe-plan-sharding sets it when its plan needs recompute); otherwise
    does nothing.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"enable", "enable", "bool", /*default=*/"false",
           "Recompute (else only with the module's moe.recompute)">,
  ];
}

def LowerToKernelsPass : Pass<"moe-lower-to-kernels", "::mlir::ModuleOp"> {
  let summary = "Turns compute ops into kernel specs and a planned step program";
  let description = [{
    Every compute op of a step function becomes a `moe.launch` of a
    `moe.kernel` spec (family, exact operand and result types, settings);
    identical computations share one kernel. A `moe.linear` whose only use
    is a `moe.add` becomes one launch with a `residual_add` epilogue.
    `moe.get_param`, `moe.fill` and the collectives stay as they are.

    Then it plans memory over the launch order: every transient tensor
    (inputs, launch and fill results) lives from its definition to its last
    use; gradients of parameters go to a gradient arena, everything else to
    the activation arena; each arena is packed greedily by size (largest
    first, lowest offset that overlaps no buffer alive at the same time,
    `alignment`-byte aligned, 64 by default), so memory is reused. Each launch records
    `[arena, offset, bytes]` per result; the module gets `moe.buffer_plan`
    with `activation_bytes`, `gradient_bytes` (arena peaks),
    `parameter_bytes`, `optimizer_state_bytes` (two f32 moments per
    AdamW-updated parameter), `total_bytes`, `num_kernels` and
    `num_launches`, and `alignment` (which `moe-schedule` keeps when it
    plans again).

    With `device-norm` (device targets), a `moe.sum_squares` of each
    gradient precedes the `moe.global_norm`, and the norm's launch takes
    the partial sums after the gradients: a placed expert tensor's rows
    separately, each row in chunks of at most 256 elements.

    With `save-preactivations` (the default), an FFN (dense or expert)
    whose gradient the step computes saves its pre-activations (x W_up, and
    x W_gate when gated) as extra launch results (`save_preactivations`
    epilogue), and the gradient launch reads them (`saved_preactivations`)
    instead of recomputing two GEMMs: memory for time, visible in the plan.
  }];
  let options = [
    Option<"savePreactivations", "save-preactivations", "bool", "true",
           "FFN forward launches keep their pre-activations for the backward">,
    Option<"alignment", "alignment", "int64_t", "64",
           "Byte alignment of every planned buffer (a power of two; 512 for "
           "OpenCL devices, whose sub-buffers need their base alignment)">,
    Option<"deviceNorm", "device-norm", "bool", "false",
           "Each global norm's gradients get a moe.sum_squares (device "
           "targets: the partial sums travel to the host, not the gradients)">
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def RoutingGroupsPass : Pass<"moe-routing-groups", "::mlir::ModuleOp"> {
  let summary = "Routes tokens in G groups (GShard's group dimension)";
  let description = [{
    Sets `groups = G` on every `moe.fused_gate`: capacity, drop order and the
    balancing loss become per group of `T / G` consecutive tokens (whole
    sequences). The per-group capacity is `ceil(capacity_factor * (T / G) *
    top_k / E)` (the token count of a group when the op has no
    `capacity_factor`: dropless), and the dispatch buffers `permute` ->
    `expert_ffn` -> `unpermute` become `[E, G * capacity, D]`.

    `groups=0` (the default) takes `G = dp * ep` from the module's
    `moe.grid` (1 without one): a step partitioned over `dp * ep` ranks then
    routes exactly as one rank with the same `G`, which is what makes
    "N ranks equal one rank" testable. Runs after `moe-fuse-gating`, before
    `moe-autodiff`.

    With a module attribute `moe.token_shares = array<i64: b0, b1, ...>`
    (sequences per data replica: a mixed cluster's unequal shares, or the
    one-rank oracle of such a run) the gates route in those unequal groups
    (`group_sizes`, in tokens) with a common capacity sized from the largest
    group, so every replica's dispatch buffer has the same shape.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"groups", "groups", "int64_t", /*default=*/"0",
           "Routing groups (0: dp * ep of the module's moe.grid)">,
  ];
}

def MicroBatchesPass : Pass<"moe-micro-batches", "::mlir::ModuleOp"> {
  let summary = "Splits each step into micro-batches (gradient accumulation)";
  let description = [{
    With `count = M > 1`, every step function (training and evaluation,
    fused gating, before `moe-routing-groups` and `moe-autodiff`) is
    rewritten to take one micro-batch of `B / M` sequences: the tokens,
    targets and every activation carrying the batch lose `(M-1)/M` of their
    leading dimension, and each `fused_gate` is re-sized for the micro-batch
    (capacity per group of its tokens, dispatch buffers). The module gets
    `moe.micro_batches = M`; the step program (moec's back end) then runs
    the forward and backward once per micro-batch, sums each gradient before
    its first once-per-step use (gradient collectives, the optimiser) and
    divides it by `M`, so the update is that of the mean loss over the
    whole batch, with one micro-batch's activations in memory.

    `count = 0` (the default) takes the module's `moe.micro_batches` when
    set (moe-plan-sharding sets it when the plan needs micro-batches),
    else 1 (nothing changes). The micro-batch must split over the grid's
    data replicas (`B / M` a multiple of `dp * ep`); unequal token shares
    are not supported with micro-batches.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"count", "count", "int64_t", /*default=*/"0",
           "Micro-batches per step (0: the module's moe.micro_batches, else 1)">,
  ];
}

def PartitionPass : Pass<"moe-partition", "::mlir::ModuleOp"> {
  let summary = "Turns the step into one rank's step of the module's grid";
  let description = [{
    For a module with `moe.grid<dp = D, ep = E, tp = T>`, rewrites every
    step function (training and evaluation, before `moe-autodiff`) into the
    program of one rank:

    - the batch splits over the `N = D * E` data replicas: the tokens,
      targets and every activation carrying the batch lose `(N-1)/N` of
      their leading dimension, and each `fused_gate` keeps `groups / N` of
      its routing groups (run `moe-routing-groups` first);
    - expert weights split along the expert dimension over `ep`: each
      `moe.param` feeding an `expert_ffn` becomes its rank's block of `S`
      positions, marked `moe.shard = "ep"` (and `moe.shard_layer`): equal
      contiguous blocks of `E / ep` experts, or the `expert_ffn`'s
      `placement` (any: pinned, uneven, replicated), each rank padded to the
      most any holds with empty positions, plus `redundant-experts` spare
      positions per layer (empty; online rebalancing fills them with
      replicas); `moe.shard_rows` lists the expert at each position;
    - a `moe.place_slots` after each fused gate lays the dispatch buffer out
      by positions (`[P, C, D]`, `P = ep * S`), and it goes to the
      positions' owners through `moe.all_to_all over [ep] split 0 concat 1`
      (`[S, ep*C, D]`); the expert outputs come back through the transposed
      all_to_all. When a rank routes one group, both are ragged: `counts`
      are the placed per-position counts, so only routed token-slots travel,
      not the capacity padding. `moe-autodiff` differentiates both;
    - with `T > 1` (Megatron tensor parallelism; the tp ranks of a replica
      share its tokens): `q`, `k`, `v` projections column-parallel (heads
      and key/value heads divided by `T`), the output projection
      row-parallel, every dense and expert FFN's `up`/`gate` column- and
      `down` row-parallel; weights get `moe.tp_dim`; column-parallel inputs
      pass `moe.tp_enter`, row-parallel outputs `moe.tp_exit` (over `[tp]`).

    - with unequal `moe.token_shares` (sequences per data replica), the
      step is that of data replica `replica`: its batch is its share, its
      gate routes it as one group at the common capacity, and its
      cross-entropy and router losses are weighted by `share * N / batch`,
      so that the mean over replicas (the loss all-reduce and every
      gradient average) is the batch's token mean. Each replica of another
      share runs its own step program (moec compiles one per share); the
      module gets `moe.replica`.

    Gradient synchronisation is `moe-insert-collectives`, after autodiff.
  }];
  let options = [
    Option<"replica", "replica", "int64_t", "-1",
           "With unequal moe.token_shares: the data replica whose step to build">,
    Option<"redundantExperts", "redundant-experts", "int64_t", "0",
           "Spare positions per MoE layer for replicas of hot experts (rounded up "
           "so that every ep rank has as many)">,
  ];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def InsertCollectivesPass : Pass<"moe-insert-collectives", "::mlir::ModuleOp"> {
  let summary = "Synchronises gradients, the clipping norm and the loss over the grid";
  let description = [{
    After `moe-autodiff` on a step partitioned by `moe-partition`. With
    `N = dp * ep` replicas and the global loss `L = (1/N) sum_r L_r`:

    - the gradient of a replicated parameter is `moe.all_reduce mean over
      [dp, ep]` (each rank holds `dL_r/dw`);
    - the gradient of an expert shard (`moe.shard = "ep"`) already sums its
      ep group's tokens (the backward all_to_all brought them), so it is
      `moe.all_reduce sum over [dp]` with `scale = 1/N`; a plain mean over
      `dp` would be `ep` times too large; when its MoE layer's placement
      has more positions than experts (uneven counts, replicas, spare
      positions), `moe.replica_sum over [ep]` then adds the replicas' rows
      (each computed part of the expert's tokens), after all the
      all-reduces so that they stay one bucket;
    - `moe.global_norm` counts replicated gradients once and sums the
      expert shards' squares over `[ep]` (`sharded` operands), a replica's
      rows counting `1/n` (`shard_layers`);
    - the returned loss is the mean over `[dp, ep]`, so every rank reports
      the global loss.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def CompressCollectivesPass : Pass<"moe-compress-collectives", "::mlir::ModuleOp"> {
  let summary = "Compresses the gradient all-reduces of a partitioned step";
  let description = [{
    After `moe-insert-collectives`: attaches a `#moe.codec` to every gradient
    all-reduce (those feeding `moe.adamw_update`), per parameter group:
    `grad=` for all, `dense-grad=` / `expert-grad=` for replicated parameters
    and expert shards, `embedding-grad=` for the vocabulary matrices (the
    tables of `moe.embedding` and the weight of the linear whose logits feed
    `moe.cross_entropy`): their gradients are row-sparse, not low-rank, and
    PowerSGD loses on them what it saves. Codecs: `none`, `fp16`, `bf16`, `int8[:block]`
    (default block 256), `topk[:ratio]` (default 0.01), `sign`,
    `powersgd[:rank]` (default 4). Vectors (norm gains) stay uncompressed
    under topk, sign and powersgd.
    `error-feedback` (default true) keeps the residual of topk, sign and
    powersgd. The first `warmup-steps` steps run uncompressed, as DGC and
    1-bit Adam do; the module records them in `moe.compression`.
    `dispatch=` (fp16, bf16, int8[:block]) compresses the token payloads of
    every all_to_all (dispatch and combine, forward and backward) from the
    first step.
    `auto` (for `grad`, `dense-grad`, `expert-grad` and `dispatch`) lets the
    cost model choose per collective on the module's `moe.cluster` and
    `moe.grid`: none, bf16 or int8, a lossier codec only where its predicted
    time (wire bytes on the group's links plus encode/decode kernels) beats
    the incumbent's by 10% (docs/CostModel.md). Every collective it judged
    gets `moe.codec_choice = {codec, uncompressed_s, predicted_s}`.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"grad", "grad", "std::string", /*default=*/"\"none\"",
           "Codec of every gradient all-reduce">,
    Option<"denseGrad", "dense-grad", "std::string", /*default=*/"\"\"",
           "Codec of replicated parameters' gradients (default: grad)">,
    Option<"expertGrad", "expert-grad", "std::string", /*default=*/"\"\"",
           "Codec of expert shards' gradients (default: grad)">,
    Option<"embeddingGrad", "embedding-grad", "std::string", /*default=*/"\"\"",
           "Codec of the vocabulary matrices' gradients: the token embedding "
           "table and the LM head (default: dense-grad)">,
    Option<"dispatch", "dispatch", "std::string", /*default=*/"\"none\"",
           "Codec of the dispatch and combine all_to_alls: fp16, bf16 or int8[:block]">,
    Option<"errorFeedback", "error-feedback", "bool", /*default=*/"true",
           "Keep the residual of topk, sign and powersgd">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0",
           "Uncompressed steps first">,
  ];
}

def RoutedRowsPass : Pass<"moe-routed-rows", "::mlir::ModuleOp"> {
  let summary = "Expert FFNs compute the routed rows of their dispatch buffers only";
  let description = [{
    Sets `rows` on every `moe.expert_ffn` and `moe.expert_ffn_grad` whose
    dispatch buffer says which slots hold tokens: `moe.permute` of a
    `moe.fused_gate` routing in one group (through `moe.place_slots`; one
    segment per expert, the gate's or the placement's counts), or the
    ragged `moe.all_to_all` that brings such buffers to their experts'
    owners (one segment per source rank, its `recv` counts). A gradient
    needs `dy` from the combine's gradient (`moe.unpermute_grad`, maybe
    through a ragged `moe.all_to_all`), which leaves the other slots zero.
    The kernels then skip the empty slots (the results are the same).
    Buffers routed in several groups on one rank keep every slot: their
    gate's counts are summed over the groups. Run after
    `moe-insert-collectives` (and `moe-compress-collectives`), before
    `moe-lower-to-kernels`.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def AddEvalStepPass : Pass<"moe-add-eval-step", "::mlir::ModuleOp"> {
  let summary = "Adds a forward-only evaluation copy of the training step";
  let description = [{
    Before `moe-autodiff`, on a module with one forward step function:
    appends `@eval_step`, a clone of it marked `moe.no_grad`, which later
    passes partition, synchronise and lower like the training step but never
    differentiate or update. The step program runs it for validation and
    sampling. It returns the language-model loss (the step's one
    `moe.cross_entropy`), without the routers' auxiliary losses. A module that already has a `moe.no_grad` function is left as
    it is.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

def MakeGridPass : Pass<"moe-make-grid", "::mlir::ModuleOp"> {
  let summary = "Sets the module's data x expert x tensor parallel grid for N ranks";
  let description = [{
    With `ranks=N > 1`, sets `moe.grid<dp = N / (ep tp), ep = ep, tp = tp>`
    on the module for `moe-partition`: `tp` (1 by default) must divide N;
    `ep` (0, the default: the largest divisor of N / tp that divides every
    MoE layer's experts) must divide N / tp and every layer's expert count,
    and the batch must split into whole sequences over the N / tp data
    replicas (dp x ep). An unsuitable choice is an error that says why.
    `dp`, when given, sets `ep = N / (dp tp)` (or must make `dp ep tp = N`
    with `ep`). `ranks=1` leaves the module as it is (`ep` must then be 0
    or 1, `tp` 1).
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"ranks", "ranks", "int64_t", /*default=*/"1", "Ranks of the grid (>= 1)">,
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "Tensor-parallel degree (>= 1, divides ranks; its ranks share a replica's tokens)">,
    Option<"ep", "ep", "int64_t", /*default=*/"0",
           "Expert-parallel degree (0: the largest divisor of ranks dividing the experts)">,
    Option<"dp", "dp", "int64_t", /*default=*/"0",
           "Data-parallel degree (0: ranks / (ep tp)); with dp, ep defaults to ranks / (dp tp)">,
  ];
}

def ExecutablePlanPass : Pass<"moe-executable-plan", "::mlir::ModuleOp"> {
  let summary = "Checks that the runtime executes the module's planned grid";
  let description = [{
    After `moe-plan-sharding`: a plan `moe-partition` and the runtime cannot
    execute yet (a tp that does not divide the heads or an FFN width,
    unequal shares of a mixed cluster, a
    batch that does not split into whole sequences over `dp x ep`, experts
    that do not split evenly, or a placement other than equal contiguous
    blocks) is an error saying why (`strict`, the default), or, with
    `strict=false`, a warning after which the grid and placements are
    dropped and the step stays on one rank (for reports).
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"strict", "strict", "bool", /*default=*/"true",
           "A plan the runtime cannot execute is an error (else a warning)">,
  ];
}

def BucketGradientsPass : Pass<"moe-bucket-gradients", "::mlir::ModuleOp"> {
  let summary = "Groups adjacent gradient all-reduces into buckets";
  let description = [{
    After `moe-lower-to-kernels` (or `moe-insert-collectives`): each run of
    adjacent uncompressed `moe.all_reduce`s over the same axes, reduction and
    scale gets one `moe.bucket = N`; the step program sends a bucket as one
    collective (one rendezvous and one latency instead of one per tensor),
    as DDP buckets gradients. A bucket packs every input before it writes any
    output, so a member reading an earlier member's result starts a new
    bucket, and so does `max-floats` (one collective's count stays far
    below 2^31). Runs of one all-reduce get no bucket.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"maxFloats", "max-floats", "int64_t", /*default=*/"int64_t(1) << 28",
           "Largest bucket, in floats">,
  ];
}

def SchedulePass : Pass<"moe-schedule", "::mlir::ModuleOp"> {
  let summary = "Overlaps the gradient all-reduces with the rest of the backward";
  let description = [{
    After `moe-lower-to-kernels` (and `moe-bucket-gradients`): each
    uncompressed `moe.all_reduce` of a gradient (its input computed in the
    step, its result read by later ops of the step, not returned) becomes
    `async` and its readers read it through a `moe.wait`. Reductions are
    bucketed in the order their inputs are computed, one open bucket per
    group, reduction and scale, up to `bucket-floats` floats; a bucket's
    reductions move to just after its last input's producer, so the
    collective starts as soon as its last gradient exists, and its wait goes
    just before the first op that reads one of its results (for AdamW with
    clipping, the global norm). A bucket whose start and wait would be
    adjacent stays blocking. In a lowered module the buffer plan is redone:
    inputs stay reserved until the wait. The mathematics is unchanged: the
    runtime's background reduction gives the blocking one's bits.

    ZeRO's flat `moe.reduce_scatter`s (`moe-shard-optimizer`) are bucketed
    the same way (never with all-reduces), with one bucket per group in
    flight: each is waited for before the next one starts (or its first
    reader), so the full gradients they read are freed early.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"bucketFloats", "bucket-floats", "int64_t", /*default=*/"0",
           "Largest bucket, in floats (0: an eighth of its kind's gradients, "
           "clamped to [2^14, 2^22])">,
  ];
}

def PipelineExpertsPass : Pass<"moe-pipeline-experts", "::mlir::ModuleOp"> {
  let summary = "Pipelines each expert phase's dispatch, kernels and combine in chunks of experts";
  let description = [{
    After `moe-lower-to-kernels` on a partitioned step: an expert phase (a
    ragged `moe.all_to_all` split 0 concat 1, the `expert_ffn` or
    `expert_ffn_grad` launch reading it, the ragged all_to_all split 1
    concat 0 of its first result) becomes `chunks` phases of whole local
    experts (the largest divisor of the experts per rank up to `chunks`):

    ```
    all_to_all(buf) ; kernel ; all_to_all(y)
      => for j: start(all_to_all async chunk_j(buf))
         for j: wait_j ; kernel on chunk j (experts [jE/C, (j+1)E/C)) ; start(all_to_all async y_j)
         for j: wait_j ; concat
    ```

    so that chunk j computes while later chunks are on the wire, and its
    combine travels while later chunks compute (as Tutel and FasterMoE
    pipeline them). The layer's `moe.place_slots` lays its positions out
    chunk by chunk, so each chunk of the dispatch buffer is one leading
    slice (`moe.chunk`); the kernels' tensors are `moe.chunk` views and
    `moe.concat`s, which the buffer plan (done again) makes without
    copies. Values are unchanged: the losses equal the unpipelined step's
    (bit for bit with Halide contractions; OpenBLAS products, cut into
    blocks by each call's rows, may differ in the last bits).
    A layer whose placement may change (`layer`), holds replicas, or has
    fewer than 2 experts per rank is left alone, as is every phase of
    another shape.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"chunks", "chunks", "int64_t", /*default=*/"2",
           "Chunks per expert phase (1: leave the step alone)">,
  ];
  let statistics = [
    Statistic<"pipelinedPhases", "pipelined-phases", "Expert phases pipelined">,
  ];
}

def ShardOptimizerPass : Pass<"moe-shard-optimizer", "::mlir::ModuleOp"> {
  let summary = "Shards the AdamW state over the data replicas (ZeRO stage 1 or 2)";
  let description = [{
    After `moe-insert-collectives`, on a partitioned step: each gradient's
    `moe.all_reduce` over its replica group (`[dp, ep]` for a replicated
    parameter, `[dp]` for an expert shard) becomes a flat
    `moe.reduce_scatter` over the same group, its `moe.adamw_update` gets
    `shard_axes` (it updates this rank's `ceil(n / P)` elements, and its
    moments hold only those), and a `moe.gather_param` after the last
    update all-gathers each parameter. The global norm sums every operand's
    squares over the whole grid. Stage 1 leaves the reductions where they
    were, after the backward; stage 2 moves each to just after its
    gradient's producer, so only the shards stay alive until the optimiser
    (the buffer plan's gradient arena holds shards; `moe-schedule` may
    then start them in the background). Stage 0 does nothing. A compressed
    reduction stays and `moe.shard_slice` takes the shard; expert replicas
    are refused with an error. Stage -1 takes the planner's `zero_stage`.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"1",
           "ZeRO stage: 0 (off), 1 (optimiser state), 2 (and gradients), "
           "-1 (the module's moe.plan zero_stage, else off)">,
  ];
}

#endif // MOE_TRANSFORMS_PASSES_TD
