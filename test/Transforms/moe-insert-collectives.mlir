// moe-insert-collectives: gradient synchronisation after autodiff. The
// global loss is the mean of the N = dp * ep replicas' losses, so
// replicated gradients are averaged over [dp, ep], and expert shards (whose
// gradient already sums their ep group's tokens, brought by the backward
// all_to_all) are summed over [dp] and scaled by 1/N. A mean over dp alone
// would be ep times too large.
// RUN: moe-opt --moe-train-pipeline=lower=false %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=EP2
// EP2: moe.all_to_all {{.*}} over [ep] split 0 concat 1
// EP2: moe.expert_ffn_grad
// EP2: %[[R:.*]] = moe.all_reduce mean %{{.*}} over [ep] : tensor<4x4xf32>
// EP2: %[[U:.*]] = moe.all_reduce sum %{{.*}} over [dp] {scale = 5.000000e-01 : f64} : tensor<2x4x5xf32>
// EP2: moe.global_norm {{.*}} {shard_axes = ["ep"], sharded = array<i1: false, false, true, true, true, false>}
// EP2: moe.adamw_update @router, %[[R]],
// EP2: moe.adamw_update @up, %[[U]],
// EP2: %[[L:.*]] = moe.all_reduce mean %{{.*}} over [ep] : tensor<f32>
// EP2: return %[[L]] : tensor<f32>

// ep = 4: 1/4, and dp = 2 x ep = 2: also 1/4, summed over dp.
// RUN: sed 's/dp = 1, ep = 2/dp = 1, ep = 4/' %S/Inputs/routed-step.mlir | moe-opt --moe-train-pipeline=lower=false | FileCheck %s --check-prefix=EP4
// EP4: moe.all_reduce mean %{{.*}} over [ep] : tensor<4x4xf32>
// EP4: moe.all_reduce sum %{{.*}} over [dp] {scale = 2.500000e-01 : f64} : tensor<1x4x5xf32>
// RUN: sed 's/dp = 1, ep = 2/dp = 2, ep = 2/' %S/Inputs/routed-step.mlir | moe-opt --moe-train-pipeline=lower=false | FileCheck %s --check-prefix=DP2EP2
// DP2EP2: moe.all_reduce mean %{{.*}} over [dp, ep] : tensor<4x4xf32>
// DP2EP2: moe.all_reduce sum %{{.*}} over [dp] {scale = 2.500000e-01 : f64} : tensor<2x4x5xf32>

// Without an optimiser the step returns synchronised gradients.
// RUN: moe-opt --moe-train-pipeline="lower=false optimizer=none" %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=NONE
// NONE: %[[G:.*]] = moe.all_reduce sum %{{.*}} over [dp] {scale = 5.000000e-01 : f64} : tensor<2x4x5xf32>
// NONE: return {{.*}}%[[G]]

// One rank: nothing to synchronise.
// RUN: sed 's/moe.grid = #moe.grid<dp = 1, ep = 2>/moe.seed = 1 : i64/' %S/Inputs/routed-step.mlir | moe-opt --moe-train-pipeline=lower=false | FileCheck %s --check-prefix=ONE
// ONE-NOT: moe.all_
// The whole module was printed (its closing brace), so the NOT covered it.
// ONE: {{^}}}{{$}}

// A selection bias: its load rule sums the expert loads of every replica
// (each rank routes its own sequences), so all ranks apply the update one
// rank routing the whole batch would.
// RUN: sed -e 's|  moe.param @head|  moe.param @bias : tensor<4xf32> init <zeros>\n  moe.param @head|' -e 's|%g, %e, %aux = moe.router softmax %x, %w top_k 2 {|%b = moe.get_param @bias : tensor<4xf32>\n    %g, %e, %aux = moe.router softmax %x, %w bias %b top_k 2 {bias_update_rate = 2.0e-3 : f64, |' -e 's|(tensor<4x3x4xf32>, tensor<4x4xf32>) -> (tensor<4x3x2xf32>|(tensor<4x3x4xf32>, tensor<4x4xf32>, tensor<4xf32>) -> (tensor<4x3x2xf32>|' %S/Inputs/routed-step.mlir > %t.bias.mlir
// RUN: moe-opt --moe-train-pipeline=lower=false %t.bias.mlir | FileCheck %s --check-prefix=BIAS
// BIAS: moe.adamw_update @head
// BIAS-NEXT: moe.balance_bias @bias, %{{.*}} {rate = 2.000000e-03 : f64, sum_axes = ["ep"]} : tensor<2x3x2xi32>
// RUN: sed 's/dp = 1, ep = 2/dp = 2, ep = 2/' %t.bias.mlir | moe-opt --moe-train-pipeline=lower=false | FileCheck %s --check-prefix=BIAS4
// BIAS4: moe.balance_bias @bias, %{{.*}} {rate = 2.000000e-03 : f64, sum_axes = ["dp", "ep"]} : tensor<1x3x2xi32>
// RUN: sed 's/moe.grid = #moe.grid<dp = 1, ep = 2>/moe.seed = 1 : i64/' %t.bias.mlir | moe-opt --moe-train-pipeline=lower=false | FileCheck %s --check-prefix=BIAS1
// BIAS1: moe.balance_bias @bias, %{{.*}} {rate = 2.000000e-03 : f64} : tensor<4x3x2xi32>

// A placement with replicas (expert 1 on both ranks; 3 positions per rank):
// after the data-parallel all-reduces (one run, one bucket), each expert
// gradient's replica rows are summed over [ep], and the clipping norm
// counts a replica's rows 1/n (shard_layers names the placement's layer).
// RUN: sed 's/moe.expert_ffn swiglu %buf, %u, %d gate %gt :/moe.expert_ffn swiglu %buf, %u, %d gate %gt {placement = #moe.placement<[[0, 1], [1, 2, 3]]>} :/' %S/Inputs/routed-step.mlir | moe-opt --moe-train-pipeline=lower=false | FileCheck %s --check-prefix=REPLICA
// REPLICA: %[[UP:.*]] = moe.all_reduce sum %dw_up over [dp] {scale = 5.000000e-01 : f64} : tensor<3x4x5xf32>
// REPLICA-NEXT: moe.all_reduce sum %dw_down
// REPLICA-NEXT: moe.all_reduce sum %dw_gate
// REPLICA-NEXT: %[[RUP:.*]] = moe.replica_sum %[[UP]] over [ep] layer 0 : tensor<3x4x5xf32>
// REPLICA-NEXT: moe.replica_sum
// REPLICA-NEXT: moe.replica_sum
// REPLICA-NEXT: moe.global_norm {{.*}}%[[RUP]]{{.*}} {shard_axes = ["ep"], shard_layers = array<i64: -1, -1, 0, 0, 0, -1>, sharded = array<i1: false, false, true, true, true, false>}
// REPLICA: moe.adamw_update @up, %[[RUP]]
