//===- Evaluation.h - the validation loss -----------------------*- C++ -*-===//
//
// The mean loss of --eval-batches held-out batches (the same windows of the
// validation split every time), every --eval-every steps and at the end;
// the lead rank prints it and writes it to the metrics. With --eval-only,
// instead of training: the loss over every consecutive window of --data.
// Both are the language-model loss (the next-token cross entropy), without
// the routers' auxiliary losses.
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
  void withoutTraining() override;

  /// The mean validation loss after `step` steps (every rank).
  double evaluate(long long step);
  /// --eval-only: the mean loss over --data's consecutive windows of
  /// seq_len targets from its start, the last partial window dropped
  /// (every rank).
  double evaluateFile();

private:
  /// Validation: the same windows of the held-out split at every evaluation.
  moert::BatchSampler valSampler;
  bool canEval = false; ///< an evaluation step and a validation split
};

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_EVALUATION_H
