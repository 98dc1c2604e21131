// moe-compress-collectives: codecs on the gradient all-reduces of a
// partitioned step, per parameter group; the loss and the norm stay exact.
// RUN: sed 's/moe.grid = #moe.grid<dp = 1, ep = 2>/moe.grid = #moe.grid<dp = 2, ep = 2>/' %S/Inputs/routed-step.mlir | moe-opt --moe-train-pipeline="lower=false compress-grad=int8 compress-warmup=5" | FileCheck %s --check-prefix=INT8
// INT8: moe.compression = #moe.compression<warmup_steps = 5, compressed = 6>
// INT8: moe.all_reduce mean %{{.*}} over [dp, ep] codec <int8, block_size = 256> : tensor<4x4xf32>
// INT8: moe.all_reduce sum %{{.*}} over [dp] codec <int8, block_size = 256> {scale = 2.500000e-01 : f64} : tensor<2x4x5xf32>
// INT8: moe.global_norm
// INT8: %[[L:.*]] = moe.all_reduce mean %{{.*}} over [dp, ep] : tensor<f32>
// INT8: return %[[L]]
// Over a group of one nothing travels, so nothing is encoded: with dp = 1
// the expert shards' reduction stays exact.
// RUN: moe-opt --moe-train-pipeline="lower=false compress-grad=int8" %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=DP1
// DP1: moe.compression = #moe.compression<warmup_steps = 0, compressed = 3>
// DP1: moe.all_reduce sum %{{.*}} over [dp] {scale = 5.000000e-01 : f64} : tensor<2x4x5xf32>

// PowerSGD factors matrices only; sparsifiers keep a residual unless told.
// RUN: moe-opt --moe-train-pipeline="lower=false compress-grad=powersgd:1" %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=PSGD
// PSGD: moe.all_reduce mean %{{.*}} over [ep] codec <powersgd, rank = 1, error_feedback> : tensor<8x4xf32>
// A matrix whose factors would be more than half its size stays exact (at
// rank 2, [8, 4] would send 2 x 12 floats of 32): none is left here.
// RUN: moe-opt --moe-train-pipeline="lower=false compress-grad=powersgd:2" %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=PSGD2
// PSGD2: warning: moe-compress-collectives: PowerSGD compresses none of the 3 gradient matrices: at this rank its factors would be more than half of each (a smaller rank compresses them)
// PSGD2-NOT: codec <powersgd
// RUN: moe-opt --moe-train-pipeline="lower=false compress-grad=topk:0.05 error-feedback=false" %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=TOPK
// TOPK: codec <topk, ratio = 5.000000e-02> : tensor<4x4xf32>
// Vectors (the norms' gains) stay exact under top-k and sign as under
// PowerSGD: a 1% sliver of a gain is no saving worth its noise.
// RUN: moe-translate --import-model %examples/models/tiny.json --cluster %S/Inputs/two-nodes-10gbe.json | moe-opt --moe-fuse-gating --moe-plan-sharding=ep=2 --moe-routing-groups --moe-partition --moe-autodiff --moe-insert-collectives --moe-compress-collectives="grad=topk:0.01" | FileCheck %s --check-prefix=VEC
// RUN: moe-translate --import-model %examples/models/tiny.json --cluster %S/Inputs/two-nodes-10gbe.json | moe-opt --moe-fuse-gating --moe-plan-sharding=ep=2 --moe-routing-groups --moe-partition --moe-autodiff --moe-insert-collectives --moe-compress-collectives="grad=sign" | FileCheck %s --check-prefix=VEC
// VEC-COUNT-5: moe.all_reduce mean %dgamma{{.*}} over [ep] : tensor<64xf32>
// VEC: moe.all_reduce mean %dweight over [ep] codec <{{topk|sign}}{{.*}}> : tensor<64x256xf32>

// Per parameter group: expert shards in bf16, replicated parameters exact.
// RUN: sed 's/moe.grid = #moe.grid<dp = 1, ep = 2>/moe.grid = #moe.grid<dp = 2, ep = 2>/' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-routing-groups --moe-partition --moe-autodiff --moe-insert-collectives --moe-compress-collectives="grad=none expert-grad=bf16" | FileCheck %s --check-prefix=GROUPS
// GROUPS: moe.all_reduce mean %{{.*}} over [dp, ep] : tensor<4x4xf32>
// GROUPS: moe.all_reduce sum %{{.*}} over [dp] codec <bf16> {scale = 2.500000e-01 : f64} : tensor<2x4x5xf32>

// The vocabulary matrices (the embedding table, the LM head feeding the
// cross-entropy) have a group of their own: PowerSGD elsewhere, int8 there.
// RUN: moe-opt --moe-train-pipeline="lower=false compress-grad=powersgd:1 compress-embedding=int8" %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=VOCAB
// VOCAB-DAG: moe.all_reduce mean %{{.*}} over [ep] codec <int8, block_size = 256> : tensor<4x8xf32>
// VOCAB-DAG: moe.all_reduce mean %{{.*}} over [ep] codec <powersgd, rank = 1, error_feedback> : tensor<4x4xf32>
// VOCAB-DAG: moe.all_reduce mean %{{.*}} over [ep] codec <int8, block_size = 256> : tensor<8x4xf32>

// Dispatch and combine (forward and backward) in bf16.
// RUN: moe-opt --moe-train-pipeline="lower=false compress-dispatch=bf16" %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=DISPATCH
// DISPATCH-COUNT-4: moe.all_to_all {{.*}} codec <bf16>
// DISPATCH-NOT: moe.all_to_all
// DISPATCH-NOT: all_reduce {{.*}} codec

// Bad options are diagnostics.
// RUN: not moe-opt --moe-train-pipeline="lower=false compress-grad=int4" %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: moe-compress-collectives: grad=int4: unknown codec (expected none, fp16, bf16, int8[:block], topk[:ratio], sign or powersgd[:rank])
// RUN: not moe-opt --moe-train-pipeline="lower=false compress-grad=topk:2" %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=RATIO
// RATIO: error: moe-compress-collectives: grad=topk:2: topk:RATIO needs a ratio in (0, 1]
// RUN: not moe-opt --moe-train-pipeline="lower=false compress-grad=int8:x" %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=NUMBER
// NUMBER: error: moe-compress-collectives: grad=int8:x: the parameter after ':' must be a number
// RUN: sed 's/moe.grid = #moe.grid<dp = 1, ep = 2>/moe.seed = 1 : i64/' %S/Inputs/routed-step.mlir | not moe-opt --moe-train-pipeline="lower=false compress-grad=int8" 2>&1 | FileCheck %s --check-prefix=ONE
// ONE: error: moe-compress-collectives: no collective to compress (run after moe-insert-collectives on a partitioned step; reductions over a group of one rank, such as expert shards at dp = 1, send nothing and stay exact)

// auto: the cost model chooses per collective on the module's cluster. Two
// H100 boxes on 10 GbE, the tiny model planned as ep = 2: the dispatch and
// combine buffers and the big gradients go int8 (the wire saving beats the
// encode/decode kernels by more than 10%), the small ones stay exact (a
// codec kernel launch costs more than their bytes), and nothing is chosen
// where nothing travels (expert shards over dp = 1).
// RUN: moe-translate --import-model %examples/models/tiny.json --cluster %S/Inputs/two-nodes-10gbe.json | moe-opt --moe-fuse-gating --moe-plan-sharding=ep=2 --moe-routing-groups --moe-partition --moe-autodiff --moe-insert-collectives --moe-compress-collectives="grad=auto dispatch=auto" | FileCheck %s --check-prefix=AUTO
// AUTO: moe.all_to_all %{{.*}} over [ep] split 0 concat 1 counts %{{.*}} codec <int8, block_size = 256> {moe.codec_choice = #moe.codec_choice<codec = "int8", uncompressed_s = {{.*}}, predicted_s = {{.*}}>} : (tensor<4x160x64xf32>
// AUTO-DAG: moe.all_reduce mean %{{.*}} over [ep] codec <int8, block_size = 256> {moe.codec_choice = #moe.codec_choice<codec = "int8", {{.*}}>} : tensor<256x64xf32>
// AUTO-DAG: moe.all_reduce mean %{{.*}} over [ep] {moe.codec_choice = #moe.codec_choice<codec = "none", {{.*}}>} : tensor<64xf32>
// AUTO-DAG: moe.all_reduce sum %{{.*}} over [dp] {scale = 5.000000e-01 : f64} : tensor<2x128x64xf32>
// RUN: not moe-opt --moe-train-pipeline="lower=false compress-grad=auto" %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=NOCLUSTER
// NOCLUSTER: error: moe-compress-collectives: 'auto' chooses codecs with the cost model and needs the module's moe.cluster and moe.grid (moec --cluster, or moe-translate --cluster and moe-plan-sharding)
