//===- PlanSharding.cpp - the moe-plan-sharding pass -----------------------===//
//
// Chooses the data-parallel and expert-parallel degrees of the training step
// on the module's cluster with the cost model (CostModel.h), places experts
// (faster devices hold more), writes `moe.grid`, per-op `placement` and
// `moe.plan`, and explains the choice in a report (JSON and a table).
//
//===----------------------------------------------------------------------===//

#include "BufferPlan.h"
#include "PlanReport.h"
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
using namespace mlir::moe::plan;

namespace {

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
    // Activation collectives per layer: forward and backward, and with
    // recompute the forward again.
    double passes = recompute ? 6 : 4;
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
          double dense = step.denseBytesPerTpRank(tdp),
                 expert = step.expertParamBytes * expertFraction[d * ep + e] / tdp;
          double updated =
              zero ? dense / static_cast<double>(dp * ep) + expert / static_cast<double>(dp)
                   : dense + expert;
          time += 7 * updated / cluster.kinds[k].memoryBandwidth;
          // Ranks sharing a host share its compute and memory.
          c.compute = std::max(c.compute, time * static_cast<double>(cluster.sharing(r)));
        }
      // Dispatch and combine, forward and backward: 4 all-to-alls per MoE
      // layer among the ep ranks of one tp slice (6 with recompute: the
      // forward's again); each sends its tokens' slots (split over tp).
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
          a2a = passes * m *
                (allToAllTime(cluster, group, bytes * maxShare / tdp / m) +
                 (layersA2A - 1) * allToAllTime(cluster, group, 1e-30));
        c.allToAll = std::max(c.allToAll, a2a);
        c.allToAllBytes = std::max(c.allToAllBytes, passes * bytes * maxShare / tdp);
      }
    }
    // Tensor parallelism: per layer, two all-reduces of the activations
    // forward and two backward (Megatron; two more with recompute), within
    // each tp group.
    if (tp > 1) {
      for (int64_t d = 0; d < dp; ++d)
        for (int64_t e = 0; e < ep; ++e) {
          Group group;
          for (int64_t t = 0; t < tp; ++t)
            group.push_back(g.rank(d, e, t));
          double bytes = static_cast<double>(step.tokens) * share[d * ep + e] *
                         static_cast<double>(step.width) * 4;
          c.tensorParallel =
              std::max(c.tensorParallel, passes * static_cast<double>(step.layers) * m *
                                             allReduceTime(cluster, group, bytes / m));
          c.tensorParallelBytes =
              std::max(c.tensorParallelBytes, passes * static_cast<double>(step.layers) * bytes);
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
      denseAR = std::max(denseAR, allReduceTime(cluster, replicas, step.denseBytesPerTpRank(tdp)));
      for (int64_t e = 0; e < ep; ++e) {
        Group experts;
        for (int64_t d = 0; d < dp; ++d)
          experts.push_back(g.rank(d, e, t));
        expertAR =
            std::max(expertAR, allReduceTime(cluster, experts,
                                             step.expertParamBytes * expertFraction[e] / tdp));
        c.allReduceBytes =
            std::max(c.allReduceBytes, step.denseBytesPerTpRank(tdp) +
                                           step.expertParamBytes * expertFraction[e] / tdp);
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
    // Memory: f32 parameter and gradient (8 bytes per element; with
    // micro-batches a second gradient, their sum) and two AdamW moments (8
    // more; with ZeRO-1 sharded over the replicas), plus the rank's share
    // of activations.
    for (int64_t d = 0; d < dp; ++d)
      for (int64_t e = 0; e < ep; ++e)
        for (int64_t t = 0; t < tp; ++t) {
          int64_t r = g.rank(d, e, t);
          double dense = step.denseBytesPerTpRank(tdp);
          double expert =
              (step.expertParamBytes * expertFraction[d * ep + e] + spareRows * rowBytes) / tdp;
          double moments =
              2 * (zero ? dense / static_cast<double>(dp * ep) + expert / static_cast<double>(dp)
                        : dense + expert);
          double activations = activationBytes(share[d * ep + e], tdp, m, recompute);
          double gradients = (micro > 1 ? 2 : 1) * (dense + expert);
          double bytes = dense + expert + gradients + moments + activations;
          if (bytes > c.memory) {
            c.memory = bytes;
            c.weightBytes = dense + expert;
            c.gradientBytes = gradients;
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
  /// fits; else the fastest that fits of more micro-batches (powers of two
  /// dividing each replica's sequences; equal token shares only), with or
  /// without recompute; else as it runs.
  Candidate fitting(int64_t dp, int64_t ep, int64_t tp, bool zero) const {
    Candidate plain = evaluate(dp, ep, tp, zero);
    if (plain.fits)
      return plain;
    std::optional<Candidate> best;
    int64_t perReplica = std::max<int64_t>(1, step.sequences / (dp * ep));
    // moe-micro-batches splits whole sequences, and equal shares only.
    std::vector<double> shares = coordinateShares(Grid{dp, ep, tp});
    bool equal = llvm::all_of(
        shares, [&](double s) { return std::abs(s - shares.front()) <= 1e-12 * shares.front(); });
    for (bool recompute : {false, true})
      for (int64_t m = recompute ? 1 : 2; m <= perReplica; m *= 2) {
        if (perReplica % m != 0 || (m > 1 && (!equal || step.sequences % (dp * ep) != 0)))
          continue;
        if (Candidate c = evaluate(dp, ep, tp, zero, m, recompute);
            c.fits && (!best || c.step() < best->step()))
          best = c;
      }
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

/// The parameters moe-partition splits over tp (splitTensorParallel): the
/// q, k and v projections of every attention (through their clamps and
/// per-head norms, whose gains stay whole) with their biases, its output
/// projection, and every dense FFN's weights. The other dense parameters
/// stay whole on each tp rank.
llvm::DenseSet<StringRef> tensorParallelParams(func::FuncOp fn) {
  llvm::DenseSet<StringRef> split;
  auto add = [&](Value w) {
    if (!w)
      return;
    if (auto copy = w.getDefiningOp<CastOp>()) // a mixed-precision copy
      w = copy.getInput();
    if (auto get = w.getDefiningOp<GetParamOp>())
      split.insert(get.getName());
  };
  auto projections = [&](Operation *att, ValueRange inputs) {
    for (Value in : inputs) {
      if (auto clip = in.getDefiningOp<ClampOp>())
        in = clip.getX();
      if (auto norm = in.getDefiningOp<RMSNormOp>())
        in = norm.getX();
      if (auto lin = in.getDefiningOp<LinearOp>()) {
        add(lin.getWeight());
        add(lin.getBias());
      }
    }
    for (Operation *user : att->getUsers())
      if (auto out = dyn_cast<LinearOp>(user))
        add(out.getWeight());
  };
  fn.walk([&](Operation *op) {
    if (auto a = dyn_cast<AttentionOp>(op))
      projections(op, {a.getQ(), a.getK(), a.getV()});
    if (auto a = dyn_cast<LatentAttentionOp>(op))
      projections(op, {a.getQ(), a.getK(), a.getV()});
    if (auto f = dyn_cast<FFNOp>(op)) {
      add(f.getWUp());
      add(f.getWDown());
      add(f.getWGate());
    }
  });
  return split;
}

/// Writes `text` to `path` ("-": stdout).
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
    if (auto att = dyn_cast<LatentAttentionOp>(op)) {
      ++step.layers;
      step.heads = step.kvHeads = att.getNumHeads();
      // The residual width: the output projection's.
      for (Operation *user : att->getUsers())
        if (auto out = dyn_cast<LinearOp>(user))
          step.width = cast<RankedTensorType>(out.getResult().getType()).getShape().back();
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
  llvm::DenseSet<StringRef> split = tensorParallelParams(fn);
  for (ParamOp p : module.getOps<ParamOp>()) {
    double bytes = static_cast<double>(p.getTensorType().getNumElements()) * 4;
    (expertParams.contains(p.getSymName()) ? step.expertParamBytes : step.denseParamBytes) += bytes;
    if (!expertParams.contains(p.getSymName()) && !split.contains(p.getSymName()))
      step.tpWholeBytes += bytes;
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
  // Plans that fit first, then the fastest (a grid takes micro-batches or
  // recompute only where it does not fit without: Planner::fitting).
  llvm::stable_sort(order, [&](size_t a, size_t b) {
    const Candidate &x = candidates[a], &y = candidates[b];
    if (x.fits != y.fits)
      return x.fits;
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
                              << ") needs " << gigabytesText(smallest.memory) << " on a "
                              << smallest.memoryKind << " device, which holds "
                              << gigabytesText(smallest.capacity) << "; give a larger cluster or a "
                              << "smaller model";
    constexpr size_t kShown = 6;
    for (size_t i = 0; i < std::min(kShown, bySize.size()); ++i) {
      const Candidate &c = *bySize[i];
      diag.attachNote() << "dp=" << c.dp << " x ep=" << c.ep << " x tp=" << c.tp
                        << (c.zero ? " with ZeRO-1" : "") << ": " << gigabytesText(c.memory)
                        << " per " << c.memoryKind << " device (holds " << gigabytesText(c.capacity)
                        << ")";
    }
    if (bySize.size() > kShown)
      diag.attachNote() << bySize.size() - kShown << " more candidates need more";
    return signalPassFailure();
  }

  std::string why = whyChosen(candidates, order);

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
  // Micro-batches and activation recompute, which the step program runs
  // (moe-micro-batches, moe-recompute-activations take them).
  module->removeAttr(MoEDialect::kMicroBatchesAttrName);
  module->removeAttr(MoEDialect::kRecomputeAttrName);
  if (best.micro > 1)
    module->setAttr(MoEDialect::kMicroBatchesAttrName, b.getI64IntegerAttr(best.micro));
  if (best.recompute)
    module->setAttr(MoEDialect::kRecomputeAttrName, b.getUnitAttr());
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

  // Reports (PlanReport.cpp).
  PlanReport report{module.getSymName() ? module.getSymName()->str() : "model",
                    *cluster,
                    step,
                    candidates,
                    order,
                    best,
                    why,
                    notExecutable,
                    peakFlops,
                    equalShares,
                    planner.coordinateShares(grid),
                    {}};
  for (ExpertFFNOp e : expertOps) {
    auto &layer = report.placement.emplace_back();
    if (auto attr = e.getPlacementAttr())
      for (int64_t r = 0; r < static_cast<int64_t>(attr.getNumRanks()); ++r) {
        auto experts = attr.getExpertsOf(r);
        layer.emplace_back(experts.begin(), experts.end());
      }
  }
  std::string tableText, jsonText;
  if (!reportTable.empty() || reportAttr) {
    tableText = planTable(report);
    if (!reportTable.empty() && failed(writeTo(reportTable, tableText, module)))
      return signalPassFailure();
  }
  if (!reportJson.empty() || reportAttr) {
    jsonText = planJson(report);
    if (!reportJson.empty() && failed(writeTo(reportJson, jsonText, module)))
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
