//===- LossScaling.h - dynamic loss scaling of f16 models -------*- C++ -*-===//
//
// f16 models (moert_program.loss_scale != 0) seed their backward with
// the step's inputs.loss_scale; a step whose gradients overflow sets
// ctx.outputs.skip_update and updates nothing. After each step the scale halves on an overflow and
// doubles after --loss-scale-window steps without one (PyTorch's
// GradScaler); it is checkpointed as state.json's "loss_scale".
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_LOSSSCALING_H
#define MOERT_LIB_TRAINER_LOSSSCALING_H

#include "Component.h"

namespace moert::trainer {

class LossScaling : public Component {
public:
  using Component::Component;
  void restore(const CheckpointData &data) override;
  void save(CheckpointData &data) override;
  void configure() override;
  void beforeStep(StepState &st) override;
  void afterStep(StepState &st) override;
  void acceptStep(StepState &st) override;
  void report(const StepState &st, nlohmann::json *line) override;

  float scale() const { return lossScale; }
  long long skipped() const { return skippedSteps; }

private:
  /// The scale (0: none), the steps since it last changed without an
  /// overflow, and the steps skipped in all.
  float lossScale = 0;
  long long goodSteps = 0, skippedSteps = 0;
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_LOSSSCALING_H
