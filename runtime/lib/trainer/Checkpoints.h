//===- Checkpoints.h - resuming from and writing checkpoints ----*- C++ -*-===//
//
// Checkpoints hold full tensors (expert shards gathered over their ep
// group), so a run resumes on any grid; each rank reads its block. State
// beyond the parameters, moments, placement, data position and codec state
// is each component's (Component::save and restore): the loss scale, the
// outer optimiser's momentum.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_CHECKPOINTS_H
#define MOERT_LIB_TRAINER_CHECKPOINTS_H

#include "Component.h"

namespace moert::trainer {

/// --resume: reads --checkpoint into the rank (the step, the placement,
/// parameters and moments, the codec state, the data position) and every
/// component of `all` (restore), before the context is bound.
void resumeRun(Rank &r, Components &all);

/// --checkpoint: checked before the first step, written every
/// --checkpoint-every steps, at the end, and when a signal stops the run.
class Checkpoints : public Component {
public:
  /// `all`: the components whose state a checkpoint holds (save).
  Checkpoints(Rank &r, Components &all);
  void onStart() override;
  void endOfStep(const StepState &st) override;
  void onFinish(const RunEnd &end) override;

  /// Writes --checkpoint after `steps` steps (every rank gathers; the lead
  /// rank writes). Refuses a non-finite state, keeping the last checkpoint.
  void write(long long steps);

private:
  Components &all;
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_CHECKPOINTS_H
