// RUN: moe-opt %s --moe-autodiff=optimizer=none --split-input-file --verify-diagnostics | FileCheck %s
// RUN: moe-opt %s --moe-autodiff --split-input-file --verify-diagnostics | FileCheck %s --check-prefix=ADAMW

// One layer: each forward op gets its backward op, in reverse order; a
// parameter read twice gets the sum of both gradients.
// CHECK-LABEL: func.func @step
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xf32> {moe.grad_of = @emb}, tensor<8xf32> {moe.grad_of = @g}, tensor<8x16xf32> {moe.grad_of = @head})
moe.param @emb : tensor<16x8xf32> init <normal, scale = 0.02>
moe.param @g : tensor<8xf32> init <ones>
moe.param @head : tensor<8x16xf32> init <normal, scale = 0.02>
func.func @step(%tokens: tensor<2x4xi32> {moe.input = "tokens"},
                %targets: tensor<2x4xi32> {moe.input = "targets"}) -> tensor<f32> {
  %e = moe.get_param @emb : tensor<16x8xf32>
  %x = moe.embedding %tokens, %e : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  %g = moe.get_param @g : tensor<8xf32>
  %h = moe.rms_norm %x, %g : tensor<2x4x8xf32>, tensor<8xf32>
  %g2 = moe.get_param @g : tensor<8xf32>
  %h2 = moe.rms_norm %h, %g2 : tensor<2x4x8xf32>, tensor<8xf32>
  %w = moe.get_param @head : tensor<8x16xf32>
  %l = moe.linear %h2, %w : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  %loss = moe.cross_entropy %l, %targets : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
// CHECK: %[[ONE:.*]] = moe.fill 1.000000e+00 {moe.loss_seed} : tensor<f32>
// CHECK: %[[DL:.*]] = moe.cross_entropy_grad %{{.*}}, %{{.*}}, %[[ONE]]
// CHECK: %[[DX:.*]], %[[DW:.*]] = moe.linear_grad %{{.*}}, %{{.*}}, %[[DL]]
// CHECK: %[[DH:.*]], %[[DG2:.*]] = moe.rms_norm_grad %{{.*}}, %{{.*}}, %[[DX]]
// CHECK: %[[DX0:.*]], %[[DG1:.*]] = moe.rms_norm_grad %{{.*}}, %{{.*}}, %[[DH]]
// CHECK: %[[DG:.*]] = moe.add %[[DG2]], %[[DG1]] : tensor<8xf32>
// CHECK: %[[DE:.*]] = moe.embedding_grad %{{.*}}, %[[DX0]]
// CHECK: return %{{.*}}, %[[DE]], %[[DG]], %[[DW]]

// With the optimiser: a step input, the schedule, the global norm over all
// gradients, one AdamW update per parameter (no decay for the rank-1 gain,
// defaults without a moe.optimizer), and the loss as the only result.
// ADAMW-LABEL: func.func @step
// ADAMW-SAME: %[[STEP:[a-z0-9]+]]: tensor<i32> {moe.input = "step"}) -> tensor<f32>
// ADAMW: %[[LR:.*]] = moe.lr_schedule %[[STEP]] {lr = 3.000000e-04 : f64, min_lr = 3.000000e-05 : f64, schedule = "cosine", total_steps = 1000 : i64, warmup_steps = 100 : i64}
// ADAMW: %[[NORM:.*]] = moe.global_norm %{{.*}}, %{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<8xf32>, tensor<8x16xf32>
// ADAMW: moe.adamw_update @emb, %{{.*}}, %[[LR]], %[[NORM]], %[[STEP]] {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, eps = 1.000000e-08 : f64, grad_clip = 1.000000e+00 : f64, weight_decay = 1.000000e-01 : f64} : tensor<16x8xf32>
// ADAMW: moe.adamw_update @g, {{.*}}weight_decay = 0.000000e+00 : f64} : tensor<8xf32>
// ADAMW: moe.adamw_update @head
// ADAMW: return %{{.*}} : tensor<f32>

// -----

// ADAMW-LABEL: func.func @routed
// ADAMW-NOT: moe.adamw_update @bias
// The selection bias moves by DeepSeek-V3's load rule instead, after the
// gradient updates, counting the router's choices (rate 1e-3 by default).
// ADAMW: moe.adamw_update @down
// ADAMW-NEXT: moe.balance_bias @bias, %{{.*}} {rate = 1.000000e-03 : f64} : tensor<2x4x2xi32>
// ADAMW-NEXT: return

// Routing: gradients flow through the gates and the aux loss, not the
// indices; the selection bias gets none. The gradient recomputes the
// group-limited selection of the forward (its expert groups).
// CHECK-LABEL: func.func @routed
// CHECK-SAME: {moe.grad_of = @router}
// CHECK-NOT: moe.grad_of = @bias
moe.param @router : tensor<8x4xf32> init <normal, scale = 0.02>
moe.param @bias : tensor<4xf32> init <zeros>
moe.param @up : tensor<4x8x16xf32> init <normal, scale = 0.02>
moe.param @down : tensor<4x16x8xf32> init <normal, scale = 0.02>
func.func @routed(%x: tensor<2x4x8xf32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
  %w = moe.get_param @router : tensor<8x4xf32>
  %b = moe.get_param @bias : tensor<4xf32>
  %gates, %experts, %aux = moe.router sigmoid %x, %w bias %b top_k 2 {aux_loss_coef = 0.01 : f32, expert_groups = 4 : i64, topk_groups = 2 : i64}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  %buf = moe.dispatch %x, %experts : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x3x8xf32>
  %u = moe.get_param @up : tensor<4x8x16xf32>
  %d = moe.get_param @down : tensor<4x16x8xf32>
  %y = moe.expert_ffn gelu %buf, %u, %d : (tensor<4x3x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x3x8xf32>
  %out = moe.combine %y, %gates, %experts : (tensor<4x3x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  %h = moe.get_param @router : tensor<8x4xf32>
  %logits = moe.linear %out, %h : tensor<2x4x8xf32>, tensor<8x4xf32> -> tensor<2x4x4xf32>
  %ce = moe.cross_entropy %logits, %targets : tensor<2x4x4xf32>, tensor<2x4xi32> -> tensor<f32>
  %loss = moe.add %ce, %aux : tensor<f32>
  return %loss : tensor<f32>
}
// CHECK: moe.combine_grad
// CHECK: moe.expert_ffn_grad gelu
// CHECK: moe.dispatch_grad
// CHECK: moe.router_grad sigmoid %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} bias %{{.*}} top_k 2 {aux_loss_coef = 0.00999999977 : f32, expert_groups = 4 : i64, topk_groups = 2 : i64}

// -----

// An op on the path to the loss without a gradient rule is an error.
module attributes {moe.grid = #moe.grid<dp = 2>} {
  moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
  func.func @f(%x: tensor<2x4xf32>, %t: tensor<2xi32>) -> tensor<f32> {
    %w = moe.get_param @w : tensor<4x4xf32>
    // expected-error @+1 {{'moe.all_reduce' op has no gradient rule, but its result reaches the loss (moe-autodiff)}}
    %r = moe.all_reduce sum %w over [dp] : tensor<4x4xf32>
    %l = moe.linear %x, %r : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
    %c = moe.cross_entropy %l, %t : tensor<2x4xf32>, tensor<2xi32> -> tensor<f32>
    return %c : tensor<f32>
  }
}

// -----

// A module without a step function is an error.
// expected-error @+1 {{moe-autodiff: no step function (a func.func returning one tensor<f32> loss) in the module}}
module {
  func.func @f(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    return %x : tensor<2x4xf32>
  }
}
