// A dp 2 step whose gradient was never all-reduced: ZeRO cannot shard it
// (moe-shard-optimizer.mlir).
module attributes {moe.grid = #moe.grid<dp = 2>} {
  moe.param @w : tensor<4xf32> init <zeros>
  func.func @step(%g: tensor<4xf32>, %lr: tensor<f32>, %step: tensor<i32> {moe.input = "step"}) -> tensor<f32> {
    %n = moe.global_norm %g : tensor<4xf32>
    moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, grad_clip = 1.0 : f64} : tensor<4xf32>
    return %n : tensor<f32>
  }
}
