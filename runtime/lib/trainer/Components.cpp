//===- Components.cpp - the components of a training run, in order -------===//
//
// The one list a new component is added to. The loop calls the components
// at each point of Component.h in this order, which is the order the run's
// operations happen in: the step's agreements after loss scaling has seen
// the overflow, the replicas' outer step before the step's bytes are
// counted, the reports at the end before the evaluation (communication,
// kernels) and after the sample (memory), the checkpoint before the trace.
//
//===----------------------------------------------------------------------===//

#include "Checkpoints.h"
#include "Evaluation.h"
#include "HFWeights.h"
#include "LearningRate.h"
#include "LocalSteps.h"
#include "LossScaling.h"
#include "Rebalancer.h"
#include "Reports.h"
#include "Sampling.h"
#include "Staleness.h"
#include "Tracing.h"

using namespace moert::trainer;

void moert::trainer::makeComponents(Rank &r, Components &all) {
  all.push_back(std::make_unique<LearningRate>(r));
  all.push_back(std::make_unique<LossScaling>(r));
  all.push_back(std::make_unique<Staleness>(r));
  all.push_back(std::make_unique<LocalSteps>(r));
  all.push_back(std::make_unique<Communication>(r));
  all.push_back(std::make_unique<KernelProfile>(r));
  all.push_back(std::make_unique<Rebalancer>(r));
  all.push_back(std::make_unique<Evaluation>(r));
  all.push_back(std::make_unique<Sampling>(r));
  all.push_back(std::make_unique<MemoryReport>(r));
  all.push_back(std::make_unique<Checkpoints>(r, all));
  all.push_back(std::make_unique<HFExport>(r));
  all.push_back(std::make_unique<Tracing>(r));
}
