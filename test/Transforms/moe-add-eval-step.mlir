// moe-add-eval-step: a forward-only clone of the step, marked moe.no_grad,
// which moe-autodiff leaves alone; a second run adds nothing.
// RUN: moe-opt --moe-add-eval-step %S/Inputs/routed-step.mlir | FileCheck %s
// RUN: moe-opt --moe-add-eval-step --moe-add-eval-step %S/Inputs/routed-step.mlir | FileCheck %s
// CHECK-LABEL: func.func @step(
// CHECK: moe.router
// CHECK-LABEL: func.func @eval_step(
// CHECK-SAME: moe.no_grad
// CHECK: moe.router
// The evaluation returns the cross entropy, not the auxiliary loss added to it.
// CHECK: %[[CE:.*]] = moe.cross_entropy
// CHECK-NOT: moe.add %[[CE]]
// CHECK: return %[[CE]]
// CHECK-NOT: func.func @eval_step
// RUN: moe-opt --moe-add-eval-step --moe-autodiff %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=GRAD
// GRAD-LABEL: func.func @step(
// GRAD: moe.adamw_update
// GRAD-LABEL: func.func @eval_step(
// GRAD-NOT: moe.adamw_update
// GRAD-NOT: moe.router_grad
// GRAD: return
