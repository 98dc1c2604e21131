func.func @f(%y: tensor<f32>, %g: tensor<2x2xf32>, %e: tensor<2x2xi32>, %dout: tensor<2x8xf32>) {
  %dy, %dg = moe.combine_grad %y, %g, %e, %dout : (tensor<f32>, tensor<2x2xf32>, tensor<2x2xi32>, tensor<2x8xf32>) -> (tensor<f32>, tensor<2x2xf32>)
  return
}
