// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s --mlir-print-op-generic | moe-opt | FileCheck %s
// Round-trip of the moe ops the passes make (ops.mlir has the forward model
// and the collectives): fill, the backward ops of moe-autodiff, the
// optimiser step, fused gating (moe-fuse-gating) and kernel specs with their
// launches (moe-lower-to-kernels), in their custom and generic forms.

// CHECK: module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>}
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {

// CHECK: moe.param @w : tensor<8x16xf32> init <normal, scale = 2.000000e-02>
moe.param @w : tensor<8x16xf32> init <normal, scale = 0.02>
// CHECK: moe.param @g : tensor<8xf32> init <ones>
moe.param @g : tensor<8xf32> init <ones>

// CHECK-LABEL: func.func @fill
func.func @fill() -> (tensor<f32>, tensor<2x4xbf16>) {
  // CHECK: moe.fill 1.000000e+00 : tensor<f32>
  %0 = moe.fill 1.0 : tensor<f32>
  // CHECK: moe.fill 0.000000e+00 : tensor<2x4xbf16>
  %1 = moe.fill 0.0 : tensor<2x4xbf16>
  return %0, %1 : tensor<f32>, tensor<2x4xbf16>
}

// CHECK-LABEL: func.func @embedding_grad
func.func @embedding_grad(%ids: tensor<2x4xi32>, %dy: tensor<2x4x8xf32>) -> tensor<32x8xf32> {
  // CHECK: moe.embedding_grad %{{.*}}, %{{.*}} : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<32x8xf32>
  %0 = moe.embedding_grad %ids, %dy : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<32x8xf32>
  return %0 : tensor<32x8xf32>
}

// CHECK-LABEL: func.func @clamp_grad
func.func @clamp_grad(%x: tensor<2x4x8xf32>, %dy: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // CHECK: moe.clamp_grad %{{.*}}, %{{.*}} {limit = 8.000000e+00 : f32} : tensor<2x4x8xf32>
  %dx = moe.clamp_grad %x, %dy {limit = 8.0 : f32} : tensor<2x4x8xf32>
  return %dx : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @sigmoid_gate_grad
func.func @sigmoid_gate_grad(%x: tensor<2x4x8xf32>, %g: tensor<2x4x1xf32>, %dy: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x1xf32>) {
  // CHECK: moe.sigmoid_gate_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<2x4x1xf32>
  %dx, %dg = moe.sigmoid_gate_grad %x, %g, %dy : tensor<2x4x8xf32>, tensor<2x4x1xf32>
  return %dx, %dg : tensor<2x4x8xf32>, tensor<2x4x1xf32>
}

// CHECK-LABEL: func.func @rms_norm_grad
func.func @rms_norm_grad(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>) {
  // CHECK: moe.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  %dx, %dg = moe.rms_norm_grad %x, %g, %dy {epsilon = 1.0e-05 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  return %dx, %dg : tensor<2x4x8xf32>, tensor<8xf32>
}

// CHECK-LABEL: func.func @attention_grad
func.func @attention_grad(%q: tensor<2x4x16xf16>, %k: tensor<2x4x8xf16>, %v: tensor<2x4x8xf16>, %do: tensor<2x4x16xf16>)
    -> (tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>) {
  // CHECK: moe.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} heads 4 kv_heads 2 : tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  %dq, %dk, %dv = moe.attention_grad %q, %k, %v, %do heads 4 kv_heads 2 : tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  // CHECK: moe.attention_grad %{{.*}} heads 4 kv_heads 2 {rope_theta = 1.000000e+04 : f32} : tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  %dq2, %dk2, %dv2 = moe.attention_grad %q, %k, %v, %do heads 4 kv_heads 2 {rope_theta = 1.0e4 : f32} : tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  return %dq, %dk2, %dv : tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
}

// CHECK-LABEL: func.func @linear_grad
func.func @linear_grad(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %dy: tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) {
  // CHECK: moe.linear_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<2x4x16xf32>
  %dx, %dw = moe.linear_grad %x, %w, %dy : tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<2x4x16xf32>
  // CHECK: moe.bias_grad %{{.*}} : tensor<2x4x16xf32> -> tensor<16xf32>
  %db = moe.bias_grad %dy : tensor<2x4x16xf32> -> tensor<16xf32>
  return %dx, %dw, %db : tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>
}

// CHECK-LABEL: func.func @ffn_grad
func.func @ffn_grad(%x: tensor<6x8xf32>, %up: tensor<8x32xf32>, %down: tensor<32x8xf32>, %gate: tensor<8x32xf32>, %dy: tensor<6x8xf32>)
    -> (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<8x32xf32>, tensor<6x8xf32>) {
  // CHECK: moe.ffn_grad swiglu %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<6x8xf32>, tensor<8x32xf32>) -> (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<8x32xf32>)
  %dx, %du, %dd, %dg = moe.ffn_grad swiglu %x, %up, %down, %dy gate %gate
      : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<6x8xf32>, tensor<8x32xf32>)
      -> (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<8x32xf32>)
  // CHECK: moe.ffn_grad relu %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<6x8xf32>) -> (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>)
  %dx2, %du2, %dd2 = moe.ffn_grad relu %x, %up, %down, %dy
      : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<6x8xf32>)
      -> (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>)
  return %dx, %du, %dd, %dg, %dx2 : tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<8x32xf32>, tensor<6x8xf32>
}

// CHECK-LABEL: func.func @expert_ffn_grad
func.func @expert_ffn_grad(%x: tensor<4x5x8xbf16>, %up: tensor<4x8x16xbf16>, %down: tensor<4x16x8xbf16>, %gate: tensor<4x8x16xbf16>, %dy: tensor<4x5x8xbf16>)
    -> (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>, tensor<4x5x8xbf16>) {
  // CHECK: moe.expert_ffn_grad swiglu %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} : (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x5x8xbf16>, tensor<4x8x16xbf16>) -> (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>)
  %dx, %du, %dd, %dg = moe.expert_ffn_grad swiglu %x, %up, %down, %dy gate %gate
      : (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x5x8xbf16>, tensor<4x8x16xbf16>)
      -> (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>)
  // CHECK: moe.expert_ffn_grad gelu %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x5x8xbf16>) -> (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>)
  %dx2, %du2, %dd2 = moe.expert_ffn_grad gelu %x, %up, %down, %dy
      : (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x5x8xbf16>)
      -> (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>)
  return %dx, %du, %dd, %dg, %dx2 : tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>, tensor<4x5x8xbf16>
}

// Routed rows (moe-routed-rows): 2 segments of 5 slots per expert, with and
// without a gate.
// CHECK-LABEL: func.func @expert_ffn_routed_rows
func.func @expert_ffn_routed_rows(%x: tensor<4x10x8xf32>, %up: tensor<4x8x16xf32>, %down: tensor<4x16x8xf32>, %gate: tensor<4x8x16xf32>, %dy: tensor<4x10x8xf32>, %rows: tensor<8xi32>)
    -> (tensor<4x10x8xf32>, tensor<4x10x8xf32>, tensor<4x10x8xf32>) {
  // CHECK: moe.expert_ffn swiglu %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} rows %{{.*}} : (tensor<4x10x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<8xi32>) -> tensor<4x10x8xf32>
  %y = moe.expert_ffn swiglu %x, %up, %down gate %gate rows %rows
      : (tensor<4x10x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>, tensor<8xi32>) -> tensor<4x10x8xf32>
  // CHECK: moe.expert_ffn_grad swiglu %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} rows %{{.*}} :
  %dx, %du, %dd, %dg = moe.expert_ffn_grad swiglu %x, %up, %down, %dy gate %gate rows %rows
      : (tensor<4x10x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x10x8xf32>, tensor<4x8x16xf32>, tensor<8xi32>)
      -> (tensor<4x10x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>)
  // CHECK: moe.expert_ffn_grad gelu %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} rows %{{.*}} :
  %dx2, %du2, %dd2 = moe.expert_ffn_grad gelu %x, %up, %down, %dy rows %rows
      : (tensor<4x10x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x10x8xf32>, tensor<8xi32>)
      -> (tensor<4x10x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>)
  return %y, %dx, %dx2 : tensor<4x10x8xf32>, tensor<4x10x8xf32>, tensor<4x10x8xf32>
}

// CHECK-LABEL: func.func @router_grad
func.func @router_grad(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %b: tensor<4xf32>, %dg: tensor<2x4x2xf32>, %daux: tensor<f32>)
    -> (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x8xf32>) {
  // CHECK: moe.router_grad softmax %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} top_k 2 {aux_loss_coef = 0.00999999977 : f32, renormalize = true}
  // CHECK-SAME: : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x2xf32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<8x4xf32>)
  %dx, %dw = moe.router_grad softmax %x, %w, %dg, %daux top_k 2 {renormalize = true, aux_loss_coef = 0.01 : f32}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x2xf32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<8x4xf32>)
  // CHECK: moe.router_grad sigmoid %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} top_k 2 {groups = 2 : i64, routed_scaling = 2.500000e+00 : f32, z_loss_coef = 1.000000e-03 : f32}
  // CHECK-SAME: : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x2xf32>, tensor<f32>, tensor<4xf32>) -> (tensor<2x4x8xf32>, tensor<8x4xf32>)
  %dx2, %dw2 = moe.router_grad sigmoid %x, %w, %dg, %daux bias %b top_k 2 {groups = 2 : i64, routed_scaling = 2.5 : f32, z_loss_coef = 0.001 : f32}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x2xf32>, tensor<f32>, tensor<4xf32>) -> (tensor<2x4x8xf32>, tensor<8x4xf32>)
  return %dx, %dw, %dx2 : tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @dispatch_combine_grad
func.func @dispatch_combine_grad(%y: tensor<4x5x8xf32>, %g: tensor<2x4x2xf32>, %e: tensor<2x4x2xi32>, %dout: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<4x5x8xf32>, tensor<2x4x2xf32>) {
  // CHECK: moe.dispatch_grad %{{.*}}, %{{.*}} : (tensor<4x5x8xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  %dx = moe.dispatch_grad %y, %e : (tensor<4x5x8xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  // CHECK: moe.combine_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x5x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x8xf32>) -> (tensor<4x5x8xf32>, tensor<2x4x2xf32>)
  %dy, %dg = moe.combine_grad %y, %g, %e, %dout
      : (tensor<4x5x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x8xf32>) -> (tensor<4x5x8xf32>, tensor<2x4x2xf32>)
  return %dx, %dy, %dg : tensor<2x4x8xf32>, tensor<4x5x8xf32>, tensor<2x4x2xf32>
}

// CHECK-LABEL: func.func @cross_entropy_grad
func.func @cross_entropy_grad(%logits: tensor<2x4x32xbf16>, %t: tensor<2x4xi32>, %dloss: tensor<f32>) -> tensor<2x4x32xbf16> {
  // CHECK: moe.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x4x32xbf16>, tensor<2x4xi32>, tensor<f32>
  %0 = moe.cross_entropy_grad %logits, %t, %dloss : tensor<2x4x32xbf16>, tensor<2x4xi32>, tensor<f32>
  // CHECK: moe.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f64} : tensor<2x4x32xbf16>
  %1 = moe.cross_entropy_grad %logits, %t, %dloss {scale = 0.5 : f64} : tensor<2x4x32xbf16>, tensor<2x4xi32>, tensor<f32>
  return %0 : tensor<2x4x32xbf16>
}

// CHECK-LABEL: func.func @optimizer
func.func @optimizer(%step: tensor<i32> {moe.input = "step"}, %dw: tensor<8x16xf32>, %dg: tensor<8xf32>, %de: tensor<2x8x16xf32>) {
  // CHECK: %[[LR:.*]] = moe.lr_schedule %{{.*}} {lr = 3.000000e-04 : f64, min_lr = 3.000000e-05 : f64, schedule = "cosine", total_steps = 1000 : i64, warmup_steps = 100 : i64}
  %lr = moe.lr_schedule %step {lr = 3.0e-4 : f64, min_lr = 3.0e-5 : f64, warmup_steps = 100 : i64, total_steps = 1000 : i64, schedule = "cosine"}
  // CHECK: %[[NORM:.*]] = moe.global_norm %{{.*}}, %{{.*}} : tensor<8x16xf32>, tensor<8xf32>
  %norm = moe.global_norm %dw, %dg : tensor<8x16xf32>, tensor<8xf32>
  // CHECK: moe.sum_squares %{{.*}} : tensor<8x16xf32> -> tensor<8x4xf32>
  %sq = moe.sum_squares %dw : tensor<8x16xf32> -> tensor<8x4xf32>
  // CHECK: moe.global_norm %{{.*}}, %{{.*}} {shard_axes = ["ep"], sharded = array<i1: false, true>} : tensor<8x16xf32>, tensor<2x8x16xf32>
  %snorm = moe.global_norm %dw, %de {sharded = array<i1: false, true>, shard_axes = ["ep"]} : tensor<8x16xf32>, tensor<2x8x16xf32>
  // CHECK: moe.global_norm %{{.*}}, %{{.*}} {shard_axes = ["ep"], shard_layers = array<i64: -1, 0>, sharded = array<i1: false, true>}
  %lnorm = moe.global_norm %dw, %de {sharded = array<i1: false, true>, shard_axes = ["ep"], shard_layers = array<i64: -1, 0>} : tensor<8x16xf32>, tensor<2x8x16xf32>
  // CHECK: moe.adamw_update @w, %{{.*}}, %[[LR]], %[[NORM]], %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, grad_clip = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64} : tensor<8x16xf32>
  moe.adamw_update @w, %dw, %lr, %norm, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64} : tensor<8x16xf32>
  // CHECK: moe.adamw_update @g, {{.*}}weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
  moe.adamw_update @g, %dg, %lr, %snorm, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, grad_clip = 0.0 : f64} : tensor<8xf32>
  return
}

// ZeRO (moe-shard-optimizer): a flat reduce-scatter, the update of this
// rank's shard, the parameter gathered back.
// CHECK-LABEL: func.func @zero
func.func @zero(%step: tensor<i32> {moe.input = "step"}, %dw: tensor<8x16xf32>, %lr: tensor<f32>) {
  // CHECK: %[[S:.*]] = moe.reduce_scatter mean %{{.*}} over [dp, ep] : tensor<8x16xf32> -> tensor<32xf32>
  %s = moe.reduce_scatter mean %dw over [dp, ep] : tensor<8x16xf32> -> tensor<32xf32>
  // CHECK: moe.reduce_scatter sum %{{.*}} over [dp] {scale = 2.500000e-01 : f64} : tensor<8x16xf32> -> tensor<64xf32>
  %e = moe.reduce_scatter sum %dw over [dp] {scale = 0.25 : f64} : tensor<8x16xf32> -> tensor<64xf32>
  %norm = moe.global_norm %s {sharded = array<i1: true>, shard_axes = ["dp", "ep"]} : tensor<32xf32>
  // CHECK: moe.adamw_update @w, %[[S]], {{.*}}shard_axes = ["dp", "ep"]{{.*}} : tensor<32xf32>
  moe.adamw_update @w, %s, %lr, %norm, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64, shard_axes = ["dp", "ep"]} : tensor<32xf32>
  // CHECK: %[[A:.*]] = moe.reduce_scatter async mean %{{.*}} over [dp] : tensor<8x16xf32> -> tensor<64xf32>
  // CHECK-NEXT: moe.wait %[[A]] : tensor<64xf32>
  %as = moe.reduce_scatter async mean %dw over [dp] : tensor<8x16xf32> -> tensor<64xf32>
  %aw = moe.wait %as : tensor<64xf32>
  // CHECK: moe.shard_slice %{{.*}} over [dp] : tensor<8x16xf32> -> tensor<64xf32>
  %sl = moe.shard_slice %dw over [dp] : tensor<8x16xf32> -> tensor<64xf32>
  // CHECK: moe.gather_param @w over [dp, ep]
  moe.gather_param @w over [dp, ep]
  return
}

// CHECK-LABEL: func.func @balance_bias
func.func @balance_bias(%experts: tensor<2x4x2xi32>) {
  // CHECK: moe.balance_bias @g, %{{.*}} {rate = 1.000000e-03 : f64} : tensor<2x4x2xi32>
  moe.balance_bias @g, %experts {rate = 1.0e-3 : f64} : tensor<2x4x2xi32>
  // CHECK: moe.balance_bias @g, %{{.*}} {rate = 0.000000e+00 : f64, sum_axes = ["dp", "ep"]} : tensor<2x4x2xi32>
  moe.balance_bias @g, %experts {rate = 0.0 : f64, sum_axes = ["dp", "ep"]} : tensor<2x4x2xi32>
  return
}

// CHECK-LABEL: func.func @place_slots
func.func @place_slots(%slots: tensor<2x4x2xi32>, %counts: tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>) {
  // CHECK: moe.place_slots %{{.*}}, %{{.*}} {block = 4 : i64, order = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  %s, %c = moe.place_slots %slots, %counts {order = array<i64: 0, 2, 1, 3>, block = 4 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  // CHECK: moe.place_slots %{{.*}}, %{{.*}} {block = 4 : i64, layer = 1 : i64, order = array<i64: 0, 1, 2, 3>}
  %s1, %c1 = moe.place_slots %slots, %counts {order = array<i64: 0, 1, 2, 3>, block = 4 : i64, layer = 1 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  // Uneven (rank 1 holds one expert) and replicated (expert 0 on both ranks).
  // CHECK: moe.place_slots %{{.*}}, %{{.*}} {block = 4 : i64, order = array<i64: 0, 1, 3, 0, 2, -1>} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<6xi32>)
  %s2, %c2 = moe.place_slots %slots, %counts {order = array<i64: 0, 1, 3, 0, 2, -1>, block = 4 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<6xi32>)
  // Blocks chunk by chunk (moe-pipeline-experts).
  // CHECK: moe.place_slots %{{.*}}, %{{.*}} {block = 4 : i64, chunks = 2 : i64, order = array<i64: 0, 1, 2, 3>, ranks = 2 : i64}
  %s3, %c3 = moe.place_slots %slots, %counts {order = array<i64: 0, 1, 2, 3>, block = 4 : i64, chunks = 2 : i64, ranks = 2 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  return %s, %c : tensor<2x4x2xi32>, tensor<4xi32>
}

// An expert phase in chunks (moe-pipeline-experts): views, background
// exchanges and their waits.
// CHECK-LABEL: func.func @pipelined
func.func @pipelined(%buf: tensor<4x4x8xf32>, %n: tensor<4xi32>, %w: tensor<2x8x16xf32>) -> (tensor<2x8x8xf32>, tensor<1x8x16xf32>) {
  // CHECK: %[[B:.*]] = moe.chunk %{{.*}}[1 of 2] : tensor<4x4x8xf32> -> tensor<2x4x8xf32>
  %b = moe.chunk %buf[1 of 2] : tensor<4x4x8xf32> -> tensor<2x4x8xf32>
  %c = moe.chunk %n[1 of 2] : tensor<4xi32> -> tensor<2xi32>
  // CHECK: %[[R:.*]], %[[RC:.*]] = moe.all_to_all async %[[B]] over [ep] split 0 concat 1 counts %{{.*}} {moe.bucket = 3 : i64} : (tensor<2x4x8xf32>, tensor<2xi32>) -> (tensor<1x8x8xf32>, tensor<2xi32>)
  %r, %rc = moe.all_to_all async %b over [ep] split 0 concat 1 counts %c {moe.bucket = 3 : i64} : (tensor<2x4x8xf32>, tensor<2xi32>) -> (tensor<1x8x8xf32>, tensor<2xi32>)
  // CHECK: %[[W:.*]]:2 = moe.wait %[[R]], %[[RC]] : tensor<1x8x8xf32>, tensor<2xi32>
  %w0, %w1 = moe.wait %r, %rc : tensor<1x8x8xf32>, tensor<2xi32>
  // CHECK: moe.concat %[[W]]#0, %[[W]]#0 : tensor<1x8x8xf32>, tensor<1x8x8xf32> -> tensor<2x8x8xf32>
  %all = moe.concat %w0, %w0 : tensor<1x8x8xf32>, tensor<1x8x8xf32> -> tensor<2x8x8xf32>
  %wc = moe.chunk %w[0 of 2] : tensor<2x8x16xf32> -> tensor<1x8x16xf32>
  return %all, %wc : tensor<2x8x8xf32>, tensor<1x8x16xf32>
}

// CHECK-LABEL: func.func @fused_gating
func.func @fused_gating(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %b: tensor<4xf32>, %dout: tensor<2x4x8xf32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x4x8xf32>, tensor<2x4x2xf32>, tensor<f32>, tensor<4xi32>) {
  // CHECK: moe.fused_gate softmax %{{.*}}, %{{.*}} top_k 2 capacity 4 {aux_loss_coef = 0.00999999977 : f32, capacity_factor = 1.000000e+00 : f32, renormalize = true}
  // CHECK-SAME: : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  %g, %e, %s, %c, %aux = moe.fused_gate softmax %x, %w top_k 2 capacity 4 {renormalize = true, capacity_factor = 1.0 : f32, aux_loss_coef = 0.01 : f32}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  // Unequal groups (a mixed cluster's token shares), in tokens.
  // CHECK: moe.fused_gate softmax %{{.*}}, %{{.*}} top_k 2 capacity 4 {group_sizes = array<i64: 4, 4>, groups = 2 : i64}
  %g2, %e2, %s2, %c2, %aux2 = moe.fused_gate softmax %x, %w top_k 2 capacity 4 {groups = 2 : i64, group_sizes = array<i64: 4, 4>}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  // CHECK: moe.fused_gate sigmoid %{{.*}}, %{{.*}} bias %{{.*}} top_k 1 capacity 2 {bias_update_rate = 5.000000e-04 : f64, groups = 2 : i64}
  // CHECK-SAME: : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> (tensor<2x4x1xf32>, tensor<2x4x1xi32>, tensor<2x4x1xi32>, tensor<4xi32>, tensor<f32>)
  %g1, %e1, %s1, %c1, %aux1 = moe.fused_gate sigmoid %x, %w bias %b top_k 1 capacity 2 {groups = 2 : i64, bias_update_rate = 5.0e-4 : f64}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> (tensor<2x4x1xf32>, tensor<2x4x1xi32>, tensor<2x4x1xi32>, tensor<4xi32>, tensor<f32>)
  // CHECK: moe.permute %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x4x8xf32>
  %buf = moe.permute %x, %s : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x4x8xf32>
  // CHECK: moe.unpermute %{{.*}}, %{{.*}} weights %{{.*}} : (tensor<4x4x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>) -> tensor<2x4x8xf32>
  %out = moe.unpermute %buf, %s weights %g : (tensor<4x4x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>) -> tensor<2x4x8xf32>
  // CHECK: moe.unpermute %{{.*}}, %{{.*}} : (tensor<4x4x8xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  %dx = moe.unpermute %buf, %s : (tensor<4x4x8xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  // CHECK: moe.unpermute_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x4x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>, tensor<2x4x8xf32>) -> (tensor<4x4x8xf32>, tensor<2x4x2xf32>)
  %dbuf, %dw = moe.unpermute_grad %buf, %s, %g, %dout
      : (tensor<4x4x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>, tensor<2x4x8xf32>) -> (tensor<4x4x8xf32>, tensor<2x4x2xf32>)
  return %out, %dx, %dbuf, %dw, %aux, %c : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<4x4x8xf32>, tensor<2x4x2xf32>, tensor<f32>, tensor<4xi32>
}

// CHECK: moe.kernel @linear_0 family "linear" : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32> {config = {}, epilogue = []}
moe.kernel @linear_0 family "linear" : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32> {config = {}, epilogue = []}
// CHECK: moe.kernel @linear_1 family "linear" : (tensor<2x8xf32>, tensor<8x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32> {config = {}, epilogue = ["residual_add"]}
moe.kernel @linear_1 family "linear" : (tensor<2x8xf32>, tensor<8x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32> {config = {}, epilogue = ["residual_add"]}
// CHECK: moe.kernel @rms_norm_grad_0 family "rms_norm_grad" : (tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<8xf32>) {config = {epsilon = 9.99999974E-6 : f32}, epilogue = []}
moe.kernel @rms_norm_grad_0 family "rms_norm_grad" : (tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<8xf32>) {config = {epsilon = 1.0e-05 : f32}, epilogue = []}
// CHECK: moe.kernel @adamw_update_0 family "adamw_update" : (tensor<8x16xf32>, tensor<f32>, tensor<f32>, tensor<i32>) -> () {config = {beta1 = 9.000000e-01 : f64}, epilogue = []}
moe.kernel @adamw_update_0 family "adamw_update" : (tensor<8x16xf32>, tensor<f32>, tensor<f32>, tensor<i32>) -> () {config = {beta1 = 0.9 : f64}, epilogue = []}

// CHECK-LABEL: func.func @launches
func.func @launches(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xf32>, %lr: tensor<f32>, %norm: tensor<f32>, %step: tensor<i32>) -> tensor<2x16xf32> {
  // CHECK: %[[W:.*]] = moe.get_param @w : tensor<8x16xf32>
  %w = moe.get_param @w : tensor<8x16xf32>
  // CHECK: %[[Y:.*]] = moe.launch @linear_0(%{{.*}}, %[[W]]) {buffers = array<i64: 0, 0, 128>} : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
  %y = moe.launch @linear_0(%x, %w) {buffers = array<i64: 0, 0, 128>} : (tensor<2x8xf32>, tensor<8x16xf32>) -> tensor<2x16xf32>
  // CHECK: moe.launch @linear_1(%{{.*}}, %[[W]], %[[Y]]) {buffers = array<i64: 0, 128, 128>}
  %z = moe.launch @linear_1(%x, %w, %y) {buffers = array<i64: 0, 128, 128>} : (tensor<2x8xf32>, tensor<8x16xf32>, tensor<2x16xf32>) -> tensor<2x16xf32>
  // CHECK: moe.launch @rms_norm_grad_0(%{{.*}}, %{{.*}}, %{{.*}}) {buffers = array<i64: 1, 0, 64, 1, 64, 32>} : (tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<8xf32>)
  %dx:2 = moe.launch @rms_norm_grad_0(%x, %g, %dy) {buffers = array<i64: 1, 0, 64, 1, 64, 32>} : (tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<8xf32>)
  // CHECK: moe.launch @adamw_update_0(%[[W]], %{{.*}}, %{{.*}}, %{{.*}}) {buffers = array<i64>, updates = @w} : (tensor<8x16xf32>, tensor<f32>, tensor<f32>, tensor<i32>) -> ()
  moe.launch @adamw_update_0(%w, %lr, %norm, %step) {buffers = array<i64>, updates = @w} : (tensor<8x16xf32>, tensor<f32>, tensor<f32>, tensor<i32>) -> ()
  return %z : tensor<2x16xf32>
}
}
