//===- Checkpoints.cpp - resuming from and writing checkpoints ----------===//
//
// Checkpoints hold full tensors (expert shards gathered over their ep
// group), so a run resumes on any grid; each rank reads its block. The
// codec state of compressed all-reduces (error-feedback residuals,
// PowerSGD's Q) differs per rank: it is stored as [ranks, n] tensors
// `codec.<site>.residual` and `codec.<site>.q`, and restored when the
// checkpoint was written by as many ranks.
//
//===----------------------------------------------------------------------===//

#include "Checkpoints.h"
#include "Shards.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

using namespace moert::trainer;

namespace {

const char kCodecPrefix[] = "codec.";
const size_t kCodecPrefixSize = sizeof kCodecPrefix - 1;

/// The checkpoint tensor of a codec's state: `what` is "residual" or "q".
std::string codecTensorName(int site, const std::string &what) {
  return kCodecPrefix + std::to_string(site) + "." + what;
}

/// Whether `name` is a codec state's tensor; then its site and what it holds
/// (empty when the name has no part after the site).
bool parseCodecTensorName(const std::string &name, int &site, std::string &what) {
  if (name.rfind(kCodecPrefix, 0) != 0)
    return false;
  size_t dot = name.find('.', kCodecPrefixSize);
  what = dot == std::string::npos ? "" : name.substr(dot + 1);
  site = std::atoi(name.substr(kCodecPrefixSize, dot - kCodecPrefixSize).c_str());
  return true;
}

/// The placement in force when the checkpoint was saved (each MoE layer's
/// experts in placement order), when it holds one for this model: experts
/// stay where online rebalancing put them, on any number of ranks.
void restorePlacement(Rank &r, const nlohmann::json &state) {
  auto it = state.find("placement");
  if (it == state.end())
    return;
  std::string where = r.o.checkpoint + ": state: placement";
  if (!it->is_array() || it->size() != r.expertOrder.size())
    die(where + ": expected one list per MoE layer (" + std::to_string(r.expertOrder.size()) + ")");
  std::vector<std::vector<int32_t>> orders;
  for (size_t l = 0; l < it->size(); ++l) {
    const nlohmann::json &list = (*it)[l];
    size_t positions = r.expertOrder[l].size();
    int64_t experts = r.prog.layer_experts[l];
    // A placement of another number of positions (another grid's) does not
    // apply: the layer keeps this program's.
    if (list.is_array() && list.size() != positions &&
        list.size() >= static_cast<size_t>(experts)) {
      orders.push_back(r.expertOrder[l]);
      continue;
    }
    std::vector<bool> seen(experts, false);
    bool ok = list.is_array() && list.size() == positions;
    std::vector<int32_t> order;
    for (size_t p = 0; ok && p < positions; ++p) {
      int64_t e = list[p].is_number_integer() ? list[p].get<int64_t>() : -2;
      ok = e >= -1 && e < experts;
      if (ok && e >= 0)
        seen[e] = true;
      order.push_back(static_cast<int32_t>(e));
    }
    ok = ok && std::find(seen.begin(), seen.end(), false) == seen.end();
    if (!ok)
      die(where + "[" + std::to_string(l) + "]: expected each position's expert (in [0, " +
          std::to_string(experts) + "), or -1 for an empty one), every expert at least once");
    orders.push_back(std::move(order));
  }
  r.expertOrder = std::move(orders);
}

/// Parameters and moments: each rank reads its block of the full tensors.
void restoreParameters(Rank &r, const moert::TensorMap &tensors) {
  for (int i = 0; i < r.prog.num_params; ++i) {
    std::string name = r.prog.params[i].name;
    const moert_param_info &p = r.prog.params[i];
    bool zero = p.zero_parts > 1;
    for (auto [suffix, target] : {std::pair<std::string, moert::AlignedFloats *>{"", &r.params[i]},
                                  {".adam_m", &r.moments[2 * i]},
                                  {".adam_v", &r.moments[2 * i + 1]}}) {
      if (target->empty())
        continue;
      // Checkpoints hold full tensors: a shard reads its block, so a run
      // resumes on any grid. With ZeRO the rank keeps its part of the
      // block: the parameter's first n elements, a moment's shard.
      moert::AlignedFloats block(static_cast<size_t>(numel(p) * (p.tp_dim >= 0 ? r.tp : 1)));
      size_t full = block.size() / static_cast<size_t>(r.rowsOf(i, r.epIndex).size()) *
                    static_cast<size_t>(r.fullRows(i));
      auto it = tensors.find(name + suffix);
      if (it == tensors.end() || it->second.data.size() != full)
        die(r.o.checkpoint + ": tensor '" + name + suffix +
            "' is missing or has another size than the model's");
      keepRows(r, it->second.data.data(), block, i);
      if (p.tp_dim >= 0) {
        moert::AlignedFloats slice(static_cast<size_t>(numel(p)));
        sliceTp(r, block.data(), slice, i);
        block = std::move(slice);
      }
      if (zero && target != &r.params[i])
        keepZero(r, block, *target, i);
      else
        std::copy(block.begin(), block.end(), target->begin());
    }
  }
}

/// This rank's row of every codec state the checkpoint holds for this many
/// ranks; with state for another number, error feedback restarts from zero.
moert::CodecStates restoreCodecStates(Rank &r, const moert::TensorMap &tensors) {
  moert::CodecStates restored;
  bool skipped = false;
  for (auto &[name, tensor] : tensors) {
    int site = 0;
    std::string what;
    if (!parseCodecTensorName(name, site, what))
      continue;
    if (tensor.shape.size() != 2 || tensor.shape[0] != r.ranks ||
        (what != "residual" && what != "q")) {
      skipped = true;
      continue;
    }
    int64_t n = tensor.shape[1];
    std::vector<float> rows(tensor.data.begin() + r.rank * n,
                            tensor.data.begin() + (r.rank + 1) * n);
    moert::CodecState &codec = restored[site];
    (what == "residual" ? codec.residual : codec.q) = std::move(rows);
  }
  if (skipped && r.lead)
    std::printf("note: %s holds codec state for another number of ranks; error "
                "feedback restarts from zero\n",
                r.o.checkpoint.c_str());
  return restored;
}

/// Codec state (error-feedback residuals, PowerSGD's Q) differs per rank:
/// [ranks, n] tensors, so a resume on the same grid continues exactly.
void gatherCodecStates(Rank &r, moert::TensorMap &tensors) {
  std::vector<int32_t> everyone(r.ranks);
  int size =
      moert_grid_group(&r.ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, everyone.data());
  for (auto &[site, codec] : moert::codecStates(&r.ctx))
    for (auto [what, values] :
         {std::pair<const char *, std::vector<float> *>{"residual", &codec.residual},
          {"q", &codec.q}}) {
      if (values->empty())
        continue;
      std::vector<float> all(values->size() * r.ranks);
      if (moert_all_gather(r.comm, values->data(),
                           static_cast<int64_t>(values->size() * sizeof(float)), all.data(),
                           everyone.data(), size) != 0)
        r.commError("checkpoint: gathering codec state");
      tensors[codecTensorName(site, what)] = {{r.ranks, static_cast<int64_t>(values->size())}, all};
    }
}

} // namespace

//===----------------------------------------------------------------------===//
// Resume
//===----------------------------------------------------------------------===//

/// Reads --checkpoint: parameters and moments, the step, the data
/// position, the codec state, and each component's state.
void moert::trainer::resumeRun(Rank &r, Components &all) {
  moert::TensorMap tensors;
  nlohmann::json state;
  std::string error, note;
  if (!moert::loadCheckpoint(r.o.checkpoint, tensors, state, error, &note))
    die(error);
  if (!note.empty() && r.lead)
    std::printf("note: %s\n", note.c_str());
  moert::ResumeState resume;
  if (!moert::readResumeState(state, r.o.checkpoint + ": state", r.sh.seed, resume, error))
    die(error);
  r.firstStep = resume.step;
  // (without data, or with --eval-only, nothing trains or is saved)
  if (!r.o.data.empty() && !r.o.evalOnly && r.firstStep > r.o.steps)
    die(r.o.checkpoint + " is at step " + std::to_string(r.firstStep) + "; --steps " +
        std::to_string(r.o.steps) + " would rewrite it over later weights (give --steps >= " +
        std::to_string(r.firstStep) + ")");
  restorePlacement(r, state);
  restoreParameters(r, tensors);
  r.restoredCodecs = restoreCodecStates(r, tensors);
  r.sampler.setPosition(resume.dataPosition);
  CheckpointData data{std::move(tensors), std::move(state)};
  for (auto &c : all)
    c->restore(data);
  if (r.lead)
    std::printf("resumed from %s at step %lld\n", r.o.checkpoint.c_str(), r.firstStep);
}

//===----------------------------------------------------------------------===//
// Save
//===----------------------------------------------------------------------===//

Checkpoints::Checkpoints(Rank &r, Components &all) : Component(r), all(all) {}

/// --checkpoint can be written (creating it) before any step.
void Checkpoints::onStart() {
  if (r.o.checkpoint.empty() || !r.lead)
    return;
  if (::mkdir(r.o.checkpoint.c_str(), 0755) != 0 && errno != EEXIST)
    die(r.o.checkpoint + ": cannot create the checkpoint directory: " + std::strerror(errno));
  struct stat st;
  if (::stat(r.o.checkpoint.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    die(r.o.checkpoint + ": --checkpoint must be a directory");
  if (::access(r.o.checkpoint.c_str(), W_OK | X_OK) != 0)
    die(r.o.checkpoint + ": the checkpoint directory is not writable: " + std::strerror(errno));
  moert::removeStaleTemporaries(r.o.checkpoint);
}

/// Writes --checkpoint (lead rank) after `steps` steps: full tensors, this
/// run's codec state, and the state any grid resumes from.
void Checkpoints::write(long long steps) {
  r.deviceSync();
  CheckpointData data;
  moert::TensorMap &tensors = data.tensors;
  gatherParameters(r, tensors);
  for (auto &c : all)
    c->save(data);
  if (r.ranks > 1 && r.ctx.runtime.codec_states)
    gatherCodecStates(r, tensors);
  // A diverged state is not saved over the last good one.
  for (const auto &[name, tensor] : tensors)
    for (float v : tensor.data)
      if (!std::isfinite(v))
        die("after step " + std::to_string(steps) + ": '" + name +
            "' holds a non-finite value; not saving it (" + r.o.checkpoint +
            " keeps the last good checkpoint)");
  nlohmann::json &state = data.state; // (with the components' fields)
  state["step"] = steps;
  state["data_position"] = r.sampler.position();
  state["seed"] = r.sh.seed;
  state["grid"] = {{"dp", r.prog.grid_dp}, {"ep", r.prog.grid_ep}, {"tp", r.prog.grid_tp}};
  if (!r.expertOrder.empty())
    state["placement"] = r.expertOrder;
  if (r.lead) {
    std::string error;
    if (!moert::saveCheckpoint(r.o.checkpoint, tensors, state, error,
                               static_cast<int>(r.o.keepCheckpoints)))
      die(error);
    std::printf("checkpoint written to %s\n", r.o.checkpoint.c_str());
  }
}

void Checkpoints::endOfStep(const StepState &st) {
  long long s = st.step;
  if (r.o.checkpointEvery > 0 && (s + 1) % r.o.checkpointEvery == 0 && s + 1 != r.o.steps)
    write(s + 1);
}

/// The end of the run, or a signal's stop: the checkpoint of the last step.
void Checkpoints::onFinish(const RunEnd &end) {
  if (!end.stopped) {
    if (!r.o.checkpoint.empty())
      write(r.o.steps);
    return;
  }
  int signo = stopSignal();
  if (r.lead)
    std::printf("stopped by %s after step %lld\n", signo == SIGTERM ? "SIGTERM" : "SIGINT",
                end.reached);
  if (!r.o.checkpoint.empty())
    write(end.reached);
  else if (r.lead)
    std::printf("no --checkpoint: nothing saved\n");
}
