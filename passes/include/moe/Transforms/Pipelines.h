//===- Pipelines.h - named pass pipelines -----------------------*- C++ -*-===//
//
// Pipelines are functions moe-opt and the driver share, so what users run
// is what the tests test.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_PIPELINES_H
#define MOE_TRANSFORMS_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

namespace mlir::moe {

struct TrainPipelineOptions : public PassPipelineOptions<TrainPipelineOptions> {
  Option<bool> evalStep{*this, "eval-step",
                        llvm::cl::desc("Add a forward-only evaluation step (moe-add-eval-step)"),
                        llvm::cl::init(false)};
  Option<int64_t> ranks{*this, "ranks",
                        llvm::cl::desc("Partition for N ranks of data x expert parallelism "
                                       "(moe-make-grid; 1: one rank)"),
                        llvm::cl::init(1)};
  Option<int64_t> ep{*this, "ep",
                     llvm::cl::desc("Expert-parallel degree of ranks, or forced on the "
                                    "cluster plan (0: chosen)"),
                     llvm::cl::init(0)};
  Option<bool> plan{*this, "plan",
                    llvm::cl::desc("Plan the grid on the module's moe.cluster "
                                   "(moe-plan-sharding, then moe-executable-plan)"),
                    llvm::cl::init(false)};
  Option<int64_t> dp{*this, "dp",
                     llvm::cl::desc("Data-parallel degree of ranks (ep = ranks / (dp tp)), or "
                                    "forced on the cluster plan (0: chosen)"),
                     llvm::cl::init(0)};
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("With plan: force the tensor-parallel degree"),
                     llvm::cl::init(0)};
  Option<std::string> pinExperts{
      *this, "pin-experts", llvm::cl::desc("With plan: EXPERT@RANK,... (moe-plan-sharding pin=)"),
      llvm::cl::init("")};
  Option<std::string> reportJson{*this, "report-json",
                                 llvm::cl::desc("With plan: write the plan report (JSON) here"),
                                 llvm::cl::init("")};
  Option<std::string> reportTable{*this, "report-table",
                                  llvm::cl::desc("With plan: write the plan table here"),
                                  llvm::cl::init("")};
  Option<bool> reportAttr{
      *this, "report-attr",
      llvm::cl::desc("With plan: attach both reports to the module as moe.plan_report"),
      llvm::cl::init(false)};
  Option<bool> tokenShares{
      *this, "token-shares",
      llvm::cl::desc("With plan: write a mixed cluster's token shares as moe.token_shares "
                     "(whole sequences), which the partitioned step executes"),
      llvm::cl::init(false)};
  Option<bool> equalShares{
      *this, "equal-shares",
      llvm::cl::desc("With plan: every data replica the same token share (what the runtime "
                     "executes; moe-plan-sharding equal-shares)"),
      llvm::cl::init(false)};
  Option<bool> strictPlan{
      *this, "strict-plan",
      llvm::cl::desc("With plan: a plan the runtime cannot execute is an error (false: a "
                     "warning, and the step stays on one rank)"),
      llvm::cl::init(true)};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("Optimiser moe-autodiff appends: adamw or none"),
                                llvm::cl::init("adamw")};
  Option<bool> fuseGating{*this, "fuse-gating", llvm::cl::desc("Run moe-fuse-gating"),
                          llvm::cl::init(true)};
  Option<int64_t> replica{*this, "replica",
                          llvm::cl::desc("With unequal moe.token_shares: the data replica whose "
                                         "step moe-partition builds"),
                          llvm::cl::init(-1)};
  Option<int64_t> microBatches{
      *this, "micro-batches",
      llvm::cl::desc("Micro-batches per training step, gradients accumulated "
                     "(moe-micro-batches; 0: the plan's choice with plan, else 1)"),
      llvm::cl::init(0)};
  Option<bool> recompute{*this, "recompute",
                         llvm::cl::desc("Recompute each layer's activations in the backward "
                                        "(moe-recompute-activations; also when the plan needs it)"),
                         llvm::cl::init(false)};
  Option<int64_t> routingGroups{*this, "routing-groups",
                                llvm::cl::desc("Routing groups of fused_gate (0: dp * ep of the "
                                               "module's moe.grid, 1 without one)"),
                                llvm::cl::init(0)};
  Option<int64_t> redundantExperts{
      *this, "redundant-experts",
      llvm::cl::desc("Spare expert positions per MoE layer of a partitioned step, for "
                     "replicas of hot experts (online rebalancing fills them)"),
      llvm::cl::init(0)};
  Option<std::string> compressGrad{
      *this, "compress-grad",
      llvm::cl::desc("Codec of the gradient all-reduces of a partitioned step "
                     "(moe-compress-collectives grad=; none by default)"),
      llvm::cl::init("none")};
  Option<std::string> compressEmbedding{
      *this, "compress-embedding",
      llvm::cl::desc("Codec of the vocabulary matrices' gradients (moe-compress-collectives "
                     "embedding-grad=; default: compress-grad)"),
      llvm::cl::init("")};
  Option<std::string> compressDispatch{
      *this, "compress-dispatch",
      llvm::cl::desc("Codec of the dispatch/combine all_to_alls (fp16, bf16, int8)"),
      llvm::cl::init("none")};
  Option<int64_t> compressWarmup{*this, "compress-warmup",
                                 llvm::cl::desc("Uncompressed steps before the codecs apply"),
                                 llvm::cl::init(0)};
  Option<bool> errorFeedback{*this, "error-feedback",
                             llvm::cl::desc("Keep the residual of topk, sign and powersgd"),
                             llvm::cl::init(true)};
  Option<bool> lower{*this, "lower", llvm::cl::desc("Run moe-lower-to-kernels"),
                     llvm::cl::init(true)};
  Option<bool> bucket{*this, "bucket",
                      llvm::cl::desc("After lowering, bucket adjacent gradient all-reduces "
                                     "(moe-bucket-gradients)"),
                      llvm::cl::init(true)};
  Option<bool> overlap{*this, "overlap",
                       llvm::cl::desc("After bucketing, start gradient all-reduces in the "
                                      "background as soon as their gradients exist "
                                      "(moe-schedule)"),
                       llvm::cl::init(true)};
  Option<int64_t> expertChunks{
      *this, "expert-chunks",
      llvm::cl::desc("After bucketing, pipeline each expert phase's dispatch, kernels and "
                     "combine in this many chunks of experts (moe-pipeline-experts; 1: off)"),
      llvm::cl::init(1)};
  Option<int64_t> zero{*this, "zero",
                       llvm::cl::desc("ZeRO stage of moe-shard-optimizer: 0 (off), 1 (AdamW "
                                      "moments sharded over the replicas), 2 (and gradients); "
                                      "-1: the plan's choice (with plan), else off"),
                       llvm::cl::init(-1)};
  Option<bool> routedRows{*this, "routed-rows",
                          llvm::cl::desc("Expert FFNs compute the routed rows of their "
                                         "dispatch buffers only (moe-routed-rows)"),
                          llvm::cl::init(true)};
  Option<int64_t> bufferAlignment{
      *this, "buffer-alignment",
      llvm::cl::desc("Byte alignment of planned buffers (moe-lower-to-kernels' alignment)"),
      llvm::cl::init(64)};
  Option<bool> deviceNorm{*this, "device-norm",
                          llvm::cl::desc("moe-lower-to-kernels' device-norm (device targets)"),
                          llvm::cl::init(false)};
  Option<bool> savePreactivations{
      *this, "save-preactivations",
      llvm::cl::desc("FFN forward launches keep their pre-activations for "
                     "the backward (false: recompute them)"),
      llvm::cl::init(true)};

  /// Whether moe-compress-collectives runs (some codec other than none).
  bool compresses() const {
    return compressGrad != "none" || compressDispatch != "none" ||
           (!compressEmbedding.empty() && compressEmbedding != "none");
  }
};

/// A forward step to a planned training-step program, one rank's when the
/// step is partitioned. Its passes in order, with the option that runs
/// each: the table of passes/README.md (test/Transforms/pass-lists.test
/// checks that it names every pass of Passes.td). `moec` runs exactly this
/// pipeline (moec --emit=mlir prints its result).
void buildTrainPipeline(OpPassManager &pm, const TrainPipelineOptions &options);

/// Passes a user adds to the training pipeline (moec --pass-before /
/// --pass-after): `passes`, a textual list of module passes
/// ("moe-count-routers,canonicalize", plugins' passes included), runs just
/// before or after the first pass whose argument is `anchor`.
struct PipelineInsertion {
  std::string anchor;
  bool after = true;
  std::string passes;
};

/// buildTrainPipeline with `insertions`; an anchor that is not in this
/// pipeline, or a list that does not parse, is an error written to
/// `errors` (naming the pipeline's passes).
LogicalResult buildTrainPipeline(OpPassManager &pm, const TrainPipelineOptions &options,
                                 ArrayRef<PipelineInsertion> insertions, raw_ostream &errors);

/// Registers --moe-train-pipeline.
void registerMoEPipelines();

} // namespace mlir::moe

#endif // MOE_TRANSFORMS_PIPELINES_H
