//===- PlanReport.cpp - moe-plan-sharding's reports -----------------------===//

#include "PlanReport.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;
using namespace mlir::moe;
using namespace mlir::moe::plan;

/// The table's column for them: "1", "8", "8 rc".
static std::string microText(const Candidate &c) {
  return std::to_string(c.micro) + (c.recompute ? " rc" : "");
}

std::string plan::secondsText(double s) {
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

std::string plan::gigabytesText(double b) {
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

/// The chosen plan as the JSON report gives it: its grid, what it needs,
/// the fullest device's memory by kind, the bytes a rank sends per step by
/// collective, the predicted throughput and MFU, and whether it executes.
static llvm::json::Object chosenJson(const Candidate &best, const StepSummary &step,
                                     double peakFlops, const std::string &notExecutable) {
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

std::string plan::whyChosen(const std::vector<Candidate> &candidates, ArrayRef<size_t> order) {
  const Candidate &best = candidates[order[0]];
  std::string why;
  llvm::raw_string_ostream os(why);
  os << "dp=" << best.dp << " x ep=" << best.ep << " x tp=" << best.tp
     << (best.zero ? " with ZeRO-1" : "") << " has the lowest predicted step time ("
     << secondsText(best.step()) << ")";
  if (order.size() > 1) {
    const Candidate &next = candidates[order[1]];
    if (!next.fits) {
      os << "; every other plan exceeds device memory";
    } else {
      double dc = next.compute - best.compute, da = next.allToAll - best.allToAll,
             dr = next.exposedAllReduce() - best.exposedAllReduce(),
             dt = next.tensorParallel - best.tensorParallel;
      os << "; the runner-up dp=" << next.dp << " x ep=" << next.ep << " x tp=" << next.tp
         << (next.zero ? " with ZeRO-1" : "") << " takes " << secondsText(next.step()) << ", ";
      if (dt >= dc && dt >= da && dt >= dr)
        os << "mostly in tensor-parallel all-reduces (" << secondsText(next.tensorParallel)
           << " vs " << secondsText(best.tensorParallel) << ")";
      else if (da >= dc && da >= dr)
        os << "mostly in all-to-all (" << secondsText(next.allToAll) << " vs "
           << secondsText(best.allToAll) << ")";
      else if (dr >= dc)
        os << "mostly in gradient all-reduce (" << secondsText(next.exposedAllReduce()) << " vs "
           << secondsText(best.exposedAllReduce()) << ")";
      else
        os << "mostly in compute (" << secondsText(next.compute) << " vs "
           << secondsText(best.compute) << ")";
    }
  }
  return why;
}

std::string plan::planTable(const PlanReport &report) {
  const cost::Cluster &cluster = report.cluster;
  const StepSummary &step = report.step;
  const Candidate &best = report.best;
  int64_t n = cluster.numRanks();
  std::map<std::string, int64_t> kindCounts;
  for (int64_t r = 0; r < n; ++r)
    ++kindCounts[cluster.kindOf(r).name];
  std::string devicesText;
  for (auto &[name, count] : kindCounts)
    devicesText += (devicesText.empty() ? "" : " + ") + std::to_string(count) + " x " + name;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "moe-plan-sharding: " << report.model << " on " << cluster.name << " (" << n
     << " devices: " << devicesText << ")\n"
     << "step: " << llvm::format("%.4g", step.flops / 1e9) << " GFLOP"
     << (step.forwardOnly ? " (forward x 3)" : "") << " in " << cluster.precision
     << " (the devices' " << cluster.precision << " peaks), parameters "
     << gigabytesText(step.denseParamBytes) << " dense + " << gigabytesText(step.expertParamBytes)
     << " experts, activations " << gigabytesText(step.activationBytes)
     << " (the whole step, unpartitioned)\n"
     << llvm::format("  %-1s %5s %5s %3s %4s %6s %12s %12s %12s %12s %12s %12s  %s\n", "", "dp",
                     "ep", "tp", "zero", "micro", "compute", "all-to-all",
                     best.overlap ? "all-reduce*" : "all-reduce", "tp comm", "step", "memory/dev",
                     "fits");
  for (size_t i : report.order) {
    const Candidate &c = report.candidates[i];
    os << llvm::format("  %-1s %5lld %5lld %3lld %4s %6s %12s %12s %12s %12s %12s %12s  %s\n",
                       &c == &best ? "*" : "", (long long)c.dp, (long long)c.ep, (long long)c.tp,
                       c.zero ? "1" : "-", microText(c).c_str(), secondsText(c.compute).c_str(),
                       secondsText(c.allToAll).c_str(), secondsText(c.exposedAllReduce()).c_str(),
                       secondsText(c.tensorParallel).c_str(), secondsText(c.step()).c_str(),
                       gigabytesText(c.memory).c_str(), c.fits ? "yes" : "no");
  }
  if (best.overlap)
    os << "  (all-reduce*: the exposed part, what the backward does not hide of the gradient "
          "all-reduces (moe-schedule); overlap=false counts them whole)\n";
  // How the work is shared over device kinds (mixed clusters).
  const std::vector<double> &coord = report.coordinateShares;
  std::map<std::string, std::pair<double, int64_t>> perKind;
  for (int64_t r = 0; r < n; ++r) {
    auto &k = perKind[cluster.kindOf(r).name];
    k.first = coord[r / best.tp];
    ++k.second;
  }
  os << "token share per replica (dp x ep coordinate" << (report.equalShares ? ", equal" : "")
     << "):";
  for (auto &[name, k] : perKind)
    os << " " << name << " " << llvm::format("%.2f%%", 100 * k.first) << " of the tokens";
  if (!report.placement.empty()) {
    os << "; experts of the first MoE layer per ep rank:";
    for (auto &l : report.placement.front())
      os << " " << l.size();
  }
  os << "\nchosen: " << report.why << "\n"
     << "  per device: weights " << gigabytesText(best.weightBytes) << ", gradients "
     << gigabytesText(best.gradientBytes) << ", optimiser state "
     << gigabytesText(best.optimizerBytes) << ", activations "
     << gigabytesText(best.activationBytes) << " (" << best.memoryKind << ", holds "
     << gigabytesText(best.capacity) << "); sends per step: all-to-all "
     << gigabytesText(best.allToAllBytes) << ", gradient all-reduce "
     << gigabytesText(best.allReduceBytes) << ", tensor-parallel "
     << gigabytesText(best.tensorParallelBytes) << "\n"
     << "  predicted: " << llvm::format("%.4g", static_cast<double>(step.tokens) / best.step())
     << " tokens/s, MFU "
     << llvm::format("%.1f%%", 100 * step.flops / best.step() / report.peakFlops)
     << " of the devices' " << cluster.precision << " peak\n";
  if (!report.notExecutable.empty())
    os << "  not executable: " << report.notExecutable << "\n";
  return text;
}

std::string plan::planJson(const PlanReport &report) {
  const cost::Cluster &cluster = report.cluster;
  const StepSummary &step = report.step;
  const Candidate &best = report.best;
  int64_t n = cluster.numRanks();
  llvm::json::Array cands;
  for (size_t i : report.order) {
    const Candidate &c = report.candidates[i];
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
  for (const auto &layer : report.placement) {
    llvm::json::Array ranks;
    for (const std::vector<int64_t> &experts : layer)
      ranks.push_back(llvm::json::Array(experts));
    placement.push_back(std::move(ranks));
  }
  for (int64_t r = 0; r < n; ++r)
    kinds.push_back(cluster.kindOf(r).name);
  llvm::json::Array shares;
  const std::vector<double> &coord = report.coordinateShares;
  for (int64_t r = 0; r < n; ++r)
    shares.push_back(coord[r / best.tp] / static_cast<double>(best.tp));
  llvm::json::Object json{
      {"cluster", cluster.name},
      {"devices", n},
      {"step_gflop", step.flops / 1e9},
      {"precision", cluster.precision},
      {"forward_only", step.forwardOnly},
      {"dense_parameter_bytes", step.denseParamBytes},
      {"tp_whole_parameter_bytes", step.tpWholeBytes},
      {"expert_parameter_bytes", step.expertParamBytes},
      {"activation_bytes", step.activationBytes},
      {"candidates", std::move(cands)},
      {"chosen", chosenJson(best, step, report.peakFlops, report.notExecutable)},
      {"token_share", std::move(shares)},
      {"device_kinds", std::move(kinds)},
      {"placement", std::move(placement)},
      {"why", report.why}};
  std::string text;
  llvm::raw_string_ostream os(text);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(json))) << "\n";
  return text;
}
