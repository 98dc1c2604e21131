//===- Pipelines.cpp - named pass pipelines -------------------------------===//

#include "moe/Transforms/Pipelines.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void moe::buildTrainPipeline(OpPassManager &pm,
                             const TrainPipelineOptions &options) {
  if (options.fuseGating) {
    pm.addPass(createFuseGatingPass());
    RoutingGroupsPassOptions groups;
    groups.groups = options.routingGroups;
    pm.addPass(createRoutingGroupsPass(groups));
    pm.addPass(createPartitionPass());
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
  if (options.lower) {
    LowerToKernelsPassOptions lower;
    lower.savePreactivations = options.savePreactivations;
    pm.addPass(createLowerToKernelsPass(lower));
  }
}

void moe::registerMoEPipelines() {
  PassPipelineRegistration<TrainPipelineOptions>(
      "moe-train-pipeline",
      "Forward step -> fused gating -> backward and optimiser -> kernel "
      "specs and a planned step program",
      buildTrainPipeline);
}
