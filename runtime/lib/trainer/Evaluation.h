//===- Evaluation.h - the validation loss -----------------------*- C++ -*-===//
//
// The mean loss of --eval-batches held-out batches (the same windows of the
// validation split every time), every --eval-every steps and at the end;
// the lead rank prints it and writes it to the metrics.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_EVALUATION_H
#define MOERT_LIB_TRAINER_EVALUATION_H

#include "Component.h"

namespace moert::trainer {

class Evaluation : public Component {
public:
  explicit Evaluation(Rank &r);
  void onStart() override;
  void endOfStep(const StepState &st) override;
  void onFinish(const RunEnd &end) override;

  /// The mean validation loss after `step` steps (every rank).
  double evaluate(long long step);

private:
  /// Validation: the same windows of the held-out split at every evaluation.
  moert::BatchSampler valSampler;
  bool canEval = false; ///< an evaluation step and a validation split
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_EVALUATION_H
