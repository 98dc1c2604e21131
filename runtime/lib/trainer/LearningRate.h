//===- LearningRate.h - the learning-rate schedule at run time --*- C++ -*-===//
//
// The step program computes each step's learning rate from
// moert_context.run.lr_schedule. This component sets it: the schedule the
// model compiled in (moert_program.lr_schedule), or a resumed checkpoint's,
// with --lr, --min-lr, --warmup-steps, --total-steps and --lr-schedule
// applied; it warns when the run's --steps ends inside the warm-up or
// before the decay does, records the schedule in checkpoints and in the
// metrics' run line.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_LEARNINGRATE_H
#define MOERT_LIB_TRAINER_LEARNINGRATE_H

#include "Component.h"

#include <optional>

namespace moert::trainer {

class LearningRate : public Component {
public:
  using Component::Component;
  void restore(const CheckpointData &data) override;
  void save(CheckpointData &data) override;
  void configure() override;
  void onStart() override;

private:
  /// The resumed checkpoint's schedule, which a resumed run continues.
  std::optional<moert_lr_schedule_config> resumed;
};

/// The schedule as JSON (checkpoints, the metrics' run line).
nlohmann::json scheduleJson(const moert_lr_schedule_config &s);

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_LEARNINGRATE_H
