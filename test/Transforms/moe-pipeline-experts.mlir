// moe-pipeline-experts: an expert phase (ragged dispatch, expert kernel,
// ragged combine) becomes chunks of whole local experts whose exchanges run
// in the background: every dispatch chunk starts first, each chunk's kernel
// waits for its rows only and starts its combine; the layer's place_slots
// lays its blocks out chunk by chunk.
// RUN: moe-opt --moe-pipeline-experts %s | FileCheck %s
// RUN: moe-opt --moe-pipeline-experts=chunks=4 %s | FileCheck %s --check-prefix=FOUR
// RUN: moe-opt --moe-pipeline-experts=chunks=1 %s | FileCheck %s --check-prefix=OFF
// RUN: moe-opt --moe-pipeline-experts %s | moe-opt --moe-pipeline-experts | FileCheck %s --check-prefix=TWICE
// RUN: not moe-opt --moe-pipeline-experts=chunks=0 %s 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: moe-pipeline-experts: chunks must be >= 1, got 0

module attributes {moe.grid = #moe.grid<ep = 2>} {
  // CHECK-DAG: moe.kernel @place_slots_1 family "place_slots" {{.*}}chunks = 2 : i64, {{.*}}ranks = 2 : i64
  // CHECK-DAG: moe.kernel @expert_ffn_1 family "expert_ffn" : (tensor<1x8x8xf32>, tensor<1x8x16xf32>, tensor<1x16x8xf32>, tensor<1x8x16xf32>, tensor<2xi32>) -> tensor<1x8x8xf32>
  // The whole-phase kernel is gone; so is the unchunked placement.
  // CHECK-NOT: @expert_ffn_0 family
  // OFF: moe.kernel @expert_ffn_0 family
  moe.kernel @place_slots_0 family "place_slots" : (tensor<4x2xi32>, tensor<4xi32>) -> (tensor<4x2xi32>, tensor<4xi32>) {config = {block = 4 : i64, order = array<i64: 0, 1, 2, 3>}, epilogue = []}
  moe.kernel @permute_0 family "permute" : (tensor<4x8xf32>, tensor<4x2xi32>) -> tensor<4x4x8xf32> {config = {}, epilogue = []}
  moe.kernel @expert_ffn_0 family "expert_ffn" : (tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<4xi32>) -> tensor<2x8x8xf32> {config = {activation = 0 : i32}, epilogue = []}
  moe.kernel @unpermute_0 family "unpermute" : (tensor<4x4x8xf32>, tensor<4x2xi32>, tensor<4x2xf32>) -> tensor<4x8xf32> {config = {}, epilogue = []}

  // CHECK-LABEL: func.func @step
  // OFF-LABEL: func.func @step
  func.func @step(%x: tensor<4x8xf32>, %slots: tensor<4x2xi32>, %counts: tensor<4xi32>,
                  %gates: tensor<4x2xf32>, %wu: tensor<2x8x16xf32>, %wd: tensor<2x16x8xf32>,
                  %wg: tensor<2x8x16xf32>) -> tensor<4x8xf32> {
    // CHECK: %[[S:.*]]:2 = moe.launch @place_slots_1(
    // CHECK: %[[P:.*]] = moe.launch @permute_0(
    // CHECK-NEXT: %[[C0:.*]] = moe.chunk %[[S]]#1[0 of 2] : tensor<4xi32> -> tensor<2xi32>
    // CHECK-NEXT: %[[B0:.*]] = moe.chunk %[[P]][0 of 2] : tensor<4x4x8xf32> -> tensor<2x4x8xf32>
    // CHECK-NEXT: %[[R0:.*]], %[[N0:.*]] = moe.all_to_all async %[[B0]] over [ep] split 0 concat 1 counts %[[C0]] {moe.bucket = 0 : i64} : (tensor<2x4x8xf32>, tensor<2xi32>) -> (tensor<1x8x8xf32>, tensor<2xi32>)
    // CHECK-NEXT: %[[C1:.*]] = moe.chunk %[[S]]#1[1 of 2]
    // CHECK-NEXT: %[[B1:.*]] = moe.chunk %[[P]][1 of 2]
    // CHECK-NEXT: %[[R1:.*]], %[[N1:.*]] = moe.all_to_all async %[[B1]] {{.*}}moe.bucket = 1 : i64
    // Chunk 0 computes while chunk 1 is on the wire.
    // CHECK-NEXT: %[[W0:.*]]:2 = moe.wait %[[R0]], %[[N0]] : tensor<1x8x8xf32>, tensor<2xi32>
    // CHECK-NEXT: %[[U0:.*]] = moe.chunk %{{.*}}[0 of 2] : tensor<2x8x16xf32> -> tensor<1x8x16xf32>
    // CHECK-NEXT: moe.chunk %{{.*}}[0 of 2] : tensor<2x16x8xf32>
    // CHECK-NEXT: moe.chunk %{{.*}}[0 of 2] : tensor<2x8x16xf32>
    // CHECK-NEXT: %[[Y0:.*]] = moe.launch @expert_ffn_1(%[[W0]]#0, %[[U0]], %{{.*}}, %{{.*}}, %[[W0]]#1)
    // CHECK-NEXT: %[[O0:.*]], %[[M0:.*]] = moe.all_to_all async %[[Y0]] over [ep] split 1 concat 0 counts %[[W0]]#1 {moe.bucket = 2 : i64}
    // CHECK-NEXT: %[[W1:.*]]:2 = moe.wait %[[R1]], %[[N1]]
    // CHECK: %[[Y1:.*]] = moe.launch @expert_ffn_1(%[[W1]]#0,
    // CHECK-NEXT: %[[O1:.*]], %[[M1:.*]] = moe.all_to_all async %[[Y1]] {{.*}}moe.bucket = 3 : i64
    // CHECK: %[[V0:.*]]:2 = moe.wait %[[O0]], %[[M0]]
    // CHECK-NEXT: %[[V1:.*]]:2 = moe.wait %[[O1]], %[[M1]]
    // CHECK-NEXT: %[[O:.*]] = moe.concat %[[V0]]#0, %[[V1]]#0 : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<4x4x8xf32>
    // CHECK: moe.launch @unpermute_0(%[[O]], %[[S]]#0,
    // CHECK-NOT: moe.all_to_all %
    //
    // Two local experts make two chunks at most.
    // FOUR-COUNT-4: moe.all_to_all async
    // FOUR-NOT: moe.all_to_all
    // OFF-NOT: async
    // Pipelined once: a second run finds no phase of the shape.
    // TWICE-COUNT-4: moe.all_to_all async
    // TWICE-NOT: moe.all_to_all
    %s:2 = moe.launch @place_slots_0(%slots, %counts) {buffers = array<i64: 0, 0, 0, 0, 0, 0>} : (tensor<4x2xi32>, tensor<4xi32>) -> (tensor<4x2xi32>, tensor<4xi32>)
    %p = moe.launch @permute_0(%x, %s#0) {buffers = array<i64: 0, 0, 0>} : (tensor<4x8xf32>, tensor<4x2xi32>) -> tensor<4x4x8xf32>
    %r, %rc = moe.all_to_all %p over [ep] split 0 concat 1 counts %s#1 : (tensor<4x4x8xf32>, tensor<4xi32>) -> (tensor<2x8x8xf32>, tensor<4xi32>)
    %y = moe.launch @expert_ffn_0(%r, %wu, %wd, %wg, %rc) {buffers = array<i64: 0, 0, 0>} : (tensor<2x8x8xf32>, tensor<2x8x16xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>, tensor<4xi32>) -> tensor<2x8x8xf32>
    %o, %oc = moe.all_to_all %y over [ep] split 1 concat 0 counts %rc : (tensor<2x8x8xf32>, tensor<4xi32>) -> (tensor<4x4x8xf32>, tensor<4xi32>)
    %u = moe.launch @unpermute_0(%o, %s#0, %gates) {buffers = array<i64: 0, 0, 0>} : (tensor<4x4x8xf32>, tensor<4x2xi32>, tensor<4x2xf32>) -> tensor<4x8xf32>
    return %u : tensor<4x8xf32>
  }
}
