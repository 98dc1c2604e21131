// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s --mlir-print-op-generic | moe-opt | FileCheck %s
// Round-trip of the attributes passes leave for later stages: the buffer
// plan (moe-lower-to-kernels), the sharding plan (moe-plan-sharding), the
// compression settings and codec choices (moe-compress-collectives). The
// parameters may come in any order; they print in their declared order.

// CHECK: module attributes {
// CHECK-SAME: moe.buffer_plan = #moe.buffer_plan<activation_bytes = 136, gradient_bytes = 0, parameter_bytes = 64, optimizer_state_bytes = 0, total_bytes = 200, num_kernels = 2, num_launches = 4, alignment = 64>
// CHECK-SAME: moe.compression = #moe.compression<warmup_steps = 5, compressed = 6>
// CHECK-SAME: moe.plan = #moe.plan<predicted_step_s = 5.200000e-03, compute_s = 4.900000e-03, all_to_all_s = 2.000000e-04, all_reduce_s = 1.000000e-04, all_reduce_exposed_s = 7.7663999999999994E-5, tensor_parallel_s = 0.0, zero_stage = 1, max_memory_bytes = 7413453.0, candidates = 9>
module attributes {
  moe.buffer_plan = #moe.buffer_plan<alignment = 64, activation_bytes = 136, gradient_bytes = 0, parameter_bytes = 64, optimizer_state_bytes = 0, total_bytes = 200, num_kernels = 2, num_launches = 4>,
  moe.compression = #moe.compression<compressed = 6, warmup_steps = 5>,
  moe.grid = #moe.grid<dp = 2, ep = 2>,
  moe.plan = #moe.plan<predicted_step_s = 5.2e-03, compute_s = 4.9e-03, all_to_all_s = 2.0e-04, all_reduce_s = 1.0e-04, all_reduce_exposed_s = 7.7663999999999994E-5, tensor_parallel_s = 0.0, zero_stage = 1, max_memory_bytes = 7413453.0, candidates = 9>
} {

// CHECK-LABEL: func.func @codec_choices
func.func @codec_choices(%g: tensor<256x64xf32>, %x: tensor<4x8x64xf32>) -> (tensor<256x64xf32>, tensor<4x8x64xf32>) {
  // CHECK: moe.all_reduce mean %{{.*}} over [ep] codec <int8, block_size = 256> {moe.codec_choice = #moe.codec_choice<codec = "int8", uncompressed_s = 1.200000e-04, predicted_s = 4.100000e-05>}
  %0 = moe.all_reduce mean %g over [ep] codec <int8, block_size = 256> {moe.codec_choice = #moe.codec_choice<codec = "int8", uncompressed_s = 1.2e-04, predicted_s = 4.1e-05>} : tensor<256x64xf32>
  // CHECK: moe.all_to_all %{{.*}} over [ep] split 0 concat 0 {moe.codec_choice = #moe.codec_choice<codec = "none", uncompressed_s = 1.000000e-05, predicted_s = 1.000000e-05>}
  %1 = moe.all_to_all %x over [ep] split 0 concat 0 {moe.codec_choice = #moe.codec_choice<predicted_s = 1.0e-05, uncompressed_s = 1.0e-05, codec = "none">} : (tensor<4x8x64xf32>) -> tensor<4x8x64xf32>
  return %0, %1 : tensor<256x64xf32>, tensor<4x8x64xf32>
}

}
