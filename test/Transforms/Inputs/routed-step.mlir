// A routed block for the partitioning tests: 4 sequences of 3 tokens,
// 4 experts, top-2, capacity factor 1 (capacity 6 for the whole batch).
module attributes {moe.grid = #moe.grid<dp = 1, ep = 2>} {
  moe.param @emb : tensor<8x4xf32> init <normal, scale = 1.0>
  moe.param @router : tensor<4x4xf32> init <normal, scale = 1.0>
  moe.param @up : tensor<4x4x5xf32> init <normal, scale = 0.6>
  moe.param @down : tensor<4x5x4xf32> init <normal, scale = 0.6>
  moe.param @gate : tensor<4x4x5xf32> init <normal, scale = 0.6>
  moe.param @head : tensor<4x8xf32> init <normal, scale = 1.0>
  func.func @step(%t: tensor<4x3xi32> {moe.input = "tokens"}, %y: tensor<4x3xi32> {moe.input = "targets"}) -> tensor<f32> {
    %emb = moe.get_param @emb : tensor<8x4xf32>
    %x = moe.embedding %t, %emb : tensor<4x3xi32>, tensor<8x4xf32> -> tensor<4x3x4xf32>
    %w = moe.get_param @router : tensor<4x4xf32>
    %g, %e, %aux = moe.router softmax %x, %w top_k 2 {renormalize = true, capacity_factor = 1.0 : f32, aux_loss_coef = 0.01 : f32} : (tensor<4x3x4xf32>, tensor<4x4xf32>) -> (tensor<4x3x2xf32>, tensor<4x3x2xi32>, tensor<f32>)
    %buf = moe.dispatch %x, %e : (tensor<4x3x4xf32>, tensor<4x3x2xi32>) -> tensor<4x6x4xf32>
    %u = moe.get_param @up : tensor<4x4x5xf32>
    %d = moe.get_param @down : tensor<4x5x4xf32>
    %gt = moe.get_param @gate : tensor<4x4x5xf32>
    %o = moe.expert_ffn swiglu %buf, %u, %d gate %gt : (tensor<4x6x4xf32>, tensor<4x4x5xf32>, tensor<4x5x4xf32>, tensor<4x4x5xf32>) -> tensor<4x6x4xf32>
    %c = moe.combine %o, %g, %e : (tensor<4x6x4xf32>, tensor<4x3x2xf32>, tensor<4x3x2xi32>) -> tensor<4x3x4xf32>
    %r = moe.add %x, %c : tensor<4x3x4xf32>
    %head = moe.get_param @head : tensor<4x8xf32>
    %logits = moe.linear %r, %head : tensor<4x3x4xf32>, tensor<4x8xf32> -> tensor<4x3x8xf32>
    %ce = moe.cross_entropy %logits, %y : tensor<4x3x8xf32>, tensor<4x3xi32> -> tensor<f32>
    %loss = moe.add %ce, %aux : tensor<f32>
    return %loss : tensor<f32>
  }
}
