// RUN: moe-opt %s --moe-autodiff=optimizer=none -split-input-file -verify-diagnostics
// The diagnostics of the ops' own gradient rules (GradientOpInterface), which
// moe-autodiff asks for when an op's result reaches the loss.

// all_to_all: the ragged row form (split 0 concat 0 with counts) has no
// gradient rule.
module attributes {moe.grid = #moe.grid<ep = 2>} {
  moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
  func.func @f(%x: tensor<4x4xf32>, %send: tensor<2xi32>, %t: tensor<4xi32>) -> tensor<f32> {
    %w = moe.get_param @w : tensor<4x4xf32>
    %h = moe.linear %x, %w : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
    // expected-error @+1 {{'moe.all_to_all' op the ragged row form has no gradient rule}}
    %rows, %recv = moe.all_to_all %h over [ep] split 0 concat 0 counts %send
        : (tensor<4x4xf32>, tensor<2xi32>) -> (tensor<4x4xf32>, tensor<2xi32>)
    %c = moe.cross_entropy %rows, %t : tensor<4x4xf32>, tensor<4xi32> -> tensor<f32>
    return %c : tensor<f32>
  }
}
