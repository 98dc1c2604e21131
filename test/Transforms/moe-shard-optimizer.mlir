// moe-shard-optimizer (ZeRO): each gradient's all-reduce over its replica
// group becomes a flat reduce-scatter over that group; the AdamW update
// takes this rank's ceil(n / P) elements (shard_axes) and the parameters are
// all-gathered after the last update. The norm sums every shard's squares
// over the whole grid.
// RUN: sed 's/dp = 1, ep = 2/dp = 2, ep = 2/' %S/Inputs/routed-step.mlir > %t.dp2ep2.mlir
// RUN: moe-opt --moe-train-pipeline="lower=false zero=2" %t.dp2ep2.mlir | FileCheck %s --check-prefix=STAGE2
// Stage 2: each reduction right after its gradient's producer.
// STAGE2: %{{.*}}, %[[DH:.*]] = moe.linear_grad
// STAGE2-NEXT: %[[H:.*]] = moe.reduce_scatter mean %[[DH]] over [dp, ep] : tensor<4x8xf32> -> tensor<8xf32>
// Expert shards: summed over dp (scaled by 1/N), 40 floats into 20 each.
// STAGE2: moe.expert_ffn_grad
// STAGE2-NEXT: %[[G:.*]] = moe.reduce_scatter sum %{{.*}} over [dp] {scale = 2.500000e-01 : f64} : tensor<2x4x5xf32> -> tensor<20xf32>
// STAGE2: %[[E:.*]] = moe.embedding_grad
// STAGE2-NEXT: %[[EM:.*]] = moe.reduce_scatter mean %[[E]] over [dp, ep] : tensor<8x4xf32> -> tensor<8xf32>
// STAGE2: %[[N:.*]] = moe.global_norm %[[EM]], {{.*}} {shard_axes = ["dp", "ep"], sharded = array<i1: true, true, true, true, true, true>}
// STAGE2: moe.adamw_update @emb, %[[EM]], %{{.*}}, %[[N]], {{.*}}shard_axes = ["dp", "ep"]{{.*}} : tensor<8xf32>
// STAGE2: moe.adamw_update @gate, %[[G]], {{.*}}shard_axes = ["dp"]{{.*}} : tensor<20xf32>
// STAGE2: moe.adamw_update @head, %[[H]], {{.*}} : tensor<8xf32>
// The gathers of one group are adjacent (one collective in the program).
// STAGE2-NEXT: moe.gather_param @emb over [dp, ep]
// STAGE2-NEXT: moe.gather_param @router over [dp, ep]
// STAGE2-NEXT: moe.gather_param @head over [dp, ep]
// STAGE2-NEXT: moe.gather_param @up over [dp]
// STAGE2-NEXT: moe.gather_param @down over [dp]
// STAGE2-NEXT: moe.gather_param @gate over [dp]
// STAGE2-NEXT: moe.all_reduce mean %{{.*}} over [dp, ep] : tensor<f32>
// STAGE2-NOT: moe.all_reduce

// Stage 1: the reductions stay after the backward (the full gradients are
// all alive at its end).
// RUN: moe-opt --moe-train-pipeline="lower=false zero=1" %t.dp2ep2.mlir | FileCheck %s --check-prefix=STAGE1
// STAGE1: moe.embedding_grad
// STAGE1-NEXT: moe.lr_schedule
// STAGE1-NEXT: moe.reduce_scatter mean %{{.*}} over [dp, ep] : tensor<8x4xf32> -> tensor<8xf32>
// STAGE1-NEXT: moe.reduce_scatter mean %{{.*}} over [dp, ep] : tensor<4x4xf32> -> tensor<4xf32>
// STAGE1: moe.global_norm

// Lowered: the moments shrink to the shards (200 floats of state per rank
// become 80: 2 x 4 bytes each) and so does the gradient arena; stage 2 also
// lowers the activation peak.
// (Blocking collectives here, overlap=false; moe-schedule's background
// reduce-scatters below.)
// RUN: moe-opt --moe-train-pipeline="zero=0 overlap=false" %t.dp2ep2.mlir | FileCheck %s --check-prefix=PLAN0
// RUN: moe-opt --moe-train-pipeline="zero=1 overlap=false" %t.dp2ep2.mlir | FileCheck %s --check-prefix=PLAN1
// RUN: moe-opt --moe-train-pipeline="zero=2 overlap=false" %t.dp2ep2.mlir | FileCheck %s --check-prefix=PLAN2
// PLAN0: activation_bytes = 1988, gradient_bytes = 896, {{.*}}optimizer_state_bytes = 1600, {{.*}}alignment = 64>
// PLAN1: activation_bytes = 1988, gradient_bytes = 528, {{.*}}optimizer_state_bytes = 640, {{.*}}alignment = 64>
// PLAN2: activation_bytes = 1860, gradient_bytes = 528, {{.*}}optimizer_state_bytes = 640, {{.*}}alignment = 64>
// PLAN2: moe.launch @adamw_update_{{[0-9]+}}({{.*}}) {buffers = array<i64>, shard_axes = ["dp", "ep"], updates = @emb} : (tensor<8xf32>,
// PLAN2: moe.gather_param @gate over [dp]

// With moe-schedule (the default) the reduce-scatters start in the
// background as their gradients exist, one bucket per group in flight,
// each waited for before the next starts or its first reader.
// RUN: moe-opt --moe-train-pipeline="zero=2" %t.dp2ep2.mlir | FileCheck %s --check-prefix=SCHED
// SCHED: %[[S:.*]] = moe.reduce_scatter async sum %{{.*}} over [dp] {moe.bucket = 0 : i64, {{.*}} : tensor<2x4x5xf32> -> tensor<20xf32>
// SCHED: moe.wait %[[S]],
// SCHED: moe.reduce_scatter async mean %{{.*}} over [dp, ep] {moe.bucket = 1 : i64,
// SCHED: moe.wait
// SCHED: moe.launch @global_norm

// dp = 1: the expert shards have no replica to shard over; the dense
// parameters shard over ep.
// RUN: moe-opt --moe-train-pipeline="lower=false zero=1" %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=EP2
// EP2: moe.global_norm {{.*}} {shard_axes = ["ep"], sharded = array<i1: true, true, true, true, true, true>}
// EP2: moe.adamw_update @emb, {{.*}}shard_axes = ["ep"]{{.*}} : tensor<16xf32>
// EP2: moe.adamw_update @up, {{.*}}weight_decay = 1.000000e-01 : f64} : tensor<2x4x5xf32>
// EP2-NOT: moe.gather_param @up
// EP2: moe.gather_param @head over [ep]

// One rank and stage 0: nothing changes.
// RUN: sed 's/moe.grid = #moe.grid<dp = 1, ep = 2>/moe.seed = 1 : i64/' %S/Inputs/routed-step.mlir | moe-opt --moe-train-pipeline="lower=false zero=2" | FileCheck %s --check-prefix=OFF
// RUN: moe-opt --moe-train-pipeline="lower=false zero=0" %t.dp2ep2.mlir | FileCheck %s --check-prefix=OFF
// OFF-NOT: reduce_scatter
// OFF-NOT: shard_axes = ["dp
// OFF-NOT: gather_param

// A compressed reduction stays (the codec reduces whole tensors, with its
// error feedback); the shard is a slice of its result.
// RUN: moe-opt --moe-train-pipeline="lower=false zero=1 compress-grad=int8" %t.dp2ep2.mlir | FileCheck %s --check-prefix=CODEC
// CODEC: %[[R:.*]] = moe.all_reduce sum %{{.*}} over [dp] codec <int8, block_size = 256> {scale = 2.500000e-01 : f64} : tensor<2x4x5xf32>
// CODEC-NEXT: %[[S:.*]] = moe.shard_slice %[[R]] over [dp] : tensor<2x4x5xf32> -> tensor<20xf32>
// CODEC: moe.adamw_update @up, %[[S]], {{.*}}shard_axes = ["dp"]
// CODEC: moe.gather_param @up over [dp]

// Refused: a replicated gradient nobody reduced, expert replicas, a bad
// stage.
// RUN: not moe-opt --moe-shard-optimizer=stage=1 %S/Inputs/zero-unreduced.mlir 2>&1 | FileCheck %s --check-prefix=UNREDUCED
// UNREDUCED: error: 'moe.adamw_update' op ZeRO: the gradient of 'w' is neither reduced nor an expert shard
// RUN: not moe-opt --moe-train-pipeline="lower=false zero=1 redundant-experts=2" %t.dp2ep2.mlir 2>&1 | FileCheck %s --check-prefix=REPLICAS
// REPLICAS: error: 'moe.adamw_update' op ZeRO cannot shard 'up': its layer's placement has room for expert replicas
// RUN: not moe-opt --moe-shard-optimizer=stage=3 %t.dp2ep2.mlir 2>&1 | FileCheck %s --check-prefix=STAGE
// STAGE: error: moe-shard-optimizer: stage must be -1, 0, 1 or 2, got 3
