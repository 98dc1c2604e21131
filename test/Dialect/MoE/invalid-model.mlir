// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of moe.param, moe.get_param and the dense model ops
// (embedding, rms_norm, attention, linear, add, ffn, cross_entropy, fill).

// param: rank >= 1
// expected-error @+1 {{'moe.param' op parameter must have rank >= 1}}
moe.param @w : tensor<f32> init <ones>

// -----

// param: every dimension >= 1
// expected-error @+1 {{'moe.param' op parameter dimensions must be >= 1, got 4x0}}
moe.param @w : tensor<4x0xf32> init <ones>

// -----

// param: float element type
// expected-error @+1 {{'moe.param' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
moe.param @w : tensor<4xi32> init <ones>

// -----

// param: at most 2^48 bytes (sums of sizes stay within int64)
// expected-error @+1 {{'moe.param' op attribute 'type' of type 'tensor<9223372036854775807xf32>' holds more than 2^48 bytes, the limit of one moe tensor}}
moe.param @w : tensor<9223372036854775807xf32> init <ones>

// -----

// any moe op: every tensor operand and result at most 2^48 bytes
func.func @huge(%x: tensor<65536x65536x65536xf32>) -> tensor<65536x65536x65536xf32> {
  // expected-error @+1 {{'moe.add' op operand #0 of type 'tensor<65536x65536x65536xf32>' holds more than 2^48 bytes, the limit of one moe tensor}}
  %0 = moe.add %x, %x : tensor<65536x65536x65536xf32>
  return %0 : tensor<65536x65536x65536xf32>
}

// -----

// param: f64 is not a moe element type
// expected-error @+1 {{'moe.param' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
moe.param @w : tensor<4xf64> init <ones>

// -----

// param: static shape
// expected-error @+1 {{'moe.param' op attribute 'type' failed to satisfy constraint: type attribute of statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values}}
moe.param @w : tensor<?x4xf32> init <ones>

// -----

// param: directly in a module
func.func @f() {
  // expected-error @+1 {{'moe.param' op expects parent op 'builtin.module'}}
  moe.param @w : tensor<4xf32> init <ones>
  return
}

// -----

// get_param: names a moe.param
func.func @f() {
  // expected-error @+1 {{'moe.get_param' op 'missing' does not name a moe.param}}
  %0 = moe.get_param @missing : tensor<4xf32>
  return
}

// -----

// get_param: type matches the parameter
moe.param @w : tensor<4xf32> init <ones>
func.func @f() {
  // expected-error @+1 {{'moe.get_param' op result type 'tensor<8xf32>' differs from parameter 'w' of type 'tensor<4xf32>'}}
  %0 = moe.get_param @w : tensor<8xf32>
  return
}

// -----

// embedding: ids are i32
func.func @f(%ids: tensor<2x4xi64>, %t: tensor<16x8xf32>) {
  // expected-error @+1 {{'moe.embedding' op operand #0 must be statically shaped tensor of 32-bit signless integer values, but got 'tensor<2x4xi64>'}}
  %0 = moe.embedding %ids, %t : tensor<2x4xi64>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return
}

// -----

// embedding: table is [V, D]
func.func @f(%ids: tensor<2x4xi32>, %t: tensor<16xf32>) {
  // expected-error @+1 {{'moe.embedding' op table must have rank 2 ([V, D]), got rank 1}}
  %0 = moe.embedding %ids, %t : tensor<2x4xi32>, tensor<16xf32> -> tensor<2x4x8xf32>
  return
}

// -----

// embedding: result is ids shape + D
func.func @f(%ids: tensor<2x4xi32>, %t: tensor<16x8xf32>) {
  // expected-error @+1 {{'moe.embedding' op result must have shape 2x4x8, got 2x4x16}}
  %0 = moe.embedding %ids, %t : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  return
}

// -----

// embedding: result element type is the table's
func.func @f(%ids: tensor<2x4xi32>, %t: tensor<16x8xf32>) {
  // expected-error @+1 {{'moe.embedding' op result must have element type 'f32' (that of table), got 'bf16'}}
  %0 = moe.embedding %ids, %t : tensor<2x4xi32>, tensor<16x8xf32> -> tensor<2x4x8xbf16>
  return
}

// -----

// rms_norm: x has rank >= 1
func.func @f(%x: tensor<f32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'moe.rms_norm' op x must have rank >= 1}}
  %0 = moe.rms_norm %x, %g : tensor<f32>, tensor<8xf32>
  return
}

// -----

// rms_norm: gamma's size divides D (groups of it are normalised)
func.func @f(%x: tensor<2x8xf32>, %g: tensor<3xf32>) {
  // expected-error @+1 {{'moe.rms_norm' op gamma's size (3) must divide x's last dimension (8): the groups normalised}}
  %0 = moe.rms_norm %x, %g : tensor<2x8xf32>, tensor<3xf32>
  return
}

// -----

// clamp: a finite limit > 0
func.func @f(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.clamp' op limit must be finite and > 0, got 0}}
  %0 = moe.clamp %x {limit = 0.0 : f32} : tensor<2x8xf32>
  return
}

// -----

// sigmoid_gate: the gate is x's shape with a last dimension of 1
func.func @f(%x: tensor<2x8xf32>, %g: tensor<2x2xf32>) {
  // expected-error @+1 {{'moe.sigmoid_gate' op gate must have shape 2x1, got 2x2}}
  %0 = moe.sigmoid_gate %x, %g : tensor<2x8xf32>, tensor<2x2xf32>
  return
}

// -----

// sigmoid_gate: the gate has x's element type
func.func @f(%x: tensor<2x8xf32>, %g: tensor<2x1xbf16>) {
  // expected-error @+1 {{'moe.sigmoid_gate' op gate must have element type 'f32' (that of x), got 'bf16'}}
  %0 = moe.sigmoid_gate %x, %g : tensor<2x8xf32>, tensor<2x1xbf16>
  return
}

// -----

// sigmoid_gate: x has rank >= 1
func.func @f(%x: tensor<f32>, %g: tensor<f32>) {
  // expected-error @+1 {{'moe.sigmoid_gate' op x must have rank >= 1}}
  %0 = moe.sigmoid_gate %x, %g : tensor<f32>, tensor<f32>
  return
}

// -----

// rms_norm: gamma is a vector
func.func @f(%x: tensor<2x8xf32>, %g: tensor<2x4xf32>) {
  // expected-error @+1 {{'moe.rms_norm' op gamma must have rank 1 ([G]), got rank 2}}
  %0 = moe.rms_norm %x, %g : tensor<2x8xf32>, tensor<2x4xf32>
  return
}

// -----

// rms_norm: gamma has x's element type
func.func @f(%x: tensor<2x8xf32>, %g: tensor<8xbf16>) {
  // expected-error @+1 {{'moe.rms_norm' op gamma must have element type 'f32' (that of x), got 'bf16'}}
  %0 = moe.rms_norm %x, %g : tensor<2x8xf32>, tensor<8xbf16>
  return
}

// -----

// rms_norm: epsilon > 0
func.func @f(%x: tensor<2x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'moe.rms_norm' op epsilon must be > 0, got 0.000000e+00}}
  %0 = moe.rms_norm %x, %g {epsilon = 0.0 : f32} : tensor<2x8xf32>, tensor<8xf32>
  return
}

// -----

// latent_attention: q is heads x (content + rotary key width)
func.func @f(%q: tensor<2x4x10xf32>, %k: tensor<2x4x8xf32>, %kr: tensor<2x4x2xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.latent_attention' op q must have shape 2x4x12, got 2x4x10}}
  %0 = moe.latent_attention %q, %k, %kr, %v heads 2 : tensor<2x4x10xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x6xf32> -> tensor<2x4x6xf32>
  return
}

// -----

// latent_attention: rotary embeddings need an even rotary key
func.func @f(%q: tensor<2x4x14xf32>, %k: tensor<2x4x8xf32>, %kr: tensor<2x4x3xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.latent_attention' op rotary embeddings need an even k_rope width, got 3}}
  %0 = moe.latent_attention %q, %k, %kr, %v heads 2 {rope_theta = 1.0e4 : f32} : tensor<2x4x14xf32>, tensor<2x4x8xf32>, tensor<2x4x3xf32>, tensor<2x4x6xf32> -> tensor<2x4x6xf32>
  return
}

// -----

// latent_attention: v's width divides into the heads
func.func @f(%q: tensor<2x4x12xf32>, %k: tensor<2x4x8xf32>, %kr: tensor<2x4x2xf32>, %v: tensor<2x4x7xf32>) {
  // expected-error @+1 {{'moe.latent_attention' op v width 7 is not a positive multiple of heads (2)}}
  %0 = moe.latent_attention %q, %k, %kr, %v heads 2 : tensor<2x4x12xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x7xf32> -> tensor<2x4x7xf32>
  return
}

// -----

// latent_attention: the result is v's type
func.func @f(%q: tensor<2x4x12xf32>, %k: tensor<2x4x8xf32>, %kr: tensor<2x4x2xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.latent_attention' op result must have shape 2x4x6, got 2x4x12}}
  %0 = moe.latent_attention %q, %k, %kr, %v heads 2 : tensor<2x4x12xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x6xf32> -> tensor<2x4x12xf32>
  return
}

// -----

// latent_attention: heads >= 1
func.func @f(%q: tensor<2x4x12xf32>, %k: tensor<2x4x8xf32>, %kr: tensor<2x4x2xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.latent_attention' op heads must be >= 1, got 0}}
  %0 = moe.latent_attention %q, %k, %kr, %v heads 0 : tensor<2x4x12xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x6xf32> -> tensor<2x4x6xf32>
  return
}

// -----

// latent_attention: every head has a content key
func.func @f(%q: tensor<2x4x12xf32>, %k: tensor<2x4x0xf32>, %kr: tensor<2x4x2xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.latent_attention' op k width 0 is not a positive multiple of heads (2)}}
  %0 = moe.latent_attention %q, %k, %kr, %v heads 2 : tensor<2x4x12xf32>, tensor<2x4x0xf32>, tensor<2x4x2xf32>, tensor<2x4x6xf32> -> tensor<2x4x6xf32>
  return
}

// -----

// latent_attention: a rotary key of width >= 1
func.func @f(%q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>, %kr: tensor<2x4x0xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.latent_attention' op k_rope must have a width >= 1}}
  %0 = moe.latent_attention %q, %k, %kr, %v heads 2 : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x0xf32>, tensor<2x4x6xf32> -> tensor<2x4x6xf32>
  return
}

// -----

// latent_attention: rope_theta > 0
func.func @f(%q: tensor<2x4x12xf32>, %k: tensor<2x4x8xf32>, %kr: tensor<2x4x2xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.latent_attention' op rope_theta must be > 0, got -1}}
  %0 = moe.latent_attention %q, %k, %kr, %v heads 2 {rope_theta = -1.0 : f32} : tensor<2x4x12xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32>, tensor<2x4x6xf32> -> tensor<2x4x6xf32>
  return
}

// -----

// attention: q has rank 3
func.func @f(%q: tensor<4x16xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.attention' op q must have rank 3 ([B, S, H * hd]), got rank 2}}
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 2 : tensor<4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

// attention: one element type
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x8xf16>, %v: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.attention' op k must have element type 'f32' (that of q), got 'f16'}}
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 2 : tensor<2x4x16xf32>, tensor<2x4x8xf16>, tensor<2x4x8xf32>
  return
}

// -----

// attention: heads >= 1
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.attention' op heads and kv_heads must be >= 1, got 0 and 2}}
  %0 = moe.attention %q, %k, %v heads 0 kv_heads 2 : tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

// attention: heads is a multiple of kv_heads
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x12xf32>, %v: tensor<2x4x12xf32>) {
  // expected-error @+1 {{'moe.attention' op heads (4) must be a multiple of kv_heads (3)}}
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 3 : tensor<2x4x16xf32>, tensor<2x4x12xf32>, tensor<2x4x12xf32>
  return
}

// -----

// attention: q width divisible by heads
func.func @f(%q: tensor<2x4x18xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.attention' op q width 18 is not divisible by heads (4)}}
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 2 : tensor<2x4x18xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

// attention: k is [B, S, kv_heads * hd]
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x16xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.attention' op k must have shape 2x4x8, got 2x4x16}}
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 2 : tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x8xf32>
  return
}

// -----

// attention: v matches k, batch and sequence match q
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x5x8xf32>) {
  // expected-error @+1 {{'moe.attention' op v must have shape 2x4x8, got 2x5x8}}
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 2 : tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x5x8xf32>
  return
}

// -----

// attention: rope_theta > 0
func.func @f(%q: tensor<2x4x16xf32>, %k: tensor<2x4x8xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'moe.attention' op rope_theta must be > 0, got -1.000000e+00}}
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 2 {rope_theta = -1.0 : f32} : tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

// -----

// attention: rotary embeddings need an even head width
func.func @f(%q: tensor<2x4x12xf32>, %k: tensor<2x4x6xf32>, %v: tensor<2x4x6xf32>) {
  // expected-error @+1 {{'moe.attention' op rotary embeddings need an even head width, got 3}}
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 2 {rope_theta = 1.0e4 : f32} : tensor<2x4x12xf32>, tensor<2x4x6xf32>, tensor<2x4x6xf32>
  return
}

// -----

// linear: weight is [K, N]
func.func @f(%x: tensor<2x8xf32>, %w: tensor<2x8x16xf32>) {
  // expected-error @+1 {{'moe.linear' op weight must have rank 2 ([K, N]), got rank 3}}
  %0 = moe.linear %x, %w : tensor<2x8xf32>, tensor<2x8x16xf32> -> tensor<2x16xf32>
  return
}

// -----

// linear: x has rank >= 1
func.func @f(%x: tensor<f32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.linear' op x must have rank >= 1}}
  %0 = moe.linear %x, %w : tensor<f32>, tensor<8x16xf32> -> tensor<16xf32>
  return
}

// -----

// linear: x width is K
func.func @f(%x: tensor<2x4xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.linear' op x width 4 does not match weight input dimension 8}}
  %0 = moe.linear %x, %w : tensor<2x4xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  return
}

// -----

// linear: result is x with last dimension N
func.func @f(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.linear' op result must have shape 2x16, got 2x8}}
  %0 = moe.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x8xf32>
  return
}

// -----

// linear: bias is [N]
func.func @f(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'moe.linear' op bias must have shape 16, got 8}}
  %0 = moe.linear %x, %w bias %b : tensor<2x8xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<2x16xf32>
  return
}

// -----

// linear: one element type
func.func @f(%x: tensor<2x8xf32>, %w: tensor<8x16xbf16>) {
  // expected-error @+1 {{'moe.linear' op weight must have element type 'f32' (that of x), got 'bf16'}}
  %0 = moe.linear %x, %w : tensor<2x8xf32>, tensor<8x16xbf16> -> tensor<2x16xf32>
  return
}

// -----

// add: one type
func.func @f(%a: tensor<2x8xf32>, %b: tensor<2x8xbf16>) {
  // expected-error @+1 {{'moe.add' op requires the same type for all operands and results}}
  %0 = "moe.add"(%a, %b) : (tensor<2x8xf32>, tensor<2x8xbf16>) -> tensor<2x8xf32>
  return
}

// -----

// ffn: x has rank >= 1
func.func @f(%x: tensor<f32>, %u: tensor<8x32xf32>, %d: tensor<32x8xf32>) {
  // expected-error @+1 {{'moe.ffn' op x must have rank >= 1}}
  %0 = moe.ffn gelu %x, %u, %d : (tensor<f32>, tensor<8x32xf32>, tensor<32x8xf32>) -> tensor<f32>
  return
}

// -----

// ffn: w_up is [D, F]
func.func @f(%x: tensor<4x8xf32>, %u: tensor<16x32xf32>, %d: tensor<32x8xf32>) {
  // expected-error @+1 {{'moe.ffn' op w_up must have shape 8x32, got 16x32}}
  %0 = moe.ffn gelu %x, %u, %d : (tensor<4x8xf32>, tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// ffn: w_up has rank 2
func.func @f(%x: tensor<4x8xf32>, %u: tensor<8xf32>, %d: tensor<32x8xf32>) {
  // expected-error @+1 {{'moe.ffn' op w_up must have rank 2 ([D, F]), got rank 1}}
  %0 = moe.ffn gelu %x, %u, %d : (tensor<4x8xf32>, tensor<8xf32>, tensor<32x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// ffn: w_down is [F, D]
func.func @f(%x: tensor<4x8xf32>, %u: tensor<8x32xf32>, %d: tensor<8x32xf32>) {
  // expected-error @+1 {{'moe.ffn' op w_down must have shape 32x8, got 8x32}}
  %0 = moe.ffn gelu %x, %u, %d : (tensor<4x8xf32>, tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<4x8xf32>
  return
}

// -----

// ffn: swiglu needs a gate
func.func @f(%x: tensor<4x8xf32>, %u: tensor<8x32xf32>, %d: tensor<32x8xf32>) {
  // expected-error @+1 {{'moe.ffn' op swiglu activation requires a gate weight}}
  %0 = moe.ffn swiglu %x, %u, %d : (tensor<4x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// ffn: gelu takes no gate
func.func @f(%x: tensor<4x8xf32>, %u: tensor<8x32xf32>, %d: tensor<32x8xf32>) {
  // expected-error @+1 {{'moe.ffn' op gelu activation takes no gate weight}}
  %0 = moe.ffn gelu %x, %u, %d gate %u : (tensor<4x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<8x32xf32>) -> tensor<4x8xf32>
  return
}

// -----

// ffn: gate is shaped like w_up
func.func @f(%x: tensor<4x8xf32>, %u: tensor<8x32xf32>, %d: tensor<32x8xf32>, %g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.ffn' op w_gate must have shape 8x32, got 8x16}}
  %0 = moe.ffn swiglu %x, %u, %d gate %g : (tensor<4x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<8x16xf32>) -> tensor<4x8xf32>
  return
}

// -----

// ffn: one element type
func.func @f(%x: tensor<4x8xf32>, %u: tensor<8x32xf16>, %d: tensor<32x8xf16>) {
  // expected-error @+1 {{'moe.ffn' op w_up must have element type 'f32' (that of x), got 'f16'}}
  %0 = moe.ffn gelu %x, %u, %d : (tensor<4x8xf32>, tensor<8x32xf16>, tensor<32x8xf16>) -> tensor<4x8xf32>
  return
}

// -----

// cross_entropy: logits have rank >= 2
func.func @f(%l: tensor<32xf32>, %t: tensor<1xi32>) {
  // expected-error @+1 {{'moe.cross_entropy' op logits must have rank >= 2 ([..., V]), got rank 1}}
  %0 = moe.cross_entropy %l, %t : tensor<32xf32>, tensor<1xi32> -> tensor<f32>
  return
}

// -----

// cross_entropy: targets have the logits' leading dimensions
func.func @f(%l: tensor<2x4x32xf32>, %t: tensor<2x5xi32>) {
  // expected-error @+1 {{'moe.cross_entropy' op targets must have shape 2x4, got 2x5}}
  %0 = moe.cross_entropy %l, %t : tensor<2x4x32xf32>, tensor<2x5xi32> -> tensor<f32>
  return
}

// -----

// cross_entropy: the loss is an f32 scalar
func.func @f(%l: tensor<2x4x32xbf16>, %t: tensor<2x4xi32>) {
  // expected-error @+1 {{'moe.cross_entropy' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<bf16>'}}
  %0 = moe.cross_entropy %l, %t : tensor<2x4x32xbf16>, tensor<2x4xi32> -> tensor<bf16>
  return
}

// -----

// fill: the value is finite (+inf)
func.func @f() {
  // expected-error @+1 {{'moe.fill' op value must be finite}}
  %0 = moe.fill 0x7FF0000000000000 : tensor<f32>
  return
}

// -----

// fill: the value is finite (NaN)
func.func @f() {
  // expected-error @+1 {{'moe.fill' op value must be finite}}
  %0 = moe.fill 0x7FF8000000000000 : tensor<2x4xbf16>
  return
}

// -----

// fill: a float tensor
func.func @f() {
  // expected-error @+1 {{'moe.fill' op result #0 must be ranked tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<4xi32>'}}
  %0 = moe.fill 0.0 : tensor<4xi32>
  return
}

// -----

// cast: one shape
func.func @f(%w: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.cast' op result must have the input's shape 'tensor<8x16xf32>', got 'tensor<16x8xbf16>'}}
  %0 = moe.cast %w : tensor<8x16xf32> -> tensor<16x8xbf16>
  return
}

// -----

// cast: to another element type
func.func @f(%w: tensor<8x16xbf16>) {
  // expected-error @+1 {{'moe.cast' op converts 'bf16' to itself}}
  %0 = moe.cast %w : tensor<8x16xbf16> -> tensor<8x16xbf16>
  return
}
