//===- Pipeline.cpp - the training pipeline as the options configure it ---===//

#include "moe/Driver/Driver.h"

#include "moe/Dialect/MoE/MoEDialect.h"
#include "moe/Dialect/MoE/MoEOps.h"
#include "moe/Transforms/Pipelines.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>

using namespace llvm;
using namespace moec::driver;

namespace {

/// The pipeline's options from the driver's: a step program on a mixed
/// cluster runs the plan's unequal token shares in whole sequences
/// (moe.token_shares: one step program per share) and its uneven expert
/// placement; its plans are chosen among tp = 1 unless --tp says otherwise
/// (or the cluster has one device kind), and a plan it cannot execute is
/// an error (a warning for --emit=plan|mlir, whose step stays on one rank).
void pipelineOptions(const CompileOptions &o, mlir::ModuleOp module,
                     mlir::moe::TrainPipelineOptions &options) {
  const ParallelOptions &p = o.parallel;
  bool program = o.emitsKernels();
  options.evalStep = true;
  options.ranks = p.ranks;
  options.ep = p.ep;
  options.dp = p.dp;
  options.plan = !o.import.cluster.empty();
  options.tp = p.tp ? p.tp : (program ? 1 : 0);
  // On a cluster of one device kind a step program runs the planner's
  // tensor parallelism too; a mixed cluster's binary keeps tp = 1 (its
  // unequal token shares and uneven experts balance the devices).
  if (!p.tp && options.tp == 1)
    if (auto cluster =
            module->getAttrOfType<mlir::DictionaryAttr>(mlir::moe::MoEDialect::kClusterAttrName))
      if (auto kinds = cluster.getAs<mlir::DictionaryAttr>("device_kinds");
          kinds && kinds.size() == 1)
        options.tp = 0;
  options.pinExperts = p.pinExperts;
  options.reportAttr = options.plan;
  options.strictPlan = program;
  options.equalShares = false;
  options.tokenShares = true;
  options.routingGroups = p.routingGroups;
  options.microBatches = o.step.microBatches;
  options.recompute = o.step.recompute;
  options.redundantExperts = p.redundantExperts;
  options.compressGrad = o.compress.grad;
  options.compressDispatch = o.compress.dispatch;
  options.compressEmbedding = o.compress.embedding;
  options.compressWarmup = o.compress.warmup;
  options.errorFeedback = !o.compress.noErrorFeedback;
  options.savePreactivations = !o.step.recomputeFFN;
  options.bufferAlignment = o.backend.target->bufferAlignment();
  options.deviceNorm = o.backend.target->deviceNorm();
  options.routedRows = !o.step.denseExperts;
  options.overlap = o.step.schedule == Schedule::Overlap;
  options.expertChunks = p.expertChunks;
  options.zero = p.zero;
}

/// Without a cluster the binary runs here: say at compile time when this
/// machine cannot hold the plan (the binary refuses to start then).
void warnIfThisHostIsTooSmall(mlir::ModuleOp module) {
  auto plan =
      module->getAttrOfType<mlir::moe::BufferPlanAttr>(mlir::moe::MoEDialect::kBufferPlanAttrName);
  auto grid = module->getAttrOfType<mlir::moe::GridAttr>(mlir::moe::MoEDialect::kGridAttrName);
  if (!plan)
    return;
  double need = static_cast<double>(plan.getTotalBytes()) * (grid ? grid.getNumRanks() : 1);
  std::ifstream meminfo("/proc/meminfo");
  std::string name, unit;
  double kb = 0;
  while (meminfo >> name >> kb >> unit)
    if (name == "MemTotal:") {
      if (need > kb * 1024)
        errs() << "moec: warning: the step's planned buffers take " << format("%.2f", need / 1e9)
               << " GB" << (grid && grid.getNumRanks() > 1 ? " over its ranks" : "")
               << "; this machine has " << format("%.2f", kb * 1024 / 1e9)
               << " GB, so the binary will refuse to run here (shrink the model, batch or "
                  "sequence, or plan for a cluster with --cluster)\n";
      return;
    }
}

/// The plan's report, taken off the module (moe-plan-sharding report-attr).
PlanReport takeReport(mlir::ModuleOp module) {
  PlanReport report;
  auto attr =
      module->getAttrOfType<mlir::DictionaryAttr>(mlir::moe::MoEDialect::kPlanReportAttrName);
  if (!attr)
    return report;
  module->removeAttr(mlir::moe::MoEDialect::kPlanReportAttrName);
  if (auto json = attr.getAs<mlir::StringAttr>("json"))
    report.json = nlohmann::json::parse(json.getValue().str(), nullptr, false);
  if (auto table = attr.getAs<mlir::StringAttr>("table"))
    report.table = table.getValue().str();
  return report;
}

/// A partitioned cluster plan: what the user should know about running it.
void notePartitionedPlan(mlir::ModuleOp module, const CompileOptions &options) {
  auto grid = module->getAttrOfType<mlir::moe::GridAttr>(mlir::moe::MoEDialect::kGridAttrName);
  if (!grid || grid.getNumRanks() == 1)
    return;
  if (auto plan = module->getAttrOfType<mlir::moe::PlanAttr>(mlir::moe::MoEDialect::kPlanAttrName))
    if (plan.getZeroStage() && options.parallel.zero == 0)
      errs() << "moec: note: the plan shards the optimiser state (ZeRO-1) and --zero 0 keeps "
                "it replicated, so each rank holds more than the plan's memory\n";
  if (options.emit == Emit::Exe)
    errs() << "moec: the step is partitioned for the plan's " << grid.getNumRanks() << " ranks (dp "
           << grid.getDp() << " x ep " << grid.getEp() << " x tp " << grid.getTp()
           << "): run it with --ranks " << grid.getNumRanks() << " (threads) or under mpirun -n "
           << grid.getNumRanks() << "\n";
}

} // namespace

mlir::LogicalResult moec::driver::runPipeline(mlir::ModuleOp module, const CompileOptions &options,
                                              PlanReport *report, int64_t replica) {
  Stage stage("pipeline", options.verbose);
  mlir::PassManager pm(module.getContext());
  mlir::moe::TrainPipelineOptions pipeline;
  pipelineOptions(options, module, pipeline);
  pipeline.replica = replica;
  Expected<std::vector<mlir::moe::PipelineInsertion>> insertions =
      pipelineInsertions(options.extensions);
  if (!insertions) {
    errs() << "moec: error: " << toString(insertions.takeError()) << "\n";
    return mlir::failure();
  }
  std::string error;
  raw_string_ostream errors(error);
  if (mlir::failed(mlir::moe::buildTrainPipeline(pm, pipeline, *insertions, errors))) {
    errs() << "moec: error: " << error;
    return mlir::failure();
  }
  if (options.verbose && replica == 0) {
    errs() << "moec: pipeline: ";
    pm.printAsTextualPipeline(errs());
    errs() << "\n";
  }
  mlir::LogicalResult ran = pm.run(module);
  PlanReport taken = takeReport(module);
  bool quiet = replica > 0; // another share's program: reported already
  if (quiet || mlir::failed(ran))
    return ran;
  bool cluster = !options.import.cluster.empty();
  if (!cluster) {
    if (options.emit == Emit::Exe)
      warnIfThisHostIsTooSmall(module);
    return mlir::success();
  }
  if (options.verbose)
    errs() << taken.table;
  if (report)
    *report = std::move(taken);
  notePartitionedPlan(module, options);
  return mlir::success();
}
