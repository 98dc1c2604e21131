// RUN: moe-opt %s --moe-fuse-gating --split-input-file --verify-diagnostics | FileCheck %s --implicit-check-not=moe.router --implicit-check-not=moe.dispatch --implicit-check-not=moe.combine

// router + dispatch + combine -> fused_gate + permute + unpermute, with the
// capacity of the dispatch buffer and the router's settings.
// CHECK-LABEL: func.func @layer
func.func @layer(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %b: tensor<4xf32>,
                 %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>) -> (tensor<2x4x8xf32>, tensor<f32>) {
  %g, %e, %aux = moe.router sigmoid %x, %w bias %b top_k 2 {renormalize = true, routed_scaling = 2.5 : f32, aux_loss_coef = 0.01 : f32}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  %buf = moe.dispatch %x, %e : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x3x8xf32>
  %y = moe.expert_ffn gelu %buf, %u, %d : (tensor<4x3x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x3x8xf32>
  %out = moe.combine %y, %g, %e : (tensor<4x3x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  return %out, %aux : tensor<2x4x8xf32>, tensor<f32>
}
// CHECK: %[[G:.*]], %{{.*}}, %[[S:.*]], %{{.*}}, %[[AUX:.*]] = moe.fused_gate sigmoid %{{.*}}, %{{.*}} bias %{{.*}} top_k 2 capacity 3 {aux_loss_coef = 0.00999999977 : f32, renormalize = true, routed_scaling = 2.500000e+00 : f32}
// CHECK-SAME: -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
// CHECK: %[[BUF:.*]] = moe.permute %{{.*}}, %[[S]] : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x3x8xf32>
// CHECK: %[[Y:.*]] = moe.expert_ffn gelu %[[BUF]]
// CHECK: %[[OUT:.*]] = moe.unpermute %[[Y]], %[[S]] weights %[[G]]
// CHECK: return %[[OUT]], %[[AUX]]

// -----

// Group-limited routing carries over to the fused gate (its kernel selects
// within the kept expert groups).
// CHECK-LABEL: func.func @expert_groups
// CHECK: moe.fused_gate sigmoid {{.*}} top_k 2 capacity 8 {expert_groups = 4 : i64, topk_groups = 2 : i64}
func.func @expert_groups(%x: tensor<8x4xf32>, %w: tensor<4x8xf32>) -> tensor<8x2xf32> {
  %g, %e, %aux = moe.router sigmoid %x, %w top_k 2 {expert_groups = 4 : i64, topk_groups = 2 : i64} : (tensor<8x4xf32>, tensor<4x8xf32>) -> (tensor<8x2xf32>, tensor<8x2xi32>, tensor<f32>)
  return %g : tensor<8x2xf32>
}

// -----

// A router feeding no dispatch gets dropless capacity (8 tokens).
// CHECK-LABEL: func.func @scores_only
// CHECK: moe.fused_gate softmax {{.*}} top_k 1 capacity 8
func.func @scores_only(%x: tensor<8x4xf32>, %w: tensor<4x2xf32>) -> tensor<8x1xf32> {
  %g, %e, %aux = moe.router softmax %x, %w top_k 1 : (tensor<8x4xf32>, tensor<4x2xf32>) -> (tensor<8x1xf32>, tensor<8x1xi32>, tensor<f32>)
  return %g : tensor<8x1xf32>
}

// -----

// Users of one router must agree on the capacity.
func.func @disagree(%x: tensor<8x4xf32>, %w: tensor<4x2xf32>) -> (tensor<2x4x4xf32>, tensor<2x8x4xf32>) {
  %g, %e, %aux = moe.router softmax %x, %w top_k 1 : (tensor<8x4xf32>, tensor<4x2xf32>) -> (tensor<8x1xf32>, tensor<8x1xi32>, tensor<f32>)
  %a = moe.dispatch %x, %e : (tensor<8x4xf32>, tensor<8x1xi32>) -> tensor<2x4x4xf32>
  // expected-error @+1 {{'moe.dispatch' op has capacity 8 but another user of the same router has 4 (moe-fuse-gating)}}
  %b = moe.dispatch %x, %e : (tensor<8x4xf32>, tensor<8x1xi32>) -> tensor<2x8x4xf32>
  return %a, %b : tensor<2x4x4xf32>, tensor<2x8x4xf32>
}

// -----

// A dispatch buffer with another number of experts than the router scores.
func.func @experts(%x: tensor<8x4xf32>, %w: tensor<4x2xf32>) -> tensor<3x4x4xf32> {
  %g, %e, %aux = moe.router softmax %x, %w top_k 1 : (tensor<8x4xf32>, tensor<4x2xf32>) -> (tensor<8x1xf32>, tensor<8x1xi32>, tensor<f32>)
  // expected-error @+1 {{'moe.dispatch' op has 3 experts but its router scores 2 (moe-fuse-gating)}}
  %a = moe.dispatch %x, %e : (tensor<8x4xf32>, tensor<8x1xi32>) -> tensor<3x4x4xf32>
  return %a : tensor<3x4x4xf32>
}
