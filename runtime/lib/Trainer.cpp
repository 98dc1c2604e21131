//===- Trainer.cpp - the step loop ----------------------------------------===//
//
// The loop of a training run: set-up, then per step the batch, the step
// program with the components' hooks around it (Component.h), the loop's
// own metrics (gradient norms, expert loads), progress and the metrics
// line; at the end the components finish. Trainer.h lists the components.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"
#include "Trace.h"
#include "trainer/Checkpoints.h"
#include "trainer/HFWeights.h"
#include "trainer/StepMetrics.h"

#include "moert/DeviceCopies.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <unistd.h>

using namespace moert::trainer;

int moert::trainer::trainRank(const Shared &sh, moert_comm *comm) {
  Trainer trainer(sh, comm);
  return trainer.run();
}

namespace {

/// One terminal line, redrawn in place.
void drawProgress(long long done, long long total, float loss, double tps, double elapsed) {
  const int width = 28;
  int filled = static_cast<int>(width * done / std::max(1LL, total));
  std::string bar(filled, '#');
  bar.resize(width, '.');
  double eta = done > 0 ? elapsed / done * (total - done) : 0;
  std::printf("\r\033[K[%s] %lld/%lld  loss %.4f  %.0f tok/s  eta %.0fs", bar.c_str(), done, total,
              loss, tps, eta);
  std::fflush(stdout);
}

} // namespace

Trainer::Trainer(const Shared &sh, moert_comm *comm) : r(sh, comm) {
  makeComponents(r, components);
  r.initialiseParameters();
  if (!r.o.initHF.empty())
    loadHFWeights(r);
  if (r.o.resume)
    resumeRun(r, components);
  r.bindContext();
  for (auto &c : components)
    c->configure();
  r.startBackground();
}

int Trainer::run() {
  const Options &o = r.o;
  r.openMetrics();
  if (o.data.empty() || o.evalOnly) {
    // Evaluating, sampling or exporting the loaded weights only: nothing
    // trains, no checkpoint is written.
    if (r.lead && o.sample > 0 && o.data.empty())
      std::printf("sampling from %s (step %lld), without training\n",
                  o.resume ? o.checkpoint.c_str() : o.initHF.c_str(), r.firstStep);
    for (auto &c : components)
      c->withoutTraining();
    return 0;
  }
  for (auto &c : components)
    c->onStart();
  if (r.lead) {
    std::printf("training: %d parameters tensors, batch %lld x %lld tokens, steps %lld..%lld",
                r.prog.num_params, (long long)r.globalBatch, (long long)r.prog.seq_len, r.firstStep,
                o.steps - 1);
    if (r.prog.micro_batches > 1) // gradient accumulation
      std::printf(", in %lld micro-batches of %lld sequences%s", (long long)r.prog.micro_batches,
                  (long long)(r.prog.batch / r.prog.micro_batches), r.ranks > 1 ? " a rank" : "");
    std::printf("\n");
  }
  r.bar = r.lead && o.progress && isatty(fileno(stdout));
  writeRunLine(r);
  RunEnd end;
  end.reached = trainLoop();
  end.stopped = end.reached < o.steps;
  for (auto &c : components)
    c->onFinish(end);
  if (!end.stopped)
    return 0;
  int signo = stopSignal();
  return 128 + (signo ? signo : SIGINT);
}

long long Trainer::trainLoop() {
  const Options &o = r.o;
  auto runStart = std::chrono::steady_clock::now();
  for (long long s = r.firstStep; s < o.steps; ++s) {
    StepState st;
    st.step = s;
    runStep(st);
    st.groupNorms = gradientGroupNorms(r, s);
    st.dropped = gatherLoad(r, s);
    if (r.lead)
      reportStep(st, runStart);
    for (auto &c : components)
      c->endOfStep(st);
    if (stopRequested(s) && s + 1 != o.steps) {
      if (r.bar)
        std::printf("\r\033[K");
      return s + 1;
    }
  }
  if (r.bar)
    std::printf("\r\033[K");
  return o.steps;
}

bool Trainer::stopRequested(long long s) {
  float stop = stopSignal() ? 1.0f : 0.0f;
  if (r.ranks > 1 &&
      moert_step_all_reduce(&r.ctx, &stop, &stop, 1, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP,
                            0, 1.0) != 0)
    r.commError("step " + std::to_string(s) + ": agreeing to stop");
  return stop > 0;
}

void Trainer::runStep(StepState &st) {
  long long s = st.step;
  moert_context &ctx = r.ctx;
  r.sampler.next(tokens, targets);
  ctx.outputs = moert_step_outputs{}; // what the step returns, from zero
  auto start = std::chrono::steady_clock::now();
  for (auto &c : components)
    c->beforeStep(st);
  // Emulated slowdown and the trace: the step's compute starts now.
  double stepStart = 0;
  if (ctx.run.compute_slowdown > 0 || ctx.run.trace)
    ctx.runtime.step_mark = stepStart = moert::nowSeconds();
  int64_t copied[2];
  moert_device_copied(copied); // from the step's start (evaluations run between)
  // The components' inputs for this step only: evaluations and collectives
  // between steps are neither replica-local nor delayed.
  ctx.inputs = st.inputs;
  int rc = r.prog.train_step(&ctx, r.aligned(r.mine(tokens), r.inA),
                             r.aligned(r.mine(targets), r.tgA), static_cast<int32_t>(s), &st.loss);
  ctx.inputs = moert_step_inputs{};
  moert_device_copied(copied);
  if (rc != 0)
    r.commError("step " + std::to_string(s) + " failed in a kernel or collective (code " +
                std::to_string(rc) + ")");
  if (ctx.runtime.step_mark > 0) {
    moert_step_end_compute(&ctx); // the compute after the last collective
    ctx.runtime.step_mark = 0;
    if (ctx.run.trace)
      ctx.run.trace->add(moert::TraceLane::Step, "step " + std::to_string(s + 1), stepStart,
                         moert::nowSeconds());
  }
  st.badNorm = !std::isfinite(ctx.outputs.grad_norm);
  for (auto &c : components)
    c->afterStep(st);
  st.end = std::chrono::steady_clock::now();
  st.seconds = std::chrono::duration<double>(st.end - start).count();
  st.commSeconds = std::min(ctx.outputs.comm_seconds, st.seconds);
  st.backgroundSeconds = ctx.outputs.async_seconds;
  st.backgroundWaitSeconds = ctx.outputs.async_wait_seconds;
  st.tokensPerSecond = r.globalBatch * r.prog.seq_len / st.seconds;
  st.gradNorm = ctx.outputs.grad_norm;
  st.lr = ctx.outputs.lr;
  st.deviceCopies[0] = copied[0];
  st.deviceCopies[1] = copied[1];
  if (!std::isfinite(st.loss))
    die("step " + std::to_string(s) + ": the loss is not finite");
  if (st.badNorm)
    die("step " + std::to_string(s) + ": the gradient norm is not finite");
  for (auto &c : components)
    c->acceptStep(st);
}

/// Progress (lead rank): the bar on a terminal, a line every 10 steps (100
/// under the bar), the components' messages, and the step's metrics.
void Trainer::reportStep(const StepState &st, std::chrono::steady_clock::time_point runStart) {
  const Options &o = r.o;
  long long s = st.step;
  if (r.bar)
    drawProgress(s + 1 - r.firstStep, o.steps - r.firstStep, st.loss, st.tokensPerSecond,
                 std::chrono::duration<double>(st.end - runStart).count());
  if (s == r.firstStep || (s + 1) % 10 == 0 || s + 1 == o.steps) {
    if (r.bar)
      std::printf("\r\033[K");
    if (!r.bar || s == r.firstStep || (s + 1) % 100 == 0 || s + 1 == o.steps)
      std::printf("step %5lld/%lld  loss %.4f  %.0f tok/s  dropped %lld\n", s + 1, o.steps, st.loss,
                  st.tokensPerSecond, st.dropped);
  }
  nlohmann::json line;
  if (r.metrics)
    line = {{"step", s + 1},
            {"loss", st.loss},
            {"lr", st.lr},
            {"grad_norm", st.gradNorm},
            {"grad_norm_groups", st.groupNorms},
            {"tokens_per_s", st.tokensPerSecond},
            {"step_seconds", st.seconds},
            {"comm_seconds", st.commSeconds},
            {"background_comm_seconds", st.backgroundSeconds},
            {"background_wait_seconds", st.backgroundWaitSeconds},
            {"dropped_tokens", st.dropped},
            {"expert_tokens", expertTokens(r, r.expertCounts)},
            {"expert_kept_tokens", expertTokens(r, r.keptCounts)},
            {"aux_loss", routerLoss(r, 0)},
            {"z_loss", routerLoss(r, 1)},
            {"device_copy_bytes",
             {{"to_device", st.deviceCopies[0]}, {"to_host", st.deviceCopies[1]}}}};
  for (auto &c : components)
    c->report(st, r.metrics ? &line : nullptr);
  if (r.metrics)
    r.writeMetrics(line);
}
