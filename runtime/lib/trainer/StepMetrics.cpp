//===- StepMetrics.cpp - the loop's own metrics of a step ------------------===//
//
// StepMetrics.h: gradient norms per parameter group, expert loads over the
// whole batch, the run's metrics line.
//
//===----------------------------------------------------------------------===//

#include "StepMetrics.h"

#include "LearningRate.h"

#include <cmath>
#include <map>

using namespace moert::trainer;

namespace {

/// Sequences of the global batch per data replica.
nlohmann::json tokenShares(const Rank &r) {
  nlohmann::json shares = nlohmann::json::array();
  for (int d = 0; d < r.replicas; ++d)
    shares.push_back(r.sequencesBefore(d + 1) - r.sequencesBefore(d));
  return shares;
}

} // namespace

/// The group of a parameter for grad_norm_groups, from the names the
/// frontend gives (l<i>.wq, l<i>.experts.up, tok_emb, ...).
const char *moert::trainer::parameterGroup(const std::string &name) {
  auto has = [&](const char *part) { return name.find(part) != std::string::npos; };
  if (name == "tok_emb" || name == "lm_head")
    return "embedding";
  if (has(".experts."))
    return "experts";
  if (has(".shared."))
    return "shared_experts";
  if (has("router"))
    return "router";
  if (has("norm"))
    return "norms";
  // The projections (and biases) of attention and of latent attention.
  std::string last = name.substr(name.rfind('.') + 1);
  for (const char *w : {"wq", "wk", "wv", "wo", "bq", "bk", "bv", "wq_a", "wq_b", "wkv_a",
                        "wk_rope", "wk_b", "wv_b"})
    if (last == w && last != name)
      return "attention";
  return "dense_ffn";
}

/// The gradient norm of each parameter group in step `s` (before clipping),
/// over the whole model: an expert shard's block counts once per ep rank,
/// a replicated parameter once. Empty without --metrics.
nlohmann::json moert::trainer::gradientGroupNorms(Rank &r, long long s) {
  if (r.gradSquares.empty())
    return nullptr;
  int dpIndex = r.replica / r.ep;
  std::vector<float> squares(r.gradSquares.size());
  for (size_t i = 0; i < squares.size(); ++i) {
    // A piece counts on the ranks at coordinate 0 of every axis that does
    // not divide it: ZeRO's group, the expert split (ep), the
    // tensor-parallel slice (tp).
    const moert_param_info &p = r.prog.params[i];
    int divided = p.zero_parts > 1 ? p.zero_axes : 0;
    if (p.shard_parts > 1)
      divided |= MOERT_AXIS_EP;
    if (p.tp_dim >= 0)
      divided |= MOERT_AXIS_TP;
    bool counts = ((divided & MOERT_AXIS_DP) || dpIndex == 0) &&
                  ((divided & MOERT_AXIS_EP) || r.epIndex == 0) &&
                  ((divided & MOERT_AXIS_TP) || r.rank % r.tp == 0);
    squares[i] = counts ? static_cast<float>(r.gradSquares[i]) : 0.0f;
  }
  if (r.ranks > 1 &&
      moert_step_all_reduce(&r.ctx, squares.data(), squares.data(),
                            static_cast<int64_t>(squares.size()),
                            MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, 0, 1.0) != 0)
    r.commError("step " + std::to_string(s) + ": gradient norms");
  std::map<std::string, double> groups;
  for (size_t i = 0; i < squares.size(); ++i)
    if (r.prog.params[i].adamw)
      groups[parameterGroup(r.prog.params[i].name)] += squares[i];
  nlohmann::json out = nlohmann::json::object();
  for (auto &[group, sum] : groups)
    out[group] = std::sqrt(sum);
  return out;
}

/// Token-slots routed past an expert's capacity in step `s`; with several
/// ranks, the load metrics cover the whole batch: every replica's counts
/// (summed into expertCounts) and drops, and the router losses (averaged:
/// each rank's are the means over its share of the routing groups, weighted
/// by that share).
long long moert::trainer::gatherLoad(Rank &r, long long s) {
  long long dropped = 0;
  for (int32_t n : r.droppedSlots)
    dropped += n;
  if (r.ranks > 1) {
    std::vector<float> load(r.expertCounts.begin(), r.expertCounts.end());
    load.insert(load.end(), r.keptCounts.begin(), r.keptCounts.end());
    for (float l : r.routerLosses)
      load.push_back(r.binary.replica_batches
                         ? l * static_cast<float>(static_cast<double>(r.prog.batch) / r.globalBatch)
                         : l / static_cast<float>(r.prog.grid_dp * r.prog.grid_ep));
    load.push_back(static_cast<float>(dropped));
    if (moert_step_all_reduce(&r.ctx, load.data(), load.data(), static_cast<int64_t>(load.size()),
                              MOERT_AXIS_DP | MOERT_AXIS_EP, 0, 1.0) != 0)
      r.commError("step " + std::to_string(s) + ": load metrics");
    size_t n = r.expertCounts.size();
    for (size_t e = 0; e < n; ++e) {
      r.expertCounts[e] = static_cast<int32_t>(load[e]);
      r.keptCounts[e] = static_cast<int32_t>(load[n + e]);
    }
    std::copy_n(load.begin() + 2 * n, r.routerLosses.size(), r.routerLosses.begin());
    dropped = static_cast<long long>(load.back());
  }
  return dropped;
}

/// What the per-layer arrays of the step lines refer to, and the run's
/// shape: one line at the start of each training run (a resumed run adds
/// its own).
void moert::trainer::writeRunLine(Rank &r) {
  if (!r.metrics)
    return;
  nlohmann::json layers = nlohmann::json::array(), experts = nlohmann::json::array();
  for (int l = 0; l < r.prog.num_moe_layers; ++l) {
    layers.push_back(r.prog.layer_names && r.prog.layer_names[l] ? r.prog.layer_names[l]
                                                                 : "moe" + std::to_string(l));
    experts.push_back(r.prog.layer_experts[l]);
  }
  r.writeMetrics(
      {{"run",
        {{"first_step", r.firstStep + 1},
         {"steps", r.o.steps},
         {"ranks", r.ranks},
         {"grid", {{"dp", r.prog.grid_dp}, {"ep", r.prog.grid_ep}, {"tp", r.prog.grid_tp}}},
         {"global_batch", r.globalBatch},
         {"micro_batches", std::max<int64_t>(r.prog.micro_batches, 1)},
         {"token_shares", tokenShares(r)},
         {"seq_len", r.prog.seq_len},
         {"moe_layers", layers},
         {"experts", experts},
         {"lr_schedule",
          r.prog.lr_schedule ? scheduleJson(r.ctx.run.lr_schedule) : nlohmann::json(nullptr)}}}});
}

/// The last step's unweighted balancing (`part` 0) or z-loss (1) per MoE
/// layer.
nlohmann::json moert::trainer::routerLoss(const Rank &r, int part) {
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < r.prog.num_moe_layers; ++l)
    layers.push_back(r.routerLosses[2 * l + part]);
  return layers;
}

/// The last step's token-slots per expert (`expertCounts` or
/// `keptCounts`), one array per MoE layer.
nlohmann::json moert::trainer::expertTokens(const Rank &r, const std::vector<int32_t> &perExpert) {
  nlohmann::json layers = nlohmann::json::array();
  const int32_t *counts = perExpert.data();
  for (int l = 0; l < r.prog.num_moe_layers; ++l) {
    layers.push_back(std::vector<int32_t>(counts, counts + r.prog.layer_experts[l]));
    counts += r.prog.layer_experts[l];
  }
  return layers;
}
