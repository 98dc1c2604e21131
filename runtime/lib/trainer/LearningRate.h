//===- LearningRate.h - the learning-rate schedule at run time --*- C++ -*-===//
//
// The step program computes each step's learning rate from
// moert_context.run.lr_schedule. This component sets it: the schedule the
// model compiled in (moert_program.lr_schedule), or a resumed checkpoint's,
// with --lr, --min-lr, --warmup-steps, --total-steps and --lr-schedule
// applied. The schedule's length is --total-steps, else the run's --steps
// (the decay ends where the run does), and its warm-up keeps its share of
// the compiled schedule unless --warmup-steps sets it (moert_fit_warmup,
// which moe-ref-train applies too). It warns when the run's --steps ends
// inside the warm-up or before or after a fixed decay does, and records the
// schedule (and what it was fitted from) in checkpoints and in the metrics'
// run line. A resumed run keeps the checkpoint's schedule unless a flag
// changes it (--total-steps refits it).
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

  /// How a schedule follows its run: its length (`fitToRun`: the run's
  /// --steps, not fixed by --total-steps) and its warm-up (`warmupFrom`:
  /// scaled from this warm-up of a schedule of `total` steps, not fixed by
  /// --warmup-steps).
  struct Fit {
    bool fitToRun = false;
    std::optional<std::pair<int64_t, int64_t>> warmupFrom;
  };

private:
  /// The resumed checkpoint's schedule, which a resumed run continues, and
  /// how it followed its run (a checkpoint of an earlier binary: fixed).
  std::optional<moert_lr_schedule_config> resumed;
  Fit resumedFit;
  /// This run's.
  Fit fit;
};

/// The schedule as JSON (checkpoints, the metrics' run line).
nlohmann::json scheduleJson(const moert_lr_schedule_config &s);

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_LEARNINGRATE_H
