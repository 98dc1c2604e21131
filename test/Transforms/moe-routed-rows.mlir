// moe-routed-rows: each expert FFN learns which slots of its dispatch
// buffer hold tokens, so its kernels skip the empty ones.

// Partitioned over ep = 2: the buffer arrives by the ragged all_to_all, one
// segment per source rank; its recv counts are the rows, forward and
// backward (dy comes back the same way from the combine's gradient).
// RUN: moe-opt --moe-train-pipeline="lower=false routed-rows=false" %S/Inputs/routed-step.mlir | moe-opt --moe-routed-rows | FileCheck %s --check-prefix=EP2
// EP2: %[[BUF:.*]], %[[RECV:.*]] = moe.all_to_all %{{.*}} over [ep] split 0 concat 1 counts %{{.*}} : (tensor<4x3x4xf32>, tensor<4xi32>) -> (tensor<2x6x4xf32>, tensor<4xi32>)
// EP2: moe.expert_ffn swiglu %[[BUF]], %{{.*}}, %{{.*}} gate %{{.*}} rows %[[RECV]] : (tensor<2x6x4xf32>, tensor<2x4x5xf32>, tensor<2x5x4xf32>, tensor<2x4x5xf32>, tensor<4xi32>) -> tensor<2x6x4xf32>
// EP2: moe.expert_ffn_grad swiglu %[[BUF]], %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} rows %[[RECV]] :

// One rank: the fused gate's counts, one segment per expert. The pipeline
// runs the pass by default.
// RUN: sed 's/ attributes {moe.grid = #moe.grid<dp = 1, ep = 2>}//' %S/Inputs/routed-step.mlir | moe-opt --moe-train-pipeline=lower=false | FileCheck %s --check-prefix=ONE
// ONE: %{{.*}}, %{{.*}}, %{{.*}}, %[[COUNTS:.*]], %{{.*}} = moe.fused_gate
// ONE: %[[BUF:.*]] = moe.permute
// ONE: moe.expert_ffn swiglu %[[BUF]], {{.*}} rows %[[COUNTS]] : {{.*}}tensor<4xi32>) -> tensor<4x6x4xf32>
// ONE: moe.expert_ffn_grad swiglu %[[BUF]], {{.*}} rows %[[COUNTS]] :

// Routed in 2 groups on one rank: the gate's counts are summed over the
// groups, so every slot is computed.
// RUN: sed 's/ attributes {moe.grid = #moe.grid<dp = 1, ep = 2>}//' %S/Inputs/routed-step.mlir | moe-opt --moe-train-pipeline="lower=false routing-groups=2" | FileCheck %s --check-prefix=GROUPS
// GROUPS: moe.fused_gate {{.*}} {{.*}}groups = 2
// GROUPS-NOT: rows %

// Buffers whose empty slots are not known to be zero keep every slot.
// RUN: moe-opt --moe-routed-rows %s | FileCheck %s
// CHECK-LABEL: func.func @unknown_buffer
// CHECK: moe.expert_ffn gelu %{{.*}}, %{{.*}}, %{{.*}} :
// CHECK: moe.expert_ffn_grad gelu %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} :
func.func @unknown_buffer(%buf: tensor<4x6x8xf32>, %up: tensor<4x8x16xf32>, %down: tensor<4x16x8xf32>, %dy: tensor<4x6x8xf32>)
    -> (tensor<4x6x8xf32>, tensor<4x6x8xf32>) {
  %y = moe.expert_ffn gelu %buf, %up, %down : (tensor<4x6x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x6x8xf32>
  %dx, %du, %dd = moe.expert_ffn_grad gelu %buf, %up, %down, %dy
      : (tensor<4x6x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x6x8xf32>)
      -> (tensor<4x6x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>)
  return %y, %dx : tensor<4x6x8xf32>, tensor<4x6x8xf32>
}

// The forward gets its rows from the permutation; the gradient, whose dy
// is an argument (maybe not zero outside the routed rows), does not.
// CHECK-LABEL: func.func @unknown_dy
// CHECK: %{{.*}}, %{{.*}}, %[[S:.*]], %[[N:.*]], %{{.*}} = moe.fused_gate
// CHECK: moe.expert_ffn gelu %{{.*}}, %{{.*}}, %{{.*}} rows %[[N]] :
// CHECK: moe.expert_ffn_grad gelu %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} :
func.func @unknown_dy(%x: tensor<2x3x8xf32>, %w: tensor<8x4xf32>, %up: tensor<4x8x16xf32>, %down: tensor<4x16x8xf32>, %dy: tensor<4x3x8xf32>)
    -> (tensor<4x3x8xf32>, tensor<4x3x8xf32>) {
  %g, %e, %s, %n, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 3
      : (tensor<2x3x8xf32>, tensor<8x4xf32>)
      -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>, tensor<2x3x2xi32>, tensor<4xi32>, tensor<f32>)
  %buf = moe.permute %x, %s : (tensor<2x3x8xf32>, tensor<2x3x2xi32>) -> tensor<4x3x8xf32>
  %y = moe.expert_ffn gelu %buf, %up, %down : (tensor<4x3x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x3x8xf32>
  %dx, %du, %dd = moe.expert_ffn_grad gelu %buf, %up, %down, %dy
      : (tensor<4x3x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x3x8xf32>)
      -> (tensor<4x3x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>)
  return %y, %dx : tensor<4x3x8xf32>, tensor<4x3x8xf32>
}
