//===- PlanReport.h - moe-plan-sharding's candidates and reports -*- C++ -*-===//
//
// The step summary and candidate plans moe-plan-sharding weighs, and the
// reports it writes of them: the table (report-table) and the JSON
// (report-json), both also in moe.plan_report. See docs/CostModel.md.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_PASSES_LIB_PLANREPORT_H
#define MOE_PASSES_LIB_PLANREPORT_H

#include "moe/Transforms/CostModel.h"

#include "llvm/ADT/ArrayRef.h"

#include <string>
#include <vector>

namespace mlir::moe::plan {

/// What the plan needs to know about the step.
struct StepSummary {
  double flops = 0;
  std::vector<double> denseTime, expertTime; ///< per device kind, whole step
  double denseParamBytes = 0, expertParamBytes = 0, activationBytes = 0;
  /// Of the dense bytes, those tensor parallelism keeps whole on every tp
  /// rank (embeddings, norms, routers, latent attention's latents).
  double tpWholeBytes = 0;
  /// A tp rank's dense parameter bytes.
  double denseBytesPerTpRank(double tp) const {
    return (denseParamBytes - tpWholeBytes) / tp + tpWholeBytes;
  }
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
};

/// `s` seconds as "1.234 s", "1.234 ms" or "1.234 us".
std::string secondsText(double s);
/// `b` bytes in GB, or, below 0.01 GB (where "0.000 GB" says nothing), in
/// MB or bytes.
std::string gigabytesText(double b);
/// Why `candidates[order[0]]` won: against the runner-up, the component
/// that differs most.
std::string whyChosen(const std::vector<Candidate> &candidates, llvm::ArrayRef<size_t> order);

/// What the reports say: the candidates in rank order, the chosen one and
/// how the work is shared.
struct PlanReport {
  std::string model; ///< the module's name
  const cost::Cluster &cluster;
  const StepSummary &step;
  const std::vector<Candidate> &candidates;
  llvm::ArrayRef<size_t> order; ///< candidates ranked, the chosen first
  const Candidate &best;
  std::string why, notExecutable; ///< empty notExecutable: it runs
  double peakFlops = 0;           ///< the devices' summed peaks
  bool equalShares = false;
  std::vector<double> coordinateShares; ///< token share of each dp x ep coordinate
  /// Per MoE layer, the experts each ep rank holds.
  std::vector<std::vector<std::vector<int64_t>>> placement;
};

/// The table: candidates, shares, the chosen plan per device.
std::string planTable(const PlanReport &report);
/// The JSON report (docs/CostModel.md).
std::string planJson(const PlanReport &report);

} // namespace mlir::moe::plan

#endif // MOE_PASSES_LIB_PLANREPORT_H
