//===- LearningRate.cpp - the learning-rate schedule at run time ----------===//

#include "LearningRate.h"

#include "moec/contract/Abi.h"

#include <algorithm>
#include <cstdio>

using namespace moert::trainer;

nlohmann::json moert::trainer::scheduleJson(const moert_lr_schedule_config &s) {
  return {{"lr", s.lr},
          {"min_lr", s.min_lr},
          {"warmup_steps", s.warmup_steps},
          {"total_steps", s.total_steps},
          {"schedule", scheduleName(s.kind)}};
}

/// A checkpoint's "fit_to_run" and "warmup_from": [warm-up, total] (absent
/// in an earlier binary's: a fixed schedule).
static LearningRate::Fit readFit(const nlohmann::json &j, bool &ok) {
  LearningRate::Fit fit;
  if (!j.is_object())
    return fit;
  if (j.contains("fit_to_run")) {
    ok = ok && j["fit_to_run"].is_boolean();
    fit.fitToRun = ok && j["fit_to_run"].get<bool>();
  }
  if (j.contains("warmup_from")) {
    const nlohmann::json &w = j["warmup_from"];
    ok = ok && w.is_array() && w.size() == 2 && w[0].is_number_integer() &&
         w[1].is_number_integer() && w[0].get<int64_t>() >= 0 &&
         w[1].get<int64_t>() >= std::max<int64_t>(1, w[0].get<int64_t>()) &&
         w[1].get<int64_t>() <= (int64_t(1) << 53);
    if (ok)
      fit.warmupFrom = {w[0].get<int64_t>(), w[1].get<int64_t>()};
  }
  return fit;
}

void LearningRate::restore(const CheckpointData &data) {
  auto it = data.state.find("lr_schedule");
  if (it == data.state.end())
    return; // (a checkpoint of an earlier binary: the compiled schedule)
  const nlohmann::json &j = *it;
  auto number = [&](const char *key) { return j.is_object() && j.contains(key) && j[key].is_number(); };
  auto count = [&](const char *key) {
    return j.is_object() && j.contains(key) && j[key].is_number_integer();
  };
  moert_lr_schedule_config s{};
  bool ok = number("lr") && number("min_lr") && count("warmup_steps") && count("total_steps") &&
            j.contains("schedule") && j["schedule"].is_string();
  if (ok) {
    s.lr = j["lr"].get<double>();
    s.min_lr = j["min_lr"].get<double>();
    s.warmup_steps = j["warmup_steps"].get<int64_t>();
    s.total_steps = j["total_steps"].get<int64_t>();
    std::optional<int> kind = scheduleKind(j["schedule"].get<std::string>());
    s.kind = kind.value_or(MOERT_LR_CONSTANT);
    ok = kind && s.lr > 0 &&
         s.min_lr >= 0 && s.min_lr <= s.lr && s.total_steps >= 1 && s.warmup_steps >= 0 &&
         s.warmup_steps <= s.total_steps;
  }
  Fit fitted = readFit(j, ok);
  if (!ok)
    die(r.o.checkpoint + ": state: lr_schedule: expected {\"lr\" > 0, \"min_lr\" in [0, lr], "
                         "\"warmup_steps\" in [0, total_steps], \"total_steps\" >= 1, "
                         "\"schedule\": cosine|linear|constant, optionally \"fit_to_run\": "
                         "bool and \"warmup_from\": [warm-up, total >= max(1, warm-up)]}");
  resumed = s;
  resumedFit = fitted;
}

void LearningRate::save(CheckpointData &data) {
  if (!r.prog.lr_schedule)
    return;
  nlohmann::json j = scheduleJson(r.ctx.run.lr_schedule);
  j["fit_to_run"] = fit.fitToRun;
  if (fit.warmupFrom)
    j["warmup_from"] = {fit.warmupFrom->first, fit.warmupFrom->second};
  data.state["lr_schedule"] = j;
}

void LearningRate::configure() {
  const Options &o = r.o;
  if (!r.prog.lr_schedule) {
    if (o.scheduleGiven())
      die("--lr, --min-lr, --warmup-steps, --total-steps, --lr-schedule: this program has no "
          "learning-rate schedule (no optimizer step)");
    return;
  }
  moert_lr_schedule_config s = resumed ? *resumed : *r.prog.lr_schedule;
  // A resumed run keeps its schedule (fitted to the run that wrote the
  // checkpoint, else fixed): a longer --steps would move the decay, or the
  // warm-up, under steps already taken. --total-steps refits it, the
  // warm-up keeping its share of the schedule it came from.
  fit = resumed ? Fit{false, resumedFit.warmupFrom}
                : Fit{true, std::pair<int64_t, int64_t>(s.warmup_steps, s.total_steps)};
  s.lr = o.lr.value_or(s.lr);
  s.min_lr = o.minLr.value_or(s.min_lr);
  s.kind = o.lrKind.value_or(s.kind);
  // The length: --total-steps, else the run's when it follows the run.
  if (o.totalSteps)
    s.total_steps = *o.totalSteps, fit.fitToRun = false;
  else if (fit.fitToRun)
    s.total_steps = o.steps;
  // The warm-up: --warmup-steps, else its share of the schedule it came from.
  if (o.warmupSteps)
    s.warmup_steps = *o.warmupSteps, fit.warmupFrom.reset();
  else if (fit.warmupFrom)
    s.warmup_steps = moert_fit_warmup(fit.warmupFrom->first, fit.warmupFrom->second, s.total_steps);
  // A warm-up given longer than the run: the run ends inside it (warned).
  if (fit.fitToRun)
    s.total_steps = std::max<int64_t>(s.total_steps, s.warmup_steps);
  if (s.min_lr > s.lr)
    die("the minimum learning rate " + std::to_string(s.min_lr) + " exceeds the learning rate " +
        std::to_string(s.lr) + " (--lr, --min-lr)");
  if (s.warmup_steps > s.total_steps)
    die("the warm-up (" + std::to_string(s.warmup_steps) + " steps) exceeds the schedule's " +
        std::to_string(s.total_steps) + " steps (--warmup-steps, --total-steps)");
  r.ctx.run.lr_schedule = s;
}

/// What the run's length does to the schedule: a run that ends inside the
/// warm-up never reaches the peak, one that ends before total_steps stops
/// short of the decay's end, one that goes past it trains on at min_lr.
void LearningRate::onStart() {
  const moert_lr_schedule_config &s = r.ctx.run.lr_schedule;
  if (!r.prog.lr_schedule || !r.lead)
    return;
  const Options &o = r.o;
  const moert_lr_schedule_config &compiled = *r.prog.lr_schedule;
  bool fitted = s.total_steps != compiled.total_steps || s.warmup_steps != compiled.warmup_steps;
  if (o.scheduleGiven() || fitted)
    std::printf("learning rate: %s, peak %g after %lld warm-up steps, minimum %g at step %lld\n",
                scheduleName(s.kind), s.lr, static_cast<long long>(s.warmup_steps), s.min_lr,
                static_cast<long long>(s.total_steps));
  if (fitted && fit.fitToRun && fit.warmupFrom)
    std::printf("  (fitted to this run's steps; the compiled schedule has %lld warm-up of %lld "
                "steps, which --total-steps %lld keeps)\n",
                static_cast<long long>(compiled.warmup_steps),
                static_cast<long long>(compiled.total_steps),
                static_cast<long long>(compiled.total_steps));
  long long steps = o.steps;
  float last = moert_lr_schedule(static_cast<int32_t>(steps - 1), s.lr, s.min_lr, s.warmup_steps,
                                 s.total_steps, s.kind);
  if (steps < s.warmup_steps && o.warmupSteps)
    std::fprintf(stderr,
                 "warning: this run of %lld steps ends inside the learning-rate warm-up (%lld "
                 "steps): its last learning rate is %g, the peak %g; --warmup-steps %lld or "
                 "fewer reaches the peak\n",
                 steps, static_cast<long long>(s.warmup_steps), last, s.lr, steps);
  else if (steps < s.warmup_steps)
    std::fprintf(stderr,
                 "warning: this run of %lld steps ends inside the learning-rate warm-up (%lld "
                 "steps): its last learning rate is %g, the peak %g; --warmup-steps N or "
                 "--total-steps %lld fits the schedule to the run\n",
                 steps, static_cast<long long>(s.warmup_steps), last, s.lr, steps);
  else if (steps < s.total_steps && s.kind != MOERT_LR_CONSTANT)
    std::fprintf(stderr,
                 "warning: the learning-rate schedule decays over %lld steps and this run has "
                 "%lld: it ends at %g, above the minimum %g; --total-steps %lld fits it to the "
                 "run\n",
                 static_cast<long long>(s.total_steps), steps, last, s.min_lr, steps);
  else if (steps > s.total_steps && s.kind != MOERT_LR_CONSTANT)
    std::fprintf(stderr,
                 "warning: the learning-rate schedule decays over %lld steps and this run has "
                 "%lld: the last %lld train at the minimum %g; --total-steps %lld fits it to the "
                 "run\n",
                 static_cast<long long>(s.total_steps), steps,
                 steps - static_cast<long long>(s.total_steps), s.min_lr, steps);
}
