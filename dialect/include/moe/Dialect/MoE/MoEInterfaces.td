//===- MoEInterfaces.td - moe op interfaces ----------------*- tablegen -*-===//

#ifndef MOE_INTERFACES_TD
#define MOE_INTERFACES_TD

include "mlir/IR/OpBase.td"

def MoE_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mlir::moe";
  let description = [{
    An op that states its own gradient rule. `moe-autodiff` visits the step
    in reverse and asks every op whose results carry a gradient to emit the
    ops computing its operands' gradients. A new differentiable op only
    implements this interface; the pass needs no change.
  }];
  let methods = [
    InterfaceMethod<[{
        Emits, at the builder's insertion point, the gradients of this op's
        operands given the gradients of its results (`resultGrads[i]` is
        null when result `i` receives none). Sets `operandGrads` to one value
        per operand, null for operands without a gradient (token ids, expert
        indices). Fails with a diagnostic when it cannot.
      }],
      "::mlir::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // MOE_INTERFACES_TD
