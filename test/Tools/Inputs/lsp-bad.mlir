module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %0 = moe.replica_sum %g over [ep] layer -1 : tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}
}
