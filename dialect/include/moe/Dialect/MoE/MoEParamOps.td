//===- MoEParamOps.td - parameter declarations -------------*- tablegen -*-===//

#ifndef MOE_PARAM_OPS_TD
#define MOE_PARAM_OPS_TD

include "moe/Dialect/MoE/MoEAttributes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def MoE_ParamOp : MoE_Op<"param", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "declares a trainable parameter";
  let description = [{
    A module-level declaration of a trainable tensor: its name, its shape and
    element type, and its initialiser. Parameters are the state a training
    step reads and updates; the step reads them with `moe.get_param`.

    ```mlir
    moe.param @tok_emb : tensor<256x64xf32> init <normal, scale = 0.02>
    moe.param @norm_f : tensor<64xf32> init <ones>
    ```

    Constraints:
    - the type is a statically shaped f32, bf16 or f16 tensor of rank >= 1
      with every dimension >= 1;
    - the op sits directly in a `builtin.module`.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<MoE_FloatTensor>:$type,
                       MoE_InitAttr:$init);
  let assemblyFormat = "$sym_name `:` $type `init` $init attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::RankedTensorType getTensorType() {
      return ::llvm::cast<::mlir::RankedTensorType>(getType());
    }
  }];
}

def MoE_GetParamOp : MoE_Op<"get_param", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "reads a parameter's current value";
  let description = [{
    Yields the current value of the parameter named by `name`.

    ```mlir
    %w = moe.get_param @tok_emb : tensor<256x64xf32>
    ```

    Constraints:
    - `name` refers to a `moe.param` in the enclosing module;
    - the result type equals that parameter's type.
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs MoE_FloatTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

#endif // MOE_PARAM_OPS_TD
