//===- LocalSteps.cpp - local SGD with an outer optimiser (DiLoCo) -------===//
//
// --local-steps H: each data replica (an ep group) takes H AdamW steps on its
// own batches without the dp all-reduces (moert_context.inputs.replica_local), then
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

#include "LocalSteps.h"
#include "Shards.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

using namespace moert::trainer;

namespace {
/// The outer all-reduce's codec site, past any step program's.
constexpr int kOuterCodecSite = 1 << 30;
} // namespace

void LocalSteps::configure() {
  if (r.o.localSteps <= 0)
    return;
  bool zero = false;
  for (int i = 0; i < r.prog.num_params; ++i)
    zero = zero || r.prog.params[i].zero_parts > 1;
  if (r.tp > 1)
    die("--local-steps with tensor parallelism (moec --tp) is not supported yet");
  // Unequal token shares weigh each replica's gradient by its share.
  if (r.binary.replica_batches)
    die("--local-steps with unequal token shares (moec --token-shares or a mixed cluster) is "
        "not supported yet: the outer step would average the replicas' deltas equally");
  if (zero)
    die("--local-steps with a ZeRO binary (moec --zero) is not supported: the inner steps "
        "would update shards that no all-gather puts back together");
}

/// The outer optimiser's momentum (absent: it starts at 0).
void LocalSteps::restore(const CheckpointData &data) {
  if (r.o.localSteps <= 0)
    return;
  outerMomentum.assign(r.params.size(), {});
  for (int i = 0; i < r.prog.num_params; ++i) {
    auto it = data.tensors.find(std::string(r.prog.params[i].name) + ".outer_v");
    outerMomentum[i].assign(r.params[i].size(), 0.0f);
    if (it != data.tensors.end()) {
      if (it->second.data.size() != r.params[i].size() /
                                        static_cast<size_t>(r.rowsOf(i, r.epIndex).size()) *
                                        static_cast<size_t>(r.fullRows(i)))
        die(r.o.checkpoint + ": tensor '" + it->first + "' has another size than the model's");
      keepRows(r, it->second.data.data(), outerMomentum[i], i);
    }
  }
}

/// NAME.outer_v: full tensors, as the parameters.
void LocalSteps::save(CheckpointData &data) {
  for (int i = 0; i < r.prog.num_params; ++i) {
    if (static_cast<size_t>(i) >= outerMomentum.size() || outerMomentum[i].empty())
      continue;
    const moert_param_info &p = r.prog.params[i];
    data.tensors[std::string(p.name) + ".outer_v"] = {data.tensors.at(p.name).shape,
                                                      gatherFull(r, outerMomentum[i], i)};
  }
}

/// Local steps: the dp all-reduces stay in the replica.
void LocalSteps::beforeStep(StepState &st) {
  st.inputs.replica_local = r.o.localSteps > 0 && st.step >= r.o.syncSteps;
}

void LocalSteps::afterStep(StepState &st) {
  if (st.inputs.replica_local)
    st.loss = replicaMean(st.loss, st.badNorm, st.step);
  outerStep(st.step, false);
}

/// The replicas agree again before anything reads the model.
void LocalSteps::onFinish(const RunEnd &end) {
  if (r.o.localSteps > 0 && end.reached > r.firstStep && end.reached % r.o.localSteps != 0)
    outerStep(end.reached - 1, true);
}

void LocalSteps::onStart() {
  if (r.o.localSteps <= 0)
    return;
  if (r.o.checkpointEvery > 0 && r.o.checkpointEvery % r.o.localSteps != 0)
    die("--checkpoint-every " + std::to_string(r.o.checkpointEvery) +
        " must be a multiple of --local-steps " + std::to_string(r.o.localSteps) +
        " (checkpoints are taken where the replicas agree)");
  if (r.o.rebalanceEvery > 0)
    die("--local-steps with --rebalance-every is not supported: the outer optimiser's state "
        "would have to move with the experts");
  outerStart.resize(r.params.size());
  if (outerMomentum.size() != r.params.size())
    outerMomentum.assign(r.params.size(), {});
  for (size_t i = 0; i < r.params.size(); ++i) {
    outerStart[i].assign(r.params[i].begin(), r.params[i].end());
    if (outerMomentum[i].size() != r.params[i].size())
      outerMomentum[i].assign(r.params[i].size(), 0.0f);
  }
  if (!r.o.saveReplicas.empty() && r.lead) {
    struct stat st;
    if ((::mkdir(r.o.saveReplicas.c_str(), 0755) != 0 && errno != EEXIST) ||
        ::stat(r.o.saveReplicas.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      die("--save-replicas " + r.o.saveReplicas +
          ": cannot create the directory: " + std::strerror(errno));
  }
  if (r.lead)
    std::printf("local steps: %lld per outer step over %d data replicas (outer lr %g, "
                "Nesterov momentum %g), from step %lld\n",
                r.o.localSteps, r.replicas / r.ep, r.o.outerLr, r.o.outerMomentum,
                r.o.syncSteps + 1);
  if (r.lead && r.o.localSteps < 50 && r.o.outerMomentum > 0)
    std::printf("note: DiLoCo's outer momentum is tuned for hundreds of local steps; with few, "
                "plain averaging (--outer-lr 1 --outer-momentum 0) measured closer to "
                "synchronous training (docs/LocalSteps.md)\n");
}

/// After step `s` (0-based): the outer step when a window of local steps
/// ends there (windows end at multiples of H, counted from the run's first
/// step, so checkpoints every multiple of H fall on them after a resume
/// too), or `force`d (at the end of a run inside a window).
void LocalSteps::outerStep(long long s, bool force) {
  if (r.o.localSteps <= 0 || s + 1 < r.o.syncSteps)
    return;
  if (s + 1 == r.o.syncSteps) { // the synchronous start ends: the first window's start
    r.deviceSync();
    for (size_t i = 0; i < r.params.size(); ++i)
      outerStart[i].assign(r.params[i].begin(), r.params[i].end());
    return;
  }
  if (!force && (s + 1) % r.o.localSteps != 0)
    return;
  r.deviceSync();
  if (!r.o.saveReplicas.empty())
    saveReplica(s + 1);
  size_t total = 0;
  for (auto &p : r.params)
    total += p.size();
  std::vector<float> delta(total);
  size_t at = 0;
  for (size_t i = 0; i < r.params.size(); ++i)
    for (size_t j = 0; j < r.params[i].size(); ++j, ++at)
      delta[at] = outerStart[i][j] - r.params[i][j];
  // Replicas of the same ep index hold the same rows: the mean over dp,
  // compressed on the wire with --outer-codec (its own codec site).
  int rc;
  if (!r.o.outerCodec) {
    rc = moert_step_all_reduce(&r.ctx, delta.data(), delta.data(), static_cast<int64_t>(total),
                               MOERT_AXIS_DP, 1, 1.0);
  } else {
    const moert::CodecSpec &spec = *r.o.outerCodec;
    moert_codec codec = {static_cast<int>(spec.kind), spec.blockSize, spec.ratio, spec.rank, 0};
    rc = moert_step_all_reduce_codec(&r.ctx, delta.data(), delta.data(),
                                     static_cast<int64_t>(total), MOERT_AXIS_DP, 1, 1.0, &codec,
                                     kOuterCodecSite, static_cast<int64_t>(total), 1);
  }
  if (rc != 0)
    r.commError("step " + std::to_string(s) + ": the outer step's all-reduce");
  float lr = static_cast<float>(r.o.outerLr), mu = static_cast<float>(r.o.outerMomentum);
  at = 0;
  for (size_t i = 0; i < r.params.size(); ++i)
    for (size_t j = 0; j < r.params[i].size(); ++j, ++at) {
      float &v = outerMomentum[i][j];
      v = mu * v + delta[at];
      float next = outerStart[i][j] - lr * (delta[at] + mu * v);
      outerStart[i][j] = r.params[i][j] = next;
    }
  r.deviceWrote();
}

/// --save-replicas: this data replica's parameters and AdamW moments after
/// `steps` steps, before the outer step, as full tensors (expert shards
/// gathered over the replica's ep group), written by its first rank to
/// DIR/step-<steps>-replica-<d>.safetensors (d: the replica's dp index).
void LocalSteps::saveReplica(long long steps) {
  CheckpointData replicaState;
  gatherParameters(r, replicaState.tensors); // collectives within the replica's ep group only
  save(replicaState);                        // and the outer momentum
  if (r.epIndex != 0 || r.rank % r.tp != 0)
    return;
  char name[64];
  std::snprintf(name, sizeof name, "/step-%lld-replica-%d.safetensors", steps, r.replica / r.ep);
  std::string error;
  if (!moert::writeFileAtomic(r.o.saveReplicas + name,
                              moert::encodeSafetensors(replicaState.tensors), error))
    die("--save-replicas: " + error);
}

/// The mean of `value` over the data replicas (the loss of a replica-local
/// step, reported for the whole batch); `bad` becomes true on every rank
/// when it is on any (a replica's non-finite gradient norm: all ranks stop
/// together).
float LocalSteps::replicaMean(float value, bool &bad, long long s) {
  if (r.prog.grid_dp <= 1)
    return value;
  float pair[2] = {value, bad ? 1.0f : 0.0f};
  if (moert_step_all_reduce(&r.ctx, pair, pair, 2, MOERT_AXIS_DP, 0, 1.0) != 0)
    r.commError("step " + std::to_string(s) + ": the replicas' mean loss");
  bad = pair[1] > 0;
  return pair[0] / static_cast<float>(r.prog.grid_dp);
}
