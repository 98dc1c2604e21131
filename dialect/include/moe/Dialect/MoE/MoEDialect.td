//===- MoEDialect.td - the moe dialect ---------------------*- tablegen -*-===//
//
// The `moe` dialect describes one training step of a Mixture-of-Experts
// transformer at graph level: parameters, the forward model, routing, and the
// collectives that a partitioned step needs.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DIALECT_TD
#define MOE_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def MoE_Dialect : Dialect {
  let name = "moe";
  let cppNamespace = "::mlir::moe";
  let summary = "Mixture-of-Experts training steps at graph level";
  let description = [{
    The `moe` dialect states what one training step of a Mixture-of-Experts
    transformer computes: which parameters exist and how they are initialised
    (`moe.param`), the forward graph over builtin ranked tensors (embedding,
    normalisation, attention, linear layers, routing, dispatch, grouped expert
    FFNs, combine, cross-entropy), and the collectives a partitioned step
    exchanges (`moe.all_to_all`, `moe.all_reduce`, `moe.reduce_scatter`,
    `moe.all_gather`), each optionally compressed by a codec.

    Tensors are statically shaped; floating-point tensors are f32, bf16 or
    f16; token ids and expert indices are i32. Ops that act per token accept
    any number of leading dimensions (`[B, S, D]` or `[T, D]`), so the model
    needs no reshapes between attention and routing.

    Discardable attributes owned by the dialect:
    - `moe.grid` on the module: a `#moe.grid` giving the device grid that
      collective groups refer to;
    - `moe.input` on a `func.func` argument: `"tokens"` or `"targets"`, the
      step's data inputs;
    - `moe.optimizer` on the module: a dictionary of the optimiser settings
      (`type = "adamw"`, `lr`, `beta1`, `beta2`, `eps`, `weight_decay`,
      `grad_clip`, `warmup_steps`, `total_steps`, `schedule`, `min_lr`);
    - `moe.seed` on the module: the integer seed of initialisation and data;
    - `moe.cluster` on the module: a dictionary describing the cluster
      (nodes, device kinds, links), attached by `moe-translate --cluster`.
    - `moe.bucket` on a `moe.all_reduce`: a non-negative integer; adjacent
      all-reduces with the same bucket travel as one collective
      (`moe-bucket-gradients`).
    - `moe.buffer_plan` on the module: a `#moe.buffer_plan`, the buffer
      plan's sizes (`moe-lower-to-kernels`);
    - `moe.plan` on the module: a `#moe.plan`, the sharding plan's predicted
      costs and ZeRO stage (`moe-plan-sharding`);
    - `moe.compression` on the module: a `#moe.compression`, the codecs'
      warm-up steps and the compressed count (`moe-compress-collectives`);
    - `moe.codec_choice` on a `moe.all_reduce` or `moe.all_to_all`: a
      `#moe.codec_choice`, the cost model's codec judgement
      (`moe-compress-collectives`, `auto`).
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Name of the module attribute holding the device grid.
    static constexpr ::llvm::StringLiteral kGridAttrName = "moe.grid";
    /// On the module: micro-batches per training step (gradient
    /// accumulation; moe-micro-batches), an integer >= 1.
    static constexpr ::llvm::StringLiteral kMicroBatchesAttrName = "moe.micro_batches";
    /// On the module: recompute each layer's activations in the backward
    /// (moe-recompute-activations), a unit attribute.
    static constexpr ::llvm::StringLiteral kRecomputeAttrName = "moe.recompute";
    /// Name of the function-argument attribute marking a step input.
    static constexpr ::llvm::StringLiteral kInputAttrName = "moe.input";
    static constexpr ::llvm::StringLiteral kOptimizerAttrName = "moe.optimizer";
    static constexpr ::llvm::StringLiteral kSeedAttrName = "moe.seed";
    static constexpr ::llvm::StringLiteral kClusterAttrName = "moe.cluster";
    /// On the module: the model the step was built from, a JSON string
    /// {"spec": MoEC model JSON, "hf_config": config.json (HF imports)}
    /// that training binaries read for HuggingFace weights in and out.
    static constexpr ::llvm::StringLiteral kModelAttrName = "moe.model";
    /// Per launch or collective result: [arena, offset, bytes] in the plan.
    static constexpr ::llvm::StringLiteral kBuffersAttrName = "moe.buffers";
    /// On the module: the buffer plan's sizes, a #moe.buffer_plan
    /// (moe-lower-to-kernels).
    static constexpr ::llvm::StringLiteral kBufferPlanAttrName = "moe.buffer_plan";
    /// On the module: the sharding plan's choices, a #moe.plan
    /// (moe-plan-sharding).
    static constexpr ::llvm::StringLiteral kPlanAttrName = "moe.plan";
    /// On the module: the sharding plan's report, {json, table} strings
    /// (moe-plan-sharding report-attr, for a driver, which removes it).
    static constexpr ::llvm::StringLiteral kPlanReportAttrName = "moe.plan_report";
    /// On the module: what the sharding plan needs that the step program
    /// does not run yet ("activation recompute"), a
    /// string (moe-plan-sharding; moe-executable-plan refuses the plan).
    static constexpr ::llvm::StringLiteral kPlanNeedsAttrName = "moe.plan_needs";
    /// On the module: moe-compress-collectives' settings, a
    /// #moe.compression.
    static constexpr ::llvm::StringLiteral kCompressionAttrName = "moe.compression";
    /// On a collective: the cost model's codec judgement, a
    /// #moe.codec_choice.
    static constexpr ::llvm::StringLiteral kCodecChoiceAttrName = "moe.codec_choice";
    /// On a moe.param: held as one rank's block along dimension 0.
    static constexpr ::llvm::StringLiteral kShardAttrName = "moe.shard";
    /// On a sharded moe.param: the global rows each ep rank holds, in rank
    /// order (rank r: entries [r n, (r+1) n) for n local rows); absent:
    /// rank r holds the contiguous block [r n, (r+1) n).
    static constexpr ::llvm::StringLiteral kShardRowsAttrName = "moe.shard_rows";
    /// On a sharded moe.param: the MoE layer whose placement (the runtime's
    /// table, which online rebalancing changes) says which rows each ep
    /// rank holds; moe.shard_rows is then the initial placement.
    static constexpr ::llvm::StringLiteral kShardLayerAttrName = "moe.shard_layer";
    /// On a moe.param: held as one tp rank's slice along this dimension
    /// (tensor parallelism, moe-partition).
    static constexpr ::llvm::StringLiteral kTpDimAttrName = "moe.tp_dim";
    /// On a function: the evaluation step (forward only, no update).
    static constexpr ::llvm::StringLiteral kNoGradAttrName = "moe.no_grad";
    /// On a step function result: the parameter it is the gradient of.
    static constexpr ::llvm::StringLiteral kGradOfAttrName = "moe.grad_of";
    /// On the module: sequences of the batch per data replica (unequal
    /// shares; before moe-partition, the routing groups of one rank).
    static constexpr ::llvm::StringLiteral kTokenSharesAttrName = "moe.token_shares";
    /// On the module: the data replica whose step it is (moe-partition,
    /// with unequal moe.token_shares).
    static constexpr ::llvm::StringLiteral kReplicaAttrName = "moe.replica";
    /// On a moe.all_reduce: its gradient bucket (moe-bucket-gradients); on
    /// an async moe.all_to_all, its exchange (moe-pipeline-experts).
    static constexpr ::llvm::StringLiteral kBucketAttrName = "moe.bucket";
    /// On the module: the initial dynamic loss scale (f16 models: the step
    /// seeds its backward with the runtime's current scale, and skips the
    /// update when the unscaled gradients overflow).
    static constexpr ::llvm::StringLiteral kLossScaleAttrName = "moe.loss_scale";
    /// On moe.fill: the backward's seed, the loss's gradient (moe-autodiff).
    static constexpr ::llvm::StringLiteral kLossSeedAttrName = "moe.loss_seed";
  private:
    void registerAttributes();
  public:
  }];
}

// Every tensor a moe op takes or makes is statically shaped with a byte size
// that the planner's and the cost model's int64 sums cannot overflow
// (moe::kMaxTensorBytes).
def MoE_BoundedTensors : NativeOpTrait<"BoundedTensors"> {
  let cppNamespace = "::mlir::moe";
}

class MoE_Op<string mnemonic, list<Trait> traits = []>
    : Op<MoE_Dialect, mnemonic, !listconcat(traits, [MoE_BoundedTensors])>;

class MoE_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<MoE_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def MoE_FloatElement : AnyTypeOf<[F32, BF16, F16], "f32, bf16 or f16">;
def MoE_FloatTensor : StaticShapeTensorOf<[F32, BF16, F16]>;
def MoE_IndexTensor : StaticShapeTensorOf<[I32]>;
def MoE_LossTensor : 0DTensorOf<[F32]>;
def MoE_DataTensor : StaticShapeTensorOf<[F32, BF16, F16, I32]>;

#endif // MOE_DIALECT_TD
