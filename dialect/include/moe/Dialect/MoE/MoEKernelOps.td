//===- MoEKernelOps.td - kernel specs and launches ---------*- tablegen -*-===//
//
// What moe-lower-to-kernels produces: one `moe.kernel` per distinct
// computation (family, operand and result types, settings, epilogue) that
// codegen turns into one generated kernel, and a step program of ordered
// `moe.launch`es over planned buffers. Collectives stay ops.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_KERNEL_OPS_TD
#define MOE_KERNEL_OPS_TD

include "moe/Dialect/MoE/MoEAttributes.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def MoE_KernelOp : MoE_Op<"kernel", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "the spec of one generated kernel";
  let description = [{
    `family` names the generator (`linear`, `linear_grad`, `rms_norm`,
    `attention`, `fused_gate`, `expert_ffn`, `adamw_update`, ...); the
    signature gives the exact operand and result types it is specialised
    to; `config` holds the op's settings (heads, epsilon, activation, top_k,
    ...); `epilogue` lists fused element-wise tails (`residual_add`: the
    last operand is added to the result).
    ```mlir
    moe.kernel @linear_3 family "linear" : (tensor<512x64xf32>, tensor<64x64xf32>) -> tensor<512x64xf32>
        {config = {}, epilogue = ["residual_add"]}
    ```
    Constraints: `family` is not empty; it is the mnemonic of a moe compute
    op (not a parameter, kernel, launch or collective op); every `config`
    key is an attribute of that op; every `epilogue` entry is
    `residual_add`, `save_preactivations` or `saved_preactivations`.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$family,
                       TypeAttrOf<FunctionType>:$signature,
                       DictionaryAttr:$config, StrArrayAttr:$epilogue);
  let assemblyFormat = "$sym_name `family` $family `:` $signature attr-dict";
  let hasVerifier = 1;
}

def MoE_LaunchOp : MoE_Op<"launch", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "runs a generated kernel in the step program";
  let description = [{
    Launches are ordered: the program runs them in sequence. `buffers`
    gives, for every result, `[arena, offset, bytes]` in the buffer plan
    (arena 0: activations, 1: gradients); `updates` names the parameter an
    optimiser kernel writes in place, and `shard_axes` (ZeRO) says that it
    writes only this rank's flat shard of it (see `moe.adamw_update`).
    ```mlir
    %y = moe.launch @linear_3(%x, %w, %res) {buffers = array<i64: 0, 4096, 131072>}
        : (tensor<512x64xf32>, tensor<64x64xf32>, tensor<512x64xf32>) -> tensor<512x64xf32>
    ```
    Constraints: `kernel` names a `moe.kernel` whose signature is the
    launch's operand and result types; `buffers` has three entries per
    result; `shard_axes` needs `updates` and names distinct grid axes.
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel, Variadic<AnyType>:$operands,
                       DenseI64ArrayAttr:$buffers,
                       OptionalAttr<FlatSymbolRefAttr>:$updates,
                       OptionalAttr<StrArrayAttr>:$shard_axes);
  let results = (outs Variadic<AnyType>:$results);
  let assemblyFormat = [{
    $kernel `(` $operands `)` attr-dict `:` functional-type($operands, $results)
  }];
  let hasVerifier = 1;
}

def MoE_ChunkOp : MoE_Op<"chunk", [Pure]> {
  let summary = "one of equal chunks of a tensor's leading dimension, as a view";
  let description = [{
    The input's leading dimension cut into `count` equal chunks; the result
    is chunk `index`, rows `[index n/count, (index + 1) n/count)` of it. In
    a lowered step it is a view: the buffer plan gives it the input's
    buffer at the chunk's offset, and nothing is copied. `moe-pipeline-experts`
    cuts an expert phase's tensors (dispatch buffers, their counts, the
    experts' weights) into chunks of whole experts this way.

    ```mlir
    %w1 = moe.chunk %w[1 of 2] : tensor<8x64x128xf32> -> tensor<4x64x128xf32>
    ```

    Constraints: `count >= 1`; `0 <= index < count`; the input has rank
    >= 1 and a leading dimension divisible by `count`; the result is the
    input's type with that dimension divided by `count`.
  }];
  let arguments = (ins MoE_DataTensor:$input, I64Attr:$index, I64Attr:$count);
  let results = (outs MoE_DataTensor:$result);
  let assemblyFormat = [{
    $input `[` $index `of` $count `]` attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def MoE_ConcatOp : MoE_Op<"concat", [Pure]> {
  let summary = "equal tensors joined along the leading dimension, in place";
  let description = [{
    The inputs, all of one type, one after another along the leading
    dimension. In a lowered step nothing is copied: the buffer plan places
    each input at its offset in the result's buffer, so the ops defining
    the inputs write the result's rows directly. An input is therefore a
    tensor the step computes (not a parameter, a block argument or a view),
    of one concat only.

    ```mlir
    %y = moe.concat %y0, %y1 : tensor<4x160x64xf32>, tensor<4x160x64xf32> -> tensor<8x160x64xf32>
    ```

    Constraints: at least one input; the inputs have one type, of rank >=
    1; the result is that type with the leading dimension multiplied by the
    number of inputs.
  }];
  let arguments = (ins Variadic<MoE_DataTensor>:$inputs);
  let results = (outs MoE_DataTensor:$result);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($result)
  }];
  let hasVerifier = 1;
}

#endif // MOE_KERNEL_OPS_TD
