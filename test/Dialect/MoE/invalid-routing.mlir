// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of moe.router, moe.dispatch, moe.expert_ffn and moe.combine.

// router: x has rank >= 1
func.func @f(%x: tensor<f32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op x must have rank >= 1}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 : (tensor<f32>, tensor<8x4xf32>) -> (tensor<2xf32>, tensor<2xi32>, tensor<f32>)
  return
}

// -----

// router: weight is [D, E]
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<32xf32>) {
  // expected-error @+1 {{'moe.router' op weight must have rank 2 ([D, E]), got rank 1}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 : (tensor<2x4x8xf32>, tensor<32xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: weight input dimension is x's width
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{'moe.router' op weight input dimension 16 does not match x width 8}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 : (tensor<2x4x8xf32>, tensor<16x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: the bias has x's element type, or f32
func.func @f(%x: tensor<2x4x8xbf16>, %w: tensor<8x4xbf16>, %b: tensor<4xf16>) {
  // expected-error @+1 {{'moe.router' op bias must have element type 'bf16' (that of x) or f32, got 'f16'}}
  %g, %e, %a = moe.router softmax %x, %w bias %b top_k 2 : (tensor<2x4x8xbf16>, tensor<8x4xbf16>, tensor<4xf16>) -> (tensor<2x4x2xbf16>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: bias is [E]
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'moe.router' op bias must have shape 4, got 8}}
  %g, %e, %a = moe.router softmax %x, %w bias %b top_k 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<8xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: bias_update_rate steers a bias, so it needs one
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op bias_update_rate needs a selection bias operand}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 {bias_update_rate = 1.0e-3 : f64} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: bias_update_rate >= 0
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'moe.router' op bias_update_rate must be finite and >= 0, got -1.000000e+00}}
  %g, %e, %a = moe.router softmax %x, %w bias %b top_k 2 {bias_update_rate = -1.0 : f64} : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// fused_gate: the same bias_update_rate check
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op bias_update_rate needs a selection bias operand}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 2 {bias_update_rate = 1.0e-3 : f64} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// router: top_k >= 1
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op top_k (0) must be in [1, 4], the number of experts}}
  %g, %e, %a = moe.router softmax %x, %w top_k 0 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x0xf32>, tensor<2x4x0xi32>, tensor<f32>)
  return
}

// -----

// router: top_k <= number of experts
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op top_k (5) must be in [1, 4], the number of experts}}
  %g, %e, %a = moe.router softmax %x, %w top_k 5 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x5xf32>, tensor<2x4x5xi32>, tensor<f32>)
  return
}

// -----

// router: gates are [..., top_k]
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op gates must have shape 2x4x2, got 2x4x3}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x3xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: experts are [..., top_k]
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op experts must have shape 2x4x2, got 8x2}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<8x2xi32>, tensor<f32>)
  return
}

// -----

// router: experts are i32
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op result #1 must be statically shaped tensor of 32-bit signless integer values, but got 'tensor<2x4x2xi64>'}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi64>, tensor<f32>)
  return
}

// -----

// router: gates have x's element type
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op gates must have element type 'f32' (that of x), got 'bf16'}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xbf16>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: aux loss is an f32 scalar
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op result #2 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<1xf32>)
  return
}

// -----

// router: capacity_factor > 0
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op capacity_factor must be > 0, got 0.000000e+00}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 {capacity_factor = 0.0 : f32} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: aux_loss_coef >= 0
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op aux_loss_coef must be >= 0, got -5.000000e-01}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 {aux_loss_coef = -0.5 : f32} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: z_loss_coef >= 0
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op z_loss_coef must be >= 0, got -1.000000e+00}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 {z_loss_coef = -1.0 : f32} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// router: routed_scaling > 0
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op routed_scaling must be > 0, got 0.000000e+00}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 {routed_scaling = 0.0 : f32} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return
}

// -----

// dispatch: experts carry x's leading dimensions
func.func @f(%x: tensor<2x4x8xf32>, %e: tensor<8x2xi32>) {
  // expected-error @+1 {{'moe.dispatch' op experts (8x2) must be [..., k] with the leading dimensions of x (2x4x8)}}
  %0 = moe.dispatch %x, %e : (tensor<2x4x8xf32>, tensor<8x2xi32>) -> tensor<4x4x8xf32>
  return
}

// -----

// dispatch: result is [E, C, D]
func.func @f(%x: tensor<2x4x8xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.dispatch' op result must have rank 3 ([E, C, D]), got rank 2}}
  %0 = moe.dispatch %x, %e : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<16x8xf32>
  return
}

// -----

// dispatch: at least one expert and one slot
func.func @f(%x: tensor<2x4x8xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.dispatch' op result needs at least one expert and one slot, got 4x0x8}}
  %0 = moe.dispatch %x, %e : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x0x8xf32>
  return
}

// -----

// dispatch: result width is x's
func.func @f(%x: tensor<2x4x8xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.dispatch' op result width 16 must equal x width 8}}
  %0 = moe.dispatch %x, %e : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x4x16xf32>
  return
}

// -----

// dispatch: result has x's element type
func.func @f(%x: tensor<2x4x8xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.dispatch' op result must have element type 'f32' (that of x), got 'f16'}}
  %0 = moe.dispatch %x, %e : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x4x8xf16>
  return
}

// -----

// expert_ffn: x is [E, C, D]
func.func @f(%x: tensor<4x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op x must have rank 3 ([E, C, D]), got rank 2}}
  %0 = moe.expert_ffn gelu %x, %u, %d : (tensor<4x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// expert_ffn: rows is 1-d
func.func @f(%x: tensor<4x6x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>, %r: tensor<4x2xi32>) {
  // expected-error @+1 {{'moe.expert_ffn' op rows must be 1-d, got 4x2}}
  %0 = moe.expert_ffn gelu %x, %u, %d rows %r : (tensor<4x6x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<4x2xi32>) -> tensor<4x6x8xf32>
  return
}

// -----

// expert_ffn: rows is [E * G], G dividing the slots
func.func @f(%x: tensor<4x6x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>, %r: tensor<16xi32>) {
  // expected-error @+1 {{'moe.expert_ffn' op rows has 16 entries; expected E * G for the 4 experts, with G dividing the 6 slots}}
  %0 = moe.expert_ffn gelu %x, %u, %d rows %r : (tensor<4x6x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>, tensor<16xi32>) -> tensor<4x6x8xf32>
  return
}

// -----

// expert_ffn: w_up is [E, D, F]
func.func @f(%x: tensor<4x5x8xf32>, %u: tensor<2x8x16xf32>, %d: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op w_up must have shape 4x8x16, got 2x8x16}}
  %0 = moe.expert_ffn gelu %x, %u, %d : (tensor<4x5x8xf32>, tensor<2x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x5x8xf32>
  return
}

// -----

// expert_ffn: w_down is [E, F, D]
func.func @f(%x: tensor<4x5x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x8x16xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op w_down must have shape 4x16x8, got 4x8x16}}
  %0 = moe.expert_ffn gelu %x, %u, %d : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x5x8xf32>
  return
}

// -----

// expert_ffn: swiglu needs a gate
func.func @f(%x: tensor<4x5x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op swiglu activation requires a gate weight}}
  %0 = moe.expert_ffn swiglu %x, %u, %d : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x5x8xf32>
  return
}

// -----

// expert_ffn: one element type
func.func @f(%x: tensor<4x5x8xbf16>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op w_up must have element type 'bf16' (that of x), got 'f32'}}
  %0 = moe.expert_ffn gelu %x, %u, %d : (tensor<4x5x8xbf16>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x5x8xbf16>
  return
}

// -----

// expert_ffn: placement needs a grid
func.func @f(%x: tensor<4x5x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op placement requires a 'moe.grid' attribute on the enclosing module}}
  %0 = moe.expert_ffn gelu %x, %u, %d {placement = #moe.placement<[[0, 1], [2, 3]]>} : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x5x8xf32>
  return
}

// -----

// expert_ffn: one placement list per ep rank
module attributes {moe.grid = #moe.grid<ep = 4>} {
func.func @f(%x: tensor<4x5x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op placement lists 2 ranks but the grid has ep = 4}}
  %0 = moe.expert_ffn gelu %x, %u, %d {placement = #moe.placement<[[0, 1], [2, 3]]>} : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x5x8xf32>
  return
}
}

// -----

// expert_ffn: placement names existing experts
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%x: tensor<4x5x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op placement names expert 4 but there are 4 experts}}
  %0 = moe.expert_ffn gelu %x, %u, %d {placement = #moe.placement<[[0, 1], [2, 3, 4]]>} : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x5x8xf32>
  return
}
}

// -----

// expert_ffn: placement places every expert
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%x: tensor<4x5x8xf32>, %u: tensor<4x8x16xf32>, %d: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'moe.expert_ffn' op placement leaves expert 2 on no rank}}
  %0 = moe.expert_ffn gelu %x, %u, %d {placement = #moe.placement<[[0, 1], [3]]>} : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x5x8xf32>
  return
}
}

// -----

// combine: y is [E, C, D]
func.func @f(%y: tensor<20x8xf32>, %g: tensor<2x4x2xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.combine' op y must have rank 3 ([E, C, D]), got rank 2}}
  %0 = moe.combine %y, %g, %e : (tensor<20x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  return
}

// -----

// combine: experts are shaped like gates
func.func @f(%y: tensor<4x5x8xf32>, %g: tensor<2x4x2xf32>, %e: tensor<2x4x1xi32>) {
  // expected-error @+1 {{'moe.combine' op experts must have shape 2x4x2, got 2x4x1}}
  %0 = moe.combine %y, %g, %e : (tensor<4x5x8xf32>, tensor<2x4x2xf32>, tensor<2x4x1xi32>) -> tensor<2x4x8xf32>
  return
}

// -----

// combine: gates have rank >= 1
func.func @f(%y: tensor<4x5x8xf32>, %g: tensor<f32>, %e: tensor<i32>) {
  // expected-error @+1 {{'moe.combine' op gates must have rank >= 1 ([..., k])}}
  %0 = moe.combine %y, %g, %e : (tensor<4x5x8xf32>, tensor<f32>, tensor<i32>) -> tensor<8xf32>
  return
}

// -----

// combine: result is [..., D]
func.func @f(%y: tensor<4x5x8xf32>, %g: tensor<2x4x2xf32>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.combine' op result must have shape 2x4x8, got 8x8}}
  %0 = moe.combine %y, %g, %e : (tensor<4x5x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>) -> tensor<8x8xf32>
  return
}

// -----

// combine: one element type
func.func @f(%y: tensor<4x5x8xf32>, %g: tensor<2x4x2xf16>, %e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.combine' op gates must have element type 'f32' (that of y), got 'f16'}}
  %0 = moe.combine %y, %g, %e : (tensor<4x5x8xf32>, tensor<2x4x2xf16>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  return
}

// -----

// fused_gate: shares the router's checks (top_k against the experts)
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op top_k (5) must be in [1, 4], the number of experts}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 5 capacity 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x5xf32>, tensor<2x4x5xi32>, tensor<2x4x5xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// fused_gate: capacity >= 1, read signed (-1 was accepted as 2^64 - 1)
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op capacity must be >= 1, got -1}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity -1 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// fused_gate: capacity >= 1
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op capacity must be >= 1, got 0}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 0 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// fused_gate: counts has one entry per expert
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op counts must have shape 4, got 3}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<3xi32>, tensor<f32>)
  return
}

// -----

// router: a balancing loss per sequence needs the sequences ([B, S, D])
func.func @f(%x: tensor<8x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.router' op aux_per_sequence needs x of rank >= 3 ([B, S, ..., D]: its sequences), got rank 2}}
  %g, %e, %a = moe.router softmax %x, %w top_k 2 {aux_per_sequence = true} : (tensor<8x8xf32>, tensor<8x4xf32>) -> (tensor<8x2xf32>, tensor<8x2xi32>, tensor<f32>)
  return
}
