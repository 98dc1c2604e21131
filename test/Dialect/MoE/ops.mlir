// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s --mlir-print-op-generic | moe-opt | FileCheck %s
// Round-trip of every moe op, in its custom and generic forms.

// CHECK: module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>}
module attributes {moe.grid = #moe.grid<dp = 2, ep = 2, tp = 1>} {

// CHECK: moe.param @emb : tensor<32x8xf32> init <normal, scale = 2.000000e-02>
moe.param @emb : tensor<32x8xf32> init <normal, scale = 0.02>
// CHECK: moe.param @gamma : tensor<8xbf16> init <ones>
moe.param @gamma : tensor<8xbf16> init <ones>
// CHECK: moe.param @bias : tensor<16xf16> init <zeros>
moe.param @bias : tensor<16xf16> init <zeros>
// CHECK: moe.param @w : tensor<8x16xf32> init <uniform, scale = 1.000000e-01>
moe.param @w : tensor<8x16xf32> init <uniform, scale = 0.1>

// CHECK-LABEL: func.func @params_and_inputs
// CHECK-SAME: (%{{.*}}: tensor<2x4xi32> {moe.input = "tokens"}, %{{.*}}: tensor<2x4xi32> {moe.input = "targets"})
func.func @params_and_inputs(%tokens: tensor<2x4xi32> {moe.input = "tokens"},
                             %targets: tensor<2x4xi32> {moe.input = "targets"}) -> tensor<32x8xf32> {
  // CHECK: moe.get_param @emb : tensor<32x8xf32>
  %0 = moe.get_param @emb : tensor<32x8xf32>
  return %0 : tensor<32x8xf32>
}

// CHECK-LABEL: func.func @embedding
func.func @embedding(%ids: tensor<2x4xi32>, %table: tensor<32x8xbf16>) -> tensor<2x4x8xbf16> {
  // CHECK: moe.embedding %{{.*}}, %{{.*}} : tensor<2x4xi32>, tensor<32x8xbf16> -> tensor<2x4x8xbf16>
  %0 = moe.embedding %ids, %table : tensor<2x4xi32>, tensor<32x8xbf16> -> tensor<2x4x8xbf16>
  return %0 : tensor<2x4x8xbf16>
}

// CHECK-LABEL: func.func @rms_norm
func.func @rms_norm(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  // CHECK: moe.rms_norm %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<8xf32>
  %0 = moe.rms_norm %x, %g : tensor<2x4x8xf32>, tensor<8xf32>
  // CHECK: moe.rms_norm %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  %1 = moe.rms_norm %x, %g {epsilon = 1.0e-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  return %0, %1 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @clamp
func.func @clamp(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // CHECK: moe.clamp %{{.*}} {limit = 8.000000e+00 : f32} : tensor<2x4x8xf32>
  %0 = moe.clamp %x {limit = 8.0 : f32} : tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @sigmoid_gate
func.func @sigmoid_gate(%x: tensor<2x4x8xf32>, %g: tensor<2x4x1xf32>) -> tensor<2x4x8xf32> {
  // CHECK: moe.sigmoid_gate %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<2x4x1xf32>
  %0 = moe.sigmoid_gate %x, %g : tensor<2x4x8xf32>, tensor<2x4x1xf32>
  return %0 : tensor<2x4x8xf32>
}

// Groups of gamma's size: per-head norms of a projection (2 heads of 4).
// CHECK-LABEL: func.func @rms_norm_per_head
func.func @rms_norm_per_head(%q: tensor<2x4x8xf32>, %g: tensor<4xf32>) -> tensor<2x4x8xf32> {
  // CHECK: moe.rms_norm %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<4xf32>
  %0 = moe.rms_norm %q, %g : tensor<2x4x8xf32>, tensor<4xf32>
  return %0 : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x4x16xf16>, %k: tensor<2x4x8xf16>, %v: tensor<2x4x8xf16>) -> (tensor<2x4x16xf16>, tensor<2x4x16xf16>) {
  // CHECK: moe.attention %{{.*}}, %{{.*}}, %{{.*}} heads 4 kv_heads 2 : tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  %0 = moe.attention %q, %k, %v heads 4 kv_heads 2 : tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  // CHECK: moe.attention %{{.*}} heads 4 kv_heads 2 {rope_theta = 1.000000e+06 : f32}
  %1 = moe.attention %q, %k, %v heads 4 kv_heads 2 {rope_theta = 1.0e6 : f32} : tensor<2x4x16xf16>, tensor<2x4x8xf16>, tensor<2x4x8xf16>
  return %0, %1 : tensor<2x4x16xf16>, tensor<2x4x16xf16>
}

// Latent attention: 2 heads with content keys of 4, a shared rotary key of
// 2, values of 3.
// CHECK-LABEL: func.func @latent_attention
func.func @latent_attention(%q: tensor<2x4x12xbf16>, %k: tensor<2x4x8xbf16>, %kr: tensor<2x4x2xbf16>, %v: tensor<2x4x6xbf16>, %do: tensor<2x4x6xbf16>) -> tensor<2x4x6xbf16> {
  // CHECK: moe.latent_attention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} heads 2 {rope_theta = 1.000000e+04 : f32} : tensor<2x4x12xbf16>, tensor<2x4x8xbf16>, tensor<2x4x2xbf16>, tensor<2x4x6xbf16> -> tensor<2x4x6xbf16>
  %0 = moe.latent_attention %q, %k, %kr, %v heads 2 {rope_theta = 1.0e4 : f32} : tensor<2x4x12xbf16>, tensor<2x4x8xbf16>, tensor<2x4x2xbf16>, tensor<2x4x6xbf16> -> tensor<2x4x6xbf16>
  // CHECK: moe.latent_attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} heads 2 : tensor<2x4x12xbf16>, tensor<2x4x8xbf16>, tensor<2x4x2xbf16>, tensor<2x4x6xbf16>
  %dq, %dk, %dkr, %dv = moe.latent_attention_grad %q, %k, %kr, %v, %do heads 2 : tensor<2x4x12xbf16>, tensor<2x4x8xbf16>, tensor<2x4x2xbf16>, tensor<2x4x6xbf16>
  return %0 : tensor<2x4x6xbf16>
}

// CHECK-LABEL: func.func @linear_and_add
func.func @linear_and_add(%x: tensor<2x4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<2x4x16xf32> {
  // CHECK: moe.linear %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  %0 = moe.linear %x, %w : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  // CHECK: moe.linear %{{.*}}, %{{.*}} bias %{{.*}} : tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<2x4x16xf32>
  %1 = moe.linear %x, %w bias %b : tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<2x4x16xf32>
  // CHECK: moe.add %{{.*}}, %{{.*}} : tensor<2x4x16xf32>
  %2 = moe.add %0, %1 : tensor<2x4x16xf32>
  return %2 : tensor<2x4x16xf32>
}

// CHECK-LABEL: func.func @cast
func.func @cast(%w: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: moe.cast %{{.*}} : tensor<8x16xf32> -> tensor<8x16xbf16>
  %0 = moe.cast %w : tensor<8x16xf32> -> tensor<8x16xbf16>
  // CHECK: moe.cast %{{.*}} : tensor<8x16xbf16> -> tensor<8x16xf16>
  %1 = moe.cast %0 : tensor<8x16xbf16> -> tensor<8x16xf16>
  // CHECK: moe.cast %{{.*}} : tensor<8x16xf16> -> tensor<8x16xf32>
  %2 = moe.cast %1 : tensor<8x16xf16> -> tensor<8x16xf32>
  return %2 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @ffn
func.func @ffn(%x: tensor<6x8xf32>, %up: tensor<8x32xf32>, %down: tensor<32x8xf32>, %gate: tensor<8x32xf32>) -> (tensor<6x8xf32>, tensor<6x8xf32>) {
  // CHECK: moe.ffn swiglu %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<8x32xf32>) -> tensor<6x8xf32>
  %0 = moe.ffn swiglu %x, %up, %down gate %gate : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>, tensor<8x32xf32>) -> tensor<6x8xf32>
  // CHECK: moe.ffn gelu %{{.*}}, %{{.*}}, %{{.*}} : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>) -> tensor<6x8xf32>
  %1 = moe.ffn gelu %x, %up, %down : (tensor<6x8xf32>, tensor<8x32xf32>, tensor<32x8xf32>) -> tensor<6x8xf32>
  return %0, %1 : tensor<6x8xf32>, tensor<6x8xf32>
}

// CHECK-LABEL: func.func @router
func.func @router(%x: tensor<2x4x8xf32>, %w: tensor<8x4xf32>, %b: tensor<4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>) {
  // CHECK: moe.router softmax %{{.*}}, %{{.*}} top_k 2 {aux_loss_coef = 0.00999999977 : f32, capacity_factor = 1.250000e+00 : f32, renormalize = true}
  // CHECK-SAME: : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  %g, %e, %aux = moe.router softmax %x, %w top_k 2 {renormalize = true, capacity_factor = 1.25 : f32, aux_loss_coef = 0.01 : f32}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  // CHECK: moe.router sigmoid %{{.*}}, %{{.*}} bias %{{.*}} top_k 2 {routed_scaling = 2.500000e+00 : f32, z_loss_coef = 1.000000e-03 : f32}
  %g2, %e2, %aux2 = moe.router sigmoid %x, %w bias %b top_k 2 {routed_scaling = 2.5 : f32, z_loss_coef = 0.001 : f32}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  // Group-limited routing: 2 groups of 2 experts, the best one kept
  // (topk_groups = 1 is the default, not printed).
  // CHECK: moe.router sigmoid %{{.*}}, %{{.*}} top_k 2 {expert_groups = 2 : i64}
  %g3, %e3, %aux3 = moe.router sigmoid %x, %w top_k 2 {expert_groups = 2 : i64, topk_groups = 1 : i64}
      : (tensor<2x4x8xf32>, tensor<8x4xf32>) -> (tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>)
  return %g, %e, %aux : tensor<2x4x2xf32>, tensor<2x4x2xi32>, tensor<f32>
}

// CHECK-LABEL: func.func @dispatch_experts_combine
func.func @dispatch_experts_combine(%x: tensor<2x4x8xf32>, %g: tensor<2x4x2xf32>, %e: tensor<2x4x2xi32>,
    %up: tensor<4x8x16xf32>, %down: tensor<4x16x8xf32>) -> tensor<2x4x8xf32> {
  // CHECK: moe.dispatch %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x5x8xf32>
  %buf = moe.dispatch %x, %e : (tensor<2x4x8xf32>, tensor<2x4x2xi32>) -> tensor<4x5x8xf32>
  // CHECK: moe.expert_ffn gelu %{{.*}}, %{{.*}}, %{{.*}} {placement = #moe.placement<{{\[}}[0, 1], [2, 3, 0]]>}
  %y = moe.expert_ffn gelu %buf, %up, %down {placement = #moe.placement<[[0, 1], [2, 3, 0]]>}
      : (tensor<4x5x8xf32>, tensor<4x8x16xf32>, tensor<4x16x8xf32>) -> tensor<4x5x8xf32>
  // CHECK: moe.combine %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x5x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  %out = moe.combine %y, %g, %e : (tensor<4x5x8xf32>, tensor<2x4x2xf32>, tensor<2x4x2xi32>) -> tensor<2x4x8xf32>
  return %out : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @expert_ffn_swiglu
func.func @expert_ffn_swiglu(%buf: tensor<4x5x8xbf16>, %up: tensor<4x8x16xbf16>, %down: tensor<4x16x8xbf16>, %gate: tensor<4x8x16xbf16>) -> tensor<4x5x8xbf16> {
  // CHECK: moe.expert_ffn swiglu %{{.*}}, %{{.*}}, %{{.*}} gate %{{.*}} :
  %y = moe.expert_ffn swiglu %buf, %up, %down gate %gate
      : (tensor<4x5x8xbf16>, tensor<4x8x16xbf16>, tensor<4x16x8xbf16>, tensor<4x8x16xbf16>) -> tensor<4x5x8xbf16>
  return %y : tensor<4x5x8xbf16>
}

// CHECK-LABEL: func.func @cross_entropy
func.func @cross_entropy(%logits: tensor<2x4x32xbf16>, %t: tensor<2x4xi32>) -> tensor<f32> {
  // CHECK: moe.cross_entropy %{{.*}}, %{{.*}} : tensor<2x4x32xbf16>, tensor<2x4xi32> -> tensor<f32>
  %0 = moe.cross_entropy %logits, %t : tensor<2x4x32xbf16>, tensor<2x4xi32> -> tensor<f32>
  // A data replica's weighted mean (unequal token shares).
  // CHECK: moe.cross_entropy %{{.*}}, %{{.*}} {scale = 1.500000e+00 : f64} : tensor<2x4x32xbf16>
  %1 = moe.cross_entropy %logits, %t {scale = 1.5 : f64} : tensor<2x4x32xbf16>, tensor<2x4xi32> -> tensor<f32>
  return %0 : tensor<f32>
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%g: tensor<8x16xf32>, %buf: tensor<4x5x8xf32>, %rows: tensor<8x8xf32>, %send: tensor<2xi32>)
    -> (tensor<8x16xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>, tensor<2x10x8xf32>, tensor<8x8xf32>, tensor<2xi32>) {
  // CHECK: moe.all_reduce sum %{{.*}} over [dp, ep] : tensor<8x16xf32>
  %0 = moe.all_reduce sum %g over [dp, ep] : tensor<8x16xf32>
  // CHECK: moe.replica_sum %{{.*}} over [ep] layer 1 : tensor<8x16xf32>
  %r = moe.replica_sum %g over [ep] layer 1 : tensor<8x16xf32>
  // CHECK: moe.all_reduce mean %{{.*}} over [dp] codec <powersgd, rank = 4, error_feedback> : tensor<8x16xf32>
  %1 = moe.all_reduce mean %g over [dp] codec <powersgd, rank = 4, error_feedback> : tensor<8x16xf32>
  // CHECK: moe.reduce_scatter sum %{{.*}} over [dp] dim 0 codec <int8, block_size = 64> : tensor<8x16xf32> -> tensor<4x16xf32>
  %2 = moe.reduce_scatter sum %g over [dp] dim 0 codec <int8, block_size = 64> : tensor<8x16xf32> -> tensor<4x16xf32>
  // CHECK: moe.all_gather %{{.*}} over [ep] dim 0 codec <bf16> : tensor<8x16xf32> -> tensor<16x16xf32>
  %3 = moe.all_gather %g over [ep] dim 0 codec <bf16> : tensor<8x16xf32> -> tensor<16x16xf32>
  // CHECK: moe.all_to_all %{{.*}} over [ep] split 0 concat 1 : (tensor<4x5x8xf32>) -> tensor<2x10x8xf32>
  %4 = moe.all_to_all %buf over [ep] split 0 concat 1 : (tensor<4x5x8xf32>) -> tensor<2x10x8xf32>
  // CHECK: moe.all_to_all %{{.*}} over [ep] split 0 concat 0 counts %{{.*}} codec <fp16> : (tensor<8x8xf32>, tensor<2xi32>) -> (tensor<8x8xf32>, tensor<2xi32>)
  %5, %6 = moe.all_to_all %rows over [ep] split 0 concat 0 counts %send codec <fp16> : (tensor<8x8xf32>, tensor<2xi32>) -> (tensor<8x8xf32>, tensor<2xi32>)
  return %0, %1, %2, %3, %4, %5, %6 : tensor<8x16xf32>, tensor<8x16xf32>, tensor<4x16xf32>, tensor<16x16xf32>, tensor<2x10x8xf32>, tensor<8x8xf32>, tensor<2xi32>
}

// CHECK-LABEL: func.func @tensor_parallel
func.func @tensor_parallel(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  // CHECK: %[[E:.*]] = moe.tp_enter %{{.*}} over [tp] : tensor<8x16xf32>
  %0 = moe.tp_enter %x over [tp] : tensor<8x16xf32>
  // CHECK: moe.tp_exit %[[E]] over [tp] : tensor<8x16xf32>
  %1 = moe.tp_exit %0 over [tp] : tensor<8x16xf32>
  return %1 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @async_all_reduce
func.func @async_all_reduce(%g: tensor<8x16xf32>, %b: tensor<16xf32>) -> (tensor<8x16xf32>, tensor<16xf32>) {
  // CHECK: %[[A:.*]] = moe.all_reduce async sum %{{.*}} over [dp] {moe.bucket = 0 : i64} : tensor<8x16xf32>
  // CHECK: %[[B:.*]] = moe.all_reduce async mean %{{.*}} over [dp] : tensor<16xf32>
  // CHECK: %{{.*}}:2 = moe.wait %[[A]], %[[B]] : tensor<8x16xf32>, tensor<16xf32>
  %0 = moe.all_reduce async sum %g over [dp] {moe.bucket = 0 : i64} : tensor<8x16xf32>
  %1 = moe.all_reduce async mean %b over [dp] : tensor<16xf32>
  %2:2 = moe.wait %0, %1 : tensor<8x16xf32>, tensor<16xf32>
  return %2#0, %2#1 : tensor<8x16xf32>, tensor<16xf32>
}

// CHECK-LABEL: func.func @codecs
func.func @codecs(%g: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  // CHECK: codec <topk, ratio = 1.000000e-02, error_feedback>
  %0 = moe.all_reduce sum %g over [dp] codec <topk, ratio = 0.01, error_feedback> : tensor<8x16xf32>
  // CHECK: codec <sign, error_feedback>
  %1 = moe.all_reduce sum %g over [dp] codec <sign, error_feedback> : tensor<8x16xf32>
  return %0, %1 : tensor<8x16xf32>, tensor<8x16xf32>
}
}
