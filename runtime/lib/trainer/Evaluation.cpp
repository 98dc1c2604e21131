//===- Evaluation.cpp - the validation loss -------------------------------===//
//
// The step program's evaluation step (the forward loss, no update) on
// every rank over the same held-out windows at every evaluation.
//
//===----------------------------------------------------------------------===//

#include "Evaluation.h"

#include <cstdio>
#include <unistd.h>

using namespace moert::trainer;

Evaluation::Evaluation(Rank &r)
    : Component(r),
      valSampler(r.data, r.sh.split, r.data.size(), r.globalBatch, r.prog.seq_len, r.sh.seed + 1) {}

/// Without an evaluation step or a validation split nothing is evaluated;
/// a split too small for one batch is an error.
void Evaluation::onStart() {
  if (r.o.evalOnly)
    return;
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

void Evaluation::withoutTraining() {
  if (r.o.evalOnly)
    evaluateFile();
}

/// Full batches of consecutive windows; a last partial batch of k windows
/// runs padded with copies of its first window, and a batch of that window
/// alone gives the copies' share to take out: the step's loss is the mean
/// of its sequences' (all seq_len long). With a capacity factor the padding
/// shares the experts' capacity as any batch does.
double Evaluation::evaluateFile() {
  if (!r.prog.eval_step)
    die("--eval-only: this binary has no evaluation step");
  const moert::TokenStream &d = r.data;
  int64_t len = r.prog.seq_len, batch = r.globalBatch;
  int64_t windows = static_cast<int64_t>((d.size() - 1) / static_cast<size_t>(len));
  std::vector<int32_t> in(static_cast<size_t>(batch * len)), tg(in.size());
  auto place = [&](int64_t slot, int64_t window) {
    for (int64_t t = 0; t < len; ++t) {
      in[slot * len + t] = d[static_cast<size_t>(window * len + t)];
      tg[slot * len + t] = d[static_cast<size_t>(window * len + t + 1)];
    }
  };
  auto run = [&]() -> double {
    float loss = 0;
    if (r.prog.eval_step(&r.ctx, r.aligned(r.mine(in), r.inA), r.aligned(r.mine(tg), r.tgA), &loss,
                         nullptr) != 0)
      r.commError("evaluation failed in a kernel or collective");
    return loss;
  };
  bool bar = r.lead && r.o.progress && isatty(fileno(stdout));
  int64_t full = windows / batch, partial = windows % batch;
  double sum = 0; // of the windows' mean losses
  for (int64_t b = 0; b < full; ++b) {
    for (int64_t s = 0; s < batch; ++s)
      place(s, b * batch + s);
    sum += run() * static_cast<double>(batch);
    if (bar) {
      std::printf("\r\033[Kevaluating: batch %lld/%lld", static_cast<long long>(b + 1),
                  static_cast<long long>(full + (partial > 0)));
      std::fflush(stdout);
    }
  }
  if (partial > 0) {
    for (int64_t s = 0; s < batch; ++s)
      place(s, full * batch + (s < partial ? s : 0));
    double mixed = run();
    for (int64_t s = 0; s < batch; ++s)
      place(s, full * batch);
    double first = run();
    sum += mixed * static_cast<double>(batch) - static_cast<double>(batch - partial) * first;
  }
  double mean = sum / static_cast<double>(windows);
  if (!r.lead)
    return mean;
  if (bar)
    std::printf("\r\033[K");
  std::printf("eval_loss %.6f over %lld tokens (%lld windows of %lld)\n", mean,
              static_cast<long long>(windows * len), static_cast<long long>(windows),
              static_cast<long long>(len));
  if (r.metrics)
    r.writeMetrics({{"eval_loss", mean}, {"eval_tokens", windows * len}});
  return mean;
}
