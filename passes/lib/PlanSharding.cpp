//===- PlanSharding.cpp - the moe-plan-sharding pass -----------------------===//
//
// Chooses the data-parallel and expert-parallel degrees of the training step
// on the module's cluster with the cost model (CostModel.h), places experts
// (faster devices hold more), writes `moe.grid`, per-op `placement` and
// `moe.plan`, and explains the choice in a report (JSON and a table).
//
//===----------------------------------------------------------------------===//

#include "BufferPlan.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/CostModel.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

namespace mlir::moe {
#define GEN_PASS_DEF_PLANSHARDINGPASS
#include "moe/Transforms/Passes.h.inc"
} // namespace mlir::moe

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::cost;

namespace {

/// What the plan needs to know about the step.
struct StepSummary {
  double flops = 0;
  std::vector<double> denseTime, expertTime; ///< per device kind, whole step
  double denseParamBytes = 0, expertParamBytes = 0, activationBytes = 0;
  std::vector<double> layerDispatchBytes; ///< per MoE layer: E x C x D buffer
  std::vector<int64_t> layerExperts;
  int64_t tokens = 0, layers = 0, width = 0, heads = 0, kvHeads = 0;
  int64_t sequences = 1;   ///< of the batch (micro-batches split them)
  double elementBytes = 4; ///< of an activation (2 in bf16/f16)
  bool forwardOnly = true;
  /// A q/k norm over a whole projection (OLMoE's): tp cannot split its heads.
  bool crossHeadNorm = false;
};

/// One candidate plan and its predicted costs.
struct Candidate {
  int64_t dp = 1, ep = 1, tp = 1;
  bool zero = false; ///< optimiser state sharded over the replicas (ZeRO-1)
  /// Micro-batches per step (gradient accumulation): activations of one
  /// micro-batch at a time, the all-to-alls' latencies m times.
  int64_t micro = 1;
  /// Activation recompute: each layer's input kept, the rest recomputed in
  /// the backward (one more forward: a third more compute).
  bool recompute = false;
  double compute = 0, allToAll = 0, allReduce = 0, tensorParallel = 0, memory = 0;
  /// The fullest rank's memory by kind: f32 weights, gradients, AdamW
  /// moments (after ZeRO-1), activations (one micro-batch's, recomputed).
  double weightBytes = 0, gradientBytes = 0, optimizerBytes = 0, activationBytes = 0;
  /// Bytes the busiest rank sends per step: dispatch and combine, gradient
  /// all-reduces (their payload), tensor-parallel all-reduces.
  double allToAllBytes = 0, allReduceBytes = 0, tensorParallelBytes = 0;
  std::string memoryKind;
  double capacity = 0; ///< the memory of a memoryKind device (shared by its ranks)
  bool fits = true;
  /// Gradient all-reduces overlap the rest of the backward (moe-schedule):
  /// what the backward (2/3 of the compute) cannot hide, and at least the
  /// last layer's share (1 / layers), whose gradients come last.
  /// The replicas' gradient sums (part of allReduce) run blocking, after
  /// the waits.
  bool overlap = false;
  int64_t layers = 1;
  double replicaSum = 0;
  double exposedAllReduce() const {
    if (!overlap)
      return allReduce;
    double hidden = allReduce - replicaSum;
    return replicaSum + std::max(hidden - compute * 2.0 / 3.0,
                                 hidden / static_cast<double>(std::max<int64_t>(layers, 1)));
  }
  double step() const { return compute + allToAll + exposedAllReduce() + tensorParallel; }
  /// Whether it fits only with micro-batches or recompute.
  bool needsMore() const { return micro > 1 || recompute; }
};

/// Ranks of the grid: r = (d * ep + e) * tp + t (GridAttr's order).
struct Grid {
  int64_t dp, ep, tp;
  int64_t rank(int64_t d, int64_t e, int64_t t) const { return (d * ep + e) * tp + t; }
  /// The ep ranks of data replica d's tensor-parallel slice t.
  Group epGroup(int64_t d, int64_t t) const {
    Group group;
    for (int64_t e = 0; e < ep; ++e)
      group.push_back(rank(d, e, t));
    return group;
  }
};

/// `shares` (fractions) as whole sequences of `batch`, at least one each
/// (largest remainder); empty when the batch has fewer sequences than
/// shares.
SmallVector<int64_t> wholeShares(const std::vector<double> &shares, int64_t batch) {
  int64_t n = static_cast<int64_t>(shares.size());
  if (batch < n || n == 0)
    return {};
  SmallVector<int64_t> whole(n, 1);
  int64_t left = batch - n;
  std::vector<std::pair<double, int64_t>> remainders;
  for (int64_t i = 0; i < n; ++i) {
    double want = std::max(0.0, shares[i] * static_cast<double>(batch) - 1);
    int64_t take = std::min(left, static_cast<int64_t>(want));
    whole[i] += take;
    left -= take;
    remainders.push_back({want - static_cast<double>(take), i});
  }
  llvm::stable_sort(remainders, [](auto &x, auto &y) { return x.first > y.first; });
  for (int64_t i = 0; left > 0; i = (i + 1) % n, --left)
    ++whole[remainders[i].second];
  return whole;
}

class Planner {
public:
  Planner(const Cluster &cluster, const StepSummary &step, bool equalShares, int64_t redundant,
          bool overlap)
      : cluster(cluster), step(step), equalShares(equalShares), redundant(redundant),
        overlap(overlap) {
    for (int64_t r = 0; r < cluster.numRanks(); ++r) {
      denseSpeed.push_back(1.0 / step.denseTime[cluster.rankKind[r]]);
      expertSpeed.push_back(1.0 / step.expertTime[cluster.rankKind[r]]);
    }
  }

  /// Token share of every data-parallel coordinate (d, e): proportional to
  /// the dense speed of its slowest tensor-parallel rank.
  std::vector<double> coordinateShares(const Grid &g) const {
    if (equalShares)
      return std::vector<double>(g.dp * g.ep, 1.0 / static_cast<double>(g.dp * g.ep));
    std::vector<double> share(g.dp * g.ep, 0.0);
    double total = 0;
    for (int64_t d = 0; d < g.dp; ++d)
      for (int64_t e = 0; e < g.ep; ++e) {
        double slowest = 1e300;
        for (int64_t t = 0; t < g.tp; ++t)
          slowest = std::min(slowest, denseSpeed[g.rank(d, e, t)]);
        share[d * g.ep + e] = slowest;
        total += slowest;
      }
    for (double &v : share)
      v /= total;
    return share;
  }

  /// Experts per rank of one expert-parallel group, proportional to speed
  /// (largest remainder, at least one each).
  std::vector<int64_t> expertCounts(const std::vector<double> &speed, int64_t experts) const {
    double total = std::accumulate(speed.begin(), speed.end(), 0.0);
    size_t n = speed.size();
    std::vector<int64_t> counts(n, 1);
    int64_t left = experts - static_cast<int64_t>(n);
    std::vector<std::pair<double, size_t>> remainders;
    for (size_t i = 0; i < n; ++i) {
      double want = speed[i] / total * static_cast<double>(experts) - 1;
      int64_t whole = std::min(left, std::max<int64_t>(0, static_cast<int64_t>(want)));
      counts[i] += whole;
      left -= whole;
      remainders.push_back({want - std::floor(want), i});
    }
    llvm::stable_sort(remainders, [](auto &x, auto &y) { return x.first > y.first; });
    for (size_t i = 0; left > 0; i = (i + 1) % n, --left)
      ++counts[remainders[i].second];
    return counts;
  }

  /// Expert speed of ep coordinate e in dp group d (its slowest tp rank).
  std::vector<double> groupSpeeds(const Grid &g, int64_t d) const {
    std::vector<double> speed;
    for (int64_t e = 0; e < g.ep; ++e) {
      double slowest = 1e300;
      for (int64_t t = 0; t < g.tp; ++t)
        slowest = std::min(slowest, expertSpeed[g.rank(d, e, t)]);
      speed.push_back(slowest);
    }
    return speed;
  }

  Candidate evaluate(int64_t dp, int64_t ep, int64_t tp, bool zero, int64_t micro = 1,
                     bool recompute = false) const {
    Candidate c;
    c.dp = dp, c.ep = ep, c.tp = tp, c.zero = zero, c.micro = micro, c.recompute = recompute;
    double m = static_cast<double>(micro);
    c.overlap = overlap && !step.forwardOnly;
    c.layers = step.layers;
    Grid g{dp, ep, tp};
    std::vector<double> share = coordinateShares(g);
    // Fraction of every MoE layer's experts each (d, e) coordinate holds,
    // averaged over layers; expert tensor parallelism splits them over tp.
    std::vector<double> expertFraction(dp * ep, 0.0);
    double layers = std::max<double>(1, static_cast<double>(step.layerExperts.size()));
    for (int64_t d = 0; d < dp; ++d) {
      std::vector<double> speed = groupSpeeds(g, d);
      std::map<int64_t, std::vector<int64_t>> byExperts; // layers share counts
      for (int64_t experts : step.layerExperts) {
        auto it = byExperts.find(experts);
        if (it == byExperts.end())
          it = byExperts.emplace(experts, expertCounts(speed, experts)).first;
        for (int64_t e = 0; e < ep; ++e)
          expertFraction[d * ep + e] += static_cast<double>(it->second[e]) / experts / layers;
      }
    }
    double tdp = static_cast<double>(tp);
    for (int64_t d = 0; d < dp; ++d) {
      double groupShare = 0;
      for (int64_t e = 0; e < ep; ++e)
        groupShare += share[d * ep + e];
      for (int64_t e = 0; e < ep; ++e)
        for (int64_t t = 0; t < tp; ++t) {
          int64_t r = g.rank(d, e, t);
          unsigned k = cluster.rankKind[r];
          double time = (share[d * ep + e] * step.denseTime[k] +
                         groupShare * expertFraction[d * ep + e] * step.expertTime[k]) /
                        tdp * (recompute ? 4.0 / 3.0 : 1.0);
          // AdamW on every element the rank updates: read w, m, v, g and
          // write w, m, v (28 bytes per f32 element, 7x the parameter
          // bytes); replicated parameters are updated on every replica.
          double updated =
              (zero ? step.denseParamBytes / static_cast<double>(dp * ep) +
                          step.expertParamBytes * expertFraction[d * ep + e] /
                              static_cast<double>(dp)
                    : step.denseParamBytes + step.expertParamBytes * expertFraction[d * ep + e]) /
              tdp;
          time += 7 * updated / cluster.kinds[k].memoryBandwidth;
          // Ranks sharing a host share its compute and memory.
          c.compute = std::max(c.compute, time * static_cast<double>(cluster.sharing(r)));
        }
      // Dispatch and combine, forward and backward: 4 all-to-alls per MoE
      // layer among the ep ranks of one tp slice; each sends its tokens'
      // slots (split over tp).
      double maxShare = 0;
      for (int64_t e = 0; e < ep; ++e)
        maxShare = std::max(maxShare, share[d * ep + e]);
      for (int64_t t = 0; t < tp; ++t) {
        Group group = g.epGroup(d, t);
        // Linear in the bytes: one evaluation for all layers plus the
        // other layers' latencies.
        double bytes =
            std::accumulate(step.layerDispatchBytes.begin(), step.layerDispatchBytes.end(), 0.0);
        double layersA2A = static_cast<double>(step.layerDispatchBytes.size());
        double a2a = 0;
        if (layersA2A > 0)
          a2a = 4 * m *
                (allToAllTime(cluster, group, bytes * maxShare / tdp / m) +
                 (layersA2A - 1) * allToAllTime(cluster, group, 1e-30));
        c.allToAll = std::max(c.allToAll, a2a);
        c.allToAllBytes = std::max(c.allToAllBytes, 4 * bytes * maxShare / tdp);
      }
    }
    // Tensor parallelism: per layer, two all-reduces of the activations
    // forward and two backward (Megatron), within each tp group.
    if (tp > 1) {
      for (int64_t d = 0; d < dp; ++d)
        for (int64_t e = 0; e < ep; ++e) {
          Group group;
          for (int64_t t = 0; t < tp; ++t)
            group.push_back(g.rank(d, e, t));
          double bytes = static_cast<double>(step.tokens) * share[d * ep + e] *
                         static_cast<double>(step.width) * 4;
          c.tensorParallel =
              std::max(c.tensorParallel, 4 * static_cast<double>(step.layers) * m *
                                             allReduceTime(cluster, group, bytes / m));
          c.tensorParallelBytes =
              std::max(c.tensorParallelBytes, 4 * static_cast<double>(step.layers) * bytes);
        }
    }
    // Gradients: each tp shard of the replicated parameters over its
    // dp x ep replicas; each expert shard over its dp replicas.
    double denseAR = 0, expertAR = 0;
    for (int64_t t = 0; t < tp; ++t) {
      Group replicas;
      for (int64_t d = 0; d < dp; ++d)
        for (int64_t e = 0; e < ep; ++e)
          replicas.push_back(g.rank(d, e, t));
      // One bucketed all-reduce per kind (the step program sends each run
      // of equal reductions as one collective).
      denseAR = std::max(denseAR, allReduceTime(cluster, replicas, step.denseParamBytes / tdp));
      for (int64_t e = 0; e < ep; ++e) {
        Group experts;
        for (int64_t d = 0; d < dp; ++d)
          experts.push_back(g.rank(d, e, t));
        expertAR =
            std::max(expertAR, allReduceTime(cluster, experts,
                                             step.expertParamBytes * expertFraction[e] / tdp));
        c.allReduceBytes = std::max(c.allReduceBytes, (step.denseParamBytes +
                                                       step.expertParamBytes * expertFraction[e]) /
                                                          tdp);
      }
    }
    c.allReduce = denseAR + expertAR;
    // Spare positions (online rebalancing's replicas): ceil(R / ep) more
    // expert rows per rank, and the replicas' gradient sums over each ep
    // group every step (every spare position holding a replica).
    double spareRows = 0, rowBytes = 0;
    if (redundant > 0 && ep > 1 && !step.layerExperts.empty()) {
      double experts = std::accumulate(step.layerExperts.begin(), step.layerExperts.end(), 0.0);
      rowBytes = step.expertParamBytes / experts; // one expert of one layer
      spareRows = static_cast<double>((redundant + ep - 1) / ep) *
                  static_cast<double>(step.layerExperts.size());
      double replicaSum = 0;
      double bytes = static_cast<double>(redundant) *
                     static_cast<double>(step.layerExperts.size()) * rowBytes / tdp;
      for (int64_t d = 0; d < dp; ++d)
        for (int64_t t = 0; t < tp; ++t)
          replicaSum = std::max(replicaSum, allReduceTime(cluster, g.epGroup(d, t), bytes));
      c.allReduce += replicaSum;
      c.replicaSum = replicaSum;
    }
    // Memory: f32 parameter and gradient (8 bytes per element) and two
    // AdamW moments (8 more; with ZeRO-1 sharded over the replicas), plus
    // the rank's share of activations.
    for (int64_t d = 0; d < dp; ++d)
      for (int64_t e = 0; e < ep; ++e)
        for (int64_t t = 0; t < tp; ++t) {
          int64_t r = g.rank(d, e, t);
          double dense = step.denseParamBytes / tdp;
          double expert =
              (step.expertParamBytes * expertFraction[d * ep + e] + spareRows * rowBytes) / tdp;
          double moments =
              2 * (zero ? dense / static_cast<double>(dp * ep) + expert / static_cast<double>(dp)
                        : dense + expert);
          double activations = activationBytes(share[d * ep + e], tdp, m, recompute);
          double bytes = 2 * (dense + expert) + moments + activations;
          if (bytes > c.memory) {
            c.memory = bytes;
            c.weightBytes = c.gradientBytes = dense + expert;
            c.optimizerBytes = moments, c.activationBytes = activations;
            c.memoryKind = cluster.kindOf(r).name;
            c.capacity = cluster.kindOf(r).memoryBytes / static_cast<double>(cluster.sharing(r));
          }
          // Ranks sharing a host share its memory.
          if (bytes * static_cast<double>(cluster.sharing(r)) > cluster.kindOf(r).memoryBytes)
            c.fits = false;
        }
    return c;
  }

  /// The grid's plan as it runs (one micro-batch, activations kept) if it
  /// fits; else the fastest that fits of more micro-batches (powers of two,
  /// each replica keeping at least one sequence per micro-batch), with or
  /// without recompute; else as it runs.
  Candidate fitting(int64_t dp, int64_t ep, int64_t tp, bool zero) const {
    Candidate plain = evaluate(dp, ep, tp, zero);
    if (plain.fits)
      return plain;
    std::optional<Candidate> best;
    int64_t perReplica = std::max<int64_t>(1, step.sequences / (dp * ep));
    for (bool recompute : {false, true})
      for (int64_t m = recompute ? 1 : 2; m <= perReplica; m *= 2)
        if (Candidate c = evaluate(dp, ep, tp, zero, m, recompute);
            c.fits && (!best || c.step() < best->step()))
          best = c;
    return best ? *best : plain;
  }

  /// Activation bytes of a rank with token share `share` of the step, its
  /// layers split over `tp`, in `micro` micro-batches; recomputed, each
  /// layer's input stays (on every tp rank) and one layer's activations
  /// live at a time.
  double activationBytes(double share, double tp, double micro, bool recompute) const {
    double whole = step.activationBytes * share / tp;
    if (recompute) {
      double layers = static_cast<double>(std::max<int64_t>(step.layers, 1));
      double inputs = static_cast<double>(step.tokens) * share * static_cast<double>(step.width) *
                      step.elementBytes * layers;
      whole = std::min(whole, inputs + whole / layers);
    }
    return whole / micro;
  }

  /// Placement of a layer's experts over the ep ranks (dp group 0; every
  /// dp group holds the same placement): pinned experts (expert -> ep
  /// ranks; several ranks make replicas) where pinned, then the others in
  /// order, each rank filled to its speed-proportional count; experts left
  /// when pins took more than a rank's share go to the ranks with the
  /// fewest experts for their count (uneven counts). Fails (empty) when a
  /// pin names a rank past ep.
  std::vector<std::vector<int64_t>>
  placement(const Grid &g, int64_t experts,
            const std::multimap<int64_t, int64_t> &pins = {}) const {
    std::vector<int64_t> counts = expertCounts(groupSpeeds(g, 0), experts);
    std::vector<std::vector<int64_t>> lists(counts.size());
    std::vector<bool> placed(experts, false);
    for (auto [expert, rank] : pins) {
      if (expert >= experts)
        continue;
      if (rank >= static_cast<int64_t>(lists.size()))
        return {};
      lists[rank].push_back(expert);
      placed[expert] = true;
    }
    int64_t next = 0;
    auto nextFree = [&]() {
      while (next < experts && placed[next])
        ++next;
      return next < experts;
    };
    for (size_t r = 0; r < counts.size(); ++r)
      while (static_cast<int64_t>(lists[r].size()) < counts[r] && nextFree()) {
        lists[r].push_back(next);
        placed[next] = true;
      }
    while (nextFree()) {
      size_t best = 0;
      for (size_t r = 1; r < counts.size(); ++r)
        if (lists[r].size() * std::max<int64_t>(counts[best], 1) <
            lists[best].size() * std::max<int64_t>(counts[r], 1))
          best = r;
      lists[best].push_back(next);
      placed[next] = true;
    }
    for (auto &list : lists)
      llvm::sort(list);
    return lists;
  }

private:
  const Cluster &cluster;
  const StepSummary &step;
  bool equalShares;  ///< the runtime's constraint: every coordinate the same tokens
  int64_t redundant; ///< spare positions per MoE layer (replicas)
  bool overlap;      ///< gradient all-reduces overlap the backward
  std::vector<double> denseSpeed, expertSpeed;
};

/// "8 micro-batches (gradient accumulation) and activation recompute".
std::string needsText(const Candidate &c) {
  std::string text;
  if (c.micro > 1)
    text = std::to_string(c.micro) + " micro-batches (gradient accumulation)";
  if (c.recompute)
    text += (text.empty() ? "" : " and ") + std::string("activation recompute");
  return text;
}

/// The table's column for them: "1", "8", "8 rc".
std::string microText(const Candidate &c) {
  return std::to_string(c.micro) + (c.recompute ? " rc" : "");
}

std::string seconds(double s) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (s >= 1)
    os << llvm::format("%.3f s", s);
  else if (s >= 1e-3)
    os << llvm::format("%.3f ms", s * 1e3);
  else
    os << llvm::format("%.3f us", s * 1e6);
  return out;
}

/// `b` bytes in GB, or, below 0.01 GB (where "0.000 GB" says nothing), in
/// MB or bytes.
std::string gigabytes(double b) {
  std::string out;
  llvm::raw_string_ostream os(out);
  if (b >= 1e7)
    os << llvm::format("%.3f GB", b / 1e9);
  else if (b >= 1e4)
    os << llvm::format("%.3f MB", b / 1e6);
  else
    os << llvm::format("%.0f bytes", b);
  return out;
}

/// Writes `text` to `path` ("-": stdout).
/// The chosen plan as the JSON report gives it: its grid, what it needs,
/// the fullest device's memory by kind, the bytes a rank sends per step by
/// collective, the predicted throughput and MFU, and whether it executes.
llvm::json::Object chosenJson(const Candidate &best, const StepSummary &step, double peakFlops,
                              const std::string &notExecutable) {
  double stepSeconds = best.step();
  llvm::json::Object chosen{
      {"dp", best.dp},
      {"ep", best.ep},
      {"tp", best.tp},
      {"zero_stage", best.zero ? 1 : 0},
      {"micro_batches", best.micro},
      {"recompute", best.recompute},
      {"step_s", stepSeconds},
      {"tokens_per_s", static_cast<double>(step.tokens) / stepSeconds},
      {"peak_flops", peakFlops},
      {"mfu", step.flops / stepSeconds / peakFlops},
      {"memory_bytes", llvm::json::Object{{"weights", best.weightBytes},
                                          {"gradients", best.gradientBytes},
                                          {"optimizer_state", best.optimizerBytes},
                                          {"activations", best.activationBytes},
                                          {"total", best.memory},
                                          {"device", best.memoryKind},
                                          {"capacity", best.capacity}}},
      {"collective_bytes", llvm::json::Object{{"all_to_all", best.allToAllBytes},
                                              {"gradient_all_reduce", best.allReduceBytes},
                                              {"tensor_parallel", best.tensorParallelBytes}}},
      {"executable", notExecutable.empty()}};
  if (!notExecutable.empty())
    chosen["not_executable"] = notExecutable;
  return chosen;
}

LogicalResult writeTo(StringRef path, StringRef text, Operation *op) {
  if (path == "-") {
    llvm::outs() << text;
    return success();
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return op->emitError() << "moe-plan-sharding: cannot write '" << path << "': " << ec.message();
  os << text;
  return success();
}

struct PlanShardingPass : public moe::impl::PlanShardingPassBase<PlanShardingPass> {
  using PlanShardingPassBase::PlanShardingPassBase;

  void runOnOperation() override;
};

void PlanShardingPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto clusterAttr = module->getAttrOfType<DictionaryAttr>("moe.cluster");
  if (!clusterAttr) {
    module.emitError("moe-plan-sharding needs a cluster: a 'moe.cluster' "
                     "module attribute (moe-translate --cluster FILE)");
    return signalPassFailure();
  }
  FailureOr<Cluster> cluster = Cluster::fromAttr(
      clusterAttr, [&] { return mlir::emitError(module.getLoc()); }, cost::precisionOf(module));
  if (failed(cluster))
    return signalPassFailure();

  // The training step: the function that is not the evaluation clone.
  func::FuncOp fn;
  for (auto f : module.getOps<func::FuncOp>())
    if (!f.isExternal() && !f->hasAttr(MoEDialect::kNoGradAttrName) && !fn)
      fn = f;
  if (!fn) {
    module.emitError("moe-plan-sharding: no step function to plan");
    return signalPassFailure();
  }

  StepSummary step;
  step.denseTime.assign(cluster->kinds.size(), 0);
  step.expertTime.assign(cluster->kinds.size(), 0);
  llvm::DenseSet<StringRef> expertParams;
  SmallVector<ExpertFFNOp> expertOps;
  double forwardActivations = 0;
  fn.walk([&](Operation *op) {
    if (op->getName().getStringRef().ends_with("_grad"))
      step.forwardOnly = false;
    if (auto e = dyn_cast<ExpertFFNOp>(op)) {
      expertOps.push_back(e);
      auto x = cast<RankedTensorType>(e->getOperand(0).getType());
      step.layerExperts.push_back(x.getShape()[0]);
      step.layerDispatchBytes.push_back(static_cast<double>(tensorBytes(x)));
      for (Value w : e.getWeights()) {
        if (auto copy = w.getDefiningOp<CastOp>()) // a mixed-precision copy
          w = copy.getInput();
        if (auto get = w.getDefiningOp<GetParamOp>())
          expertParams.insert(get.getName());
      }
    }
    if (auto att = dyn_cast<AttentionOp>(op)) {
      ++step.layers;
      step.width = cast<RankedTensorType>(att->getOperand(0).getType()).getShape().back();
      step.heads = att.getNumHeads();
      step.kvHeads = att.getNumKvHeads();
      for (Value in : {att.getQ(), att.getK()}) {
        if (auto clip = in.getDefiningOp<ClampOp>())
          in = clip.getX();
        if (auto norm = in.getDefiningOp<RMSNormOp>())
          step.crossHeadNorm |=
              cast<RankedTensorType>(norm.getGamma().getType()).getShape()[0] > att.getHeadDim();
      }
    }
    if (op->getNumResults() && !isa<GetParamOp>(op) &&
        !op->getName().getStringRef().ends_with("_grad"))
      for (Value r : op->getResults())
        if (auto t = dyn_cast<RankedTensorType>(r.getType()))
          forwardActivations += static_cast<double>(t.getNumElements()) *
                                std::max<unsigned>(1, t.getElementTypeBitWidth() / 8);
    if (isa<AdamWUpdateOp>(op))
      return; // the optimiser is costed per rank from the parameters
    OpCost c = costOf(op);
    step.flops += c.flops;
    for (size_t k = 0; k < cluster->kinds.size(); ++k)
      (c.expert ? step.expertTime : step.denseTime)[k] += computeTime(c, cluster->kinds[k]);
  });
  for (BlockArgument arg : fn.getArguments())
    if (auto t = dyn_cast<RankedTensorType>(arg.getType()))
      if (auto kind = fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "moe.input");
          kind && kind.getValue() == "tokens")
        step.tokens = t.getNumElements(), step.sequences = t.getRank() ? t.getShape()[0] : 1;
  step.elementBytes = cluster->precision == "f32" ? 4 : 2;
  if (step.forwardOnly) {
    // A forward-only step: the backward costs about twice the forward.
    step.flops *= 3;
    for (auto *times : {&step.denseTime, &step.expertTime})
      for (double &t : *times)
        t *= 3;
  }
  for (ParamOp p : module.getOps<ParamOp>()) {
    double bytes = static_cast<double>(p.getTensorType().getNumElements()) * 4;
    (expertParams.contains(p.getSymName()) ? step.expertParamBytes : step.denseParamBytes) += bytes;
  }
  if (auto plan = module->getAttrOfType<BufferPlanAttr>(MoEDialect::kBufferPlanAttrName))
    step.activationBytes = static_cast<double>(plan.getActivationBytes());
  else
    step.activationBytes = forwardActivations;
  for (double &t : step.denseTime)
    t = std::max(t, 1e-12);
  for (double &t : step.expertTime)
    t = std::max(t, 1e-12);

  // Pins: "EXPERT@RANK,..." (the expert of every MoE layer that has it,
  // on that ep rank).
  std::multimap<int64_t, int64_t> pins; // an expert on several ranks: replicas
  for (StringRef item : llvm::split(StringRef(pinExperts), ',')) {
    item = item.trim();
    if (item.empty())
      continue;
    auto [expertText, rankText] = item.split('@');
    int64_t expert, rank;
    if (expertText.trim().getAsInteger(10, expert) || rankText.trim().getAsInteger(10, rank) ||
        expert < 0 || rank < 0) {
      mlir::emitError(module.getLoc())
          << "moe-plan-sharding: pin '" << item << "' is not EXPERT@RANK (whole numbers, e.g. 3@0)";
      return signalPassFailure();
    }
    auto [first, last] = pins.equal_range(expert);
    if (std::any_of(first, last, [&](auto &pin) { return pin.second == rank; })) {
      mlir::emitError(module.getLoc())
          << "moe-plan-sharding: expert " << expert << " is pinned to rank " << rank << " twice";
      return signalPassFailure();
    }
    pins.emplace(expert, rank);
  }

  int64_t maxPinnedRank = -1, maxExperts = 0;
  for (auto [expert, rank] : pins)
    maxPinnedRank = std::max(maxPinnedRank, rank);
  for (int64_t e : step.layerExperts)
    maxExperts = std::max(maxExperts, e);
  for (auto [expert, rank] : pins)
    if (expert >= maxExperts) {
      if (maxExperts == 0)
        mlir::emitError(module.getLoc())
            << "moe-plan-sharding: pin " << expert << "@" << rank << ": the model has no MoE layer";
      else
        mlir::emitError(module.getLoc())
            << "moe-plan-sharding: pin " << expert << "@" << rank
            << " names an expert no layer has (experts are numbered 0 to " << maxExperts - 1 << ")";
      return signalPassFailure();
    }

  int64_t n = cluster->numRanks();
  int64_t minExperts = step.layerExperts.empty() ? 1 : *llvm::min_element(step.layerExperts);
  if (step.tokens > 0 && n > step.tokens) {
    mlir::emitError(module.getLoc()) << "moe-plan-sharding: " << n << " devices but only "
                                     << step.tokens << " tokens per step; every rank needs tokens";
    return signalPassFailure();
  }
  // Candidates: tp dividing the smallest node (and the heads), ep dividing
  // the rest that the experts can fill, dp = n / (ep tp); optimiser state
  // replicated or sharded (ZeRO-1). Forced degrees narrow the set.
  int64_t smallestNode = n;
  {
    std::map<unsigned, int64_t> perNode;
    for (int64_t r = 0; r < n; ++r)
      ++perNode[cluster->rankNode[r]];
    for (auto &[node, count] : perNode)
      smallestNode = std::min(smallestNode, count);
  }
  Planner planner(*cluster, step, equalShares, redundantExperts, overlap);
  std::vector<Candidate> candidates;
  for (int64_t tp = 1; tp <= std::min<int64_t>(smallestNode, 8); tp *= 2) {
    if (smallestNode % tp || n % tp || (tpDegree > 0 && tp != tpDegree))
      continue;
    if (tp > 1 && (step.heads % tp || step.kvHeads % tp || step.width % tp || step.crossHeadNorm))
      continue;
    for (int64_t ep = 1; ep <= std::min(n / tp, minExperts); ++ep) {
      if ((n / tp) % ep != 0 || (epDegree > 0 && ep != epDegree) || ep <= maxPinnedRank)
        continue;
      int64_t dp = n / tp / ep;
      if (dpDegree > 0 && dp != dpDegree)
        continue;
      for (bool zero : {false, true})
        candidates.push_back(planner.fitting(dp, ep, tp, zero));
    }
  }
  if (candidates.empty()) {
    mlir::emitError(module.getLoc())
        << "moe-plan-sharding: no plan with "
        << (dpDegree > 0 ? "dp = " + std::to_string(dpDegree) + " " : "")
        << (epDegree > 0 ? "ep = " + std::to_string(epDegree) + " " : "")
        << (tpDegree > 0 ? "tp = " + std::to_string(tpDegree) + " " : "")
        << (maxPinnedRank >= 0
                ? "ep > " + std::to_string(maxPinnedRank) + " (a rank for every pin) "
                : "")
        << "on " << n << " devices: dp x ep x tp must equal the device "
        << "count, ep must be at most " << minExperts
        << " (the fewest experts of a layer), tp a power of two "
           "dividing the node size and the heads"
        << (step.crossHeadNorm ? " (tp = 1: a q/k norm spans the heads)" : "");
    return signalPassFailure();
  }
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), 0);
  // Plans that fit as the step program runs them come first; those that
  // need micro-batches or recompute (which it does not run yet) only when
  // no other fits.
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    const Candidate &x = candidates[a], &y = candidates[b];
    if (x.fits != y.fits)
      return x.fits;
    if (x.needsMore() != y.needsMore())
      return !x.needsMore();
    if (x.step() != y.step())
      return x.step() < y.step();
    return !x.zero && y.zero; // the same time: keep state replicated
  });
  // ZeRO-1 variants that neither fit where the replicated one does not nor
  // make the step faster (fewer micro-batches, no recompute) are noise in
  // the report: list a ZeRO-1 plan only when it is what makes its grid fit
  // or fit faster.
  {
    std::vector<size_t> kept;
    for (size_t i : order) {
      const Candidate &c = candidates[i];
      if (c.zero) {
        bool replicatedAsGood = llvm::any_of(candidates, [&](const Candidate &o) {
          return !o.zero && o.dp == c.dp && o.ep == c.ep && o.tp == c.tp && o.fits &&
                 o.micro <= c.micro && (!o.recompute || c.recompute);
        });
        if (replicatedAsGood)
          continue;
      }
      kept.push_back(i);
    }
    order = kept;
  }
  const Candidate &best = candidates[order.front()];
  if (!best.fits) {
    // Every candidate, smallest first: what each needs against what its
    // tightest device holds.
    std::vector<const Candidate *> bySize;
    for (const Candidate &c : candidates)
      if (!c.zero || c.dp * c.ep > 1) // ZeRO-1 over one replica changes nothing
        bySize.push_back(&c);
    llvm::stable_sort(bySize,
                      [](const Candidate *a, const Candidate *b) { return a->memory < b->memory; });
    const Candidate &smallest = *bySize.front();
    InFlightDiagnostic diag = mlir::emitError(module.getLoc())
                              << "moe-plan-sharding: no plan fits in device memory; the smallest ("
                              << "dp=" << smallest.dp << " x ep=" << smallest.ep
                              << " x tp=" << smallest.tp << (smallest.zero ? " with ZeRO-1" : "")
                              << ") needs " << gigabytes(smallest.memory) << " on a "
                              << smallest.memoryKind << " device, which holds "
                              << gigabytes(smallest.capacity) << "; give a larger cluster or a "
                              << "smaller model";
    constexpr size_t kShown = 6;
    for (size_t i = 0; i < std::min(kShown, bySize.size()); ++i) {
      const Candidate &c = *bySize[i];
      diag.attachNote() << "dp=" << c.dp << " x ep=" << c.ep << " x tp=" << c.tp
                        << (c.zero ? " with ZeRO-1" : "") << ": " << gigabytes(c.memory) << " per "
                        << c.memoryKind << " device (holds " << gigabytes(c.capacity) << ")";
    }
    if (bySize.size() > kShown)
      diag.attachNote() << bySize.size() - kShown << " more candidates need more";
    return signalPassFailure();
  }

  // Why the winner won: against the runner-up, the component that differs
  // most.
  std::string why;
  {
    llvm::raw_string_ostream os(why);
    os << "dp=" << best.dp << " x ep=" << best.ep << " x tp=" << best.tp
       << (best.zero ? " with ZeRO-1" : "") << " has the lowest predicted step time ("
       << seconds(best.step()) << ")";
    if (order.size() > 1) {
      const Candidate &next = candidates[order[1]];
      if (!next.fits) {
        os << "; every other plan exceeds device memory";
      } else {
        double dc = next.compute - best.compute, da = next.allToAll - best.allToAll,
               dr = next.exposedAllReduce() - best.exposedAllReduce(),
               dt = next.tensorParallel - best.tensorParallel;
        os << "; the runner-up dp=" << next.dp << " x ep=" << next.ep << " x tp=" << next.tp
           << (next.zero ? " with ZeRO-1" : "") << " takes " << seconds(next.step()) << ", ";
        if (dt >= dc && dt >= da && dt >= dr)
          os << "mostly in tensor-parallel all-reduces (" << seconds(next.tensorParallel) << " vs "
             << seconds(best.tensorParallel) << ")";
        else if (da >= dc && da >= dr)
          os << "mostly in all-to-all (" << seconds(next.allToAll) << " vs "
             << seconds(best.allToAll) << ")";
        else if (dr >= dc)
          os << "mostly in gradient all-reduce (" << seconds(next.exposedAllReduce()) << " vs "
             << seconds(best.exposedAllReduce()) << ")";
        else
          os << "mostly in compute (" << seconds(next.compute) << " vs " << seconds(best.compute)
             << ")";
      }
    }
  }

  // The plan into the IR.
  Builder b(module.getContext());
  // The device kinds mark a grid whose replicas take unequal token shares;
  // with token-shares, the shares in whole sequences do (moe.token_shares).
  bool mixed = cluster->kinds.size() > 1 && !equalShares;
  module->removeAttr(MoEDialect::kTokenSharesAttrName);
  if (mixed && tokenShares) {
    SmallVector<int64_t> sequences = wholeShares(
        planner.coordinateShares(Grid{best.dp, best.ep, best.tp}), batchSequences(module));
    if (!sequences.empty() && !llvm::all_equal(sequences))
      module->setAttr(MoEDialect::kTokenSharesAttrName, b.getDenseI64ArrayAttr(sequences));
    mixed = sequences.empty();
  }
  ArrayAttr devices;
  if (mixed) {
    SmallVector<Attribute> names;
    for (int64_t r = 0; r < n; ++r)
      names.push_back(b.getStringAttr(cluster->kindOf(r).name));
    devices = b.getArrayAttr(names);
  }
  module->setAttr("moe.grid",
                  GridAttr::get(module.getContext(), best.dp, best.ep, best.tp, devices));
  Grid grid{best.dp, best.ep, best.tp};
  for (ExpertFFNOp e : expertOps) {
    int64_t experts = cast<RankedTensorType>(e->getOperand(0).getType()).getShape()[0];
    std::vector<std::vector<int64_t>> lists = planner.placement(grid, experts, pins);
    // Candidates with a pin past their ep ranks were left out above.
    assert(!lists.empty() && "the chosen grid has a rank for every pin");
    SmallVector<int64_t> flat, sizes;
    for (auto &l : lists) {
      flat.append(l.begin(), l.end());
      sizes.push_back(static_cast<int64_t>(l.size()));
    }
    e.setPlacementAttr(PlacementAttr::get(module.getContext(), flat, sizes));
  }
  // What the plan needs that the step program does not run yet.
  module->removeAttr(MoEDialect::kPlanNeedsAttrName);
  if (best.micro > 1 || best.recompute)
    module->setAttr(MoEDialect::kPlanNeedsAttrName,
                    b.getStringAttr(needsText(best)));
  std::string notExecutable =
      whyNotExecutable(module, module->getAttrOfType<GridAttr>(MoEDialect::kGridAttrName));
  double peakFlops = 0; // the devices' peaks in the step's precision
  for (int64_t r = 0; r < n; ++r)
    peakFlops += cluster->kindOf(r).flops / static_cast<double>(cluster->sharing(r));
  module->setAttr(MoEDialect::kPlanAttrName,
                  PlanAttr::get(module.getContext(), best.step(), best.compute, best.allToAll,
                                best.allReduce, best.exposedAllReduce(), best.tensorParallel,
                                best.zero ? 1 : 0, best.memory,
                                static_cast<int64_t>(order.size())));

  // Reports.
  std::map<std::string, int64_t> kindCounts;
  for (int64_t r = 0; r < n; ++r)
    ++kindCounts[cluster->kindOf(r).name];
  std::string devicesText;
  for (auto &[name, count] : kindCounts)
    devicesText += (devicesText.empty() ? "" : " + ") + std::to_string(count) + " x " + name;
  std::string tableText, jsonText;
  if (!reportTable.empty() || reportAttr) {
    std::string &text = tableText;
    llvm::raw_string_ostream os(text);
    os << "moe-plan-sharding: " << (module.getSymName() ? *module.getSymName() : "model") << " on "
       << cluster->name << " (" << n << " devices: " << devicesText << ")\n"
       << "step: " << llvm::format("%.4g", step.flops / 1e9) << " GFLOP"
       << (step.forwardOnly ? " (forward x 3)" : "") << " in " << cluster->precision
       << " (the devices' " << cluster->precision << " peaks), parameters "
       << gigabytes(step.denseParamBytes) << " dense + " << gigabytes(step.expertParamBytes)
       << " experts, activations " << gigabytes(step.activationBytes)
       << " (the whole step, unpartitioned)\n"
       << llvm::format("  %-1s %5s %5s %3s %4s %6s %12s %12s %12s %12s %12s %12s  %s\n", "", "dp",
                       "ep", "tp", "zero", "micro", "compute", "all-to-all",
                       best.overlap ? "all-reduce*" : "all-reduce", "tp comm", "step", "memory/dev",
                       "fits");
    for (size_t i : order) {
      const Candidate &c = candidates[i];
      os << llvm::format("  %-1s %5lld %5lld %3lld %4s %6s %12s %12s %12s %12s %12s %12s  %s\n",
                         &c == &best ? "*" : "", (long long)c.dp, (long long)c.ep, (long long)c.tp,
                         c.zero ? "1" : "-", microText(c).c_str(), seconds(c.compute).c_str(),
                         seconds(c.allToAll).c_str(), seconds(c.exposedAllReduce()).c_str(),
                         seconds(c.tensorParallel).c_str(), seconds(c.step()).c_str(),
                         gigabytes(c.memory).c_str(), c.fits ? "yes" : "no");
    }
    if (best.overlap)
      os << "  (all-reduce*: the exposed part, what the backward does not hide of the gradient "
            "all-reduces (moe-schedule); overlap=false counts them whole)\n";
    // How the work is shared over device kinds (mixed clusters).
    std::vector<double> coord = planner.coordinateShares(grid);
    std::map<std::string, std::pair<double, int64_t>> perKind;
    for (int64_t r = 0; r < n; ++r) {
      auto &k = perKind[cluster->kindOf(r).name];
      k.first = coord[r / best.tp];
      ++k.second;
    }
    os << "token share per replica (dp x ep coordinate" << (equalShares ? ", equal" : "") << "):";
    for (auto &[name, k] : perKind)
      os << " " << name << " " << llvm::format("%.2f%%", 100 * k.first) << " of the tokens";
    if (!expertOps.empty()) {
      std::vector<std::vector<int64_t>> lists = planner.placement(
          grid, cast<RankedTensorType>(expertOps.front()->getOperand(0).getType()).getShape()[0],
          pins);
      os << "; experts of the first MoE layer per ep rank:";
      for (auto &l : lists)
        os << " " << l.size();
    }
    os << "\nchosen: " << why << "\n"
       << "  per device: weights " << gigabytes(best.weightBytes) << ", gradients "
       << gigabytes(best.gradientBytes) << ", optimiser state " << gigabytes(best.optimizerBytes)
       << ", activations " << gigabytes(best.activationBytes) << " (" << best.memoryKind
       << ", holds " << gigabytes(best.capacity) << "); sends per step: all-to-all "
       << gigabytes(best.allToAllBytes) << ", gradient all-reduce "
       << gigabytes(best.allReduceBytes) << ", tensor-parallel "
       << gigabytes(best.tensorParallelBytes) << "\n"
       << "  predicted: " << llvm::format("%.4g", static_cast<double>(step.tokens) / best.step())
       << " tokens/s, MFU " << llvm::format("%.1f%%", 100 * step.flops / best.step() / peakFlops)
       << " of the devices' " << cluster->precision << " peak\n";
    if (!notExecutable.empty())
      os << "  not executable: " << notExecutable << "\n";
    if (!reportTable.empty() && failed(writeTo(reportTable, text, module)))
      return signalPassFailure();
  }
  if (!reportJson.empty() || reportAttr) {
    llvm::json::Array cands;
    for (size_t i : order) {
      const Candidate &c = candidates[i];
      cands.push_back(llvm::json::Object{{"dp", c.dp},
                                         {"ep", c.ep},
                                         {"tp", c.tp},
                                         {"zero_stage", c.zero ? 1 : 0},
                                         {"micro_batches", c.micro},
                                         {"recompute", c.recompute},
                                         {"compute_s", c.compute},
                                         {"all_to_all_s", c.allToAll},
                                         {"all_reduce_s", c.allReduce},
                                         {"all_reduce_exposed_s", c.exposedAllReduce()},
                                         {"tensor_parallel_s", c.tensorParallel},
                                         {"step_s", c.step()},
                                         {"max_memory_bytes", c.memory},
                                         {"max_memory_device", c.memoryKind},
                                         {"fits", c.fits}});
    }
    // Per MoE layer, the experts each ep rank holds; each device's kind.
    llvm::json::Array placement, kinds;
    for (ExpertFFNOp e : expertOps) {
      llvm::json::Array ranks;
      if (auto attr = e.getPlacementAttr())
        for (int64_t r = 0; r < static_cast<int64_t>(attr.getNumRanks()); ++r)
          ranks.push_back(llvm::json::Array(attr.getExpertsOf(r)));
      placement.push_back(std::move(ranks));
    }
    for (int64_t r = 0; r < n; ++r)
      kinds.push_back(cluster->kindOf(r).name);
    llvm::json::Array shares;
    std::vector<double> coord = planner.coordinateShares(grid);
    for (int64_t r = 0; r < n; ++r)
      shares.push_back(coord[r / best.tp] / static_cast<double>(best.tp));
    llvm::json::Object report{{"cluster", cluster->name},
                              {"devices", n},
                              {"step_gflop", step.flops / 1e9},
                              {"precision", cluster->precision},
                              {"forward_only", step.forwardOnly},
                              {"dense_parameter_bytes", step.denseParamBytes},
                              {"expert_parameter_bytes", step.expertParamBytes},
                              {"activation_bytes", step.activationBytes},
                              {"candidates", std::move(cands)},
                              {"chosen", chosenJson(best, step, peakFlops, notExecutable)},
                              {"token_share", std::move(shares)},
                              {"device_kinds", std::move(kinds)},
                              {"placement", std::move(placement)},
                              {"why", why}};
    std::string &text = jsonText;
    llvm::raw_string_ostream os(text);
    os << llvm::formatv("{0:2}", llvm::json::Value(std::move(report))) << "\n";
    if (!reportJson.empty() && failed(writeTo(reportJson, text, module)))
      return signalPassFailure();
  }
  if (reportAttr)
    module->setAttr(MoEDialect::kPlanReportAttrName,
                    b.getDictionaryAttr({
                        b.getNamedAttr("json", b.getStringAttr(jsonText)),
                        b.getNamedAttr("table", b.getStringAttr(tableText)),
                    }));
}

} // namespace

int64_t mlir::moe::batchSequences(ModuleOp module) {
  for (auto fn : module.getOps<func::FuncOp>())
    if (fn.getNumArguments())
      if (auto tokens = dyn_cast<RankedTensorType>(fn.getArgument(0).getType());
          tokens && tokens.getRank() == 2)
        return tokens.getShape()[0];
  return 0;
}
