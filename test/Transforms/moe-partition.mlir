// moe-partition: one rank's step of the module's grid. With ep = 2 the
// batch of 4 sequences splits in 2, the expert weights keep 2 of 4
// experts, and the dispatch buffer [E, C, D] = [4, 3, 4] goes to the
// experts' owners as [E/ep, ep*C, D] = [2, 6, 4] and comes back.
// RUN: moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition %S/Inputs/routed-step.mlir | FileCheck %s
// CHECK: moe.param @up : tensor<2x4x5xf32> {{.*}}{moe.shard = ["ep"], moe.shard_layer = 0 : i64}
// CHECK: moe.param @down : tensor<2x5x4xf32> {{.*}}{moe.shard = ["ep"], moe.shard_layer = 0 : i64}
// CHECK: moe.param @head : tensor<4x8xf32> init <normal, scale = 1.000000e+00>{{$}}
// CHECK: func.func @step(%arg0: tensor<2x3xi32> {moe.input = "tokens"}, %arg1: tensor<2x3xi32> {moe.input = "targets"})
// CHECK: moe.fused_gate softmax {{.*}} top_k 2 capacity 3 {{.*}} : (tensor<2x3x4xf32>, tensor<4x4xf32>)
// CHECK-NOT: groups =
// The dispatch buffer is in the placement's order, the runtime's table of
// layer 0 (expert order until online rebalancing moves experts).
// CHECK: %[[SLOTS:.*]], %[[COUNTS:.*]] = moe.place_slots %slots, %counts {block = 3 : i64, layer = 0 : i64, order = array<i64: 0, 1, 2, 3>}
// CHECK: %[[BUF:.*]] = moe.permute %{{.*}}, %[[SLOTS]] {{.*}} -> tensor<4x3x4xf32>
// One routing group per rank: the exchanges are ragged, counted by the
// gate's per-expert counts (in placement order), and the way back by what
// arrived.
// CHECK: %[[IN:.*]], %[[RECV:.*]] = moe.all_to_all %[[BUF]] over [ep] split 0 concat 1 counts %[[COUNTS]] : (tensor<4x3x4xf32>, tensor<4xi32>) -> (tensor<2x6x4xf32>, tensor<4xi32>)
// CHECK: %[[OUT:.*]] = moe.expert_ffn swiglu %[[IN]], {{.*}} -> tensor<2x6x4xf32>
// CHECK: %[[BACK:.*]], %{{.*}} = moe.all_to_all %[[OUT]] over [ep] split 1 concat 0 counts %[[RECV]] : (tensor<2x6x4xf32>, tensor<4xi32>) -> (tensor<4x3x4xf32>, tensor<4xi32>)
// CHECK: moe.unpermute %[[BACK]]
// CHECK: moe.cross_entropy {{.*}} : tensor<2x3x8xf32>, tensor<2x3xi32> -> tensor<f32>

// dp = 2 x ep = 2: 4 replicas of one sequence each; experts still split in 2.
// RUN: sed 's/dp = 1, ep = 2/dp = 2, ep = 2/' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition | FileCheck %s --check-prefix=DP
// DP: moe.param @up : tensor<2x4x5xf32>
// DP: func.func @step(%arg0: tensor<1x3xi32>
// DP: moe.fused_gate softmax {{.*}} top_k 2 capacity 2
// DP: moe.all_to_all {{.*}} over [ep] split 0 concat 1 counts {{.*}} : (tensor<4x2x4xf32>, tensor<4xi32>) -> (tensor<2x4x4xf32>, tensor<4xi32>)

// Two routing groups per rank interleave their slots in the buffer: dense.
// RUN: moe-opt --moe-fuse-gating --moe-routing-groups=groups=4 --moe-partition %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=DENSE
// DENSE: moe.fused_gate {{.*}} capacity 2 {{{.*}}groups = 2 : i64
// DENSE: moe.all_to_all {{.*}} over [ep] split 0 concat 1 : (tensor<4x4x4xf32>) -> tensor<2x8x4xf32>

// What cannot be partitioned is an error: tp must split every FFN width.
// RUN: sed 's/dp = 1, ep = 2/dp = 1, ep = 1, tp = 2/' %S/Inputs/routed-step.mlir | not moe-opt --moe-fuse-gating --moe-partition 2>&1 | FileCheck %s --check-prefix=TP
// TP: error: 'moe.expert_ffn' op 'up' dimension 2 (5) does not split over tp = 2

// Tensor parallelism (Megatron): q, k, v column-parallel (heads split, the
// grouped key/value heads too), the output projection row-parallel, the
// dense FFN's and every expert's width split; column-parallel inputs enter
// through moe.tp_enter (their gradient sums over tp), row-parallel outputs
// leave through moe.tp_exit (summed over tp).
// RUN: moe-translate --import-model %S/../Driver/Inputs/micro-tp.json | moe-opt --moe-make-grid="ranks=4 ep=2 tp=2" --moe-fuse-gating --moe-routing-groups --moe-partition | FileCheck %s --check-prefix=TPS
// TPS: moe.param @l0.wq : tensor<32x16xf32> {{.*}}{moe.tp_dim = 1 : i64}
// TPS: moe.param @l0.wk : tensor<32x8xf32> {{.*}}{moe.tp_dim = 1 : i64}
// TPS: moe.param @l0.wo : tensor<16x32xf32> {{.*}}{moe.tp_dim = 0 : i64}
// TPS: moe.param @l0.router : tensor<32x4xf32> init <normal, scale = 2.000000e-02>{{$}}
// TPS: moe.param @l0.experts.up : tensor<2x32x16xf32> {{.*}}moe.tp_dim = 2 : i64}
// TPS: moe.param @l0.experts.down : tensor<2x16x32xf32> {{.*}}moe.tp_dim = 1 : i64}
// TPS: moe.param @l0.shared.down : tensor<16x32xf32> {{.*}}{moe.tp_dim = 0 : i64}
// TPS: func.func @train_step(%arg0: tensor<2x16xi32>
// TPS: %[[N:.*]] = moe.rms_norm
// TPS-NEXT: %[[E:.*]] = moe.tp_enter %[[N]] over [tp] : tensor<2x16x32xf32>
// TPS: moe.linear %[[E]], %{{.*}} : tensor<2x16x32xf32>, tensor<32x16xf32> -> tensor<2x16x16xf32>
// TPS: %[[A:.*]] = moe.attention {{.*}} heads 2 kv_heads 1 {{.*}} : tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>
// TPS: %[[O:.*]] = moe.linear %[[A]], %{{.*}} : tensor<2x16x16xf32>, tensor<16x32xf32> -> tensor<2x16x32xf32>
// TPS-NEXT: moe.tp_exit %[[O]] over [tp] : tensor<2x16x32xf32>
// TPS: %[[X:.*]], %{{.*}} = moe.all_to_all {{.*}} over [ep]
// TPS-NEXT: %[[XE:.*]] = moe.tp_enter %[[X]] over [tp] : tensor<2x32x32xf32>
// TPS-NEXT: %[[Y:.*]] = moe.expert_ffn swiglu %[[XE]], {{.*}} : (tensor<2x32x32xf32>, tensor<2x32x16xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>) -> tensor<2x32x32xf32>
// TPS-NEXT: %[[YX:.*]] = moe.tp_exit %[[Y]] over [tp] : tensor<2x32x32xf32>
// TPS-NEXT: moe.all_to_all %[[YX]] over [ep]
// TPS: moe.ffn swiglu {{.*}} -> tensor<2x16x32xf32>
// TPS-NEXT: moe.tp_exit
// The heads must split: micro.json has one key/value head.
// RUN: moe-translate --import-model %S/../Driver/Inputs/micro.json | not moe-opt --moe-make-grid="ranks=2 tp=2" --moe-fuse-gating --moe-routing-groups --moe-partition 2>&1 | FileCheck %s --check-prefix=HEADS
// HEADS: error: 'moe.attention' op tensor parallelism splits the heads: heads (2) and kv_heads (1) must be divisible by tp = 2
// RUN: not moe-opt --moe-fuse-gating --moe-partition %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=GROUPS
// GROUPS: error: 'moe.fused_gate' op routes in 1 groups, which do not split over 2 data replicas (dp * ep) (run moe-routing-groups first)
// RUN: sed 's/dp = 1, ep = 2/dp = 1, ep = 8/' %S/Inputs/routed-step.mlir | not moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition 2>&1 | FileCheck %s --check-prefix=SPLIT
// SPLIT: error: 'moe.fused_gate' op cannot route in 8 groups: the batch (4 sequences) does not divide into whole-sequence groups

// A placement with experts out of order (pinned experts: rank 0 holds 3 and
// 0, rank 1 holds 2 and 1): the slots are moved to the placement's order
// (moe.place_slots), so each rank's experts are one block of the buffer,
// and the expert weights record which rows each rank holds.
// RUN: sed 's/moe.expert_ffn swiglu %buf, %u, %d gate %gt :/moe.expert_ffn swiglu %buf, %u, %d gate %gt {placement = #moe.placement<[[3, 0], [2, 1]]>} :/' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition | FileCheck %s --check-prefix=PINNED
// PINNED: moe.param @up : tensor<2x4x5xf32> {{.*}}{moe.shard = ["ep"], moe.shard_layer = 0 : i64, moe.shard_rows = array<i64: 3, 0, 2, 1>}
// PINNED: moe.param @down : tensor<2x5x4xf32> {{.*}}{moe.shard = ["ep"], moe.shard_layer = 0 : i64, moe.shard_rows = array<i64: 3, 0, 2, 1>}
// PINNED: %{{.*}}, %{{.*}}, %[[S:.*]], %[[C:.*]], %{{.*}} = moe.fused_gate
// PINNED-NEXT: %[[SLOTS:.*]], %[[COUNTS:.*]] = moe.place_slots %[[S]], %[[C]] {block = 3 : i64, layer = 0 : i64, order = array<i64: 3, 0, 2, 1>}
// PINNED: moe.permute %{{.*}}, %[[SLOTS]]
// PINNED: moe.all_to_all {{.*}} over [ep] split 0 concat 1 counts %[[COUNTS]]
// PINNED: moe.unpermute {{.*}}, %[[SLOTS]]
// Uneven counts: rank 0 holds 3 experts, rank 1 one; each rank has 3
// positions (the second's last two empty, -1), the buffer 6 positions, the
// weights 3 rows per rank.
// RUN: sed 's/moe.expert_ffn swiglu %buf, %u, %d gate %gt :/moe.expert_ffn swiglu %buf, %u, %d gate %gt {placement = #moe.placement<[[0, 1, 2], [3]]>} :/' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition | FileCheck %s --check-prefix=UNEVEN
// UNEVEN: moe.param @up : tensor<3x4x5xf32> {{.*}}{moe.shard = ["ep"], moe.shard_layer = 0 : i64, moe.shard_rows = array<i64: 0, 1, 2, 3, -1, -1>}
// UNEVEN: moe.place_slots {{.*}} {block = 3 : i64, layer = 0 : i64, order = array<i64: 0, 1, 2, 3, -1, -1>} : (tensor<2x3x2xi32>, tensor<4xi32>) -> (tensor<2x3x2xi32>, tensor<6xi32>)
// UNEVEN: moe.permute {{.*}} -> tensor<6x3x4xf32>
// UNEVEN: moe.all_to_all {{.*}} over [ep] split 0 concat 1 counts {{.*}} : (tensor<6x3x4xf32>, tensor<6xi32>) -> (tensor<3x6x4xf32>, tensor<6xi32>)
// UNEVEN: moe.expert_ffn swiglu {{.*}} -> tensor<3x6x4xf32>
// UNEVEN: moe.all_to_all {{.*}} over [ep] split 1 concat 0 counts {{.*}} : (tensor<3x6x4xf32>, tensor<6xi32>) -> (tensor<6x3x4xf32>, tensor<6xi32>)
// Replicas: expert 1 on both ranks; its token-slots are dealt between them.
// RUN: sed 's/moe.expert_ffn swiglu %buf, %u, %d gate %gt :/moe.expert_ffn swiglu %buf, %u, %d gate %gt {placement = #moe.placement<[[0, 1], [1, 2, 3]]>} :/' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition | FileCheck %s --check-prefix=REPLICA
// REPLICA: moe.param @up : tensor<3x4x5xf32> {{.*}}moe.shard_rows = array<i64: 0, 1, -1, 1, 2, 3>}
// REPLICA: moe.place_slots {{.*}}order = array<i64: 0, 1, -1, 1, 2, 3>}

// Unequal token shares (3 and 1 sequences on ep = 2): replica 1's step takes
// its one sequence, routes it as one group at the common capacity (5, from
// the largest share), sends the same [4, 5, 4] buffer as replica 0's, and
// weighs its losses by 1 x 2 / 4 (the mean over the replicas is then the
// batch's mean).
// RUN: sed 's/module attributes {/module attributes {moe.token_shares = array<i64: 3, 1>, /' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition=replica=1 | FileCheck %s --check-prefix=SHARE1
// SHARE1: module attributes {{{.*}}moe.replica = 1 : i64, moe.token_shares = array<i64: 3, 1>}
// SHARE1: func.func @step(%arg0: tensor<1x3xi32> {moe.input = "tokens"}
// SHARE1: moe.fused_gate softmax {{.*}} top_k 2 capacity 5 {aux_loss_coef = 5.000000e-03 : f32, capacity_factor = 1.000000e+00 : f32, renormalize = true} : (tensor<1x3x4xf32>
// SHARE1: moe.all_to_all {{.*}} : (tensor<4x5x4xf32>, tensor<4xi32>) -> (tensor<2x10x4xf32>, tensor<4xi32>)
// SHARE1: moe.cross_entropy {{.*}} {scale = 5.000000e-01 : f64} : tensor<1x3x8xf32>, tensor<1x3xi32> -> tensor<f32>
// RUN: sed 's/module attributes {/module attributes {moe.token_shares = array<i64: 3, 1>, /' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition=replica=0 | FileCheck %s --check-prefix=SHARE0
// SHARE0: func.func @step(%arg0: tensor<3x3xi32> {moe.input = "tokens"}
// SHARE0: moe.all_to_all {{.*}} : (tensor<4x5x4xf32>, tensor<4xi32>) -> (tensor<2x10x4xf32>, tensor<4xi32>)
// SHARE0: moe.cross_entropy {{.*}} {scale = 1.500000e+00 : f64}
// RUN: sed 's/module attributes {/module attributes {moe.token_shares = array<i64: 3, 1>, /' %S/Inputs/routed-step.mlir | not moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition 2>&1 | FileCheck %s --check-prefix=NOREPLICA
// NOREPLICA: error: moe-partition: with unequal moe.token_shares give the data replica to build, replica=0..1 (got -1)
