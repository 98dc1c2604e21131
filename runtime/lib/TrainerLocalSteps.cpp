//===- TrainerLocalSteps.cpp - local SGD with an outer optimiser (DiLoCo) -===//
//
// --local-steps H: each data replica (an ep group) takes H AdamW steps on its
// own batches without the dp all-reduces (moert_context.replica_local), then
// the replicas average their parameter deltas, Delta = start - params, over
// the dp axis, and an outer Nesterov-momentum SGD step (DiLoCo, Douillard et
// al. 2023: learning rate 0.7, momentum 0.9) moves the start point:
//
//   v = mu v + mean(Delta);  start = start - lr (mean(Delta) + mu v);  params = start
//
// AdamW moments stay each replica's own. The dp all-reduces of H steps
// become one all-reduce of the parameters; checkpoints are taken at outer
// steps (their momentum saved as NAME.outer_v), where every replica holds
// the same parameters. --save-replicas DIR writes what each replica reached
// before the outer step averages it (what a test checks the outer step
// against).
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <sys/stat.h>

using namespace moert::trainer;

namespace {
/// The outer all-reduce's codec site, past any step program's.
constexpr int kOuterCodecSite = 1 << 30;
} // namespace

void Trainer::checkLocalSteps() {
  if (o.localSteps <= 0)
    return;
  if (o.checkpointEvery > 0 && o.checkpointEvery % o.localSteps != 0)
    die("--checkpoint-every " + std::to_string(o.checkpointEvery) +
        " must be a multiple of --local-steps " + std::to_string(o.localSteps) +
        " (checkpoints are taken where the replicas agree)");
  if (o.rebalanceEvery > 0)
    die("--local-steps with --rebalance-every is not supported: the outer optimiser's state "
        "would have to move with the experts");
  outerStart.resize(params.size());
  if (outerMomentum.size() != params.size())
    outerMomentum.assign(params.size(), {});
  for (size_t i = 0; i < params.size(); ++i) {
    outerStart[i].assign(params[i].begin(), params[i].end());
    if (outerMomentum[i].size() != params[i].size())
      outerMomentum[i].assign(params[i].size(), 0.0f);
  }
  if (!o.saveReplicas.empty() && lead) {
    struct stat st;
    if ((::mkdir(o.saveReplicas.c_str(), 0755) != 0 && errno != EEXIST) ||
        ::stat(o.saveReplicas.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      die("--save-replicas " + o.saveReplicas + ": cannot create the directory: " +
          std::strerror(errno));
  }
  if (lead)
    std::printf("local steps: %lld per outer step over %d data replicas (outer lr %g, "
                "Nesterov momentum %g), from step %lld\n",
                o.localSteps, replicas / ep, o.outerLr, o.outerMomentum, o.syncSteps + 1);
  if (lead && o.localSteps < 50 && o.outerMomentum > 0)
    std::printf("note: DiLoCo's outer momentum is tuned for hundreds of local steps; with few, "
                "plain averaging (--outer-lr 1 --outer-momentum 0) measured closer to "
                "synchronous training (docs/LocalSteps.md)\n");
}

/// After step `s` (0-based): the outer step when a window of local steps
/// ends there (windows end at multiples of H, counted from the run's first
/// step, so checkpoints every multiple of H fall on them after a resume
/// too), or `force`d (at the end of a run inside a window).
void Trainer::outerStep(long long s, bool force) {
  if (o.localSteps <= 0 || s + 1 < o.syncSteps)
    return;
  if (s + 1 == o.syncSteps) { // the synchronous start ends: the first window's start
    deviceSync();
    for (size_t i = 0; i < params.size(); ++i)
      outerStart[i].assign(params[i].begin(), params[i].end());
    return;
  }
  if (!force && (s + 1) % o.localSteps != 0)
    return;
  deviceSync();
  if (!o.saveReplicas.empty())
    saveReplica(s + 1);
  size_t total = 0;
  for (auto &p : params)
    total += p.size();
  std::vector<float> delta(total);
  size_t at = 0;
  for (size_t i = 0; i < params.size(); ++i)
    for (size_t j = 0; j < params[i].size(); ++j, ++at)
      delta[at] = outerStart[i][j] - params[i][j];
  // Replicas of the same ep index hold the same rows: the mean over dp,
  // compressed on the wire with --outer-codec (its own codec site).
  int rc;
  if (!o.outerCodec) {
    rc = moert_step_all_reduce(&ctx, delta.data(), delta.data(), static_cast<int64_t>(total),
                               MOERT_AXIS_DP, 1, 1.0);
  } else {
    const moert::CodecSpec &spec = *o.outerCodec;
    moert_codec codec = {static_cast<int>(spec.kind), spec.blockSize, spec.ratio, spec.rank, 0};
    rc = moert_step_all_reduce_codec(&ctx, delta.data(), delta.data(), static_cast<int64_t>(total),
                                     MOERT_AXIS_DP, 1, 1.0, &codec, kOuterCodecSite,
                                     static_cast<int64_t>(total), 1);
  }
  if (rc != 0)
    commError("step " + std::to_string(s) + ": the outer step's all-reduce");
  float lr = static_cast<float>(o.outerLr), mu = static_cast<float>(o.outerMomentum);
  at = 0;
  for (size_t i = 0; i < params.size(); ++i)
    for (size_t j = 0; j < params[i].size(); ++j, ++at) {
      float &v = outerMomentum[i][j];
      v = mu * v + delta[at];
      float next = outerStart[i][j] - lr * (delta[at] + mu * v);
      outerStart[i][j] = params[i][j] = next;
    }
  deviceWrote();
}

/// --save-replicas: this data replica's parameters and AdamW moments after
/// `steps` steps, before the outer step, as full tensors (expert shards
/// gathered over the replica's ep group), written by its first rank to
/// DIR/step-<steps>-replica-<d>.safetensors (d: the replica's dp index).
void Trainer::saveReplica(long long steps) {
  moert::TensorMap tensors;
  gatherParameters(tensors); // collectives within the replica's ep group only
  if (epIndex != 0 || rank % tp != 0)
    return;
  char name[64];
  std::snprintf(name, sizeof name, "/step-%lld-replica-%d.safetensors", steps, replica / ep);
  std::string error;
  if (!moert::writeFileAtomic(o.saveReplicas + name, moert::encodeSafetensors(tensors), error))
    die("--save-replicas: " + error);
}

/// The mean of `value` over the data replicas (the loss of a replica-local
/// step, reported for the whole batch); `bad` becomes true on every rank
/// when it is on any (a replica's non-finite gradient norm: all ranks stop
/// together).
float Trainer::replicaMean(float value, bool &bad, long long s) {
  if (prog.grid_dp <= 1)
    return value;
  float pair[2] = {value, bad ? 1.0f : 0.0f};
  if (moert_step_all_reduce(&ctx, pair, pair, 2, MOERT_AXIS_DP, 0, 1.0) != 0)
    commError("step " + std::to_string(s) + ": the replicas' mean loss");
  bad = pair[1] > 0;
  return pair[0] / static_cast<float>(prog.grid_dp);
}
