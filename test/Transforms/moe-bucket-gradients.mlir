// moe-bucket-gradients: runs of adjacent uncompressed all-reduces of one
// group, reduction and scale share a moe.bucket; the step program sends a
// bucket as one collective.
// RUN: moe-opt --moe-bucket-gradients %s | FileCheck %s
// RUN: moe-opt --moe-bucket-gradients="max-floats=150" %s | FileCheck %s --check-prefix=SMALL
// RUN: moe-opt --moe-bucket-gradients %s | moe-opt --moe-bucket-gradients | FileCheck %s

module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
  // CHECK-LABEL: func.func @step
  // SMALL-LABEL: func.func @step
  func.func @step(%a: tensor<8x16xf32>, %b: tensor<16xf32>, %c: tensor<4x4xf32>) -> tensor<f32> {
    // Three of one kind: one bucket.
    // CHECK: moe.all_reduce mean %{{.*}} over [dp, ep] {moe.bucket = 0 : i64}
    // CHECK: moe.all_reduce mean %{{.*}} over [dp, ep] {moe.bucket = 0 : i64}
    // CHECK: moe.all_reduce mean %{{.*}} over [dp, ep] {moe.bucket = 0 : i64}
    // 128 + 16 floats fit 150; the third starts a new bucket of one.
    // SMALL: moe.all_reduce mean %{{.*}} {moe.bucket = 0 : i64}
    // SMALL: moe.all_reduce mean %{{.*}} {moe.bucket = 0 : i64}
    // SMALL: moe.all_reduce mean %{{.*}} over [dp, ep] : tensor<4x4xf32>
    %0 = moe.all_reduce mean %a over [dp, ep] : tensor<8x16xf32>
    %1 = moe.all_reduce mean %b over [dp, ep] : tensor<16xf32>
    %2 = moe.all_reduce mean %c over [dp, ep] : tensor<4x4xf32>
    // Another group, scale or a codec ends a bucket; a compressed all-reduce
    // is never bucketed.
    // CHECK: moe.all_reduce sum %{{.*}} over [dp] {moe.bucket = 1 : i64, scale = 2.500000e-01 : f64}
    // CHECK: moe.all_reduce sum %{{.*}} over [dp] {moe.bucket = 1 : i64, scale = 2.500000e-01 : f64}
    // CHECK: moe.all_reduce sum %{{.*}} over [dp] codec <int8, block_size = 256> : tensor<16xf32>
    // CHECK: moe.all_reduce sum %{{.*}} over [dp] codec <int8, block_size = 256> : tensor<16xf32>
    %3 = moe.all_reduce sum %a over [dp] {scale = 2.500000e-01 : f64} : tensor<8x16xf32>
    %4 = moe.all_reduce sum %b over [dp] {scale = 2.500000e-01 : f64} : tensor<16xf32>
    %5 = moe.all_reduce sum %b over [dp] codec <int8, block_size = 256> : tensor<16xf32>
    %6 = moe.all_reduce sum %b over [dp] codec <int8, block_size = 256> : tensor<16xf32>
    // A member reading an earlier member's result starts a new bucket, and a
    // run of one gets none.
    // CHECK: moe.all_reduce sum %{{.*}} over [ep] {moe.bucket = 2 : i64}
    // CHECK: moe.all_reduce sum %{{.*}} over [ep] {moe.bucket = 2 : i64}
    // CHECK: moe.all_reduce sum %{{.*}} over [ep] : tensor<16xf32>
    // CHECK-NOT: moe.bucket
    %10 = moe.all_reduce sum %c over [ep] : tensor<4x4xf32>
    %7 = moe.all_reduce sum %b over [ep] : tensor<16xf32>
    %8 = moe.all_reduce sum %7 over [ep] : tensor<16xf32>
    %9 = moe.global_norm %0 : tensor<8x16xf32>
    return %9 : tensor<f32>
  }
}
