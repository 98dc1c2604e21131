// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of group-limited routing (expert_groups, topk_groups) on
// moe.router, moe.fused_gate and moe.router_grad.

// expert_groups divides the experts
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x6xf32>) {
  // expected-error @+1 {{'moe.router' op expert_groups (4) must be >= 1 and divide the 6 experts}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 {expert_groups = 4 : i64, topk_groups = 2 : i64} : (tensor<2x4x8xf32>, tensor<8x6xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// topk_groups is at most expert_groups
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>) {
  // expected-error @+1 {{'moe.router' op topk_groups (5) must be in [1, 4], the number of expert groups}}
  %g, %e, %a = moe.router sigmoid %x, %w top_k 2 {expert_groups = 4 : i64, topk_groups = 5 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// top_k fits in the experts of the kept groups
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op top_k (3) exceeds the 2 experts of topk_groups (1) groups of 2}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 3 capacity 4 {expert_groups = 4 : i64, topk_groups = 1 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> (tensor<2x4x3xf32>, tensor<2x4x3xi32>, tensor<2x4x3xi32>, tensor<8xi32>, tensor<f32>)
  return
}

// -----

// the gradient checks the same
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>, %dg: tensor<2x4x2xf32>, %da: tensor<f32>) {
  // expected-error @+1 {{'moe.router_grad' op topk_groups (0) must be in [1, 2], the number of expert groups}}
  %dx, %dw = moe.router_grad sigmoid %x, %w, %dg, %da top_k 2 {expert_groups = 2 : i64, topk_groups = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<2x4x2xf32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<8x8xf32>)
  return
}
