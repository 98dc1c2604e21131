// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of the backward ops moe-autodiff emits (embedding_grad,
// rms_norm_grad, attention_grad, linear_grad, bias_grad, ffn_grad,
// expert_ffn_grad, router_grad, dispatch_grad, combine_grad,
// cross_entropy_grad): each gradient has the type of what it differentiates.

// embedding_grad: the table gradient is [V, D]
func.func @f(%ids: tensor<2x4xi32>, %dy: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.embedding_grad' op dtable must have rank 2 ([V, D]), got rank 3}}
  %0 = moe.embedding_grad %ids, %dy : tensor<2x4xi32>, tensor<2x4x8xf32> -> tensor<1x32x8xf32>
  return
}

// -----

// embedding_grad: dy is the ids' shape followed by D
func.func @f(%ids: tensor<2x4xi32>, %dy: tensor<2x3x8xf32>) {
  // expected-error @+1 {{'moe.embedding_grad' op dy must have shape 2x4x8, got 2x3x8}}
  %0 = moe.embedding_grad %ids, %dy : tensor<2x4xi32>, tensor<2x3x8xf32> -> tensor<32x8xf32>
  return
}

// -----

// rms_norm_grad: dx and dy have x's type (a trait, ahead of the verifier)
func.func @f(%x: tensor<2x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x8xf16>) {
  // expected-error @+1 {{'moe.rms_norm_grad' op failed to verify that all of {x, dx, dy} have same type}}
  %dx, %dg = "moe.rms_norm_grad"(%x, %g, %dy) {epsilon = 1.0e-05 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf16>) -> (tensor<2x8xf32>, tensor<8xf32>)
  return
}

// -----

// rms_norm_grad: gamma's size divides x's last dimension, as moe.rms_norm's
func.func @f(%x: tensor<2x8xf32>, %g: tensor<3xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.rms_norm_grad' op gamma's size (3) must divide x's last dimension (8): the groups normalised}}
  %dx, %dg = moe.rms_norm_grad %x, %g, %dy {epsilon = 1.0e-05 : f32} : tensor<2x8xf32>, tensor<3xf32>
  return
}

// -----

// rms_norm_grad: gamma is a vector
func.func @f(%x: tensor<2x8xf32>, %g: tensor<2x4xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.rms_norm_grad' op gamma must have rank 1 ([G]), got rank 2}}
  %dx, %dg = moe.rms_norm_grad %x, %g, %dy {epsilon = 1.0e-05 : f32} : tensor<2x8xf32>, tensor<2x4xf32>
  return
}

// -----

// clamp_grad: the limit as moe.clamp's
func.func @f(%x: tensor<2x8xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.clamp_grad' op limit must be finite and > 0, got -1}}
  %dx = moe.clamp_grad %x, %dy {limit = -1.0 : f32} : tensor<2x8xf32>
  return
}

// -----

// sigmoid_gate_grad: the gate as moe.sigmoid_gate's
func.func @f(%x: tensor<2x8xf32>, %g: tensor<2x2xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.sigmoid_gate_grad' op gate must have shape 2x1, got 2x2}}
  %dx, %dg = moe.sigmoid_gate_grad %x, %g, %dy : tensor<2x8xf32>, tensor<2x2xf32>
  return
}

// -----

// latent_attention_grad: dk_rope has k_rope's type
func.func @f(%q: tensor<2x4x12xf32>, %k: tensor<2x4x8xf32>, %kr: tensor<2x4x2xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.latent_attention_grad' op failed to verify that all of {k_rope, dk_rope} have same type}}
  %a, %b, %c, %d = "moe.latent_attention_grad"(%q, %k, %kr, %v, %v) {num_heads = 2 : i64} : (tensor<2x4x12xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x6xf32>, tensor<2x4x6xf32>) -> (tensor<2x4x12xf32>, tensor<2x4x8xf32>, tensor<2x4x4xf32>, tensor<2x4x6xf32>)
  return
}

// -----

// attention_grad: dout and dq have q's type (traits, ahead of the verifier)
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>, %do: tensor<2x4x16xf16>) {
  // expected-error @+1 {{'moe.attention_grad' op failed to verify that all of {q, dq, dout} have same type}}
  %dq, %dk, %dv = "moe.attention_grad"(%q, %k, %v, %do) {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf16>) -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
  return
}

// -----

// attention_grad: dk has k's type
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>, %do: tensor<2x4x16xf32>) {
  // expected-error @+1 {{'moe.attention_grad' op failed to verify that all of {k, dk} have same type}}
  %dq, %dk, %dv = "moe.attention_grad"(%q, %k, %v, %do) {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x8x8xf32>, tensor<2x4x8xf32>)
  return
}

// -----

// attention_grad: dv has v's type
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>, %do: tensor<2x4x16xf32>) {
  // expected-error @+1 {{'moe.attention_grad' op failed to verify that all of {v, dv} have same type}}
  %dq, %dk, %dv = "moe.attention_grad"(%q, %k, %v, %do) {num_heads = 4 : i64, num_kv_heads = 2 : i64} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xbf16>)
  return
}

// -----

// attention_grad: the head counts are attributes it needs
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>, %do: tensor<2x4x16xf32>) {
  // expected-error @+1 {{'moe.attention_grad' op requires attribute 'num_kv_heads'}}
  %dq, %dk, %dv = "moe.attention_grad"(%q, %k, %v, %do) {num_heads = 4 : i64} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
  return
}

// -----

// linear_grad: weight is [K, N]
func.func @f(%x: tensor<2x8xf32>, %w: tensor<8xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.linear_grad' op weight must have rank 2 ([K, N]), got rank 1}}
  %dx, %dw = moe.linear_grad %x, %w, %dy : tensor<2x8xf32>, tensor<8xf32>, tensor<2x8xf32>
  return
}

// -----

// linear_grad: x has rank >= 1
func.func @f(%x: tensor<f32>, %w: tensor<8x16xf32>, %dy: tensor<16xf32>) {
  // expected-error @+1 {{'moe.linear_grad' op x must have rank >= 1}}
  %dx, %dw = moe.linear_grad %x, %w, %dy : tensor<f32>, tensor<8x16xf32>, tensor<16xf32>
  return
}

// -----

// linear_grad: dy has the forward result's shape
func.func @f(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>, %dy: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.linear_grad' op dy must have shape 2x16, got 2x8}}
  %dx, %dw = moe.linear_grad %x, %w, %dy : tensor<2x8xf32>, tensor<8x16xf32>, tensor<2x8xf32>
  return
}

// -----

// bias_grad: dy has rank >= 1
func.func @f(%dy: tensor<f32>) {
  // expected-error @+1 {{'moe.bias_grad' op dy must have rank >= 1}}
  %db = moe.bias_grad %dy : tensor<f32> -> tensor<1xf32>
  return
}

// -----

// bias_grad: the result is [N], dy's last dimension
func.func @f(%dy: tensor<2x4x16xf32>) {
  // expected-error @+1 {{'moe.bias_grad' op dbias must have shape 16, got 4}}
  %db = moe.bias_grad %dy : tensor<2x4x16xf32> -> tensor<4xf32>
  return
}

// -----

// ffn_grad: dw_gate exactly when w_gate
func.func @f(%x: tensor<6x8xf32>, %up: tensor<8x32xf32>, %down: tensor<32x8xf32>, %gate: tensor<8x32xf32>, %dy: tensor<6x8xf32>) {
  // expected-error @+1 {{'moe.ffn_grad' op dw_gate must be present exactly when w_gate is}}
  %dx, %du, %dd = moe.ffn_grad swiglu %x, %up, %down, %dy gate %gate
      : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<6x8xf32>, tensor<8x32xf32>)
      -> (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>)
  return
}

// -----

// ffn_grad: dy has x's type
func.func @f(%x: tensor<6x8xf32>, %up: tensor<8x32xf32>, %down: tensor<32x8xf32>, %dy: tensor<6x8xf16>) {
  // expected-error @+1 {{'moe.ffn_grad' op dy must have the type of x ('tensor<6x8xf32>'), got 'tensor<6x8xf16>'}}
  %dx, %du, %dd = moe.ffn_grad gelu %x, %up, %down, %dy
      : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<6x8xf16>)
      -> (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>)
  return
}

// -----

// ffn_grad: dw_down has w_down's type
func.func @f(%x: tensor<6x8xf32>, %up: tensor<8x32xf32>, %down: tensor<32x8xf32>, %dy: tensor<6x8xf32>) {
  // expected-error @+1 {{'moe.ffn_grad' op dw_down must have the type of w_down ('tensor<32x8xf32>'), got 'tensor<8x32xf32>'}}
  %dx, %du, %dd = moe.ffn_grad relu %x, %up, %down, %dy
      : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<6x8xf32>)
      -> (tensor<6x8xf32>, tensor<8x32xf32>, tensor<8x32xf32>)
  return
}

// -----

// expert_ffn_grad: dw_gate exactly when w_gate
func.func @f(%x: tensor<4x5x8xf32>, %up: tensor<4x8x16xf32>, %down: tensor<4x16x8xf32>, %dy: tensor<4x5x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn_grad' op dw_gate must be present exactly when w_gate is}}
  %dx, %du, %dd, %dg = moe.expert_ffn_grad gelu %x, %up, %down, %dy
      : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x5x8xf32>)
      -> (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x8x16xf32>)
  return
}

// -----

// expert_ffn_grad: rows as on expert_ffn
func.func @f(%x: tensor<4x5x8xf32>, %up: tensor<4x8x16xf32>, %down: tensor<4x16x8xf32>, %dy: tensor<4x5x8xf32>, %r: tensor<6xi32>) {
  // expected-error @+1 {{'moe.expert_ffn_grad' op rows has 6 entries; expected E * G for the 4 experts, with G dividing the 5 slots}}
  %dx, %du, %dd = moe.expert_ffn_grad gelu %x, %up, %down, %dy rows %r
      : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x5x8xf32>, tensor<6xi32>)
      -> (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>)
  return
}

// -----

// expert_ffn_grad: dw_gate has w_gate's type
func.func @f(%x: tensor<4x5x8xf32>, %up: tensor<4x8x16xf32>, %down: tensor<4x16x8xf32>, %gate: tensor<4x8x16xf32>, %dy: tensor<4x5x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn_grad' op dw_gate must have the type of w_gate ('tensor<4x8x16xf32>'), got 'tensor<4x8x16xbf16>'}}
  %dx, %du, %dd, %dg = moe.expert_ffn_grad swiglu %x, %up, %down, %dy gate %gate
      : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x5x8xf32>, tensor<4x8x16xf32>)
      -> (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x8x16xbf16>)
  return
}

// -----

// router_grad: x has rank >= 1
func.func @f(%x: tensor<f32>, %w: tensor<8x4xf32>, %dg: tensor<2xf32>, %daux: tensor<f32>) {
  // expected-error @+1 {{'moe.router_grad' op x must have rank >= 1}}
  %dx, %dw = moe.router_grad softmax %x, %w, %dg, %daux top_k 2
      : (tensor<f32>, tensor<8x4xf32>, tensor<2xf32>, tensor<f32>) -> (tensor<f32>, tensor<8x4xf32>)
  return
}

// -----

// router_grad: groups >= 1
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %dg: tensor<2x4x2xf32>, %daux: tensor<f32>) {
  // expected-error @+1 {{'moe.router_grad' op groups must be >= 1, got 0}}
  %dx, %dw = moe.router_grad softmax %x, %w, %dg, %daux top_k 2 {groups = 0 : i64}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x2xf32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<8x4xf32>)
  return
}

// -----

// router_grad: groups divide the batch
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %dg: tensor<2x4x2xf32>, %daux: tensor<f32>) {
  // expected-error @+1 {{'moe.router_grad' op groups (4) must divide the batch dimension (2): a group is whole sequences}}
  %dx, %dw = moe.router_grad softmax %x, %w, %dg, %daux top_k 2 {groups = 4 : i64}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x2xf32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<8x4xf32>)
  return
}

// -----

// router_grad: dgates is [..., top_k]
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %dg: tensor<2x4x3xf32>, %daux: tensor<f32>) {
  // expected-error @+1 {{'moe.router_grad' op dgates must have shape 2x4x2, got 2x4x3}}
  %dx, %dw = moe.router_grad softmax %x, %w, %dg, %daux top_k 2
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x3xf32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<8x4xf32>)
  return
}

// -----

// router_grad: dweight has weight's type
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %dg: tensor<2x4x2xf32>, %daux: tensor<f32>) {
  // expected-error @+1 {{'moe.router_grad' op dweight must have the type of weight ('tensor<8x4xf32>'), got 'tensor<4x8xf32>'}}
  %dx, %dw = moe.router_grad sigmoid %x, %w, %dg, %daux top_k 2
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x2xf32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

// dispatch_grad: dbuf is [E, C, D]
func.func @f(%dbuf: tensor<20x8xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.dispatch_grad' op dbuf must have rank 3 ([E, C, D]), got rank 2}}
  %dx = moe.dispatch_grad %dbuf, %e : (tensor<20x8xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  return
}

// -----

// dispatch_grad: experts have rank >= 1
func.func @f(%dbuf: tensor<4x5x8xf32>, %e: tensor<i32>) {
  // expected-error @+1 {{'moe.dispatch_grad' op experts must have rank >= 1}}
  %dx = moe.dispatch_grad %dbuf, %e : (tensor<4x5x8xf32>, tensor<i32>) -> tensor<8xf32>
  return
}

// -----

// dispatch_grad: the result is [..., D] with the experts' leading dimensions
func.func @f(%dbuf: tensor<4x5x8xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.dispatch_grad' op dx must have shape 2x4x8, got 2x4x2}}
  %dx = moe.dispatch_grad %dbuf, %e : (tensor<4x5x8xf32>, tensor<2x4x2xi32>) -> tensor<2x4x2xf32>
  return
}

// -----

// combine_grad: gates have rank >= 1
func.func @f(%y: tensor<4x5x8xf32>, %g: tensor<f32>, %e: tensor<i32>, %dout: tensor<8xf32>) {
  // expected-error @+1 {{'moe.combine_grad' op gates must have rank >= 1}}
  %dy, %dg = moe.combine_grad %y, %g, %e, %dout
      : (tensor<4x5x8xf32>, tensor<f32>, tensor<i32>, tensor<8xf32>) -> (tensor<4x5x8xf32>, tensor<f32>)
  return
}

// -----

// combine_grad: y has rank >= 1 (was a crash: its last dimension was read
// before its rank was checked)
func.func @f(%y: tensor<f32>, %g: tensor<2x2xf32>, %e: tensor<2x2xi32>, %dout: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.combine_grad' op y must have rank >= 1}}
  %dy, %dg = moe.combine_grad %y, %g, %e, %dout
      : (tensor<f32>, tensor<2x2xf32>, tensor<2x2xi32>, tensor<2x8xf32>) -> (tensor<f32>, tensor<2x2xf32>)
  return
}

// -----

// combine_grad: dout is [..., D] with the gates' leading dimensions
func.func @f(%y: tensor<4x5x8xf32>, %g: tensor<2x4x2xf32>, %e: tensor<2x4x2xi32>, %dout: tensor<2x4x5xf32>) {
  // expected-error @+1 {{'moe.combine_grad' op dout must have shape 2x4x8, got 2x4x5}}
  %dy, %dg = moe.combine_grad %y, %g, %e, %dout
      : (tensor<4x5x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x5xf32>) -> (tensor<4x5x8xf32>, tensor<2x4x2xf32>)
  return
}

// -----

// combine_grad: dgates has the gates' type
func.func @f(%y: tensor<4x5x8xf32>, %g: tensor<2x4x2xf32>, %e: tensor<2x4x2xi32>, %dout: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.combine_grad' op dgates must have the type of gates ('tensor<2x4x2xf32>'), got 'tensor<2x4x2xf16>'}}
  %dy, %dg = moe.combine_grad %y, %g, %e, %dout
      : (tensor<4x5x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x8xf32>) -> (tensor<4x5x8xf32>, tensor<2x4x2xf16>)
  return
}

// -----

// cross_entropy_grad: the loss gradient is an f32 scalar
func.func @f(%l: tensor<2x4x32xf32>, %t: tensor<2x4xi32>, %dloss: tensor<1xf32>) {
  // expected-error @+1 {{'moe.cross_entropy_grad' op operand #2 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %0 = moe.cross_entropy_grad %l, %t, %dloss : tensor<2x4x32xf32>, tensor<2x4xi32>, tensor<1xf32>
  return
}

// -----

// router_grad: unequal groups cover the tokens
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %dg: tensor<2x4x2xf32>, %daux: tensor<f32>) {
  // expected-error @+1 {{'moe.router_grad' op group_sizes sum to 12 tokens, not the 8 tokens of x}}
  %dx, %dw = moe.router_grad softmax %x, %w, %dg, %daux top_k 2 {groups = 2 : i64, group_sizes = array<i64: 8, 4>}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x2xf32>, tensor<f32>) -> (tensor<2x4x8xf32>, tensor<8x4xf32>)
  return
}
