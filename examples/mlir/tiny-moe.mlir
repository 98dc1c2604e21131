// A tiny MoE transformer training step in the moe dialect: one layer,
// vocabulary 256 (bytes), d_model 64, 4 heads with 2 kv heads, 4 experts of
// width 128 with top-2 softmax routing, one shared expert, batch 2 x 32 tokens.
// Written by hand: `moe-translate --import-model MODEL.json` writes modules
// of this form from a model description (with the optimiser's settings and
// the model's description as module attributes), and `moec` compiles either
// into a training binary (`moec tiny-moe.mlir -o train`).

module attributes {moe.grid = #moe.grid<dp = 1, ep = 2, devices = ["local-cpu", "local-cpu"]>} {
  moe.param @tok_emb : tensor<256x64xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.attn_norm : tensor<64xf32> init <ones>
  moe.param @l0.wq : tensor<64x64xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.wk : tensor<64x32xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.wv : tensor<64x32xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.wo : tensor<64x64xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.ffn_norm : tensor<64xf32> init <ones>
  moe.param @l0.router : tensor<64x4xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.experts.gate : tensor<4x64x128xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.experts.up : tensor<4x64x128xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.experts.down : tensor<4x128x64xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.shared.gate : tensor<64x128xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.shared.up : tensor<64x128xf32> init <normal, scale = 2.000000e-02>
  moe.param @l0.shared.down : tensor<128x64xf32> init <normal, scale = 2.000000e-02>
  moe.param @norm_f : tensor<64xf32> init <ones>
  moe.param @lm_head : tensor<64x256xf32> init <normal, scale = 2.000000e-02>

  func.func @train_step(%tokens: tensor<2x32xi32> {moe.input = "tokens"},
                        %targets: tensor<2x32xi32> {moe.input = "targets"}) -> tensor<f32> {
    %emb = moe.get_param @tok_emb : tensor<256x64xf32>
    %x = moe.embedding %tokens, %emb : tensor<2x32xi32>, tensor<256x64xf32> -> tensor<2x32x64xf32>

    // Attention block.
    %g1 = moe.get_param @l0.attn_norm : tensor<64xf32>
    %h = moe.rms_norm %x, %g1 : tensor<2x32x64xf32>, tensor<64xf32>
    %wq = moe.get_param @l0.wq : tensor<64x64xf32>
    %wk = moe.get_param @l0.wk : tensor<64x32xf32>
    %wv = moe.get_param @l0.wv : tensor<64x32xf32>
    %wo = moe.get_param @l0.wo : tensor<64x64xf32>
    %q = moe.linear %h, %wq : tensor<2x32x64xf32>, tensor<64x64xf32> -> tensor<2x32x64xf32>
    %k = moe.linear %h, %wk : tensor<2x32x64xf32>, tensor<64x32xf32> -> tensor<2x32x32xf32>
    %v = moe.linear %h, %wv : tensor<2x32x64xf32>, tensor<64x32xf32> -> tensor<2x32x32xf32>
    %att = moe.attention %q, %k, %v heads 4 kv_heads 2 {rope_theta = 1.000000e+04 : f32}
        : tensor<2x32x64xf32>, tensor<2x32x32xf32>, tensor<2x32x32xf32>
    %proj = moe.linear %att, %wo : tensor<2x32x64xf32>, tensor<64x64xf32> -> tensor<2x32x64xf32>
    %x1 = moe.add %x, %proj : tensor<2x32x64xf32>

    // MoE block: route, dispatch to 4 experts with capacity 40, combine.
    %g2 = moe.get_param @l0.ffn_norm : tensor<64xf32>
    %h2 = moe.rms_norm %x1, %g2 : tensor<2x32x64xf32>, tensor<64xf32>
    %wr = moe.get_param @l0.router : tensor<64x4xf32>
    %gates, %experts, %aux = moe.router softmax %h2, %wr top_k 2
        {renormalize = true, capacity_factor = 1.250000e+00 : f32, aux_loss_coef = 1.000000e-02 : f32}
        : (tensor<2x32x64xf32>, tensor<64x4xf32>) -> (tensor<2x32x2xf32>, tensor<2x32x2xi32>, tensor<f32>)
    %buf = moe.dispatch %h2, %experts : (tensor<2x32x64xf32>, tensor<2x32x2xi32>) -> tensor<4x40x64xf32>
    %eg = moe.get_param @l0.experts.gate : tensor<4x64x128xf32>
    %eu = moe.get_param @l0.experts.up : tensor<4x64x128xf32>
    %ed = moe.get_param @l0.experts.down : tensor<4x128x64xf32>
    %ey = moe.expert_ffn swiglu %buf, %eu, %ed gate %eg {placement = #moe.placement<[[0, 1], [2, 3]]>}
        : (tensor<4x40x64xf32>, tensor<4x64x128xf32>, tensor<4x128x64xf32>, tensor<4x64x128xf32>) -> tensor<4x40x64xf32>
    %routed = moe.combine %ey, %gates, %experts
        : (tensor<4x40x64xf32>, tensor<2x32x2xf32>, tensor<2x32x2xi32>) -> tensor<2x32x64xf32>
    %sg = moe.get_param @l0.shared.gate : tensor<64x128xf32>
    %su = moe.get_param @l0.shared.up : tensor<64x128xf32>
    %sd = moe.get_param @l0.shared.down : tensor<128x64xf32>
    %shared = moe.ffn swiglu %h2, %su, %sd gate %sg
        : (tensor<2x32x64xf32>, tensor<64x128xf32>, tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<2x32x64xf32>
    %moe_out = moe.add %routed, %shared : tensor<2x32x64xf32>
    %x2 = moe.add %x1, %moe_out : tensor<2x32x64xf32>

    // Head and loss.
    %gf = moe.get_param @norm_f : tensor<64xf32>
    %hf = moe.rms_norm %x2, %gf : tensor<2x32x64xf32>, tensor<64xf32>
    %wh = moe.get_param @lm_head : tensor<64x256xf32>
    %logits = moe.linear %hf, %wh : tensor<2x32x64xf32>, tensor<64x256xf32> -> tensor<2x32x256xf32>
    %ce = moe.cross_entropy %logits, %targets : tensor<2x32x256xf32>, tensor<2x32xi32> -> tensor<f32>
    %loss = moe.add %ce, %aux : tensor<f32>
    return %loss : tensor<f32>
  }
}
