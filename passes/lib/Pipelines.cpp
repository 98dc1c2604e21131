//===- Pipelines.cpp - named pass pipelines -------------------------------===//

#include "moe/Transforms/Pipelines.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace {

/// Adds the pipeline's passes and, around the first pass of each anchor
/// named, the user's insertions.
class PipelineBuilder {
public:
  PipelineBuilder(OpPassManager &pm, ArrayRef<moe::PipelineInsertion> insertions,
                  raw_ostream &errors)
      : pm(pm), insertions(insertions), used(insertions.size(), false), errors(errors) {}

  void addPass(std::unique_ptr<Pass> pass) {
    std::string anchor = pass->getArgument().str();
    bool first = !llvm::is_contained(names, anchor);
    names.push_back(anchor);
    if (first)
      insert(anchor, /*after=*/false);
    pm.addPass(std::move(pass));
    if (first)
      insert(anchor, /*after=*/true);
  }

  /// Whether every insertion found its anchor and parsed.
  LogicalResult finish() {
    for (auto [insertion, done] : llvm::zip(insertions, used))
      if (!done) {
        errors << "'" << insertion.anchor << "' is not a pass of this training pipeline; its "
               << "passes, in order: " << llvm::join(names, ", ") << "\n";
        return failure();
      }
    return failure(parseFailed);
  }

private:
  void insert(StringRef anchor, bool after) {
    for (auto [i, insertion] : llvm::enumerate(insertions)) {
      if (insertion.anchor != anchor || insertion.after != after)
        continue;
      used[i] = true;
      if (failed(parsePassPipeline(insertion.passes, pm, errors)))
        parseFailed = true;
    }
  }

  OpPassManager &pm;
  ArrayRef<moe::PipelineInsertion> insertions;
  std::vector<bool> used;
  std::vector<std::string> names;
  bool parseFailed = false;
  raw_ostream &errors;
};

} // namespace

void moe::buildTrainPipeline(OpPassManager &pm, const TrainPipelineOptions &options) {
  (void)buildTrainPipeline(pm, options, {}, llvm::errs());
}

LogicalResult moe::buildTrainPipeline(OpPassManager &passes, const TrainPipelineOptions &options,
                                      ArrayRef<PipelineInsertion> insertions, raw_ostream &errors) {
  PipelineBuilder pm(passes, insertions, errors);
  if (options.evalStep)
    pm.addPass(createAddEvalStepPass());
  if (options.plan) {
    // The planner weighs the fused forward step.
    pm.addPass(createFuseGatingPass());
    PlanShardingPassOptions plan;
    plan.reportJson = options.reportJson;
    plan.reportTable = options.reportTable;
    plan.reportAttr = options.reportAttr;
    plan.dpDegree = options.dp;
    plan.epDegree = options.ep;
    plan.tpDegree = options.tp;
    plan.pinExperts = options.pinExperts;
    plan.equalShares = options.equalShares;
    plan.tokenShares = options.tokenShares;
    plan.redundantExperts = options.redundantExperts;
    // What moe-schedule will overlap: uncompressed gradients of a lowered step.
    plan.overlap = options.overlap && options.lower && options.compressGrad == "none";
    pm.addPass(createPlanShardingPass(plan));
    ExecutablePlanPassOptions check;
    check.strict = options.strictPlan;
    pm.addPass(createExecutablePlanPass(check));
  } else if (options.ranks != 1 || options.ep > 1 || options.tp > 1 || options.dp > 1) {
    MakeGridPassOptions grid;
    grid.ranks = options.ranks;
    grid.ep = options.ep;
    grid.dp = options.dp;
    grid.tp = std::max<int64_t>(options.tp, 1);
    pm.addPass(createMakeGridPass(grid));
  }
  if (options.fuseGating) {
    pm.addPass(createFuseGatingPass());
    MicroBatchesPassOptions micro;
    micro.count = options.microBatches;
    pm.addPass(createMicroBatchesPass(micro));
    RoutingGroupsPassOptions groups;
    groups.groups = options.routingGroups;
    pm.addPass(createRoutingGroupsPass(groups));
    PartitionPassOptions partition;
    partition.redundantExperts = options.redundantExperts;
    partition.replica = options.replica;
    pm.addPass(createPartitionPass(partition));
  }
  AutodiffPassOptions autodiff;
  autodiff.optimizer = options.optimizer;
  pm.addPass(createAutodiffPass(autodiff));
  pm.addPass(createInsertCollectivesPass());
  if (options.compresses()) {
    CompressCollectivesPassOptions compress;
    compress.grad = options.compressGrad;
    compress.embeddingGrad = options.compressEmbedding;
    compress.dispatch = options.compressDispatch;
    compress.warmupSteps = options.compressWarmup;
    compress.errorFeedback = options.errorFeedback;
    pm.addPass(createCompressCollectivesPass(compress));
  }
  if (options.zero != 0) {
    ShardOptimizerPassOptions zero;
    zero.stage = options.zero;
    pm.addPass(createShardOptimizerPass(zero));
  }
  if (options.routedRows)
    pm.addPass(createRoutedRowsPass());
  RecomputeActivationsPassOptions recompute;
  recompute.enable = options.recompute;
  pm.addPass(createRecomputeActivationsPass(recompute));
  if (options.lower) {
    LowerToKernelsPassOptions lower;
    lower.savePreactivations = options.savePreactivations;
    lower.alignment = options.bufferAlignment;
    lower.deviceNorm = options.deviceNorm;
    pm.addPass(createLowerToKernelsPass(lower));
    if (options.bucket)
      pm.addPass(createBucketGradientsPass());
    if (options.expertChunks != 1) {
      PipelineExpertsPassOptions pipeline;
      pipeline.chunks = options.expertChunks;
      pm.addPass(createPipelineExpertsPass(pipeline));
    }
    if (options.overlap)
      pm.addPass(createSchedulePass());
  }
  return pm.finish();
}

void moe::registerMoEPipelines() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "moe-train-pipeline",
      "Forward step -> fused gating -> backward and optimiser -> kernel "
      "specs and a planned step program",
      [](OpPassManager &pm, const TrainPipelineOptions &options) {
        buildTrainPipeline(pm, options);
      });
}
