//===- StepMetrics.h - the loop's own metrics of a step ---------*- C++ -*-===//
//
// What the step loop measures every step besides the loss: the gradient
// norm per parameter group, the expert loads and router losses over the
// whole batch (every rank's counts summed: the rebalancer weighs them),
// and the metrics line that opens each run.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_STEPMETRICS_H
#define MOERT_LIB_TRAINER_STEPMETRICS_H

#include "Rank.h"

namespace moert::trainer {

/// The group of a parameter for grad_norm_groups, from the names the
/// frontend gives (l<i>.wq, l<i>.experts.up, tok_emb, ...).
const char *parameterGroup(const std::string &name);
/// The gradient norm of each parameter group in step `s` (before
/// clipping), over the whole model; null without --metrics. Every rank.
nlohmann::json gradientGroupNorms(Rank &r, long long s);
/// Token-slots routed past an expert's capacity in step `s`; with several
/// ranks the counters (expertCounts, keptCounts, routerLosses) become the
/// whole batch's. Every rank.
long long gatherLoad(Rank &r, long long s);
/// The run's shape, and what the per-layer arrays of the step lines refer
/// to: one line at the start of each training run (lead rank).
void writeRunLine(Rank &r);
/// The last step's token-slots per expert (`expertCounts` or
/// `keptCounts`), one array per MoE layer.
nlohmann::json expertTokens(const Rank &r, const std::vector<int32_t> &perExpert);
/// The last step's balancing (`part` 0) or z-loss (1) per MoE layer.
nlohmann::json routerLoss(const Rank &r, int part);

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_STEPMETRICS_H
