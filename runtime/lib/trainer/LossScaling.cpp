//===- LossScaling.cpp - dynamic loss scaling of f16 models ---------------===//

#include "LossScaling.h"

#include <algorithm>
#include <cstdio>

using namespace moert::trainer;

void LossScaling::restore(const CheckpointData &data) {
  auto it = data.state.find("loss_scale");
  if (it == data.state.end())
    return;
  const nlohmann::json &ls = *it;
  bool ok = ls.is_object() && ls.contains("scale") && ls.contains("good_steps") &&
            ls.at("scale").is_number() && ls.at("good_steps").is_number_integer() &&
            ls.at("scale").get<double>() >= 1 && ls.at("scale").get<double>() <= 1e30 &&
            ls.at("good_steps").get<long long>() >= 0;
  if (!ok)
    die(r.o.checkpoint +
        ": state: loss_scale: expected {\"scale\": a number in [1, 1e30], \"good_steps\": >= 0}");
  lossScale = ls.at("scale").get<float>();
  goodSteps = ls.at("good_steps").get<long long>();
}

void LossScaling::save(CheckpointData &data) {
  if (lossScale > 0)
    data.state["loss_scale"] = {{"scale", lossScale}, {"good_steps", goodSteps}};
}

void LossScaling::configure() {
  if (r.o.lossScale > 0 && r.prog.loss_scale == 0)
    die("--loss-scale: this program does not scale its loss (only f16 models do)");
  if (r.prog.loss_scale == 0)
    lossScale = 0; // (a checkpoint of an f16 model resumed by another)
  else if (r.o.lossScale > 0)
    lossScale = static_cast<float>(r.o.lossScale);
  else if (lossScale == 0) // (else the checkpoint's)
    lossScale = static_cast<float>(r.prog.loss_scale);
}

void LossScaling::beforeStep(StepState &st) { st.inputs.loss_scale = lossScale; }

/// An overflow is a skipped step, not a diverged one.
void LossScaling::afterStep(StepState &st) {
  st.skipped = r.ctx.outputs.skip_update != 0;
  st.lossScale = lossScale;
  if (st.skipped)
    st.badNorm = false;
}

/// After the step: an overflow halves the scale (the step updated nothing),
/// --loss-scale-window steps without one double it.
void LossScaling::acceptStep(StepState &st) {
  if (lossScale == 0)
    return;
  if (st.skipped) {
    ++skippedSteps;
    goodSteps = 0;
    lossScale *= 0.5f;
    if (lossScale < 1.0f)
      die("step " + std::to_string(st.step) +
          ": the gradients are not finite even at loss scale 1 (they overflow f16 unscaled)");
  } else if (++goodSteps >= r.o.lossScaleWindow) {
    goodSteps = 0;
    lossScale = std::min(lossScale * 2.0f, 1e30f);
  }
}

/// The first 10 skipped steps are printed; the metrics line of an f16
/// model carries the step's scale and whether it was skipped.
void LossScaling::report(const StepState &st, nlohmann::json *line) {
  if (st.skipped && skippedSteps <= 10) {
    if (r.bar)
      std::printf("\r\033[K");
    std::printf("step %5lld: gradients overflow f16 at loss scale %g: update skipped, scale %g%s\n",
                st.step + 1, st.lossScale, lossScale,
                skippedSteps == 10 ? " (further skips: the metrics' loss_scale)" : "");
  }
  if (line && st.lossScale > 0) {
    (*line)["loss_scale"] = st.lossScale;
    (*line)["skipped"] = st.skipped;
  }
}
