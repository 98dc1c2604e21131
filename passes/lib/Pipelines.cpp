//===- Pipelines.cpp - named pass pipelines -------------------------------===//

#include "moe/Transforms/Pipelines.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void moe::buildTrainPipeline(OpPassManager &pm, const TrainPipelineOptions &options) {
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
}

void moe::registerMoEPipelines() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "moe-train-pipeline",
      "Forward step -> fused gating -> backward and optimiser -> kernel "
      "specs and a planned step program",
      buildTrainPipeline);
}
