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
  // expected-error @+1 {{'moe.bucket' must be a non-negative integer on a moe.all_reduce or moe.reduce_scatter}}
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

// moe.buffer_plan is a dictionary on a module.
// expected-error @+1 {{'moe.buffer_plan' must be a dictionary on a builtin.module}}
module attributes {moe.buffer_plan = [16, 32]} {
}
