// RUN: moe-opt %s -split-input-file -verify-diagnostics
// Every constraint of the moe attributes and of the dialect's discardable
// attributes (moe.grid, moe.input, moe.optimizer, moe.seed, moe.cluster), with
// its exact message.

// init: normal needs a positive scale
// expected-error @+1 {{custom op 'moe.param' normal initialiser requires scale > 0, got 0.000000e+00}}
moe.param @w : tensor<4xf32> init <normal, scale = 0.0>

// -----

// init: uniform needs a positive scale
// expected-error @+1 {{custom op 'moe.param' uniform initialiser requires scale > 0, got 0.000000e+00}}
moe.param @w : tensor<4xf32> init <uniform>

// -----

// init: zeros takes no scale
// expected-error @+1 {{custom op 'moe.param' zeros initialiser takes no scale}}
moe.param @w : tensor<4xf32> init <zeros, scale = 1.0>

// -----

// init: unknown kind
// expected-error @+1 {{custom op 'moe.param' unknown initialiser 'xavier' (expected one of: zeros, ones, normal, uniform)}}
moe.param @w : tensor<4xf32> init <xavier>

// -----

// grid: degrees are at least 1
// expected-error @+1 {{grid degree dp must be >= 1, got 0}}
module attributes {moe.grid = #moe.grid<dp = 0, ep = 2>} {
}

// -----

// grid: one device per rank
// expected-error @+1 {{grid lists 1 devices but has dp * ep * tp = 2 ranks}}
module attributes {moe.grid = #moe.grid<ep = 2, devices = ["h100"]>} {
}

// -----

// grid: device names are non-empty
// expected-error @+1 {{grid device #1 must be a non-empty string, got ""}}
module attributes {moe.grid = #moe.grid<ep = 2, devices = ["h100", ""]>} {
}

// -----

// grid: only on a module
// expected-error @+1 {{'moe.grid' may only be attached to a builtin.module}}
func.func @f() attributes {moe.grid = #moe.grid<ep = 2>} {
  return
}

// -----

// grid: must be a #moe.grid
// expected-error @+1 {{'moe.grid' must be a #moe.grid attribute}}
module attributes {moe.grid = 4 : i64} {
}

// -----

// placement: at least one rank
// expected-error @+1 {{placement must list at least one rank}}
func.func @f() attributes {p = #moe.placement<[]>} {
  return
}

// -----

// placement: no negative expert
// expected-error @+1 {{placement lists negative expert -1 on rank 0}}
func.func @f() attributes {p = #moe.placement<[[0, -1]]>} {
  return
}

// -----

// placement: no expert twice on one rank
// expected-error @+1 {{placement lists expert 2 twice on rank 1}}
func.func @f() attributes {p = #moe.placement<[[0, 1], [2, 2]]>} {
  return
}

// -----

// codec: int8 needs a block size
// expected-error @+1 {{int8 codec requires block_size >= 1, got 0}}
func.func @f() attributes {c = #moe.codec<int8>} {
  return
}

// -----

// codec: topk ratio in (0, 1]
// expected-error @+1 {{topk codec requires 0 < ratio <= 1, got 1.500000e+00}}
func.func @f() attributes {c = #moe.codec<topk, ratio = 1.5>} {
  return
}

// -----

// codec: powersgd rank >= 1
// expected-error @+1 {{powersgd codec requires rank >= 1, got 0}}
func.func @f() attributes {c = #moe.codec<powersgd>} {
  return
}

// -----

// codec: a parameter of another kind
// expected-error @+1 {{'block_size' is not a parameter of the fp16 codec}}
func.func @f() attributes {c = #moe.codec<fp16, block_size = 4>} {
  return
}

// -----

// codec: ratio belongs to topk
// expected-error @+1 {{'ratio' is not a parameter of the int8 codec}}
func.func @f() attributes {c = #moe.codec<int8, block_size = 4, ratio = 0.5>} {
  return
}

// -----

// codec: rank belongs to powersgd
// expected-error @+1 {{'rank' is not a parameter of the sign codec}}
func.func @f() attributes {c = #moe.codec<sign, rank = 2>} {
  return
}

// -----

// codec: error feedback only for sparsifying codecs
// expected-error @+1 {{error_feedback applies to topk, sign and powersgd, not to bf16}}
func.func @f() attributes {c = #moe.codec<bf16, error_feedback>} {
  return
}

// -----

// codec: unknown parameter
// expected-error @+1 {{unknown codec parameter 'density' (expected block_size, ratio, rank or error_feedback)}}
func.func @f() attributes {c = #moe.codec<topk, density = 0.1>} {
  return
}

// -----

// codec: unknown kind
// expected-error @+1 {{unknown codec 'fp8' (expected one of: fp16, bf16, int8, topk, sign, powersgd)}}
func.func @f() attributes {c = #moe.codec<fp8>} {
  return
}

// -----

// codec: a parameter given twice
// expected-error @+1 {{codec parameter 'ratio' given twice}}
func.func @f() attributes {c = #moe.codec<topk, ratio = 0.1, ratio = 0.2>} {
  return
}

// -----

// input: tokens or targets
// expected-error @+1 {{'moe.input' on argument #0 must be "tokens", "targets" or "step", got "labels"}}
func.func @f(%x: tensor<2x4xi32> {moe.input = "labels"}) {
  return
}

// -----

// input: a static i32 tensor
// expected-error @+1 {{step input #0 (tokens) must be a static tensor of i32, got 'tensor<2x4xf32>'}}
func.func @f(%x: tensor<2x4xf32> {moe.input = "tokens"}) {
  return
}

// -----

// input: not an op attribute
// expected-error @+1 {{'moe.input' belongs on a function argument, not on an op}}
func.func @f() attributes {moe.input = "tokens"} {
  return
}

// -----

// unknown dialect attribute
// expected-error @+1 {{unknown moe dialect attribute 'moe.mesh'}}
func.func @f() attributes {moe.mesh = 1 : i64} {
  return
}

// -----

// unknown argument attribute
// expected-error @+1 {{unknown moe argument attribute 'moe.data'}}
func.func @f(%x: tensor<2x4xi32> {moe.data = "tokens"}) {
  return
}

// -----

// optimizer: a dictionary
// expected-error @+1 {{'moe.optimizer' must be a dictionary}}
module attributes {moe.optimizer = "adamw"} {
}

// -----

// optimizer: type adamw
// expected-error @+1 {{'moe.optimizer' must have type = "adamw"}}
module attributes {moe.optimizer = {type = "sgd", lr = 1.0e-3 : f64}} {
}

// -----

// optimizer: a positive learning rate
// expected-error @+1 {{'moe.optimizer' must have a learning rate lr > 0}}
module attributes {moe.optimizer = {type = "adamw", lr = 0.0 : f64}} {
}

// -----

// optimizer: only on a module
// expected-error @+1 {{'moe.optimizer' may only be attached to a builtin.module}}
func.func @f() attributes {moe.optimizer = {type = "adamw", lr = 1.0e-3 : f64}} {
  return
}

// -----

// model: the description a module was built from, a string
// expected-error @+1 {{'moe.model' must be a string on a builtin.module}}
module attributes {moe.model = 3 : i64} {
}

// -----

// seed: a non-negative integer
// expected-error @+1 {{'moe.seed' must be a non-negative integer}}
module attributes {moe.seed = -1 : i64} {
}

// -----

// seed: an integer
// expected-error @+1 {{'moe.seed' must be a non-negative integer}}
module attributes {moe.seed = "42"} {
}

// -----

// cluster: a dictionary
// expected-error @+1 {{'moe.cluster' must be a dictionary}}
module attributes {moe.cluster = ["h100"]} {
}

// -----

// all_to_all: one element type
module attributes {moe.grid = #moe.grid<ep = 2>} {
func.func @f(%g: tensor<8x16xf32>) {
  // expected-error @+1 {{'moe.all_to_all' op result must have element type 'f32' (that of input), got 'f16'}}
  %0 = moe.all_to_all %g over [ep] split 0 concat 0 : (tensor<8x16xf32>) -> tensor<8x16xf16>
  return
}
}

// -----

// no_grad: a unit attribute on a function
// expected-error @+1 {{'moe.no_grad' must be a unit attribute on a function}}
module attributes {moe.no_grad} {
}

// -----

// shard: ["ep"] on a moe.param
// expected-error @+1 {{'moe.shard' must be ["ep"] on a moe.param}}
moe.param @w : tensor<4x4xf32> init <ones> {moe.shard = ["dp"]}

// -----

// shard: only on a moe.param
module attributes {moe.grid = #moe.grid<ep = 2>} {
// expected-error @+1 {{'moe.shard' must be ["ep"] on a moe.param}}
func.func @f() attributes {moe.shard = ["ep"]} {
  return
}
}

// -----

// shard_rows: on a sharded moe.param
// expected-error @+1 {{'moe.shard_rows' must be an array<i64> on a moe.param with 'moe.shard'}}
moe.param @w : tensor<2x4xf32> init <ones> {moe.shard_rows = array<i64: 1, 0>}

// -----

// shard_rows: a row (or -1) per position, whole blocks
// expected-error @+1 {{'moe.shard_rows' must list a row of the full tensor (or -1, empty) per position, a multiple of the block's 2 rows}}
moe.param @w : tensor<2x4xf32> init <ones> {moe.shard = ["ep"], moe.shard_rows = array<i64: 0, 2, 2>}

// -----

// shard_rows: rows are >= -1
// expected-error @+1 {{'moe.shard_rows' must list a row of the full tensor (or -1, empty) per position, a multiple of the block's 2 rows}}
moe.param @w : tensor<2x4xf32> init <ones> {moe.shard = ["ep"], moe.shard_rows = array<i64: 0, 2, -2, 3>}

// -----

// tp_dim: a dimension of the moe.param
// expected-error @+1 {{'moe.tp_dim' must be a dimension of the moe.param it is on}}
moe.param @w : tensor<2x4xf32> init <ones> {moe.tp_dim = 2 : i64}

// -----

// shard_layer: a layer index on a sharded moe.param
// expected-error @+1 {{'moe.shard_layer' must be a non-negative integer on a moe.param with 'moe.shard'}}
moe.param @w : tensor<2x4xf32> init <ones> {moe.shard = ["ep"], moe.shard_layer = -1}

// -----

// plan: a #moe.plan on a module
// expected-error @+1 {{'moe.plan' must be a #moe.plan on a builtin.module, got "dp=2"}}
module attributes {moe.plan = "dp=2"} {
}

// -----

// plan: only on a module
// expected-error @+1 {{'moe.plan' must be a #moe.plan on a builtin.module, got #moe.plan<}}
func.func @f() attributes {moe.plan = #moe.plan<predicted_step_s = 1.0, compute_s = 1.0, all_to_all_s = 0.0, all_reduce_s = 0.0, all_reduce_exposed_s = 0.0, tensor_parallel_s = 0.0, zero_stage = 0, max_memory_bytes = 1.0, candidates = 1>} {
  return
}

// -----

// plan: times and memory are >= 0
// expected-error @+1 {{plan all_to_all_s must be >= 0, got -1.000000e+00}}
module attributes {moe.plan = #moe.plan<predicted_step_s = 1.0, compute_s = 1.0, all_to_all_s = -1.0, all_reduce_s = 0.0, all_reduce_exposed_s = 0.0, tensor_parallel_s = 0.0, zero_stage = 0, max_memory_bytes = 1.0, candidates = 1>} {
}

// -----

// plan: ZeRO stage 0, 1 or 2
// expected-error @+1 {{plan zero_stage must be 0, 1 or 2, got 3}}
module attributes {moe.plan = #moe.plan<predicted_step_s = 1.0, compute_s = 1.0, all_to_all_s = 0.0, all_reduce_s = 0.0, all_reduce_exposed_s = 0.0, tensor_parallel_s = 0.0, zero_stage = 3, max_memory_bytes = 1.0, candidates = 1>} {
}

// -----

// plan: at least one candidate was costed
// expected-error @+1 {{plan candidates must be >= 1, got 0}}
module attributes {moe.plan = #moe.plan<predicted_step_s = 1.0, compute_s = 1.0, all_to_all_s = 0.0, all_reduce_s = 0.0, all_reduce_exposed_s = 0.0, tensor_parallel_s = 0.0, zero_stage = 0, max_memory_bytes = 1.0, candidates = 0>} {
}

// -----

// plan: every parameter is given
// expected-error @+1 {{expected ','}}
module attributes {moe.plan = #moe.plan<predicted_step_s = 1.0, compute_s = 1.0, all_to_all_s = 0.0, all_reduce_s = 0.0, all_reduce_exposed_s = 0.0, tensor_parallel_s = 0.0, zero_stage = 0, max_memory_bytes = 1.0>} {
}

// -----

// plan_report: a dictionary on a module
// expected-error @+1 {{'moe.plan_report' must be a dictionary on a builtin.module}}
module attributes {moe.plan_report = "table"} {
}

// -----

// token_shares: positive sequence counts on a module
// expected-error @+1 {{'moe.token_shares' must be a non-empty array<i64> of positive sequence counts on a builtin.module}}
module attributes {moe.token_shares = array<i64: 3, 0>} {
}

// -----

// recompute: a unit attribute on a module
// expected-error @+1 {{'moe.recompute' must be a unit attribute on a builtin.module}}
module attributes {moe.recompute = 1 : i64} {
}

// -----

// micro_batches: a positive count on a module
// expected-error @+1 {{'moe.micro_batches' must be a positive integer (micro-batches per step) on a builtin.module}}
module attributes {moe.micro_batches = 0 : i64} {
}

// -----

// replica: an index into the token shares
// expected-error @+1 {{'moe.replica' must be an index into the module's 'moe.token_shares'}}
module attributes {moe.token_shares = array<i64: 3, 1>, moe.replica = 2 : i64} {
}

// -----

// loss_scale: a float >= 1 on the module
// expected-error @+1 {{'moe.loss_scale' must be a float in [1, 1e30] on a builtin.module}}
module attributes {moe.loss_scale = 0.5 : f64} {
}

// -----

// loss_seed: marks the backward's seed, a moe.fill
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) {
  // expected-error @+1 {{'moe.loss_seed' must be a unit attribute on a moe.fill}}
  %0 = moe.add %x, %y {moe.loss_seed} : tensor<4xf32>
  return
}
