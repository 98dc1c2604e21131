//===- Passes.td - moe passes ------------------------------*- tablegen -*-===//

#ifndef MOE_TRANSFORMS_PASSES_TD
#define MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AutodiffPass : Pass<"moe-autodiff", "::mlir::ModuleOp"> {
  let summary = "Builds the backward graph of the training step";
  let description = [{
    For every `func.func` returning one `tensor<f32>` (the loss), walks the
    step in reverse and asks each op whose results carry a gradient for its
    gradient rule (`GradientOpInterface`); gradients of a value used several
    times are summed with `moe.add`. Gradients reaching a `moe.get_param` are
    accumulated per parameter.

    Before: `func.func @train_step(...) -> tensor<f32>`.
    After: `func.func @train_step(...) -> (tensor<f32>, grads...)` returning
    the loss and the gradient of every parameter that receives one, in
    declaration order, each result marked `{moe.grad_of = @param}`.

    Gradients through top-k routing follow the selected gate values, not the
    expert indices; the selection bias of auxiliary-loss-free balancing has
    no gradient. An op without a gradient rule on the path from a parameter
    to the loss is an error at that op.
  }];
  let dependentDialects = ["::mlir::moe::MoEDialect"];
}

#endif // MOE_TRANSFORMS_PASSES_TD
