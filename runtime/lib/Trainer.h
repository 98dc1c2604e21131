//===- Trainer.h - one rank's training run ----------------------*- C++ -*-===//
//
// What main() (TrainerMain.cpp) runs on every rank: a Trainer holds the
// step loop only. The rank's state (parameters, AdamW moments, planned
// arenas, the step program's context) is a Rank (trainer/Rank.h); every
// feature of a run around the step program is a component
// (trainer/Component.h) that the loop calls at fixed points, in the order
// of trainer/Components.cpp:
//
//   LossScaling    f16 models' dynamic loss scale
//   Staleness      delayed gradient all-reduces (--staleness)
//   LocalSteps     DiLoCo's inner and outer steps (--local-steps)
//   Communication  bytes per step against the analytical volume
//   KernelProfile  --profile-kernels
//   Rebalancer     moving hot experts (--rebalance-every)
//   Evaluation     the validation loss
//   Sampling       --sample
//   MemoryReport   peak memory against the plan
//   Checkpoints    --checkpoint, --resume (and what each component saves)
//   Tracing        --emulate-link, --emulate-cluster, --trace
//
// Every rank calls every point (the collectives are inside them); only the
// lead rank (0) prints and writes metrics and checkpoints. Internal to
// libmoert_main.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_H
#define MOERT_LIB_TRAINER_H

#include "trainer/Component.h"
#include "trainer/Rank.h"

#include <chrono>

namespace moert::trainer {

/// Trains on one rank (all of it on one rank): what main() runs per rank.
/// Returns the exit status.
int trainRank(const Shared &sh, moert_comm *comm);

class Trainer {
public:
  /// Grid coordinates, parameters (initialised from the seed, or read from
  /// --checkpoint with --resume), the step's context, the components.
  Trainer(const Shared &sh, moert_comm *comm);
  Trainer(const Trainer &) = delete;
  Trainer &operator=(const Trainer &) = delete;

  /// Trains from the first step to --steps, then the components finish
  /// (evaluation, sample, reports, checkpoint, trace). Returns the exit
  /// status.
  int run();

private:
  /// Returns the step count reached: --steps, or fewer when a signal
  /// stopped the run.
  long long trainLoop();
  /// Draws step `st.step`'s batch and runs the step program's training
  /// step with the components' hooks around it.
  void runStep(StepState &st);
  /// Whether any rank was asked to stop (SIGINT, SIGTERM): every rank
  /// agrees, so all stop after the same step.
  bool stopRequested(long long step);
  /// Progress (lead rank): the bar, a line every 10 steps, the metrics line.
  void reportStep(const StepState &st, std::chrono::steady_clock::time_point runStart);

  Rank r;
  Components components;
  /// The global batch's tokens and targets (every rank draws them).
  std::vector<int32_t> tokens, targets;
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_H
