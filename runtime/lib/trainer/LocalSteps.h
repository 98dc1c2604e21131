//===- LocalSteps.h - local SGD with an outer optimiser (DiLoCo) -*- C++ -*-===//
//
// --local-steps H: each data replica takes H AdamW steps on its own batches
// without the dp all-reduces (moert_context.inputs.replica_local), then an outer
// Nesterov step over the replicas' mean parameter delta moves the start
// point every replica continues from (docs/LocalSteps.md). Its momentum is
// checkpointed as NAME.outer_v.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_LOCALSTEPS_H
#define MOERT_LIB_TRAINER_LOCALSTEPS_H

#include "Component.h"

namespace moert::trainer {

class LocalSteps : public Component {
public:
  using Component::Component;
  void restore(const CheckpointData &data) override;
  void save(CheckpointData &data) override;
  void configure() override;
  void onStart() override;
  void beforeStep(StepState &st) override;
  void afterStep(StepState &st) override;
  void onFinish(const RunEnd &end) override;

  /// The outer optimiser's momentum of parameter `i` (empty when off).
  const moert::AlignedFloats &momentum(int i) const { return outerMomentum[i]; }

private:
  /// After step `s` (0-based): the outer step when a window of local steps
  /// ends there, or `force`d (at the end of a run inside a window).
  void outerStep(long long s, bool force);
  /// --save-replicas: this data replica's state before the outer step.
  void saveReplica(long long steps);
  /// The mean of `value` over the data replicas; `bad` true on every rank
  /// when it is on any.
  float replicaMean(float value, bool &bad, long long s);

  /// The parameters at the last outer step, and the outer momentum.
  std::vector<moert::AlignedFloats> outerStart, outerMomentum;
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_LOCALSTEPS_H
