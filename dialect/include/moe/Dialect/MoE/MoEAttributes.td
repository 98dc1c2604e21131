//===- MoEAttributes.td - moe enums and attributes ---------*- tablegen -*-===//

#ifndef MOE_ATTRIBUTES_TD
#define MOE_ATTRIBUTES_TD

include "moe/Dialect/MoE/MoEDialect.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def MoE_Scoring : I32EnumAttr<"Scoring", "router scoring function", [
    I32EnumAttrCase<"softmax", 0>, I32EnumAttrCase<"sigmoid", 1>]> {
  let cppNamespace = "::mlir::moe";
}

def MoE_Activation : I32EnumAttr<"Activation", "FFN activation", [
    I32EnumAttrCase<"swiglu", 0>, I32EnumAttrCase<"gelu", 1>,
    I32EnumAttrCase<"relu", 2>]> {
  let cppNamespace = "::mlir::moe";
}

def MoE_Reduction : I32EnumAttr<"Reduction", "collective reduction", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>]> {
  let cppNamespace = "::mlir::moe";
}

def MoE_InitKind : I32EnumAttr<"InitKind", "parameter initialiser", [
    I32EnumAttrCase<"zeros", 0>, I32EnumAttrCase<"ones", 1>,
    I32EnumAttrCase<"normal", 2>, I32EnumAttrCase<"uniform", 3>]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::moe";
}

def MoE_CodecKind : I32EnumAttr<"CodecKind", "collective codec", [
    I32EnumAttrCase<"fp16", 0>, I32EnumAttrCase<"bf16", 1>,
    I32EnumAttrCase<"int8", 2>, I32EnumAttrCase<"topk", 3>,
    I32EnumAttrCase<"sign", 4>, I32EnumAttrCase<"powersgd", 5>]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::moe";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

def MoE_InitAttr : MoE_Attr<"Init", "init"> {
  let summary = "how a parameter is initialised";
  let description = [{
    `zeros`, `ones`, `normal` with standard deviation `scale`, or `uniform`
    on `[-scale, scale]`. The seed comes from the run, not the IR.

    ```mlir
    #moe.init<normal, scale = 0.02>
    #moe.init<ones>
    ```

    Constraints:
    - `normal` and `uniform` require `scale > 0`;
    - `zeros` and `ones` take no `scale`.
  }];
  let parameters = (ins "InitKind":$kind, APFloatParameter<"">:$scale);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "InitKind":$kind, CArg<"double", "0.0">:$scale), [{
      return $_get($_ctxt, kind, ::llvm::APFloat(scale));
    }]>];
  let extraClassDeclaration = [{
    /// `scale` as a double (0 for zeros and ones).
    double getScaleValue() const { return getScale().convertToDouble(); }
  }];
}

def MoE_GridAttr : MoE_Attr<"Grid", "grid"> {
  let summary = "the device grid a partitioned step runs on";
  let description = [{
    A grid of `dp * ep * tp` ranks. `ep` is the expert-parallel degree (ranks
    that hold different experts), `dp` the data-parallel degree among expert
    replicas, `tp` the tensor-parallel degree; non-expert parameters are
    replicated over `dp x ep`. Rank `r` has coordinates
    `r = (d * ep + e) * tp + t`. An optional `devices` list names the device
    kind of every rank, in rank order, so mixed clusters are expressible.

    ```mlir
    #moe.grid<dp = 2, ep = 4>
    #moe.grid<dp = 1, ep = 2, devices = ["h100", "ascend910b"]>
    ```

    Constraints:
    - every degree is at least 1;
    - `devices`, when present, has exactly `dp * ep * tp` entries, none empty.
  }];
  let parameters = (ins
    DefaultValuedParameter<"int64_t", "1">:$dp,
    DefaultValuedParameter<"int64_t", "1">:$ep,
    DefaultValuedParameter<"int64_t", "1">:$tp,
    OptionalParameter<"::mlir::ArrayAttr">:$devices);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of ranks in the grid.
    int64_t getNumRanks() const { return getDp() * getEp() * getTp(); }
    /// Size of the group spanned by the named axes ("dp", "ep", "tp").
    int64_t getGroupSize(::llvm::ArrayRef<::mlir::Attribute> axes) const;
  }];
}

def MoE_PlacementAttr : MoE_Attr<"Placement", "placement"> {
  let summary = "which experts each expert-parallel rank holds";
  let description = [{
    One list per rank of the `ep` axis, giving the experts that rank holds.
    An expert may appear on several ranks (replicas of a hot expert); lists
    may differ in length (faster devices hold more experts).

    ```mlir
    #moe.placement<[[0, 1, 2], [3], [3, 4]]>
    ```

    Constraints (checked here): at least one rank; expert ids are
    non-negative; no expert twice on one rank. Checked by the op carrying it:
    the number of lists equals the grid's `ep`; every expert is placed.
  }];
  let parameters = (ins ArrayRefParameter<"int64_t">:$experts,
                        ArrayRefParameter<"int64_t">:$rankSizes);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of ranks the placement covers.
    size_t getNumRanks() const { return getRankSizes().size(); }
    /// Experts held by `rank`.
    ::llvm::ArrayRef<int64_t> getExpertsOf(size_t rank) const;
  }];
}

def MoE_CodecAttr : MoE_Attr<"Codec", "codec"> {
  let summary = "how a collective compresses its payload";
  let description = [{
    - `fp16`, `bf16`: cast floats; no parameters.
    - `int8`: blocks of `block_size` values, each with one f32 scale.
    - `topk`: keep the `ratio` largest-magnitude values (indices sent too).
    - `sign`: one bit per value plus one scale (1-bit SGD/Adam).
    - `powersgd`: rank-`rank` factorisation, warm-started.
    `error_feedback` keeps the compression residual per tensor and rank and
    adds it back next step; it applies to the lossy sparsifying codecs
    (`topk`, `sign`, `powersgd`).

    ```mlir
    #moe.codec<int8, block_size = 256>
    #moe.codec<topk, ratio = 0.01, error_feedback>
    #moe.codec<powersgd, rank = 4, error_feedback>
    ```

    Constraints:
    - `int8` requires `block_size >= 1`; `topk` requires `0 < ratio <= 1`;
      `powersgd` requires `rank >= 1`;
    - a parameter that does not belong to the codec kind is an error;
    - `error_feedback` only with `topk`, `sign` or `powersgd`.
  }];
  let parameters = (ins "CodecKind":$kind, "int64_t":$blockSize,
                        APFloatParameter<"">:$ratio, "int64_t":$rank,
                        "bool":$errorFeedback);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// True for codecs that only change the float format (fp16, bf16, int8),
    /// the ones that may compress all-to-all, reduce-scatter and all-gather.
    bool isElementwise() const;
    /// `ratio` as a double (0 when the codec has none).
    double getRatioValue() const { return getRatio().convertToDouble(); }
  }];
  let builders = [
    AttrBuilder<(ins "CodecKind":$kind, CArg<"int64_t", "0">:$blockSize,
                     CArg<"double", "0.0">:$ratio, CArg<"int64_t", "0">:$rank,
                     CArg<"bool", "false">:$errorFeedback), [{
      return $_get($_ctxt, kind, blockSize, ::llvm::APFloat(ratio), rank,
                   errorFeedback);
    }]>];
}

//===----------------------------------------------------------------------===//
// Module and collective attributes that passes write for later stages
//===----------------------------------------------------------------------===//

// A double held as an APFloat (attribute storage hashes and compares it
// bitwise), written as a float literal: `compute_s = 1.5e-03`, and a whole
// number as `7413453.0` (parseF64 and printF64 in MoEAttributes.cpp).
class MoE_F64Parameter<string desc> : APFloatParameter<desc> {
  let parser = [{ parseF64($_parser) }];
  let printer = [{ printF64($_printer, $_self) }];
}

def MoE_BufferPlanAttr : MoE_Attr<"BufferPlan", "buffer_plan"> {
  let summary = "the buffer plan's sizes, on the module";
  let description = [{
    Written by `moe-lower-to-kernels` (and rewritten when the buffers are
    planned again) as the module's `moe.buffer_plan`: the peak bytes of each
    arena, the parameters' bytes, their total, the kernel and launch counts
    and the alignment of every buffer. The step program sizes its arenas
    from it; `moec --emit=plan` prints it.

    ```mlir
    #moe.buffer_plan<activation_bytes = 136, gradient_bytes = 0,
                     parameter_bytes = 64, optimizer_state_bytes = 0,
                     total_bytes = 200, num_kernels = 2, num_launches = 4,
                     alignment = 64>
    ```

    Constraints:
    - every size and count is >= 0;
    - `alignment` is a power of two;
    - `total_bytes` is the sum of the activation, gradient, parameter and
      optimizer-state bytes.
  }];
  let parameters = (ins "int64_t":$activation_bytes, "int64_t":$gradient_bytes,
                        "int64_t":$parameter_bytes,
                        "int64_t":$optimizer_state_bytes, "int64_t":$total_bytes,
                        "int64_t":$num_kernels, "int64_t":$num_launches,
                        "int64_t":$alignment);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def MoE_PlanAttr : MoE_Attr<"Plan", "plan"> {
  let summary = "the sharding plan's predicted costs, on the module";
  let description = [{
    Written by `moe-plan-sharding` as the module's `moe.plan`: the chosen
    candidate's predicted step time and its parts (seconds), its memory per
    device (bytes), its ZeRO stage and how many candidates were costed.
    `moe-shard-optimizer` (stage -1) and `moec` read `zero_stage`.

    ```mlir
    #moe.plan<predicted_step_s = 5.2e-03, compute_s = 4.9e-03,
              all_to_all_s = 2.0e-04, all_reduce_s = 7.8e-05,
              all_reduce_exposed_s = 7.8e-05, tensor_parallel_s = 0.0,
              zero_stage = 0, max_memory_bytes = 7413453.0, candidates = 2>
    ```

    Constraints:
    - every time and `max_memory_bytes` is >= 0;
    - `zero_stage` is 0, 1 or 2;
    - `candidates` is >= 1.
  }];
  let parameters = (ins MoE_F64Parameter<"">:$predicted_step_s,
                        MoE_F64Parameter<"">:$compute_s,
                        MoE_F64Parameter<"">:$all_to_all_s,
                        MoE_F64Parameter<"">:$all_reduce_s,
                        MoE_F64Parameter<"">:$all_reduce_exposed_s,
                        MoE_F64Parameter<"">:$tensor_parallel_s,
                        "int64_t":$zero_stage,
                        MoE_F64Parameter<"">:$max_memory_bytes,
                        "int64_t":$candidates);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "double":$predictedStep, "double":$compute, "double":$allToAll,
                     "double":$allReduce, "double":$allReduceExposed,
                     "double":$tensorParallel, "int64_t":$zeroStage,
                     "double":$maxMemoryBytes, "int64_t":$candidates), [{
      return $_get($_ctxt, ::llvm::APFloat(predictedStep), ::llvm::APFloat(compute),
                   ::llvm::APFloat(allToAll), ::llvm::APFloat(allReduce),
                   ::llvm::APFloat(allReduceExposed), ::llvm::APFloat(tensorParallel),
                   zeroStage, ::llvm::APFloat(maxMemoryBytes), candidates);
    }]>];
}

def MoE_CompressionAttr : MoE_Attr<"Compression", "compression"> {
  let summary = "moe-compress-collectives' settings, on the module";
  let description = [{
    Written by `moe-compress-collectives` as the module's `moe.compression`:
    the steps that run uncompressed before the codecs start
    (`warmup_steps`), and how many collectives it compressed. The step
    program reads `warmup_steps`.

    ```mlir
    #moe.compression<warmup_steps = 5, compressed = 6>
    ```

    Constraints:
    - `warmup_steps` and `compressed` are >= 0.
  }];
  let parameters = (ins "int64_t":$warmup_steps, "int64_t":$compressed);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def MoE_CodecChoiceAttr : MoE_Attr<"CodecChoice", "codec_choice"> {
  let summary = "the cost model's codec judgement of one collective";
  let description = [{
    Written by `moe-compress-collectives` (`grad=auto`, `dispatch=auto`) on
    each collective it judged, as `moe.codec_choice`: the codec it chose
    (`"none"` to send plain f32) and the predicted seconds of the collective
    uncompressed and with that choice.

    ```mlir
    #moe.codec_choice<codec = "int8", uncompressed_s = 1.2e-04, predicted_s = 4.1e-05>
    ```

    Constraints:
    - `codec` is `"none"` or a codec kind (`fp16`, `bf16`, `int8`, `topk`,
      `sign`, `powersgd`);
    - both times are >= 0.
  }];
  let parameters = (ins StringRefParameter<"">:$codec,
                        MoE_F64Parameter<"">:$uncompressed_s,
                        MoE_F64Parameter<"">:$predicted_s);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "::llvm::StringRef":$codec, "double":$uncompressed,
                     "double":$predicted), [{
      return $_get($_ctxt, codec, ::llvm::APFloat(uncompressed), ::llvm::APFloat(predicted));
    }]>];
}

#endif // MOE_ATTRIBUTES_TD
