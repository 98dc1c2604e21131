//===- Evaluation.cpp - the validation loss -------------------------------===//
//
// The step program's evaluation step (the forward loss, no update) on
// every rank over the same held-out windows at every evaluation.
//
//===----------------------------------------------------------------------===//

#include "Evaluation.h"

#include <cstdio>

using namespace moert::trainer;

Evaluation::Evaluation(Rank &r)
    : Component(r),
      valSampler(r.data, r.sh.split, r.data.size(), r.globalBatch, r.prog.seq_len, r.sh.seed + 1) {}

/// Without an evaluation step or a validation split nothing is evaluated;
/// a split too small for one batch is an error.
void Evaluation::onStart() {
  std::string error;
  canEval = r.prog.eval_step && r.o.valFraction > 0;
  if (canEval && !valSampler.valid(error))
    die(r.o.data + ": validation split: " + error + " (use more data or a larger --val-fraction)");
}

void Evaluation::endOfStep(const StepState &st) {
  long long s = st.step;
  if (canEval && r.o.evalEvery > 0 && (s + 1) % r.o.evalEvery == 0 && s + 1 != r.o.steps)
    evaluate(s + 1);
}

void Evaluation::onFinish(const RunEnd &end) {
  if (!end.stopped && canEval)
    evaluate(r.o.steps);
}

/// The mean validation loss over --eval-batches held-out batches after
/// `step` steps; the lead rank prints it and writes it to the metrics.
double Evaluation::evaluate(long long step) {
  valSampler.setPosition(0);
  std::vector<int32_t> in, tg;
  double total = 0;
  for (long long b = 0; b < r.o.evalBatches; ++b) {
    valSampler.next(in, tg);
    float loss = 0;
    if (r.prog.eval_step(&r.ctx, r.aligned(r.mine(in), r.inA), r.aligned(r.mine(tg), r.tgA), &loss,
                         nullptr) != 0)
      r.commError("evaluation failed in a kernel or collective");
    total += loss;
  }
  double mean = total / r.o.evalBatches;
  if (!r.lead)
    return mean;
  if (r.bar)
    std::printf("\r\033[K");
  std::printf("step %5lld  validation loss %.4f (%lld x %lld held-out tokens)\n", step, mean,
              (long long)r.o.evalBatches, (long long)(r.globalBatch * r.prog.seq_len));
  if (r.metrics)
    r.writeMetrics({{"step", step}, {"val_loss", mean}});
  return mean;
}
