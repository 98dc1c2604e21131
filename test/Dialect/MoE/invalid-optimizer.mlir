// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of the optimiser step moe-autodiff appends:
// moe.lr_schedule, moe.global_norm, moe.sum_squares, moe.adamw_update and
// moe.balance_bias.

// lr_schedule: lr > 0
func.func @f(%step: tensor<i32>) {
  // expected-error @+1 {{'moe.lr_schedule' op lr must be > 0, got 0}}
  %lr = moe.lr_schedule %step {lr = 0.0 : f64, min_lr = 0.0 : f64, warmup_steps = 0 : i64, total_steps = 10 : i64, schedule = "cosine"}
  return
}

// -----

// lr_schedule: a NaN lr is no positive lr
func.func @f(%step: tensor<i32>) {
  // expected-error @+1 {{'moe.lr_schedule' op lr must be > 0, got nan}}
  %lr = moe.lr_schedule %step {lr = 0x7FF8000000000000 : f64, min_lr = 0.0 : f64, warmup_steps = 0 : i64, total_steps = 10 : i64, schedule = "cosine"}
  return
}

// -----

// lr_schedule: 0 <= min_lr <= lr
func.func @f(%step: tensor<i32>) {
  // expected-error @+1 {{'moe.lr_schedule' op min_lr must be in [0, lr], got 1.000000e-02}}
  %lr = moe.lr_schedule %step {lr = 1.0e-3 : f64, min_lr = 1.0e-2 : f64, warmup_steps = 0 : i64, total_steps = 10 : i64, schedule = "linear"}
  return
}

// -----

// lr_schedule: min_lr >= 0
func.func @f(%step: tensor<i32>) {
  // expected-error @+1 {{'moe.lr_schedule' op min_lr must be in [0, lr], got -1.000000e-03}}
  %lr = moe.lr_schedule %step {lr = 1.0e-3 : f64, min_lr = -1.0e-3 : f64, warmup_steps = 0 : i64, total_steps = 10 : i64, schedule = "linear"}
  return
}

// -----

// lr_schedule: total_steps >= 1
func.func @f(%step: tensor<i32>) {
  // expected-error @+1 {{'moe.lr_schedule' op needs 0 <= warmup_steps <= total_steps and total_steps >= 1, got 0 and 0}}
  %lr = moe.lr_schedule %step {lr = 1.0e-3 : f64, min_lr = 0.0 : f64, warmup_steps = 0 : i64, total_steps = 0 : i64, schedule = "constant"}
  return
}

// -----

// lr_schedule: warmup_steps >= 0 (read signed: it was accepted as 2^64 - 1)
func.func @f(%step: tensor<i32>) {
  // expected-error @+1 {{'moe.lr_schedule' op needs 0 <= warmup_steps <= total_steps and total_steps >= 1, got -1 and -1}}
  %lr = moe.lr_schedule %step {lr = 1.0e-3 : f64, min_lr = 0.0 : f64, warmup_steps = -1 : i64, total_steps = -1 : i64, schedule = "constant"}
  return
}

// -----

// lr_schedule: warmup_steps <= total_steps
func.func @f(%step: tensor<i32>) {
  // expected-error @+1 {{'moe.lr_schedule' op needs 0 <= warmup_steps <= total_steps and total_steps >= 1, got 20 and 10}}
  %lr = moe.lr_schedule %step {lr = 1.0e-3 : f64, min_lr = 0.0 : f64, warmup_steps = 20 : i64, total_steps = 10 : i64, schedule = "constant"}
  return
}

// -----

// lr_schedule: a known schedule
func.func @f(%step: tensor<i32>) {
  // expected-error @+1 {{'moe.lr_schedule' op schedule must be cosine, linear or constant, got 'step'}}
  %lr = moe.lr_schedule %step {lr = 1.0e-3 : f64, min_lr = 0.0 : f64, warmup_steps = 0 : i64, total_steps = 10 : i64, schedule = "step"}
  return
}

// -----

// global_norm: at least one gradient
func.func @f() {
  // expected-error @+1 {{'moe.global_norm' op needs at least one gradient}}
  %n = "moe.global_norm"() : () -> tensor<f32>
  return
}

// -----

// global_norm: sharded comes with shard_axes
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op sharded and shard_axes come together}}
  %n = moe.global_norm %g, %e {sharded = array<i1: false, true>} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: shard_axes comes with sharded
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op sharded and shard_axes come together}}
  %n = moe.global_norm %g, %e {shard_axes = ["ep"]} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: one sharded entry per operand
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op sharded has 1 entries for 2 operands}}
  %n = moe.global_norm %g, %e {sharded = array<i1: true>, shard_axes = ["ep"]} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: shard_axes are grid axes
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op unknown grid axis 'xp' (expected dp, ep or tp)}}
  %n = moe.global_norm %g, %e {sharded = array<i1: false, true>, shard_axes = ["xp"]} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: shard_axes need the module's grid
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op requires a 'moe.grid' attribute on the enclosing module}}
  %n = moe.global_norm %g, %e {sharded = array<i1: false, true>, shard_axes = ["ep"]} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}

// -----

// adamw_update: 0 <= beta1 < 1
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
func.func @f(%g: tensor<4x4xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op betas must be in [0, 1), got 1.000000e+00 and 9.500000e-01}}
  moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 1.0 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64} : tensor<4x4xf32>
  return
}

// -----

// adamw_update: 0 <= beta2 < 1
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
func.func @f(%g: tensor<4x4xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op betas must be in [0, 1), got 9.000000e-01 and -5.000000e-01}}
  moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = -0.5 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64} : tensor<4x4xf32>
  return
}

// -----

// adamw_update: eps > 0
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
func.func @f(%g: tensor<4x4xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op eps must be > 0}}
  moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 0.0 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64} : tensor<4x4xf32>
  return
}

// -----

// adamw_update: weight_decay >= 0
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
func.func @f(%g: tensor<4x4xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op weight_decay and grad_clip must be >= 0}}
  moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = -0.1 : f64, grad_clip = 1.0 : f64} : tensor<4x4xf32>
  return
}

// -----

// adamw_update: grad_clip >= 0
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
func.func @f(%g: tensor<4x4xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op weight_decay and grad_clip must be >= 0}}
  moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = -1.0 : f64} : tensor<4x4xf32>
  return
}

// -----

// adamw_update: names a moe.param
func.func @f(%g: tensor<4x4xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op 'missing' does not name a moe.param}}
  moe.adamw_update @missing, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64} : tensor<4x4xf32>
  return
}

// -----

// adamw_update: the gradient has the parameter's type
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
func.func @f(%g: tensor<4x8xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op gradient type 'tensor<4x8xf32>' differs from parameter 'w' of type 'tensor<4x4xf32>'}}
  moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64} : tensor<4x8xf32>
  return
}

// -----

// balance_bias: rate >= 0
moe.param @b : tensor<4xf32> init <zeros>
func.func @f(%e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.balance_bias' op rate must be finite and >= 0, got -1.000000e-03}}
  moe.balance_bias @b, %e {rate = -1.0e-3 : f64} : tensor<2x4x2xi32>
  return
}

// -----

// balance_bias: a NaN rate is no rate
moe.param @b : tensor<4xf32> init <zeros>
func.func @f(%e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.balance_bias' op rate must be finite and >= 0, got nan}}
  moe.balance_bias @b, %e {rate = 0x7FF8000000000000 : f64} : tensor<2x4x2xi32>
  return
}

// -----

// balance_bias: experts are [..., k] indices, not a scalar
moe.param @b : tensor<4xf32> init <zeros>
func.func @f(%e: tensor<i32>) {
  // expected-error @+1 {{'moe.balance_bias' op experts must be [..., k] expert indices}}
  moe.balance_bias @b, %e {rate = 1.0e-3 : f64} : tensor<i32>
  return
}

// -----

// adamw_update: a ZeRO gradient is the parameter's flat shard
module attributes {moe.grid = #moe.grid<dp = 4>} {
moe.param @w : tensor<3x5xf32> init <normal, scale = 0.02>
func.func @f(%g: tensor<3xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op sharded gradient type 'tensor<3xf32>' is not parameter 'w''s shard 'tensor<4xf32>' over 4 ranks}}
  moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64, shard_axes = ["dp"]} : tensor<3xf32>
  return
}
}

// -----

// adamw_update: ZeRO axes are grid axes
module attributes {moe.grid = #moe.grid<dp = 4>} {
moe.param @w : tensor<3x5xf32> init <normal, scale = 0.02>
func.func @f(%g: tensor<4xf32>, %lr: tensor<f32>, %n: tensor<f32>, %step: tensor<i32>) {
  // expected-error @+1 {{'moe.adamw_update' op unknown grid axis 'pp' (expected dp, ep or tp)}}
  moe.adamw_update @w, %g, %lr, %n, %step {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64, shard_axes = ["pp"]} : tensor<4xf32>
  return
}
}

// -----

// balance_bias: names a moe.param
func.func @f(%e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.balance_bias' op 'missing' does not name a moe.param}}
  moe.balance_bias @missing, %e {rate = 1.0e-3 : f64} : tensor<2x4x2xi32>
  return
}

// -----

// balance_bias: the parameter is a [E] f32 bias
moe.param @w : tensor<4x4xf32> init <normal, scale = 0.02>
func.func @f(%e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.balance_bias' op parameter 'w' must be a [E] f32 selection bias, got 'tensor<4x4xf32>'}}
  moe.balance_bias @w, %e {rate = 1.0e-3 : f64} : tensor<2x4x2xi32>
  return
}

// -----

// balance_bias: sum_axes is a group of grid axes
moe.param @b : tensor<4xf32> init <zeros>
func.func @f(%e: tensor<2x4x2xi32>) {
  // expected-error @+1 {{'moe.balance_bias' op grid axis 'dp' is listed twice}}
  moe.balance_bias @b, %e {rate = 1.0e-3 : f64, sum_axes = ["dp", "dp"]} : tensor<2x4x2xi32>
  return
}

// -----

// global_norm: shard_copies needs sharded
module attributes {moe.grid = #moe.grid<ep = 2, tp = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op shard_copies needs sharded}}
  %n = moe.global_norm %g, %e {shard_copies = array<i64: 1, 2>} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: shard_copies has one entry per operand
module attributes {moe.grid = #moe.grid<ep = 2, tp = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op shard_copies has 1 entries for 2 operands}}
  %n = moe.global_norm %g, %e {sharded = array<i1: true, true>, shard_axes = ["ep", "tp"], shard_copies = array<i64: 2>} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: shard_copies are >= 1
module attributes {moe.grid = #moe.grid<ep = 2, tp = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op shard_copies[1] must be >= 1, got 0}}
  %n = moe.global_norm %g, %e {sharded = array<i1: true, true>, shard_axes = ["ep", "tp"], shard_copies = array<i64: 2, 0>} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: shard_layers needs sharded
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op shard_layers needs sharded}}
  %n = moe.global_norm %g, %e {shard_layers = array<i64: -1, 0>} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: one shard_layers entry per operand
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op shard_layers has 1 entries for 2 operands}}
  %n = moe.global_norm %g, %e {sharded = array<i1: false, true>, shard_axes = ["ep"], shard_layers = array<i64: 0>} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// global_norm: a layer only on a sharded operand
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<4x4xf32>, %e: tensor<2x4x4xf32>) {
  // expected-error @+1 {{'moe.global_norm' op shard_layers[0] must be -1, or a layer >= 0 of a sharded operand, got 0}}
  %n = moe.global_norm %g, %e {sharded = array<i1: false, true>, shard_axes = ["ep"], shard_layers = array<i64: 0, 0>} : tensor<4x4xf32>, tensor<2x4x4xf32>
  return
}
}

// -----

// sum_squares: rows x chunks
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.sum_squares' op result must be 2-D (rows x chunks), got rank 1}}
  %p = moe.sum_squares %g : tensor<8x16xf32> -> tensor<8xf32>
  return
}

// -----

// sum_squares: the chunks divide each row
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.sum_squares' op 8 rows of 3 chunks do not divide the input's 128 elements}}
  %p = moe.sum_squares %g : tensor<8x16xf32> -> tensor<8x3xf32>
  return
}
