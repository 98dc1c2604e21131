// The example training step verifies and round-trips.
// RUN: moe-opt %examples/mlir/tiny-moe.mlir | moe-opt | FileCheck %s

// CHECK: module attributes {moe.grid = #moe.grid<ep = 2, devices = ["local-cpu", "local-cpu"]>}
// CHECK-COUNT-16: moe.param @
// CHECK-LABEL: func.func @train_step
// CHECK: moe.embedding
// CHECK: moe.attention {{.*}} heads 4 kv_heads 2
// CHECK: moe.router softmax {{.*}} top_k 2
// CHECK: moe.dispatch {{.*}} -> tensor<4x40x64xf32>
// CHECK: moe.expert_ffn swiglu {{.*}} {placement = #moe.placement<{{\[}}[0, 1], [2, 3]]>}
// CHECK: moe.combine
// CHECK: moe.ffn swiglu
// CHECK: moe.cross_entropy
// CHECK: return {{.*}} : tensor<f32>
