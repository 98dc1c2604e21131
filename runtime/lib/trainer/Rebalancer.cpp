//===- Rebalancer.cpp - moving experts between ranks while training ------===//
//
// Online load balancing (--rebalance-every N). The load monitor keeps a
// moving average of each expert's kept token-slots per MoE layer (those
// within its capacity: the rows it computes; the whole batch's, identical
// on every rank; exponential, spanning about N steps). Every N steps, a
// placement algorithm proposes, per layer, a new placement of the layer's
// P positions (P/ep per rank; EPLB-style): where the program asks for
// replicas (Rank::replicaRoom: moec --redundant-experts, or a placement
// that replicates), the spare positions (P - E) go one by one to the
// expert with the most tokens per replica (else they stay empty, or take
// moved experts), then the
// replicas, heaviest first, each onto the rank with room that does not hold
// that expert yet and would finish it first (the least loaded, its load
// over its device's speed: --emulate-cluster's, else every rank's 1; where
// it was on ties). Local search then improves that proposal, and the
// placement in force, by swapping positions between ranks while the
// slowest rank's predicted time drops; the better of the two is proposed
// (the one in force on ties: fewer moves). Greedy placement alone can be
// worse than no move: with a fixed number of positions per rank the last
// experts go where there is room, on a mixed cluster the slow rank. A rule
// decides whether moving pays:
//
//   gain = N x step seconds x f x (1 - new max rank time / old max rank time)
//          (a rank's time is its load over its speed; the max averaged
//          over the last N steps one by one; an expert's replicas split its
//          tokens so that their ranks finish as evenly as possible, as the
//          step does, moert_place_slots)
//   cost = (bytes to move + N x the replicas' added gradient-sum bytes)
//          x seconds per byte (the last migration's, measured; one step's
//          time over the bytes to move before the first)
//
// where f is the share of the step the expert FFNs take, estimated from the
// program (a token's expert FLOPs, top-k routed experts, over all its
// FLOPs, both from the parameter shapes). A layer moves when gain > cost.
// The migration moves only the experts a rank gains: each one's weight
// and AdamW moment rows come from the first rank that held it (one
// all-gather per tensor over each ep group, every member sending its list
// of such rows, padded to the longest); the other rows stay. The
// mathematics is unchanged (every expert computes the same rows wherever it
// is, its replicas' gradients are summed), so the losses equal a run
// without rebalancing. Every input of the
// decision is the same on every rank (loads are all-reduced, step times
// averaged), so all ranks move together.
//
//===----------------------------------------------------------------------===//

#include "Rebalancer.h"

#include "../Placement.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <numeric>

using namespace moert::trainer;

namespace {

/// Each ep rank's token-slots under `order` (rank r holds positions
/// [r P/ep, (r+1) P/ep)) as the step splits them: a replicated expert's
/// among its replicas so that their ranks finish as evenly as possible
/// (moert::splitLoads, the rule of moert_place_slots).
std::vector<double> rankLoads(const std::vector<double> &load, const std::vector<int32_t> &order,
                              int ep, const std::vector<double> &speeds) {
  std::vector<double> parts =
      moert::splitLoads(load.data(), load.size(), order.data(), order.size(), ep, speeds.data());
  std::vector<double> ranks(ep, 0.0);
  size_t local = order.size() / ep;
  for (size_t p = 0; p < order.size(); ++p)
    ranks[p / local] += parts[p];
  return ranks;
}

/// The same with an expert's replicas sharing its tokens equally: the
/// local search's model, which a swap updates in place.
std::vector<double> equalShareLoads(const std::vector<double> &load,
                                    const std::vector<int32_t> &order, int ep) {
  std::vector<double> ranks(ep, 0.0);
  std::vector<int32_t> replicas = moert::replicaCounts(order.data(), order.size(), load.size());
  size_t local = order.size() / ep;
  for (size_t p = 0; p < order.size(); ++p)
    if (order[p] >= 0)
      ranks[p / local] += load[order[p]] / replicas[order[p]];
  return ranks;
}

/// The slowest rank's time: its token-slots over its device's speed.
double maxTime(const std::vector<double> &ranks, const std::vector<double> &speeds) {
  double max = 0;
  for (size_t r = 0; r < ranks.size(); ++r)
    max = std::max(max, ranks[r] / speeds[r]);
  return max;
}

/// The time the ranks would take with the load shared in proportion to their
/// speeds over the slowest rank's time: with equal speeds, the mean load
/// over the max.
double balancednessOf(const std::vector<double> &ranks, const std::vector<double> &speeds) {
  double max = maxTime(ranks, speeds);
  double ideal = std::accumulate(ranks.begin(), ranks.end(), 0.0) /
                 std::accumulate(speeds.begin(), speeds.end(), 0.0);
  return max > 0 ? ideal / max : 1.0;
}

/// The new placement (EPLB-style) of `order.size()` positions, P/ep per
/// rank: the spare positions (P - E) go one by one to the expert with the
/// most tokens per replica (at most one replica per rank); then replicas,
/// heaviest first, each onto the rank with room that does not hold that
/// expert yet and would finish it first, (load + share) / speed (a rank that
/// held it before on ties, so as few as possible move); each rank's experts
/// keep their old relative order.
std::vector<int32_t> proposeOrder(const std::vector<double> &load,
                                  const std::vector<int32_t> &order, int ep, bool replicate,
                                  const std::vector<double> &speeds) {
  size_t experts = load.size(), positions = order.size(), local = positions / ep;
  std::vector<int> replicas(experts, 1);
  for (size_t spare = replicate ? positions - experts : 0; spare > 0; --spare) {
    int best = -1;
    for (size_t e = 0; e < experts; ++e)
      if (replicas[e] < ep && (best < 0 || load[e] / replicas[e] > load[best] / replicas[best]))
        best = static_cast<int>(e);
    if (best < 0)
      break;
    ++replicas[best];
  }
  // Where each expert was on each rank (`positions`: not there), to keep
  // orders stable and experts in place.
  std::vector<std::vector<size_t>> oldPosition(ep, std::vector<size_t>(experts, positions));
  for (size_t p = 0; p < positions; ++p)
    if (order[p] >= 0)
      oldPosition[p / local][order[p]] = p;
  auto had = [&](int r, int32_t e) { return oldPosition[r][e] < positions; };
  std::vector<std::pair<double, int32_t>> units;
  for (size_t e = 0; e < experts; ++e)
    for (int k = 0; k < replicas[e]; ++k)
      units.push_back({load[e] / replicas[e], static_cast<int32_t>(e)});
  std::stable_sort(units.begin(), units.end(),
                   [](const auto &a, const auto &b) { return a.first > b.first; });
  std::vector<double> ranks(ep, 0.0);
  std::vector<std::vector<int32_t>> held(ep);
  std::vector<std::vector<bool>> holds(ep, std::vector<bool>(experts, false));
  for (auto [share, e] : units) {
    int best = -1;
    for (int r = 0; r < ep; ++r) {
      if (held[r].size() == local || holds[r][e])
        continue;
      double finish = (ranks[r] + share) / speeds[r],
             bestFinish = best < 0 ? 0 : (ranks[best] + share) / speeds[best];
      if (best < 0 || finish < bestFinish || (finish == bestFinish && had(r, e) && !had(best, e)))
        best = r;
    }
    if (best < 0)
      continue; // a replica whose every rank with room holds the expert: left out
    held[best].push_back(e);
    holds[best][e] = true;
    ranks[best] += share;
  }
  // Old positions first: experts that stay keep their order; empty
  // positions last.
  std::vector<int32_t> next;
  for (int r = 0; r < ep; ++r) {
    std::vector<int32_t> &mine = held[r];
    std::stable_sort(mine.begin(), mine.end(),
                     [&](int32_t a, int32_t b) { return oldPosition[r][a] < oldPosition[r][b]; });
    next.insert(next.end(), mine.begin(), mine.end());
    next.insert(next.end(), local - mine.size(), -1);
  }
  return next;
}

/// The slowest rank's time for the ranks' loads `ranks`, and the sum of
/// the squares of the ranks' times (which breaks ties between placements
/// with the same slowest rank).
std::pair<double, double> scoreOf(const std::vector<double> &ranks,
                                  const std::vector<double> &speeds) {
  double squares = 0;
  for (size_t r = 0; r < ranks.size(); ++r)
    squares += (ranks[r] / speeds[r]) * (ranks[r] / speeds[r]);
  return {maxTime(ranks, speeds), squares};
}

/// Local search from `order`: swaps of two positions on different ranks
/// (an expert and an empty position: a move), each lowering the slowest
/// rank's time (or, at the same slowest time, the sum of the squares), until
/// none does. Replica counts do not change; a rank never holds an expert
/// twice. The greedy placement alone can be worse than the placement it
/// replaces: with a fixed number of positions per rank, the last experts
/// must go where there is room, and with unequal speeds that may be the
/// slow rank.
std::vector<int32_t> improveBySwaps(const std::vector<double> &load, std::vector<int32_t> order,
                                    int ep, const std::vector<double> &speeds) {
  size_t positions = order.size(), local = positions / ep;
  std::vector<int32_t> replicas = moert::replicaCounts(order.data(), positions, load.size());
  auto unit = [&](int32_t e) { return e < 0 ? 0.0 : load[e] / replicas[e]; };
  std::vector<double> ranks = equalShareLoads(load, order, ep);
  auto holds = [&](size_t r, int32_t e) {
    for (size_t p = r * local; p < (r + 1) * local; ++p)
      if (order[p] == e)
        return true;
    return false;
  };
  for (size_t iteration = 0; iteration < 4 * positions; ++iteration) {
    auto best = scoreOf(ranks, speeds);
    size_t worst = 0;
    for (int r = 1; r < ep; ++r)
      if (ranks[r] / speeds[r] > ranks[worst] / speeds[worst])
        worst = r;
    size_t bestP = positions, bestQ = positions;
    for (size_t p = worst * local; p < (worst + 1) * local; ++p)
      for (size_t q = 0; q < positions; ++q) {
        size_t other = q / local;
        int32_t e = order[p], f = order[q];
        if (other == worst || e == f || (e < 0 && f < 0) || (f >= 0 && holds(worst, f)) ||
            (e >= 0 && holds(other, e)))
          continue;
        double moved = unit(f) - unit(e);
        ranks[worst] += moved;
        ranks[other] -= moved;
        auto candidate = scoreOf(ranks, speeds);
        ranks[worst] -= moved;
        ranks[other] += moved;
        // Relative margins: sums of doubles must not cycle on rounding.
        if (candidate.first < best.first * (1 - 1e-12) ||
            (candidate.first <= best.first && candidate.second < best.second * (1 - 1e-12))) {
          best = candidate;
          bestP = p;
          bestQ = q;
        }
      }
    if (bestP == positions)
      break;
    double moved = unit(order[bestQ]) - unit(order[bestP]);
    ranks[worst] += moved;
    ranks[bestQ / local] -= moved;
    std::swap(order[bestP], order[bestQ]);
  }
  return order;
}

/// Expert copies of `next` that their rank did not hold under `order`.
int changingRank(const std::vector<int32_t> &order, const std::vector<int32_t> &next, int ep) {
  size_t local = order.size() / ep;
  std::vector<std::vector<int32_t>> had(ep);
  for (size_t p = 0; p < order.size(); ++p)
    had[p / local].push_back(order[p]);
  int changing = 0;
  for (size_t p = 0; p < next.size(); ++p)
    changing += next[p] >= 0 && std::find(had[p / local].begin(), had[p / local].end(), next[p]) ==
                                    had[p / local].end();
  return changing;
}

} // namespace

void Rebalancer::configure() {
  if (r.o.rebalanceEvery <= 0)
    return;
  bool zero = false;
  for (int i = 0; i < r.prog.num_params; ++i)
    zero = zero || r.prog.params[i].zero_parts > 1;
  if (r.tp > 1)
    die("--rebalance-every with tensor parallelism (moec --tp) is not supported yet: the "
        "migration moves whole expert rows");
  if (zero)
    die("--rebalance-every with a ZeRO binary (moec --zero) is not supported: the AdamW "
        "moments are sharded over the data replicas and would not move with the experts");
}

void Rebalancer::onStart() {
  if (r.o.rebalanceEvery <= 0)
    return;
  if (r.ep < 2)
    die("--rebalance-every moves experts between expert-parallel ranks; this binary has ep = " +
        std::to_string(r.ep) + " (compile with moec --ranks N for ep > 1)");
  bool placed = false;
  for (int i = 0; i < r.prog.num_params; ++i)
    placed |= r.prog.params[i].shard_layer >= 0;
  if (!placed)
    die("--rebalance-every: this step program's expert placement is fixed (recompile it with "
        "this moec)");
  if (r.prog.step_codec_bytes > 0)
    die("--rebalance-every with compressed gradient all-reduces is not supported yet: their "
        "per-rank codec state would not move with the experts");
}

/// The share of a step's compute in the routed experts: per token, top-k
/// experts' FFN weights against every weight it multiplies (2 FLOPs per
/// weight each way, the same factor for all, so weights suffice).
double Rebalancer::expertShare(double topK) const {
  double expert = 0, other = 0;
  for (int i = 0; i < r.prog.num_params; ++i) {
    const moert_param_info &p = r.prog.params[i];
    double n = 1;
    for (int d = 0; d < p.rank; ++d)
      n *= static_cast<double>(p.shape[d]);
    if (p.rank < 2)
      continue; // gains and biases: no matrix products
    if (p.shard_layer >= 0)
      expert += n / static_cast<double>(p.shape[0]) * topK; // one expert's weights
    else if (std::string(p.name) != "tok_emb")
      other += n; // the embedding is a lookup
  }
  return expert + other > 0 ? expert / (expert + other) : 0;
}

void Rebalancer::report(const StepState &, nlohmann::json *line) {
  if (line)
    (*line)["balancedness"] = balancedness();
}

void Rebalancer::endOfStep(const StepState &st) { rebalance(st.step, st.seconds); }

/// Adds a step's kept token-slots to the load monitor: an exponential
/// moving average of each expert's (the rows it computes: a hot expert past
/// its capacity computes the capacity, wherever it sits) spanning about one
/// window (weight 2 / (N + 1) on the newest step), since routing drifts
/// while training and recent steps predict the next ones best; and the last
/// N steps' counts one by one.
void Rebalancer::watch(double stepSeconds) {
  recentLoads.emplace_back(r.keptCounts.begin(), r.keptCounts.end());
  if (static_cast<long long>(recentLoads.size()) > r.o.rebalanceEvery)
    recentLoads.pop_front();
  double alpha = 2.0 / (r.o.rebalanceEvery + 1.0);
  if (loadWindow.empty())
    loadWindow.assign(r.keptCounts.begin(), r.keptCounts.end());
  for (size_t e = 0; e < r.keptCounts.size(); ++e)
    loadWindow[e] += alpha * (r.keptCounts[e] - loadWindow[e]);
  windowSeconds += stepSeconds;
  ++windowSteps;
}

/// MoE layer `l`'s proposal (its experts' loads at `offset` of the
/// window), judged by the rule: `meanStep` the ranks' mean step seconds,
/// `share` the experts' share of a step.
Rebalancer::Proposal Rebalancer::propose(int l, size_t offset, double meanStep,
                                         double share) const {
  const std::vector<double> &speeds = r.epSpeedTable;
  const std::vector<int32_t> &order = r.expertOrder[l];
  size_t experts = r.prog.layer_experts[l];
  std::vector<double> load(loadWindow.begin() + offset, loadWindow.begin() + offset + experts);
  Proposal out;
  // The greedy placement improved by swaps, or the one in force improved
  // by swaps (fewer moves) when it predicts as well.
  out.order =
      improveBySwaps(load, proposeOrder(load, order, r.ep, r.replicaRoom[l], speeds), r.ep, speeds);
  std::vector<int32_t> kept = improveBySwaps(load, order, r.ep, speeds);
  if (scoreOf(rankLoads(load, kept, r.ep, speeds), speeds) <=
      scoreOf(rankLoads(load, out.order, r.ep, speeds), speeds))
    out.order = std::move(kept);
  // Judged on the window's steps one by one: the step waits for its most
  // loaded rank, and a proposal fitted to the average may not hold step
  // by step (routing noise and drift).
  double oldMax = 0, newMax = 0;
  for (const std::vector<int32_t> &counts : recentLoads) {
    std::vector<double> stepLoad(counts.begin() + offset, counts.begin() + offset + experts);
    std::vector<double> oldRanks = rankLoads(stepLoad, order, r.ep, speeds);
    std::vector<double> newRanks = rankLoads(stepLoad, out.order, r.ep, speeds);
    oldMax += maxTime(oldRanks, speeds);
    newMax += maxTime(newRanks, speeds);
    out.oldBalance += balancednessOf(oldRanks, speeds) / recentLoads.size();
    out.newBalance += balancednessOf(newRanks, speeds) / recentLoads.size();
  }
  // Rows that change rank, times parameter and moments.
  out.changing = changingRank(order, out.order, r.ep);
  double bytes = 0;
  for (int i = 0; i < r.prog.num_params; ++i)
    if (r.prog.params[i].shard_layer == l)
      bytes += 3.0 * 4.0 * numel(r.prog.params[i]) /
               static_cast<double>(r.prog.params[i].shape[0]) * out.changing;
  // Replicas add their gradient sums to every step until the next
  // rebalancing.
  double replicaBytes = 0;
  for (int i = 0; i < r.prog.num_params; ++i)
    if (const moert_param_info &p = r.prog.params[i]; p.shard_layer == l && p.adamw) {
      int64_t rowSize = numel(p) / p.shape[0];
      replicaBytes += static_cast<double>(
          moert_replica_sum_bytes(out.order.data(), r.positionsOf(l), rowSize, r.ep) -
          moert_replica_sum_bytes(order.data(), r.positionsOf(l), rowSize, r.ep));
    }
  bytes += std::max(0.0, replicaBytes) * r.o.rebalanceEvery;
  double gain = r.o.rebalanceEvery * meanStep * share * (oldMax > 0 ? 1 - newMax / oldMax : 0);
  double cost = bytes * (secondsPerByte >= 0 ? secondsPerByte : meanStep / std::max(bytes, 1.0));
  out.pays = out.changing > 0 && gain > cost;
  return out;
}

void Rebalancer::rebalance(long long s, double stepSeconds) {
  if (r.o.rebalanceEvery <= 0)
    return;
  watch(stepSeconds);
  if ((s + 1) % r.o.rebalanceEvery != 0 || s + 1 == r.o.steps)
    return;
  // Every rank decides from the same numbers: the ranks' mean step time.
  float seconds = static_cast<float>(windowSeconds / windowSteps);
  if (moert_step_all_reduce(&r.ctx, &seconds, &seconds, 1,
                            MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, 1, 1.0) != 0)
    r.commError("step " + std::to_string(s) + ": rebalancing");
  // Routed token-slots per token: top-k.
  double slots = std::accumulate(r.expertCounts.begin(), r.expertCounts.end(), 0.0);
  double topK = slots / static_cast<double>(r.globalBatch * r.prog.seq_len *
                                            std::max(r.prog.num_moe_layers, 1));
  double share = expertShare(topK), meanStep = seconds;
  auto start = std::chrono::steady_clock::now();
  int64_t sentBefore = r.comm ? moert_comm_bytes(r.comm, MOERT_ALL_GATHER) : 0;
  Migration done;
  size_t offset = 0;
  for (int l = 0; l < r.prog.num_moe_layers; ++l) {
    Proposal proposal = propose(l, offset, meanStep, share);
    offset += r.prog.layer_experts[l];
    if (!proposal.pays)
      continue;
    done.before.push_back(proposal.oldBalance);
    done.after.push_back(proposal.newBalance);
    done.layers.push_back(l);
    done.experts += proposal.changing;
    migrate(l, std::move(proposal.order));
  }
  windowSeconds = 0;
  windowSteps = 0;
  if (done.layers.empty())
    return;
  done.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done.bytes = (r.comm ? moert_comm_bytes(r.comm, MOERT_ALL_GATHER) : 0) - sentBefore;
  float perByte[2] = {static_cast<float>(done.seconds), static_cast<float>(done.bytes)};
  if (moert_step_all_reduce(&r.ctx, perByte, perByte, 2,
                            MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, 1, 1.0) != 0)
    r.commError("step " + std::to_string(s) + ": rebalancing");
  if (perByte[1] > 0)
    secondsPerByte = perByte[0] / perByte[1];
  reportMigration(s, done);
}

/// The lead rank's line and the metrics' "migration".
void Rebalancer::reportMigration(long long s, const Migration &done) {
  if (r.lead) {
    std::printf("step %lld: moved %d experts between ranks (layers", s + 1, done.experts);
    for (int l : done.layers)
      std::printf(" %d", l);
    std::printf("), balancedness");
    for (size_t i = 0; i < done.layers.size(); ++i)
      std::printf(" %.2f -> %.2f", done.before[i], done.after[i]);
    std::printf(", %.1f MB in %.3f s\n", done.bytes / 1e6, done.seconds);
  }
  if (r.metrics)
    r.writeMetrics({{"step", s + 1},
                    {"migration",
                     {{"layers", done.layers},
                      {"experts_moved", done.experts},
                      {"bytes", done.bytes},
                      {"seconds", done.seconds},
                      {"balancedness_before", done.before},
                      {"balancedness_predicted", done.after}}}});
}

/// Moves layer `l` to `order`: each rank receives the rows (weights,
/// moments) of the experts it gains and keeps the others, in place (the
/// step program reads the tensors through fixed pointers).
void Rebalancer::migrate(int l, std::vector<int32_t> order) {
  // Only the rows of the experts a rank gains travel (weights and AdamW
  // moments), each from the first rank that held it; the rest stay.
  r.deviceSync();
  const std::vector<int32_t> &old = r.expertOrder[l];
  size_t local = old.size() / static_cast<size_t>(r.ep);
  int32_t experts = r.prog.layer_experts[l];
  auto slot = [&](const std::vector<int32_t> &in, int rk, int32_t e) -> int64_t {
    for (size_t j = 0; j < local; ++j)
      if (in[rk * local + j] == e)
        return static_cast<int64_t>(j);
    return -1;
  };
  std::vector<int> source(experts, -1);
  for (size_t p = 0; p < old.size(); ++p)
    if (old[p] >= 0 && source[old[p]] < 0)
      source[old[p]] = static_cast<int>(p / local);
  // Each moving expert's index in its source's list, and the longest list.
  std::vector<int64_t> indexAtSource(experts, -1);
  std::vector<int64_t> sent(r.ep, 0);
  std::vector<int32_t> sending; // the experts this rank sends, in order
  for (int32_t e = 0; e < experts; ++e) {
    bool gained = false;
    for (int k = 0; k < r.ep && !gained; ++k)
      gained = slot(order, k, e) >= 0 && slot(old, k, e) < 0;
    if (!gained)
      continue;
    indexAtSource[e] = sent[source[e]]++;
    if (source[e] == r.epIndex)
      sending.push_back(e);
  }
  int64_t most = *std::max_element(sent.begin(), sent.end());
  std::vector<int32_t> epGroup(r.ep);
  int epSize = moert_grid_group(&r.ctx, MOERT_AXIS_EP, epGroup.data());
  // Each new slot's old slot on this rank, where it keeps an expert that
  // changes slot (-1: unchanged, empty or received).
  std::vector<int64_t> keptFrom(local, -1);
  for (size_t j = 0; j < local; ++j)
    if (int32_t e = order[r.epIndex * local + j]; e >= 0 && e != old[r.epIndex * local + j])
      keptFrom[j] = slot(old, r.epIndex, e);
  auto move = [&](moert::AlignedFloats &t) {
    size_t rowSize = t.size() / local;
    std::vector<float> send(static_cast<size_t>(most) * rowSize), recv(send.size() * r.ep);
    for (size_t k = 0; k < sending.size(); ++k)
      std::copy_n(t.begin() + slot(old, r.epIndex, sending[k]) * rowSize, rowSize,
                  send.begin() + k * rowSize);
    if (most > 0 &&
        moert_all_gather(r.comm, send.data(), static_cast<int64_t>(send.size() * sizeof(float)),
                         recv.data(), epGroup.data(), epSize) != 0)
      r.commError("moving experts");
    // In place, only the rows whose expert changes: kept experts that
    // change slot are set aside first (their old rows may be overwritten).
    std::vector<float> stash;
    std::vector<int64_t> stashed(local, -1);
    for (size_t j = 0; j < local; ++j)
      if (int64_t kept = keptFrom[j]; kept >= 0) {
        stashed[j] = static_cast<int64_t>(stash.size());
        stash.insert(stash.end(), t.begin() + kept * rowSize, t.begin() + (kept + 1) * rowSize);
      }
    for (size_t j = 0; j < local; ++j) {
      int32_t e = order[r.epIndex * local + j];
      float *to = t.data() + j * rowSize;
      if (e == old[r.epIndex * local + j])
        continue;
      if (e < 0)
        std::fill_n(to, rowSize, 0.0f);
      else if (stashed[j] >= 0)
        std::copy_n(stash.begin() + stashed[j], rowSize, to);
      else
        std::copy_n(recv.begin() + (source[e] * most + indexAtSource[e]) * rowSize, rowSize, to);
    }
  };
  for (int i = 0; i < r.prog.num_params; ++i)
    if (r.prog.params[i].shard_layer == l) {
      move(r.params[i]);
      if (!r.moments[2 * i].empty()) {
        move(r.moments[2 * i]);
        move(r.moments[2 * i + 1]);
      }
    }
  r.expertOrder[l] = std::move(order);
  r.orderPtrs[l] = r.expertOrder[l].data();
  r.deviceWrote();
}

/// Each MoE layer's balancedness in the last step under the placement in
/// force: the time with its kept token-slots (the rows computed) shared in
/// proportion to the ep ranks' speeds over the slowest rank's time (1:
/// even; at equal speeds the mean over the max of the ranks' kept
/// token-slots).
nlohmann::json Rebalancer::balancedness() const {
  nlohmann::json layers = nlohmann::json::array();
  const std::vector<double> &speeds = r.epSpeedTable;
  size_t offset = 0;
  for (int l = 0; l < r.prog.num_moe_layers; ++l) {
    size_t experts = r.prog.layer_experts[l];
    std::vector<double> load(r.keptCounts.begin() + offset,
                             r.keptCounts.begin() + offset + experts);
    offset += experts;
    layers.push_back(balancednessOf(rankLoads(load, r.expertOrder[l], r.ep, speeds), speeds));
  }
  return layers;
}
