// moe-schedule: each gradient all-reduce starts in the background right
// after its bucket's last gradient is computed and is waited for just before
// the first op reading it; buckets follow the order gradients are computed.
// RUN: moe-opt --moe-schedule="bucket-floats=150" %s | FileCheck %s
// RUN: moe-opt --moe-schedule %s | FileCheck %s --check-prefix=ONE
// RUN: moe-opt --moe-schedule %s | FileCheck %s --check-prefix=KIND
// Scheduling twice changes nothing more.
// RUN: moe-opt --moe-schedule="bucket-floats=150" %s | moe-opt --moe-schedule="bucket-floats=150" | FileCheck %s
// RUN: not moe-opt --moe-schedule="bucket-floats=-1" %s 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: moe-schedule: bucket-floats must be >= 0

module attributes {moe.grid = #moe.grid<dp = 2, ep = 2>} {
  // CHECK-LABEL: func.func @step
  // ONE-LABEL: func.func @step
  func.func @step(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x4x8xf32>,
                  %loss: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
    // CHECK: %[[A:.*]] = moe.fill 1.0{{.*}} : tensor<8x16xf32>
    // CHECK-NEXT: %[[DX1:.*]], %[[DG1:.*]] = moe.rms_norm_grad
    // 128 + 8 floats: one bucket, started once both exist.
    // CHECK-NEXT: %[[RA:.*]] = moe.all_reduce async mean %[[A]] over [dp, ep] {moe.bucket = 0 : i64}
    // CHECK-NEXT: %[[RB:.*]] = moe.all_reduce async mean %[[DG1]] over [dp, ep] {moe.bucket = 0 : i64}
    // CHECK-NEXT: %{{.*}}, %[[DG2:.*]] = moe.rms_norm_grad %[[DX1]]
    // Another scale: another bucket.
    // CHECK-NEXT: %[[RC:.*]] = moe.all_reduce async sum %[[DG2]] over [dp] {moe.bucket = 1 : i64, scale = 5.000000e-01 : f64}
    // CHECK-NEXT: %[[D:.*]] = moe.fill 2.0
    // The last gradient's bucket has nothing to overlap: it stays blocking,
    // and so do compressed reductions and the returned loss's.
    // CHECK-NEXT: %[[RD:.*]] = moe.all_reduce mean %[[D]] over [dp, ep] : tensor<16xf32>
    // CHECK-NEXT: moe.all_reduce sum %{{.*}} over [dp] codec
    // CHECK-NEXT: moe.all_reduce mean %{{.*}} over [ep] : tensor<f32>
    // CHECK-NEXT: %[[W0:.*]]:2 = moe.wait %[[RA]], %[[RB]] : tensor<8x16xf32>, tensor<8xf32>
    // CHECK-NEXT: %[[W1:.*]] = moe.wait %[[RC]] : tensor<8xf32>
    // CHECK-NEXT: moe.global_norm %[[W0]]#0, %[[W0]]#1, %[[W1]], %[[RD]]
    //
    // One bucket per kind by default (2^14 floats at least): the mean bucket
    // ends with the last gradient, so only the scaled sum overlaps.
    // ONE: moe.rms_norm_grad
    // ONE-NEXT: moe.rms_norm_grad
    // ONE-NEXT: moe.all_reduce async sum
    // ONE-NEXT: moe.fill 2.0
    // ONE-NEXT: moe.all_reduce mean
    // ONE-NEXT: moe.all_reduce mean
    // ONE-NOT: async
    // ONE: moe.wait
    // ONE-NOT: moe.wait
    // ONE: moe.global_norm
    %a = moe.fill 1.0 : tensor<8x16xf32>
    %dx1, %dg1 = moe.rms_norm_grad %x, %g, %dy {epsilon = 1.0e-05 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
    %dx2, %dg2 = moe.rms_norm_grad %dx1, %g, %dy {epsilon = 1.0e-05 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
    %d = moe.fill 2.0 : tensor<16xf32>
    %ra = moe.all_reduce mean %a over [dp, ep] : tensor<8x16xf32>
    %rb = moe.all_reduce mean %dg1 over [dp, ep] : tensor<8xf32>
    %rc = moe.all_reduce sum %dg2 over [dp] {scale = 5.000000e-01 : f64} : tensor<8xf32>
    %rd = moe.all_reduce mean %d over [dp, ep] : tensor<16xf32>
    %re = moe.all_reduce sum %dg2 over [dp] codec <int8, block_size = 8> : tensor<8xf32>
    %rl = moe.all_reduce mean %loss over [ep] : tensor<f32>
    %n = moe.global_norm %ra, %rb, %rc, %rd, %re : tensor<8x16xf32>, tensor<8xf32>, tensor<8xf32>, tensor<16xf32>, tensor<8xf32>
    return %n, %rl : tensor<f32>, tensor<f32>
  }
  // Each kind of reduction is cut by its own floats (an eighth, 2^14 at
  // least): 600,000 floats of expert gradients (a scaled sum over dp) do
  // not make the 40,000 of the replicated parameters one bucket, which
  // would start only with the last of them; each of the four starts right
  // after its gradient.
  // KIND-LABEL: func.func @kinds
  // KIND: %[[BIG:.*]] = moe.fill 1.0{{.*}} : tensor<600x1000xf32>
  // KIND-NEXT: moe.all_reduce async sum %[[BIG]] over [dp]
  // KIND-NEXT: %[[A:.*]] = moe.fill 1.0{{.*}} : tensor<100x100xf32>
  // KIND-NEXT: moe.all_reduce async mean %[[A]] over [dp, ep]
  // KIND-NEXT: %[[B:.*]] = moe.fill 2.0{{.*}} : tensor<100x100xf32>
  // KIND-NEXT: moe.all_reduce async mean %[[B]] over [dp, ep]
  // KIND-NEXT: %[[C:.*]] = moe.fill 3.0{{.*}} : tensor<100x100xf32>
  // KIND-NEXT: moe.all_reduce async mean %[[C]] over [dp, ep]
  // KIND-NEXT: %[[D:.*]] = moe.fill 4.0{{.*}} : tensor<100x100xf32>
  // KIND-NEXT: moe.all_reduce async mean %[[D]] over [dp, ep]
  func.func @kinds() -> tensor<f32> {
    %big = moe.fill 1.0 : tensor<600x1000xf32>
    %a = moe.fill 1.0 : tensor<100x100xf32>
    %b = moe.fill 2.0 : tensor<100x100xf32>
    %c = moe.fill 3.0 : tensor<100x100xf32>
    %d = moe.fill 4.0 : tensor<100x100xf32>
    %e = moe.fill 5.0 : tensor<8xf32>
    %rbig = moe.all_reduce sum %big over [dp] {scale = 5.000000e-01 : f64} : tensor<600x1000xf32>
    %ra = moe.all_reduce mean %a over [dp, ep] : tensor<100x100xf32>
    %rb = moe.all_reduce mean %b over [dp, ep] : tensor<100x100xf32>
    %rc = moe.all_reduce mean %c over [dp, ep] : tensor<100x100xf32>
    %rd = moe.all_reduce mean %d over [dp, ep] : tensor<100x100xf32>
    %n = moe.global_norm %rbig, %ra, %rb, %rc, %rd, %e : tensor<600x1000xf32>, tensor<100x100xf32>, tensor<100x100xf32>, tensor<100x100xf32>, tensor<100x100xf32>, tensor<8xf32>
    return %n : tensor<f32>
  }
}
