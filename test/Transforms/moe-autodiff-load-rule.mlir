// RUN: moe-opt %s --moe-autodiff --split-input-file --verify-diagnostics | FileCheck %s
// moe-autodiff with the AdamW optimiser appends DeepSeek-V3's load rule
// (moe.balance_bias) for every router's selection bias; moe-autodiff.mlir
// checks the rule on a routed step, this file its edge cases.

// bias_update_rate = 0 keeps the bias fixed: no load rule.
// CHECK-LABEL: func.func @frozen_bias
// CHECK-NOT: moe.balance_bias
// CHECK: return
moe.param @router : tensor<8x4xf32> init <normal, scale = 0.02>
moe.param @bias : tensor<4xf32> init <zeros>
func.func @frozen_bias(%x: tensor<2x4x8xf32>) -> tensor<f32> {
  %w = moe.get_param @router : tensor<8x4xf32>
  %b = moe.get_param @bias : tensor<4xf32>
  %gates, %experts, %aux = moe.router sigmoid %x, %w bias %b top_k 2 {aux_loss_coef = 0.01 : f32, bias_update_rate = 0.0 : f64}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return %aux : tensor<f32>
}

// -----

// A bias the load rule should train must be a parameter.
moe.param @router : tensor<8x4xf32> init <normal, scale = 0.02>
func.func @fill_bias(%x: tensor<2x4x8xf32>) -> tensor<f32> {
  %w = moe.get_param @router : tensor<8x4xf32>
  %b = moe.fill 0.0 : tensor<4xf32>
  // expected-error @+1 {{'moe.router' op a trained selection bias must come from moe.get_param (moe-autodiff updates it by the load rule)}}
  %gates, %experts, %aux = moe.router sigmoid %x, %w bias %b top_k 2 {aux_loss_coef = 0.01 : f32}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return %aux : tensor<f32>
}
