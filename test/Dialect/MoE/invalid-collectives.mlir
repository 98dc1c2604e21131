// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of the collectives: all_reduce, reduce_scatter, all_gather,
// all_to_all (dense and ragged), and the codecs they may carry; shard_slice,
// gather_param, replica_sum, wait, and tensor parallelism's tp_enter and
// tp_exit.

// group: at least one axis
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_reduce' op must name at least one grid axis}}
  %0 = moe.all_reduce sum %g over [] : tensor<8x16xf32>
  return
}
}

// -----

// group: a known axis
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_reduce' op unknown grid axis 'pp' (expected dp, ep or tp)}}
  %0 = moe.all_reduce sum %g over [pp] : tensor<8x16xf32>
  return
}
}

// -----

// group: no axis twice
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_reduce' op grid axis 'dp' is listed twice}}
  %0 = moe.all_reduce sum %g over [dp, dp] : tensor<8x16xf32>
  return
}
}

// -----

// group: needs the module grid
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_reduce' op requires a 'moe.grid' attribute on the enclosing module}}
  %0 = moe.all_reduce sum %g over [dp] : tensor<8x16xf32>
  return
}

// -----

// all_reduce: the scale is finite
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_reduce' op scale must be finite}}
  %0 = moe.all_reduce sum %g over [dp] {scale = 0x7FF8000000000000 : f64} : tensor<8x16xf32>
  return
}
}

// -----

// all_reduce: result type is the input's
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_reduce' op failed to verify that all of {input, result} have same type}}
  %0 = "moe.all_reduce"(%g) <{reduction = 0 : i32, axes = ["dp"]}> : (tensor<8x16xf32>) -> tensor<8x8xf32>
  return
}
}

// -----

// all_reduce: a codec must compress (fp16 on f16)
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf16>) {
  // expected-error @+1 {{'moe.all_reduce' op codec fp16 does not compress 'f16' data}}
  %0 = moe.all_reduce sum %g over [dp] codec <fp16> : tensor<8x16xf16>
  return
}
}

// -----

// all_reduce: a codec must compress (bf16 on bf16)
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xbf16>) {
  // expected-error @+1 {{'moe.all_reduce' op codec bf16 does not compress 'bf16' data}}
  %0 = moe.all_reduce sum %g over [dp] codec <bf16> : tensor<8x16xbf16>
  return
}
}

// -----

// all_reduce: powersgd needs a matrix
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<16xf32>) {
  // expected-error @+1 {{'moe.all_reduce' op codec powersgd needs a tensor of rank >= 2, got rank 1}}
  %0 = moe.all_reduce sum %g over [dp] codec <powersgd, rank = 2> : tensor<16xf32>
  return
}
}

// -----

// all_reduce: float data only
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<16xi32>) {
  // expected-error @+1 {{'moe.all_reduce' op operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float values, but got 'tensor<16xi32>'}}
  %0 = moe.all_reduce sum %g over [dp] : tensor<16xi32>
  return
}
}

// -----

// reduce_scatter: dim in range
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.reduce_scatter' op dim 2 is out of range for rank 2}}
  %0 = moe.reduce_scatter sum %g over [dp] dim 2 : tensor<8x16xf32> -> tensor<8x16xf32>
  return
}
}

// -----

// reduce_scatter: dim divisible by the group
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<6x16xf32>) {
  // expected-error @+1 {{'moe.reduce_scatter' op input dimension 0 (6) is not divisible by the group size 4}}
  %0 = moe.reduce_scatter sum %g over [dp, ep] dim 0 : tensor<6x16xf32> -> tensor<2x16xf32>
  return
}
}

// -----

// reduce_scatter: result divides dim by the group
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.reduce_scatter' op result must have shape 4x16, got 2x16}}
  %0 = moe.reduce_scatter sum %g over [dp] dim 0 : tensor<8x16xf32> -> tensor<2x16xf32>
  return
}
}

// -----

// reduce_scatter, flat (ZeRO): ceil(n / P) elements
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<6x5xf32>) {
  // expected-error @+1 {{'moe.reduce_scatter' op result must have shape 8, got 7}}
  %0 = moe.reduce_scatter mean %g over [dp, ep] : tensor<6x5xf32> -> tensor<7xf32>
  return
}
}

// -----

// reduce_scatter: the scale is positive and finite
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.reduce_scatter' op scale must be finite and > 0, got 0}}
  %0 = moe.reduce_scatter sum %g over [dp] {scale = 0.0 : f64} : tensor<8x16xf32> -> tensor<64xf32>
  return
}
}

// -----

// shard_slice: ceil(n / P) elements
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<6x5xf32>) {
  // expected-error @+1 {{'moe.shard_slice' op result must have shape 8, got 30}}
  %0 = moe.shard_slice %g over [dp, ep] : tensor<6x5xf32> -> tensor<30xf32>
  return
}
}

// -----

// reduce_scatter async: flat and uncompressed
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{'moe.reduce_scatter' op async reduce_scatter must be flat and uncompressed}}
  %0 = moe.reduce_scatter async sum %g over [dp] dim 0 : tensor<8x16xf32> -> tensor<4x16xf32>
  %1 = moe.wait %0 : tensor<4x16xf32>
  return %1 : tensor<4x16xf32>
}
}

// -----

// reduce_scatter async: its one user is a wait
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) -> tensor<64xf32> {
  // expected-error @+1 {{'moe.reduce_scatter' op async result must have exactly one user, a moe.wait in the same block}}
  %0 = moe.reduce_scatter async sum %g over [dp] : tensor<8x16xf32> -> tensor<64xf32>
  return %0 : tensor<64xf32>
}
}

// -----

// gather_param: a parameter
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f() {
  // expected-error @+1 {{'moe.gather_param' op 'w' does not name a moe.param}}
  moe.gather_param @w over [dp]
  return
}
}

// -----

// gather_param: grid axes
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
moe.param @w : tensor<4x4xf32> init <zeros>
func.func @f() {
  // expected-error @+1 {{'moe.gather_param' op grid axis 'dp' is listed twice}}
  moe.gather_param @w over [dp, dp]
  return
}
}

// -----

// reduce_scatter: only elementwise codecs
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.reduce_scatter' op codec topk cannot compress moe.reduce_scatter (allowed: fp16, bf16, int8)}}
  %0 = moe.reduce_scatter sum %g over [dp] dim 0 codec <topk, ratio = 0.1> : tensor<8x16xf32> -> tensor<4x16xf32>
  return
}
}

// -----

// reduce_scatter: one element type
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.reduce_scatter' op result must have element type 'f32' (that of input), got 'bf16'}}
  %0 = moe.reduce_scatter sum %g over [dp] dim 0 : tensor<8x16xf32> -> tensor<4x16xbf16>
  return
}
}

// -----

// all_gather: dim in range
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_gather' op dim -1 is out of range for rank 2}}
  %0 = moe.all_gather %g over [ep] dim -1 : tensor<8x16xf32> -> tensor<8x16xf32>
  return
}
}

// -----

// all_gather: result multiplies dim by the group
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_gather' op result must have shape 8x32, got 16x16}}
  %0 = moe.all_gather %g over [ep] dim 1 : tensor<8x16xf32> -> tensor<16x16xf32>
  return
}
}

// -----

// all_gather: only elementwise codecs
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_gather' op codec sign cannot compress moe.all_gather (allowed: fp16, bf16, int8)}}
  %0 = moe.all_gather %g over [ep] dim 0 codec <sign> : tensor<8x16xf32> -> tensor<16x16xf32>
  return
}
}

// -----

// all_to_all: split_dim in range
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_to_all' op split_dim 3 is out of range for rank 2}}
  %0 = moe.all_to_all %g over [ep] split 3 concat 0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}
}

// -----

// all_to_all: concat_dim in range
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_to_all' op concat_dim 2 is out of range for rank 2}}
  %0 = moe.all_to_all %g over [ep] split 0 concat 2 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}
}

// -----

// all_to_all: split_dim divisible by the group
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<5x16xf32>) {
  // expected-error @+1 {{'moe.all_to_all' op input dimension 0 (5) is not divisible by the group size 2}}
  %0 = moe.all_to_all %g over [ep] split 0 concat 0 : (tensor<5x16xf32>) -> tensor<5x16xf32>
  return
}
}

// -----

// all_to_all: result shape
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_to_all' op result must have shape 4x32, got 8x16}}
  %0 = moe.all_to_all %g over [ep] split 0 concat 1 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}
}

// -----

// all_to_all: counts come with recv_counts
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'moe.all_to_all' op counts operand and recv_counts result must come together (ragged form)}}
  %0 = moe.all_to_all %g over [ep] split 0 concat 0 counts %c : (tensor<8x16xf32>, tensor<2xi32>) -> tensor<8x16xf32>
  return
}
}

// -----

// all_to_all: ragged forms: rows (split 0 concat 0) or dispatch buffers
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'moe.all_to_all' op ragged all_to_all is split 0 concat 0 (rows), or split 0 concat 1 / split 1 concat 0 on a rank-3 dispatch buffer; got split 1 and concat 1 on rank 2}}
  %0, %1 = moe.all_to_all %g over [ep] split 1 concat 1 counts %c : (tensor<8x16xf32>, tensor<2xi32>) -> (tensor<8x16xf32>, tensor<2xi32>)
  return
}
}

// -----

// all_to_all: the ragged dispatch form counts the E blocks of C rows
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<4x3x8xf32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'moe.all_to_all' op counts must have shape 4, got 2}}
  %0, %1 = moe.all_to_all %g over [ep] split 0 concat 1 counts %c : (tensor<4x3x8xf32>, tensor<2xi32>) -> (tensor<2x6x8xf32>, tensor<2xi32>)
  return
}
}

// -----

// all_to_all: one count per group rank
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'moe.all_to_all' op counts must have shape 2, got 4}}
  %0, %1 = moe.all_to_all %g over [ep] split 0 concat 0 counts %c : (tensor<8x16xf32>, tensor<4xi32>) -> (tensor<8x16xf32>, tensor<4xi32>)
  return
}
}

// -----

// all_to_all: recv_counts has one entry per group rank
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>, %c: tensor<2xi32>) {
  // expected-error @+1 {{'moe.all_to_all' op recv_counts must have shape 2, got 3}}
  %0, %1 = moe.all_to_all %g over [ep] split 0 concat 0 counts %c : (tensor<8x16xf32>, tensor<2xi32>) -> (tensor<8x16xf32>, tensor<3xi32>)
  return
}
}

// -----

// all_to_all: only elementwise codecs
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_to_all' op codec powersgd cannot compress moe.all_to_all (allowed: fp16, bf16, int8)}}
  %0 = moe.all_to_all %g over [ep] split 0 concat 0 codec <powersgd, rank = 1> : (tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}
}

// -----

// all_to_all: a codec must compress
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
func.func @f(%g: tensor<8x16xbf16>) {
  // expected-error @+1 {{'moe.all_to_all' op codec bf16 does not compress 'bf16' data}}
  %0 = moe.all_to_all %g over [ep] split 0 concat 0 codec <bf16> : (tensor<8x16xbf16>) -> tensor<8x16xbf16>
  return
}
}

// -----

// moe.compression: a #moe.compression on a module
// expected-error @+1 {{'moe.compression' must be a #moe.compression on a builtin.module, got 1 : i64}}
module attributes {moe.compression = 1 : i64} {
}

// -----

// moe.compression: only on a module
module {
// expected-error @+1 {{'moe.compression' must be a #moe.compression on a builtin.module, got #moe.compression<warmup_steps = 10, compressed = 0>}}
func.func @f() attributes {moe.compression = #moe.compression<warmup_steps = 10, compressed = 0>} {
  return
}
}

// -----

// moe.compression: counts are >= 0
// expected-error @+1 {{compression warmup_steps must be >= 0, got -1}}
module attributes {moe.compression = #moe.compression<warmup_steps = -1, compressed = 0>} {
}

// -----

// moe.codec_choice: a #moe.codec_choice
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error @+1 {{'moe.codec_choice' must be a #moe.codec_choice on a moe.all_reduce or moe.all_to_all, got "int8"}}
  %0 = moe.all_reduce sum %g over [dp] {moe.codec_choice = "int8"} : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
}

// -----

// moe.codec_choice: only on all_reduce and all_to_all
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<8x16xf32>) -> tensor<16x16xf32> {
  // expected-error @+1 {{'moe.codec_choice' must be a #moe.codec_choice on a moe.all_reduce or moe.all_to_all, got #moe.codec_choice<codec = "int8"}}
  %0 = moe.all_gather %g over [dp] dim 0 {moe.codec_choice = #moe.codec_choice<codec = "int8", uncompressed_s = 2.0, predicted_s = 1.0>} : tensor<8x16xf32> -> tensor<16x16xf32>
  return %0 : tensor<16x16xf32>
}
}

// -----

// moe.codec_choice: "none" or a codec kind
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error @+1 {{codec choice codec must be "none" or one of fp16, bf16, int8, topk, sign, powersgd, got "int4"}}
  %0 = moe.all_reduce sum %g over [dp] {moe.codec_choice = #moe.codec_choice<codec = "int4", uncompressed_s = 2.0, predicted_s = 1.0>} : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
}

// -----

// moe.codec_choice: times are >= 0
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // expected-error @+1 {{codec choice predicted_s must be >= 0, got -1.000000e+00}}
  %0 = moe.all_reduce sum %g over [dp] {moe.codec_choice = #moe.codec_choice<codec = "none", uncompressed_s = 2.0, predicted_s = -1.0>} : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}
}

// -----

// replica_sum: a layer >= 0
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<2x16xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{'moe.replica_sum' op layer must be >= 0, got -1}}
  %0 = moe.replica_sum %g over [ep] layer -1 : tensor<2x16xf32>
  return %0 : tensor<2x16xf32>
}
}

// -----

// replica_sum: rows of a shard
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{'moe.replica_sum' op input must have rank >= 1 (rows of an expert shard)}}
  %0 = moe.replica_sum %g over [ep] layer 0 : tensor<f32>
  return %0 : tensor<f32>
}
}

// -----

// async all_reduce: no codec
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<16xf32>) -> tensor<16xf32> {
  // expected-error @+1 {{'moe.all_reduce' op async reduction cannot have a codec}}
  %0 = moe.all_reduce async sum %g over [dp] codec <int8, block_size = 16> : tensor<16xf32>
  %1 = moe.wait %0 : tensor<16xf32>
  return %1 : tensor<16xf32>
}
}

// -----

// async all_reduce: read only through its wait
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<16xf32>) -> tensor<16xf32> {
  // expected-error @+1 {{'moe.all_reduce' op async result must have exactly one user, a moe.wait in the same block}}
  %0 = moe.all_reduce async sum %g over [dp] : tensor<16xf32>
  return %0 : tensor<16xf32>
}
}

// -----

// wait: at least one operand
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f() {
  // expected-error @+1 {{'moe.wait' op needs at least one operand}}
  "moe.wait"() : () -> ()
  return
}
}

// -----

// wait: on async all_reduces only
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<16xf32>) -> tensor<16xf32> {
  %0 = moe.all_reduce sum %g over [dp] : tensor<16xf32>
  // expected-error @+1 {{'moe.wait' op operand #0 is not a result of an async moe.all_reduce, moe.reduce_scatter or moe.all_to_all in the same block}}
  %1 = moe.wait %0 : tensor<16xf32>
  return %1 : tensor<16xf32>
}
}

// -----

// async all_to_all: the ragged dispatch form, uncompressed
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'moe.all_to_all' op async all_to_all must be the ragged dispatch form without a codec}}
  %0 = moe.all_to_all async %x over [ep] split 0 concat 1 : (tensor<4x8xf32>) -> tensor<2x16xf32>
  %1 = moe.concat %0, %0 : tensor<2x16xf32>, tensor<2x16xf32> -> tensor<4x16xf32>
  return %x : tensor<4x8xf32>
}
}

// -----

// async all_to_all: read only through one wait
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%b: tensor<4x4x8xf32>, %n: tensor<4xi32>) -> tensor<2x8x8xf32> {
  // expected-error @+1 {{'moe.all_to_all' op async results must have one user, a moe.wait in the same block}}
  %r, %rc = moe.all_to_all async %b over [ep] split 0 concat 1 counts %n : (tensor<4x4x8xf32>, tensor<4xi32>) -> (tensor<2x8x8xf32>, tensor<4xi32>)
  return %r : tensor<2x8x8xf32>
}
}

// -----

// wait: an async all_to_all's results in one wait
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%b: tensor<4x4x8xf32>, %n: tensor<4xi32>) -> tensor<2x8x8xf32> {
  %r, %rc = moe.all_to_all async %b over [ep] split 0 concat 1 counts %n : (tensor<4x4x8xf32>, tensor<4xi32>) -> (tensor<2x8x8xf32>, tensor<4xi32>)
  // expected-error @+1 {{'moe.wait' op operand #0 is an async moe.all_to_all's result: its other result must be waited for in the same moe.wait}}
  %w = moe.wait %r : tensor<2x8x8xf32>
  return %w : tensor<2x8x8xf32>
}
}

// -----

// tp_enter: needs the module grid
func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.tp_enter' op requires a 'moe.grid' attribute on the enclosing module}}
  %0 = moe.tp_enter %x over [tp] : tensor<8x16xf32>
  return
}

// -----

// tp_enter: a known axis
module attributes {moe.grid = #moe.grid<dp = 2, tp = 2>} {
func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.tp_enter' op unknown grid axis 'pp' (expected dp, ep or tp)}}
  %0 = moe.tp_enter %x over [pp] : tensor<8x16xf32>
  return
}
}

// -----

// tp_enter: result type is the input's (a trait, ahead of the verifier)
module attributes {moe.grid = #moe.grid<tp = 2>} {
func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.tp_enter' op failed to verify that all of {input, result} have same type}}
  %0 = "moe.tp_enter"(%x) {axes = ["tp"]} : (tensor<8x16xf32>) -> tensor<8x16xf16>
  return
}
}

// -----

// tp_exit: at least one axis
module attributes {moe.grid = #moe.grid<dp = 2, tp = 2>} {
func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.tp_exit' op must name at least one grid axis}}
  %0 = moe.tp_exit %x over [] : tensor<8x16xf32>
  return
}
}

// -----

// tp_exit: no axis twice
module attributes {moe.grid = #moe.grid<dp = 2, tp = 2>} {
func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.tp_exit' op grid axis 'tp' is listed twice}}
  %0 = moe.tp_exit %x over [tp, tp] : tensor<8x16xf32>
  return
}
}

// -----

// tp_exit: needs the module grid
func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.tp_exit' op requires a 'moe.grid' attribute on the enclosing module}}
  %0 = moe.tp_exit %x over [tp] : tensor<8x16xf32>
  return
}

// -----

// tp_exit: result type is the input's (a trait, ahead of the verifier)
module attributes {moe.grid = #moe.grid<tp = 2>} {
func.func @f(%x: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.tp_exit' op failed to verify that all of {input, result} have same type}}
  %0 = "moe.tp_exit"(%x) {axes = ["tp"]} : (tensor<8x16xf32>) -> tensor<4x16xf32>
  return
}
}
