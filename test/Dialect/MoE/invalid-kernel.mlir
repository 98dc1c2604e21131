// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of moe.kernel and moe.launch: a kernel computes one moe
// compute op (its family, its attributes as config, known epilogues), and a
// launch matches its kernel's signature and plans every result.

// expected-error @+1 {{'moe.kernel' op family must not be empty}}
moe.kernel @k family "" : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> {config = {}, epilogue = []}

// -----

// expected-error @+1 {{'moe.kernel' op family 'matmul' names no moe compute op (a kernel family is the mnemonic of the op it computes)}}
moe.kernel @k family "matmul" : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> {config = {}, epilogue = []}

// -----

// A collective stays an op; it is no kernel.
// expected-error @+1 {{'moe.kernel' op family 'all_reduce' names no moe compute op}}
moe.kernel @k family "all_reduce" : (tensor<4xf32>) -> tensor<4xf32> {config = {}, epilogue = []}

// -----

// expected-error @+1 {{'moe.kernel' op config key 'eps' is not an attribute of moe.rms_norm}}
moe.kernel @k family "rms_norm" : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32> {config = {eps = 1.0e-05 : f64}, epilogue = []}

// -----

// expected-error @+1 {{'moe.kernel' op epilogue "gelu" is none of residual_add, save_preactivations, saved_preactivations}}
moe.kernel @k family "linear" : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> {config = {}, epilogue = ["gelu"]}

// -----

moe.kernel @k family "linear" : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> {config = {}, epilogue = []}
func.func @f(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'moe.launch' op buffers must have 3 entries per result (3), got 2}}
  %y = moe.launch @k(%x, %w) {buffers = array<i64: 0, 0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

moe.kernel @k family "linear" : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> {config = {}, epilogue = []}
func.func @f(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'moe.launch' op shard_axes needs updates (a sharded optimiser update)}}
  %y = moe.launch @k(%x, %w) {buffers = array<i64: 0, 0, 32>, shard_axes = ["dp"]} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

moe.kernel @k family "linear" : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32> {config = {}, epilogue = []}
func.func @f(%x: tensor<3x4xf32>, %w: tensor<4x4xf32>) -> tensor<3x4xf32> {
  // expected-error @+1 {{'moe.launch' op types do not match the signature}}
  %y = moe.launch @k(%x, %w) {buffers = array<i64: 0, 0, 48>} : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
  return %y : tensor<3x4xf32>
}

// -----

func.func @f(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{'moe.launch' op 'nowhere' does not name a moe.kernel}}
  %y = moe.launch @nowhere(%x) {buffers = array<i64: 0, 0, 32>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// moe.bucket is a non-negative integer on a moe.all_reduce.
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'moe.bucket' must be a non-negative integer on a moe.all_reduce, moe.reduce_scatter or moe.all_to_all}}
  %0 = moe.all_reduce sum %g over [dp] {moe.bucket = -1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
}

// -----

// moe.buffers is an array<i64> of [arena, offset, bytes] per result.
module attributes {moe.grid = #moe.grid<dp = 2>} {
func.func @f(%g: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'moe.buffers' must be an array<i64> of [arena, offset, bytes] per result}}
  %0 = moe.all_reduce sum %g over [dp] {moe.buffers = [0, 0, 16]} : tensor<4xf32>
  return %0 : tensor<4xf32>
}
}

// -----

// moe.buffer_plan is a #moe.buffer_plan on a module.
// expected-error @+1 {{'moe.buffer_plan' must be a #moe.buffer_plan on a builtin.module, got [16, 32]}}
module attributes {moe.buffer_plan = [16, 32]} {
}

// -----

// moe.buffer_plan: only on a module
// expected-error @+1 {{'moe.buffer_plan' must be a #moe.buffer_plan on a builtin.module, got #moe.buffer_plan<}}
func.func @f() attributes {moe.buffer_plan = #moe.buffer_plan<activation_bytes = 8, gradient_bytes = 0, parameter_bytes = 0, optimizer_state_bytes = 0, total_bytes = 8, num_kernels = 1, num_launches = 1, alignment = 64>} {
  return
}

// -----

// moe.buffer_plan: sizes and counts are >= 0
// expected-error @+1 {{buffer plan num_launches must be >= 0, got -1}}
module attributes {moe.buffer_plan = #moe.buffer_plan<activation_bytes = 8, gradient_bytes = 0, parameter_bytes = 0, optimizer_state_bytes = 0, total_bytes = 8, num_kernels = 1, num_launches = -1, alignment = 64>} {
}

// -----

// moe.buffer_plan: the alignment is a power of two
// expected-error @+1 {{buffer plan alignment must be a power of two, got 48}}
module attributes {moe.buffer_plan = #moe.buffer_plan<activation_bytes = 8, gradient_bytes = 0, parameter_bytes = 0, optimizer_state_bytes = 0, total_bytes = 8, num_kernels = 1, num_launches = 1, alignment = 48>} {
}

// -----

// moe.buffer_plan: the total is the sum of the four arenas
// expected-error @+1 {{buffer plan total_bytes must be the sum of the activation, gradient, parameter and optimizer-state bytes, got 9}}
module attributes {moe.buffer_plan = #moe.buffer_plan<activation_bytes = 8, gradient_bytes = 0, parameter_bytes = 0, optimizer_state_bytes = 0, total_bytes = 9, num_kernels = 1, num_launches = 1, alignment = 64>} {
}

// -----

// chunk: count >= 1
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'moe.chunk' op count must be >= 1, got 0}}
  %0 = moe.chunk %x[0 of 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

// chunk: index in [0, count)
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'moe.chunk' op index must be in [0, 2), got 2}}
  %0 = moe.chunk %x[2 of 2] : tensor<4x8xf32> -> tensor<2x8xf32>
  return
}

// -----

// chunk: equal chunks of the leading dimension
func.func @f(%x: tensor<3x8xf32>) {
  // expected-error @+1 {{'moe.chunk' op input must have a leading dimension divisible by 2, got 'tensor<3x8xf32>'}}
  %0 = moe.chunk %x[0 of 2] : tensor<3x8xf32> -> tensor<1x8xf32>
  return
}

// -----

// chunk: the result is one chunk
func.func @f(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'moe.chunk' op result must be 'tensor<2x8xf32>', got 'tensor<2x4xf32>'}}
  %0 = moe.chunk %x[0 of 2] : tensor<4x8xf32> -> tensor<2x4xf32>
  return
}

// -----

// concat: at least one input
func.func @f() {
  // expected-error @+1 {{'moe.concat' op needs at least one input}}
  %0 = "moe.concat"() : () -> tensor<4xf32>
  return
}

// -----

// concat: inputs of one type
func.func @f(%a: tensor<2x8xf32>, %b: tensor<3x8xf32>) {
  // expected-error @+1 {{'moe.concat' op input #1 must be 'tensor<2x8xf32>' like input #0, got 'tensor<3x8xf32>'}}
  %0 = moe.concat %a, %b : tensor<2x8xf32>, tensor<3x8xf32> -> tensor<5x8xf32>
  return
}

// -----

// concat: of rank >= 1
func.func @f(%a: tensor<f32>) {
  // expected-error @+1 {{'moe.concat' op inputs must have rank >= 1}}
  %0 = moe.concat %a, %a : tensor<f32>, tensor<f32> -> tensor<2xf32>
  return
}

// -----

// concat: the result holds every input
func.func @f(%a: tensor<2x8xf32>) {
  // expected-error @+1 {{'moe.concat' op result must be 'tensor<4x8xf32>', got 'tensor<2x16xf32>'}}
  %0 = moe.concat %a, %a : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x16xf32>
  return
}
