//===- Component.h - a run-time feature of the training loop ----*- C++ -*-===//
//
// The step loop (Trainer.cpp) runs the step program; everything else a
// training run does (loss scaling, local steps, delayed gradients,
// rebalancing, communication and memory reports, evaluation, sampling,
// checkpoints, tracing) is a Component: it owns its state, reads its
// options, and is called at fixed points of the run. The loop calls every
// component at each point in the order of makeComponents()
// (Components.cpp); a component overrides the points it needs.
//
//   construction   restore (--resume), then configure
//   before step 0  onStart
//   each step      beforeStep, (the step program), afterStep, acceptStep,
//                  report (lead rank), endOfStep
//   at the end     onFinish (also when a signal stopped the run)
//   no training (--eval-only; --sample or --export-hf without --data):
//                  withoutTraining only
//
// Every rank calls every point (collectives are inside them); only the
// lead rank prints and writes metrics. docs/AddingARuntimeComponent.md
// shows how to add one.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_COMPONENT_H
#define MOERT_LIB_TRAINER_COMPONENT_H

#include "Rank.h"

#include "moert/Checkpoint.h"

#include <chrono>
#include <memory>
#include <vector>

namespace moert::trainer {

/// One training step as the loop and the components see it.
struct StepState {
  long long step; ///< 0-based
  /// The step program's inputs (moert_context.inputs), filled by the
  /// components' beforeStep for this step only.
  moert_step_inputs inputs{};
  float loss = 0; ///< the step's loss (a replica-local step's: the replicas' mean)
  float gradNorm = 0, lr = 0;
  /// The gradient norm is not finite (a replica's own in local steps):
  /// the loop stops the run after afterStep.
  bool badNorm = false;
  bool skipped = false; ///< loss scaling: the gradients overflowed, no update
  float lossScale = 0;  ///< loss scaling: the step's scale (0: none)
  double seconds = 0;   ///< the step's time, program to afterStep
  double commSeconds = 0, backgroundSeconds = 0, backgroundWaitSeconds = 0;
  double tokensPerSecond = 0;
  std::chrono::steady_clock::time_point end;
  int64_t deviceCopies[2] = {0, 0}; ///< device kernels' staging: to the device, to the host
  nlohmann::json groupNorms;        ///< gradient norm per parameter group (--metrics)
  long long dropped = 0;            ///< token-slots past the experts' capacity
};

/// How the run ends: after `reached` steps, `stopped` by a signal or not.
struct RunEnd {
  long long reached;
  bool stopped;
};

/// A checkpoint's contents: full tensors and state.json.
struct CheckpointData {
  moert::TensorMap tensors;
  nlohmann::json state;
};

class Component {
public:
  explicit Component(Rank &r) : r(r) {}
  virtual ~Component() = default;
  Component(const Component &) = delete;
  Component &operator=(const Component &) = delete;

  /// --resume: reads its state from the checkpoint (before configure).
  virtual void restore(const CheckpointData &) {}
  /// Adds its state to a checkpoint being written (every rank).
  virtual void save(CheckpointData &) {}
  /// After the context is bound: checks its options against the program
  /// and each other, and sets its part of the context.
  virtual void configure() {}
  /// Before the first step (with --data): checks that need the data or the
  /// file system, and what it prints before training.
  virtual void onStart() {}
  /// Sets the step's inputs (st.inputs) before the step program runs.
  virtual void beforeStep(StepState &) {}
  /// After the step program succeeded, before the loop checks the loss and
  /// the gradient norm: agreements between ranks, the outer step.
  virtual void afterStep(StepState &) {}
  /// After the step's loss and gradient norm were found finite.
  virtual void acceptStep(StepState &) {}
  /// Lead rank, after the step's progress line: its messages, and its
  /// fields of the step's metrics line (`line` null without --metrics).
  virtual void report(const StepState &, nlohmann::json *) {}
  /// After the step is reported: work between steps (every rank).
  virtual void endOfStep(const StepState &) {}
  /// After the last step (or the step a signal stopped the run at).
  virtual void onFinish(const RunEnd &) {}
  /// No training (--eval-only; --sample or --export-hf without --data):
  /// the run evaluates, samples or exports the loaded weights only.
  virtual void withoutTraining() {}

protected:
  Rank &r;
};

using Components = std::vector<std::unique_ptr<Component>>;

/// Every component into `all`, in the order the loop calls them
/// (Components.cpp).
void makeComponents(Rank &r, Components &all);

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_COMPONENT_H
