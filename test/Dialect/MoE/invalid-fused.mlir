// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of fused gating (moe-fuse-gating): moe.fused_gate's routing
// groups, moe.permute, moe.unpermute and moe.unpermute_grad. fused_gate's
// router checks are in invalid-routing.mlir.

// fused_gate: groups >= 1
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op groups must be >= 1, got 0}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 2 {groups = 0 : i64} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// fused_gate: groups are whole sequences
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op groups (3) must divide the batch dimension (2): a group is whole sequences}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 2 {groups = 3 : i64} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// fused_gate: slots are shaped like experts
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op slots must have shape 2x4x2, got 2x4x1}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 2 : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x1xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// permute: slots carry x's token dimensions
func.func @f(%x: tensor<2x4x8xf32>, %s: tensor<8x2xi32>) {
  // expected-error @+1 {{'moe.permute' op slots (8x2) must be [..., k] with the token dimensions of 2x4x8}}
  %0 = moe.permute %x, %s : (tensor<2x4x8xf32>, tensor<8x2xi32>) -> tensor<4x4x8xf32>
  return
}

// -----

// permute: slots have rank >= 1
func.func @f(%x: tensor<2x4x8xf32>, %s: tensor<i32>) {
  // expected-error @+1 {{'moe.permute' op slots (scalar) must be [..., k] with the token dimensions of 2x4x8}}
  %0 = moe.permute %x, %s : (tensor<2x4x8xf32>, tensor<i32>) -> tensor<4x4x8xf32>
  return
}

// -----

// permute: the result is [E, C, D]
func.func @f(%x: tensor<2x4x8xf32>, %s: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.permute' op result must have rank 3 ([E, C, D]), got rank 2}}
  %0 = moe.permute %x, %s : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<16x8xf32>
  return
}

// -----

// permute: the result has x's width
func.func @f(%x: tensor<2x4x8xf32>, %s: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.permute' op result width must equal x width}}
  %0 = moe.permute %x, %s : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x4x16xf32>
  return
}

// -----

// permute: the result has x's element type
func.func @f(%x: tensor<2x4x8xf32>, %s: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.permute' op result must have element type 'f32' (that of x), got 'bf16'}}
  %0 = moe.permute %x, %s : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x4x8xbf16>
  return
}

// -----

// unpermute: buf is [E, C, D]
func.func @f(%buf: tensor<16x8xf32>, %s: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.unpermute' op buf must have rank 3 ([E, C, D]), got rank 2}}
  %0 = moe.unpermute %buf, %s : (tensor<16x8xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  return
}

// -----

// unpermute: slots carry the result's token dimensions
func.func @f(%buf: tensor<4x4x8xf32>, %s: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.unpermute' op slots (2x4x2) must be [..., k] with the token dimensions of 8x8}}
  %0 = moe.unpermute %buf, %s : (tensor<4x4x8xf32>, tensor<2x4x2xi32>) -> tensor<8x8xf32>
  return
}

// -----

// unpermute: weights have the slots' shape
func.func @f(%buf: tensor<4x4x8xf32>, %s: tensor<2x4x2xi32>, %w: tensor<2x4x1xf32>) {
  // expected-error @+1 {{'moe.unpermute' op weights must have shape 2x4x2, got 2x4x1}}
  %0 = moe.unpermute %buf, %s weights %w : (tensor<4x4x8xf32>, tensor<2x4x2xi32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

// unpermute: the result has the buffer's width
func.func @f(%buf: tensor<4x4x8xf32>, %s: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.unpermute' op result width must equal the buffer width}}
  %0 = moe.unpermute %buf, %s : (tensor<4x4x8xf32>, tensor<2x4x2xi32>) -> tensor<2x4x4xf32>
  return
}

// -----

// unpermute: one element type
func.func @f(%buf: tensor<4x4x8xf32>, %s: tensor<2x4x2xi32>, %w: tensor<2x4x2xf16>) {
  // expected-error @+1 {{'moe.unpermute' op weights must have element type 'f32' (that of buf), got 'f16'}}
  %0 = moe.unpermute %buf, %s weights %w : (tensor<4x4x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf16>) -> tensor<2x4x8xf32>
  return
}

// -----

// unpermute_grad: dbuf has buf's type
func.func @f(%buf: tensor<4x4x8xf32>, %s: tensor<2x4x2xi32>, %w: tensor<2x4x2xf32>, %dout: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.unpermute_grad' op results must have the types of buf and weights}}
  %dbuf, %dw = moe.unpermute_grad %buf, %s, %w, %dout
      : (tensor<4x4x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>, tensor<2x4x8xf32>) -> (tensor<4x4x8xbf16>, tensor<2x4x2xf32>)
  return
}

// -----

// unpermute_grad: dweights has the weights' type
func.func @f(%buf: tensor<4x4x8xf32>, %s: tensor<2x4x2xi32>, %w: tensor<2x4x2xf32>, %dout: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.unpermute_grad' op results must have the types of buf and weights}}
  %dbuf, %dw = moe.unpermute_grad %buf, %s, %w, %dout
      : (tensor<4x4x8xf32>, tensor<2x4x2xi32>, tensor<2x4x2xf32>, tensor<2x4x8xf32>) -> (tensor<4x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

// place_slots: the placed slots have the slots' type
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op result_slots must have the type of slots}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2, 3>, block = 4 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x1xi32>, tensor<4xi32>)
  return
}

// -----

// place_slots: placed counts are [P]
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op result_counts must have rank 1 ([P]), got rank 2}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2, 3>, block = 4 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<2x2xi32>)
  return
}

// -----

// place_slots: counts are [E]
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<2x2xi32>) {
  // expected-error @+1 {{'moe.place_slots' op counts must have rank 1 ([E]), got rank 2}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2, 3>, block = 4 : i64} : (tensor<2x4x2xi32>, tensor<2x2xi32>) -> (tensor<2x4x2xi32>, tensor<2x2xi32>)
  return
}

// -----

// place_slots: one order entry per position
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op order has 3 entries for 4 positions (result_counts)}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2>, block = 4 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  return
}

// -----

// place_slots: every expert has a position
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op order places no replica of expert 2}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 1, 3, -1, -1>, block = 4 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<6xi32>)
  return
}

// -----

// place_slots: order names experts or -1
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op order entries must be experts in [0, 4) or -1 (empty), got 4}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2, 4>, block = 4 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  return
}

// -----

// place_slots: block >= 1
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op block must be >= 1, got 0}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2, 3>, block = 0 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  return
}

// -----

// place_slots: layer >= 0
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op layer must be >= 0, got -1}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2, 3>, block = 4 : i64, layer = -1 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  return
}

// -----

// fused_gate: one group size per group
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op group_sizes has 1 entries for groups = 2}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 2 {groups = 2 : i64, group_sizes = array<i64: 8>} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// fused_gate: unequal groups are whole sequences
func.func @f(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{'moe.fused_gate' op group_sizes entry 6 is not a positive number of whole sequences of 4 tokens}}
  %g, %e, %s, %c, %a = moe.fused_gate softmax %x, %w top_k 2 capacity 2 {groups = 2 : i64, group_sizes = array<i64: 6, 2>} : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<2x4x2xi32>, tensor<4xi32>, tensor<f32>)
  return
}

// -----

// place_slots: chunks and ranks together
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op chunks and ranks must come together}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2, 3>, block = 4 : i64, chunks = 2 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  return
}

// -----

// place_slots: positions cut into chunks of ranks
func.func @f(%s: tensor<2x4x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.place_slots' op chunks (2) and ranks (4) must be >= 1 with 4 positions divisible by their product}}
  %a, %b = moe.place_slots %s, %c {order = array<i64: 0, 1, 2, 3>, block = 4 : i64, chunks = 2 : i64, ranks = 4 : i64} : (tensor<2x4x2xi32>, tensor<4xi32>) -> (tensor<2x4x2xi32>, tensor<4xi32>)
  return
}
