// moe-micro-batches: each step takes one micro-batch; the gates are sized
// for its tokens. The input is a 4 x 3-token batch, 4 experts, top-2,
// capacity factor 1 (capacity 6 for the whole batch).
// RUN: sed 's/ep = 2/ep = 1/' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-micro-batches=count=2 | FileCheck %s --check-prefix=M2
// M2: module attributes {{{.*}}moe.micro_batches = 2 : i64
// M2: func.func @step(%arg0: tensor<2x3xi32> {moe.input = "tokens"}, %arg1: tensor<2x3xi32> {moe.input = "targets"})
// M2: moe.embedding {{.*}} -> tensor<2x3x4xf32>
// Two sequences of three tokens: ceil(1.0 * 6 * 2 / 4) = 3 slots.
// M2: moe.fused_gate softmax {{.*}} top_k 2 capacity 3 {{.*}} -> (tensor<2x3x2xf32>
// M2: moe.permute {{.*}} -> tensor<4x3x4xf32>
// M2: moe.unpermute {{.*}} -> tensor<2x3x4xf32>
// M2: moe.cross_entropy {{.*}} : tensor<2x3x8xf32>, tensor<2x3xi32> -> tensor<f32>

// The count comes from the module (moe-plan-sharding sets it) when not
// given; 1 changes nothing but the attribute.
// RUN: sed 's/ep = 2/ep = 1/; s/module attributes {/module attributes {moe.micro_batches = 4 : i64, /' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-micro-batches | FileCheck %s --check-prefix=M4
// M4: func.func @step(%arg0: tensor<1x3xi32>
// M4: moe.fused_gate softmax {{.*}} top_k 2 capacity 2
// RUN: moe-opt --moe-fuse-gating --moe-micro-batches %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=M1
// M1: moe.micro_batches = 1 : i64
// M1: func.func @step(%arg0: tensor<4x3xi32>

// Each micro-batch splits over the grid's data replicas (ep = 2 here: 4
// sequences in 4 micro-batches leave one, which does not split in 2).
// RUN: not moe-opt --moe-fuse-gating --moe-micro-batches=count=4 %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=SPLIT
// SPLIT: error: moe-micro-batches: the batch of 4 sequences does not split into 4 micro-batches of 2 data replicas (dp x ep) each; choose a micro-batch count that divides 2
// RUN: not moe-opt --moe-micro-batches=count=2 %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=UNFUSED
// UNFUSED: error: 'moe.router' op splitting the batch needs fused gating: run moe-fuse-gating first
// RUN: sed 's/module attributes {/module attributes {moe.micro_batches = 0 : i64, /' %S/Inputs/routed-step.mlir | not moe-opt 2>&1 | FileCheck %s --check-prefix=ATTR
// ATTR: error: 'moe.micro_batches' must be a positive integer (micro-batches per step) on a builtin.module
