// RUN: moe-opt %s --moe-lower-to-kernels --split-input-file --verify-diagnostics | FileCheck %s --implicit-check-not=moe.linear --implicit-check-not=moe.cross_entropy
// RUN: moe-opt %s --moe-lower-to-kernels=save-preactivations=false --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=RECOMPUTE
// Device targets plan at 512 bytes (OpenCL sub-buffers start at the
// device's base alignment); the plan records it for moe-schedule.
// RUN: moe-opt %s --moe-lower-to-kernels=alignment=512 --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=ALIGN
// Device targets: each gradient's partial sums of squares feed the norm.
// RUN: moe-opt %s --moe-lower-to-kernels=device-norm --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=DEVNORM
// RUN: not moe-opt %s --moe-lower-to-kernels=alignment=48 --split-input-file 2>&1 | FileCheck %s --check-prefix=BADALIGN
// BADALIGN: error: moe-lower-to-kernels: alignment 48 is not a power of two

// Three identical linears share one kernel; the plan reuses memory.
// Lifetimes (program positions): x [0,2], t [0,5], a [2,3], b [3,4],
// c [4,5], loss [5,6]. Greedy by size: x at 0; a overlaps x -> 64; b at 0
// (x is dead); c at 64; t overlaps all four -> 128; loss at 0. Peak 136.
// CHECK: module attributes {moe.buffer_plan = #moe.buffer_plan<activation_bytes = 136, gradient_bytes = 0, parameter_bytes = 64, optimizer_state_bytes = 0, total_bytes = 200, num_kernels = 2, num_launches = 4, alignment = 64>}
// CHECK: moe.param @w
// CHECK: moe.kernel @linear_0 family "linear" : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> {config = {}, epilogue = []}
// CHECK: moe.kernel @cross_entropy_0 family "cross_entropy" : (tensor<2x4xf32>, tensor<2xi32>) -> tensor<f32>
// CHECK-LABEL: func.func @chain
// CHECK: %[[A:.*]] = moe.launch @linear_0(%{{.*}}, %{{.*}}) {buffers = array<i64: 0, 64, 32>}
// CHECK: %[[B:.*]] = moe.launch @linear_0(%[[A]], %{{.*}}) {buffers = array<i64: 0, 0, 32>}
// CHECK: %[[C:.*]] = moe.launch @linear_0(%[[B]], %{{.*}}) {buffers = array<i64: 0, 64, 32>}
// CHECK: moe.launch @cross_entropy_0(%[[C]], %{{.*}}) {buffers = array<i64: 0, 0, 4>}
// The same at 512 bytes: a and c at 512, t at 1024.
// ALIGN: module attributes {moe.buffer_plan = #moe.buffer_plan<activation_bytes = 1032, {{.*}}, alignment = 512>
// ALIGN: moe.launch @linear_0(%{{.*}}, %{{.*}}) {buffers = array<i64: 0, 512, 32>}
// ALIGN: moe.launch @linear_0(%{{.*}}, %{{.*}}) {buffers = array<i64: 0, 0, 32>}
// ALIGN: moe.launch @linear_0(%{{.*}}, %{{.*}}) {buffers = array<i64: 0, 512, 32>}
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.1>
func.func @chain(%x: tensor<2x4xf32>, %t: tensor<2xi32>) -> tensor<f32> {
  %w = moe.get_param @w : tensor<4x4xf32>
  %a = moe.linear %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %b = moe.linear %a, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %c = moe.linear %b, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %l = moe.cross_entropy %c, %t : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// linear + residual add -> one launch with an epilogue; AdamW launches
// update parameters in place, their gradients live in the gradient arena
// and their moments count as optimiser state (2 x 4 bytes x 16).
// CHECK: moe.buffer_plan = #moe.buffer_plan<{{.*}}gradient_bytes = 64, parameter_bytes = 64, optimizer_state_bytes = 128,
// CHECK: moe.kernel @linear_0 family "linear" : (tensor<2x4xf32>, tensor<4x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> {config = {}, epilogue = ["residual_add"]}
// CHECK: moe.kernel @adamw_update_0 family "adamw_update"
// CHECK-NOT: param = @w
// CHECK-LABEL: func.func @residual
// CHECK: moe.launch @linear_0(%{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NOT: moe.add
// CHECK: moe.fill 0.000000e+00 {moe.buffers = array<i64: 1, 0, 64>} : tensor<4x4xf32>
// CHECK: moe.launch @adamw_update_0({{.*}}) {buffers = array<i64>, updates = @w}
// DEVNORM: moe.kernel @sum_squares_0 family "sum_squares" : (tensor<4x4xf32>) -> tensor<1x1xf32>
// DEVNORM: moe.kernel @global_norm_0 family "global_norm" : (tensor<4x4xf32>, tensor<1x1xf32>) -> tensor<f32>
// DEVNORM-LABEL: func.func @residual
// DEVNORM: %[[G:.*]] = moe.fill
// DEVNORM: %[[P:.*]] = moe.launch @sum_squares_0(%[[G]])
// DEVNORM: moe.launch @global_norm_0(%[[G]], %[[P]])
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.1>
func.func @residual(%x: tensor<2x4xf32>, %s: tensor<i32>) -> tensor<2x4xf32> {
  %w = moe.get_param @w : tensor<4x4xf32>
  %a = moe.linear %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %r = moe.add %x, %a : tensor<2x4xf32>
  %g = moe.fill 0.0 : tensor<4x4xf32>
  %lr = moe.lr_schedule %s {lr = 1.0e-3 : f64, min_lr = 1.0e-4 : f64, warmup_steps = 1 : i64, total_steps = 10 : i64, schedule = "cosine"}
  %n = moe.global_norm %g : tensor<4x4xf32>
  moe.adamw_update @w, %g, %lr, %n, %s {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64} : tensor<4x4xf32>
  return %r : tensor<2x4xf32>
}

// -----

// An FFN whose gradient the step computes saves its pre-activations (x W_up,
// x W_gate) as extra results; the gradient launch reads them. They live
// from the forward to the backward in the plan.
// CHECK: moe.kernel @ffn_0 family "ffn" : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x16xf32>) -> (tensor<4x8xf32>, tensor<4x16xf32>, tensor<4x16xf32>) {config = {activation = 0 : i32}, epilogue = ["save_preactivations"]}
// CHECK: moe.kernel @ffn_grad_0 family "ffn_grad" : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>) -> ({{.*}}) {config = {activation = 0 : i32}, epilogue = ["saved_preactivations"]}
// CHECK-LABEL: func.func @ffn_step
// CHECK: %[[F:.*]]:3 = moe.launch @ffn_0(
// CHECK: moe.launch @ffn_grad_0(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[F]]#1, %[[F]]#2)
// CHECK: return %[[F]]#0
// Without saving, the backward recomputes them: no extra results.
// RECOMPUTE: moe.kernel @ffn_0 family "ffn" : ({{.*}}) -> tensor<4x8xf32> {config = {activation = 0 : i32}, epilogue = []}
// RECOMPUTE: moe.kernel @ffn_grad_0 family "ffn_grad" : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>, tensor<8x16xf32>) -> ({{.*}}) {config = {activation = 0 : i32}, epilogue = []}
moe.param @up : tensor<8x16xf32> init <normal, scale = 0.1>
moe.param @down : tensor<16x8xf32> init <normal, scale = 0.1>
moe.param @gate : tensor<8x16xf32> init <normal, scale = 0.1>
func.func @ffn_step(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %u = moe.get_param @up : tensor<8x16xf32>
  %d = moe.get_param @down : tensor<16x8xf32>
  %g = moe.get_param @gate : tensor<8x16xf32>
  %y = moe.ffn swiglu %x, %u, %d gate %g : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  %dx, %du, %dd, %dg = moe.ffn_grad swiglu %x, %u, %d, %dy gate %g : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<4x8xf32>, tensor<8x16xf32>) -> (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16x8xf32>, tensor<8x16xf32>)
  return %y, %dx : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Group-limited routing is part of a gate's kernel spec; at its default (1,
// every expert) it is left out, so a model without groups keeps its specs.
// CHECK: moe.kernel @fused_gate_0 family "fused_gate" {{.*}} {config = {aux_loss_coef = 0.000000e+00 : f32, capacity = 8 : i64, groups = 1 : i64, renormalize = false, routed_scaling = 1.000000e+00 : f32, scoring = 1 : i32, top_k = 2 : i64, z_loss_coef = 0.000000e+00 : f32}, epilogue = []}
// CHECK: moe.kernel @fused_gate_1 family "fused_gate" {{.*}} {config = {aux_loss_coef = 0.000000e+00 : f32, capacity = 8 : i64, expert_groups = 4 : i64, groups = 1 : i64, renormalize = false, routed_scaling = 1.000000e+00 : f32, scoring = 1 : i32, top_k = 2 : i64, topk_groups = 2 : i64, z_loss_coef = 0.000000e+00 : f32}, epilogue = []}
// CHECK-LABEL: func.func @gates
func.func @gates(%x: tensor<8x4xf32>, %w: tensor<4x8xf32>) -> (tensor<8x2xi32>, tensor<8x2xi32>) {
  %g, %e, %s, %c, %a = moe.fused_gate sigmoid %x, %w top_k 2 capacity 8 : (tensor<8x4xf32>, tensor<4x8xf32>) -> (tensor<8x2xf32>, tensor<8x2xi32>, tensor<8x2xi32>, tensor<8xi32>, tensor<f32>)
  %g2, %e2, %s2, %c2, %a2 = moe.fused_gate sigmoid %x, %w top_k 2 capacity 8 {expert_groups = 4 : i64, topk_groups = 2 : i64} : (tensor<8x4xf32>, tensor<4x8xf32>) -> (tensor<8x2xf32>, tensor<8x2xi32>, tensor<8x2xi32>, tensor<8xi32>, tensor<f32>)
  return %e, %e2 : tensor<8x2xi32>, tensor<8x2xi32>
}

// -----

// An op of another dialect in a step function cannot become a kernel.
func.func @foreign(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'func.call' op cannot be lowered to a kernel (moe-lower-to-kernels handles moe ops only)}}
  %y = func.call @foreign(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
