//===- TrainerCheckpoint.cpp - resuming from and writing checkpoints ------===//
//
// Checkpoints hold full tensors (expert shards gathered over their ep
// group), so a run resumes on any grid; each rank reads its block. The
// codec state of compressed all-reduces (error-feedback residuals,
// PowerSGD's Q) differs per rank: it is stored as [ranks, n] tensors
// `codec.<site>.residual` and `codec.<site>.q`, and restored when the
// checkpoint was written by as many ranks.
//
//===----------------------------------------------------------------------===//

#include "Trainer.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
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

} // namespace

//===----------------------------------------------------------------------===//
// Resume
//===----------------------------------------------------------------------===//

/// Reads --checkpoint: parameters and moments, the step and the data
/// position; returns this rank's codec state.
moert::CodecStates Trainer::resumeFromCheckpoint() {
  moert::TensorMap tensors;
  nlohmann::json state;
  std::string error, note;
  if (!moert::loadCheckpoint(o.checkpoint, tensors, state, error, &note))
    die(error);
  if (!note.empty() && lead)
    std::printf("note: %s\n", note.c_str());
  moert::ResumeState resume;
  if (!moert::readResumeState(state, o.checkpoint + ": state", sh.seed, resume, error))
    die(error);
  firstStep = resume.step;
  if (!o.data.empty() && firstStep > o.steps) // (without data nothing trains or is saved)
    die(o.checkpoint + " is at step " + std::to_string(firstStep) + "; --steps " +
        std::to_string(o.steps) +
        " would rewrite it over later weights (give --steps >= " + std::to_string(firstStep) + ")");
  restorePlacement(state);
  if (auto it = state.find("loss_scale"); it != state.end()) {
    const nlohmann::json &ls = *it;
    bool ok = ls.is_object() && ls.contains("scale") && ls.contains("good_steps") &&
              ls.at("scale").is_number() && ls.at("good_steps").is_number_integer() &&
              ls.at("scale").get<double>() >= 1 && ls.at("scale").get<double>() <= 1e30 &&
              ls.at("good_steps").get<long long>() >= 0;
    if (!ok)
      die(o.checkpoint +
          ": state: loss_scale: expected {\"scale\": a number in [1, 1e30], \"good_steps\": >= 0}");
    lossScale = ls.at("scale").get<float>();
    goodSteps = ls.at("good_steps").get<long long>();
  }
  restoreParameters(tensors);
  moert::CodecStates restored = restoreCodecStates(tensors);
  sampler.setPosition(resume.dataPosition);
  if (lead)
    std::printf("resumed from %s at step %lld\n", o.checkpoint.c_str(), firstStep);
  return restored;
}

/// The placement in force when the checkpoint was saved (each MoE layer's
/// experts in placement order), when it holds one for this model: experts
/// stay where online rebalancing put them, on any number of ranks.
void Trainer::restorePlacement(const nlohmann::json &state) {
  auto it = state.find("placement");
  if (it == state.end())
    return;
  std::string where = o.checkpoint + ": state: placement";
  if (!it->is_array() || it->size() != expertOrder.size())
    die(where + ": expected one list per MoE layer (" + std::to_string(expertOrder.size()) + ")");
  std::vector<std::vector<int32_t>> orders;
  for (size_t l = 0; l < it->size(); ++l) {
    const nlohmann::json &list = (*it)[l];
    size_t positions = expertOrder[l].size();
    int64_t experts = prog.layer_experts[l];
    // A placement of another number of positions (another grid's) does not
    // apply: the layer keeps this program's.
    if (list.is_array() && list.size() != positions &&
        list.size() >= static_cast<size_t>(experts)) {
      orders.push_back(expertOrder[l]);
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
  expertOrder = std::move(orders);
}

void Trainer::restoreParameters(const moert::TensorMap &tensors) {
  for (int i = 0; i < prog.num_params; ++i) {
    std::string name = prog.params[i].name;
    const moert_param_info &p = prog.params[i];
    bool zero = p.zero_parts > 1;
    for (auto [suffix, target] : {std::pair<std::string, moert::AlignedFloats *>{"", &params[i]},
                                  {".adam_m", &moments[2 * i]},
                                  {".adam_v", &moments[2 * i + 1]}}) {
      if (target->empty())
        continue;
      // Checkpoints hold full tensors: a shard reads its block, so a run
      // resumes on any grid. With ZeRO the rank keeps its part of the
      // block: the parameter's first n elements, a moment's shard.
      moert::AlignedFloats block(static_cast<size_t>(numel(p) * (p.tp_dim >= 0 ? tp : 1)));
      size_t full = block.size() / static_cast<size_t>(rowsOf(i, epIndex).size()) *
                    static_cast<size_t>(fullRows(i));
      auto it = tensors.find(name + suffix);
      if (it == tensors.end() || it->second.data.size() != full)
        die(o.checkpoint + ": tensor '" + name + suffix +
            "' is missing or has another size than the model's");
      keepRows(it->second.data.data(), block, i);
      if (p.tp_dim >= 0) {
        moert::AlignedFloats slice(static_cast<size_t>(numel(p)));
        sliceTp(block.data(), slice, i);
        block = std::move(slice);
      }
      if (zero && target != &params[i])
        keepZero(block, *target, i);
      else
        std::copy(block.begin(), block.end(), target->begin());
    }
  }
  // The outer optimiser's momentum (--local-steps); absent: it starts at 0.
  if (o.localSteps <= 0)
    return;
  outerMomentum.assign(params.size(), {});
  for (int i = 0; i < prog.num_params; ++i) {
    auto it = tensors.find(std::string(prog.params[i].name) + ".outer_v");
    outerMomentum[i].assign(params[i].size(), 0.0f);
    if (it != tensors.end()) {
      if (it->second.data.size() != params[i].size() /
                                        static_cast<size_t>(rowsOf(i, epIndex).size()) *
                                        static_cast<size_t>(fullRows(i)))
        die(o.checkpoint + ": tensor '" + it->first + "' has another size than the model's");
      keepRows(it->second.data.data(), outerMomentum[i], i);
    }
  }
}

/// This rank's row of every codec state the checkpoint holds for this many
/// ranks; with state for another number, error feedback restarts from zero.
moert::CodecStates Trainer::restoreCodecStates(const moert::TensorMap &tensors) {
  moert::CodecStates restored;
  bool skipped = false;
  for (auto &[name, tensor] : tensors) {
    int site = 0;
    std::string what;
    if (!parseCodecTensorName(name, site, what))
      continue;
    if (tensor.shape.size() != 2 || tensor.shape[0] != ranks ||
        (what != "residual" && what != "q")) {
      skipped = true;
      continue;
    }
    int64_t n = tensor.shape[1];
    std::vector<float> mine(tensor.data.begin() + rank * n, tensor.data.begin() + (rank + 1) * n);
    moert::CodecState &codec = restored[site];
    (what == "residual" ? codec.residual : codec.q) = std::move(mine);
  }
  if (skipped && lead)
    std::printf("note: %s holds codec state for another number of ranks; error "
                "feedback restarts from zero\n",
                o.checkpoint.c_str());
  return restored;
}

//===----------------------------------------------------------------------===//
// Save
//===----------------------------------------------------------------------===//

void Trainer::checkCheckpointPath() const {
  if (o.checkpoint.empty() || !lead)
    return;
  if (::mkdir(o.checkpoint.c_str(), 0755) != 0 && errno != EEXIST)
    die(o.checkpoint + ": cannot create the checkpoint directory: " + std::strerror(errno));
  struct stat st;
  if (::stat(o.checkpoint.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    die(o.checkpoint + ": --checkpoint must be a directory");
  if (::access(o.checkpoint.c_str(), W_OK | X_OK) != 0)
    die(o.checkpoint + ": the checkpoint directory is not writable: " + std::strerror(errno));
  moert::removeStaleTemporaries(o.checkpoint);
}

/// Writes --checkpoint (lead rank) after `steps` steps: full tensors, this
/// run's codec state, and the state any grid resumes from.
void Trainer::saveCheckpoint(long long steps) {
  deviceSync();
  moert::TensorMap tensors;
  gatherParameters(tensors);
  if (ranks > 1 && ctx.codec_states)
    gatherCodecStates(tensors);
  // A diverged state is not saved over the last good one.
  for (const auto &[name, tensor] : tensors)
    for (float v : tensor.data)
      if (!std::isfinite(v))
        die("after step " + std::to_string(steps) + ": '" + name +
            "' holds a non-finite value; not saving it (" + o.checkpoint +
            " keeps the last good checkpoint)");
  nlohmann::json state = {
      {"step", steps},
      {"data_position", sampler.position()},
      {"seed", sh.seed},
      {"grid", {{"dp", prog.grid_dp}, {"ep", prog.grid_ep}, {"tp", prog.grid_tp}}}};
  if (!expertOrder.empty())
    state["placement"] = expertOrder;
  if (lossScale > 0)
    state["loss_scale"] = {{"scale", lossScale}, {"good_steps", goodSteps}};
  if (lead) {
    std::string error;
    if (!moert::saveCheckpoint(o.checkpoint, tensors, state, error,
                               static_cast<int>(o.keepCheckpoints)))
      die(error);
    std::printf("checkpoint written to %s\n", o.checkpoint.c_str());
  }
}

/// Parameters and moments as full tensors: expert shards are gathered over
/// their ep group (in ep order), so any grid can resume from the checkpoint.
void Trainer::gatherParameters(moert::TensorMap &tensors) {
  for (int i = 0; i < prog.num_params; ++i) {
    const moert_param_info &p = prog.params[i];
    std::vector<int64_t> shape(p.shape, p.shape + p.rank);
    if (p.tp_dim > 0)
      shape[p.tp_dim] *= tp;
    if (p.rank > 0)
      shape[0] = fullRows(i);
    // ZeRO: the parameter without its tail, the moments' shards gathered;
    // tensor parallelism: the slices gathered; then the expert blocks.
    auto whole = [&](moert::AlignedFloats block) {
      if (p.tp_dim >= 0)
        block = gatherTp(block, i);
      return gatherFull(block, i);
    };
    bool zero = p.zero_parts > 1;
    tensors[p.name] = {
        shape, whole(zero ? moert::AlignedFloats(params[i].begin(), params[i].begin() + numel(p))
                          : params[i])};
    if (p.adamw)
      for (auto [suffix, k] : {std::pair<const char *, int>{".adam_m", 0}, {".adam_v", 1}})
        tensors[std::string(p.name) + suffix] = {
            shape, whole(zero ? gatherZero(moments[2 * i + k], i) : moments[2 * i + k])};
    if (static_cast<size_t>(i) < outerMomentum.size() && !outerMomentum[i].empty())
      tensors[std::string(p.name) + ".outer_v"] = {shape, gatherFull(outerMomentum[i], i)};
  }
}

/// The full tensor of parameter `i` (or of one of its moments) from this
/// rank's block: expert shards are gathered over the ep group and each
/// rank's rows put in their places.
std::vector<float> Trainer::gatherFull(const moert::AlignedFloats &local, int i) {
  const moert_param_info &p = prog.params[i];
  int parts = std::max(p.shard_parts, 1);
  if (parts == 1)
    return std::vector<float>(local.begin(), local.end());
  size_t rowSize = local.size() / static_cast<size_t>(p.shape[0]);
  std::vector<float> out(rowSize * static_cast<size_t>(fullRows(i)));
  std::vector<int32_t> epGroup(ep);
  int epSize = moert_grid_group(&ctx, MOERT_AXIS_EP, epGroup.data());
  std::vector<float> blocks(local.size() * parts);
  if (moert_all_gather(comm, local.data(), static_cast<int64_t>(local.size() * sizeof(float)),
                       blocks.data(), epGroup.data(), epSize) != 0)
    commError("gathering expert shards");
  // Replicas hold the same rows; empty positions (-1) none.
  for (int e = 0; e < parts; ++e) {
    std::vector<int64_t> rows = rowsOf(i, e);
    for (size_t j = 0; j < rows.size(); ++j)
      if (rows[j] >= 0)
        std::copy_n(blocks.begin() + (e * rows.size() + j) * rowSize, rowSize,
                    out.begin() + rows[j] * rowSize);
  }
  return out;
}

moert::AlignedFloats Trainer::gatherZero(const moert::AlignedFloats &shard, int i) {
  const moert_param_info &p = prog.params[i];
  std::vector<int32_t> group(ranks);
  int size = moert_grid_group(&ctx, p.zero_axes, group.data());
  moert::AlignedFloats all(shard.size() * static_cast<size_t>(size));
  if (moert_all_gather(comm, shard.data(), static_cast<int64_t>(shard.size() * sizeof(float)),
                       all.data(), group.data(), size) != 0)
    commError("gathering ZeRO shards");
  all.resize(static_cast<size_t>(numel(p)));
  return all;
}

/// [outer, extent, inner] around parameter `i`'s tp dimension (its slice).
static void aroundTp(const moert_param_info &p, int64_t &outer, int64_t &extent, int64_t &inner) {
  outer = 1, inner = 1, extent = p.shape[p.tp_dim];
  for (int d = 0; d < p.tp_dim; ++d)
    outer *= p.shape[d];
  for (int d = p.tp_dim + 1; d < p.rank; ++d)
    inner *= p.shape[d];
}

void Trainer::sliceTp(const float *full, moert::AlignedFloats &slice, int i) const {
  const moert_param_info &p = prog.params[i];
  int64_t outer, extent, inner, t = rank % tp;
  aroundTp(p, outer, extent, inner);
  for (int64_t o = 0; o < outer; ++o)
    std::copy_n(full + (o * tp + t) * extent * inner, extent * inner,
                slice.begin() + o * extent * inner);
}

moert::AlignedFloats Trainer::gatherTp(const moert::AlignedFloats &slice, int i) {
  const moert_param_info &p = prog.params[i];
  std::vector<int32_t> group(ranks);
  int size = moert_grid_group(&ctx, MOERT_AXIS_TP, group.data());
  moert::AlignedFloats all(slice.size() * static_cast<size_t>(size)), full(all.size());
  if (moert_all_gather(comm, slice.data(), static_cast<int64_t>(slice.size() * sizeof(float)),
                       all.data(), group.data(), size) != 0)
    commError("gathering tensor-parallel slices");
  int64_t outer, extent, inner;
  aroundTp(p, outer, extent, inner);
  for (int t = 0; t < size; ++t)
    for (int64_t o = 0; o < outer; ++o)
      std::copy_n(all.begin() + t * slice.size() + o * extent * inner, extent * inner,
                  full.begin() + (o * size + t) * extent * inner);
  return full;
}

void Trainer::keepZero(const moert::AlignedFloats &block, moert::AlignedFloats &shard,
                       int i) const {
  const moert_param_info &p = prog.params[i];
  // The grid coordinates only (this may run before the context is bound).
  moert_context grid = {};
  grid.rank = rank, grid.dp = prog.grid_dp, grid.ep = ep, grid.tp = tp;
  int64_t offset = moert_step_shard_offset(&grid, p.zero_axes, zeroShard(p));
  for (size_t j = 0; j < shard.size(); ++j) {
    size_t at = static_cast<size_t>(offset) + j;
    shard[j] = at < block.size() ? block[at] : 0.0f;
  }
}

/// This rank's block of parameter `i` (or of a moment) from the full
/// tensor `full`: the rows rowsOf gives it (zeros at empty positions).
void Trainer::keepRows(const float *full, moert::AlignedFloats &local, int i) const {
  std::vector<int64_t> rows = rowsOf(i, epIndex);
  size_t rowSize = local.size() / rows.size();
  for (size_t j = 0; j < rows.size(); ++j) {
    if (rows[j] >= 0)
      std::copy_n(full + rows[j] * rowSize, rowSize, local.begin() + j * rowSize);
    else
      std::fill_n(local.begin() + j * rowSize, rowSize, 0.0f);
  }
}

/// Codec state (error-feedback residuals, PowerSGD's Q) differs per rank:
/// [ranks, n] tensors, so a resume on the same grid continues exactly.
void Trainer::gatherCodecStates(moert::TensorMap &tensors) {
  std::vector<int32_t> everyone(ranks);
  int size = moert_grid_group(&ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, everyone.data());
  for (auto &[site, codec] : moert::codecStates(&ctx))
    for (auto [what, values] :
         {std::pair<const char *, std::vector<float> *>{"residual", &codec.residual},
          {"q", &codec.q}}) {
      if (values->empty())
        continue;
      std::vector<float> all(values->size() * ranks);
      if (moert_all_gather(comm, values->data(),
                           static_cast<int64_t>(values->size() * sizeof(float)), all.data(),
                           everyone.data(), size) != 0)
        commError("checkpoint: gathering codec state");
      tensors[codecTensorName(site, what)] = {{ranks, static_cast<int64_t>(values->size())}, all};
    }
}
