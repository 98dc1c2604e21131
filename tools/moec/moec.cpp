//===- moec.cpp - the MoEC driver ------------------------------------------===//
//
//   moec examples/models/tiny.json [--cluster c.json] -o out/tiny --emit=kernels [-v]
//
// Stages: frontend (model description -> moe IR), the training pipeline
// (fused gating, autodiff + AdamW, kernel specs + buffer plan), then kernel
// generation with moe-halide-gen, and the step program compiled and linked
// into a training executable. `--emit=mlir|plan|kernels|cpp` stops after a
// stage. `--ranks N` partitions the step for N ranks (moe-partition).
//
//===----------------------------------------------------------------------===//

#include "EmitProgram.h"
#include "KernelTable.h"

#include "moe/Frontend/ClusterToMLIR.h"
#include "moe/Frontend/HFConfig.h"
#include "moe/Frontend/ModelToMLIR.h"
#include "moe/InitAllDialects.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <numeric>

using namespace llvm;
using namespace moec::frontend;

static cl::OptionCategory category("moec options");
static cl::opt<std::string> modelFile(cl::Positional, cl::desc("<model.json>"),
                                      cl::cat(category));
static cl::opt<bool> hfConfig("hf", cl::desc("The model is a HuggingFace config.json"),
                              cl::cat(category));
static cl::opt<std::string> clusterFile("cluster", cl::desc("Cluster description"),
                                        cl::value_desc("cluster.json"), cl::cat(category));
static cl::opt<std::string> outputPath("o", cl::desc("Output (file or directory)"),
                                       cl::value_desc("path"), cl::cat(category));
enum class Emit { Mlir, Plan, Kernels, Cpp, Exe };
static cl::opt<Emit> emit(
    "emit", cl::desc("Stop after a stage"),
    cl::values(clEnumValN(Emit::Mlir, "mlir", "the lowered training step (moe IR)"),
               clEnumValN(Emit::Plan, "plan", "the buffer plan and kernel list (JSON)"),
               clEnumValN(Emit::Kernels, "kernels",
                          "generate every kernel into <o>/kernels with a manifest"),
               clEnumValN(Emit::Cpp, "cpp", "the C++ step program"),
               clEnumValN(Emit::Exe, "exe", "the training executable (default)")),
    cl::init(Emit::Exe),
    cl::cat(category));
static cl::opt<bool> recompute(
    "recompute-ffn",
    cl::desc("FFN backward recomputes the pre-activations instead of saving "
             "them in the forward (less activation memory, slower step)"),
    cl::init(false));
static cl::opt<moec::Gemm> gemm(
    "gemm", cl::desc("Who computes the linear and FFN contractions"),
    cl::values(clEnumValN(moec::Gemm::Auto, "auto",
                          "OpenBLAS for large products, Halide for small ones (default)"),
               clEnumValN(moec::Gemm::Halide, "halide", "Halide schedules only"),
               clEnumValN(moec::Gemm::Blas, "blas", "OpenBLAS sgemm extern stages")),
    cl::init(moec::Gemm::Auto), cl::cat(category));
static cl::opt<bool> verbose("v", cl::desc("Show each stage and its time"),
                             cl::cat(category));
static cl::opt<unsigned> hfSeqLen(
    "seq-len", cl::desc("With --hf: tokens per sequence (default: "
                        "min(max_position_embeddings, 4096))"),
    cl::init(0), cl::cat(category));
static cl::opt<unsigned> hfBatch("batch-size",
                                 cl::desc("With --hf: sequences per step (default 1)"),
                                 cl::init(1), cl::cat(category));
static cl::opt<unsigned> ranks(
    "ranks",
    cl::desc("Partition the step over N ranks (data x expert parallel): the "
             "binary runs them as threads, or one per process under mpirun"),
    cl::init(1), cl::cat(category));
static cl::opt<unsigned> expertParallel(
    "ep",
    cl::desc("Expert-parallel degree of --ranks (default: the largest divisor "
             "of N that divides every layer's experts; dp = N / ep), or forced "
             "on a --cluster plan"),
    cl::init(0), cl::cat(category));
static cl::opt<unsigned> dataParallel(
    "dp", cl::desc("With --cluster: force the plan's data-parallel degree"), cl::init(0),
    cl::cat(category));
static cl::opt<unsigned> tensorParallel(
    "tp", cl::desc("With --cluster: force the plan's tensor-parallel degree"), cl::init(0),
    cl::cat(category));
static cl::opt<std::string> pinExperts(
    "pin-experts",
    cl::desc("With --cluster: pin experts to ep ranks, EXPERT@RANK,... (moe-plan-sharding pin=)"),
    cl::value_desc("list"), cl::init(""), cl::cat(category));
static cl::opt<std::string> compressGrad(
    "compress-grad",
    cl::desc("With --ranks: compress the gradient all-reduces with CODEC (fp16, bf16, "
             "int8[:block], topk[:ratio], sign, powersgd[:rank]; error feedback on)"),
    cl::value_desc("codec"), cl::init("none"), cl::cat(category));
static cl::opt<std::string> compressEmbedding(
    "compress-embedding",
    cl::desc("With --compress-grad: another codec for the token embedding and LM head "
             "gradients (row-sparse, not low-rank; e.g. int8 or none beside powersgd)"),
    cl::value_desc("codec"), cl::init(""), cl::cat(category));
static cl::opt<std::string> compressDispatch(
    "compress-dispatch",
    cl::desc("With --ranks: send the dispatch/combine token payloads as fp16, bf16 or "
             "int8[:block]"),
    cl::value_desc("codec"), cl::init("none"), cl::cat(category));
static cl::opt<unsigned> compressWarmup("compress-warmup",
                                        cl::desc("Uncompressed steps before the codec applies"),
                                        cl::init(0), cl::cat(category));
static cl::opt<bool> noErrorFeedback(
    "no-error-feedback",
    cl::desc("Drop what topk, sign and powersgd do not send (for comparison)"),
    cl::init(false), cl::cat(category));
static cl::opt<unsigned> routingGroups(
    "routing-groups",
    cl::desc("Route tokens in G groups of whole sequences (default: --ranks); "
             "a one-rank binary with G groups trains exactly as G ranks"),
    cl::init(0), cl::cat(category));

namespace {
using Clock = std::chrono::steady_clock;

/// Prints a stage's time under -v.
struct Stage {
  explicit Stage(const char *name) : name(name), start(Clock::now()) {}
  ~Stage() {
    if (verbose)
      errs() << "moec: " << name << ": "
             << static_cast<long long>(std::chrono::duration<double, std::milli>(
                                           Clock::now() - start)
                                           .count())
             << " ms\n";
  }
  const char *name;
  Clock::time_point start;
};

int fail(const Twine &message) {
  errs() << "moec: error: " << message << "\n";
  return 1;
}

/// moe-halide-gen beside this executable.
std::string generatorPath(const char *argv0) {
  std::string self = sys::fs::getMainExecutable(argv0, (void *)&generatorPath);
  SmallString<256> path(sys::path::parent_path(self));
  sys::path::append(path, "moe-halide-gen");
  return std::string(path);
}
} // namespace

/// Plans the sharding of `module` on its cluster (moe-plan-sharding after
/// moe-fuse-gating), reads the JSON report into `sharding`, prints the table
/// with -v, and keeps the plan's grid when the runtime executes it. A plan
/// it cannot execute is an error when emitting a step program (binary,
/// kernels, C++), whose plans are chosen with tp = 1 unless --tp is given,
/// and a note (the step stays on one rank) for --emit=plan|mlir.
static mlir::LogicalResult planOnCluster(mlir::ModuleOp module, nlohmann::json &sharding) {
  SmallString<128> jsonPath, tablePath;
  for (auto *path : {&jsonPath, &tablePath}) {
    int fd;
    if (sys::fs::createTemporaryFile("moec-plan", "txt", fd, *path))
      return fail("cannot create a temporary file for the plan report"), mlir::failure();
    sys::Process::SafelyCloseFileDescriptor(fd);
  }
  mlir::PassManager pm(module.getContext());
  pm.addPass(mlir::moe::createFuseGatingPass());
  mlir::moe::PlanShardingPassOptions plan;
  plan.reportJson = jsonPath.str().str();
  plan.reportTable = tablePath.str().str();
  plan.dpDegree = dataParallel;
  plan.epDegree = expertParallel;
  plan.pinExperts = pinExperts;
  // A step program runs on the runtime, which has no tensor parallelism
  // yet: its plans are chosen among tp = 1 unless --tp says otherwise.
  bool program = emit == Emit::Exe || emit == Emit::Kernels || emit == Emit::Cpp;
  plan.tpDegree = tensorParallel ? tensorParallel : (program ? 1 : 0);
  pm.addPass(mlir::moe::createPlanShardingPass(plan));
  mlir::LogicalResult ran = pm.run(module);
  auto json = MemoryBuffer::getFile(jsonPath);
  auto table = MemoryBuffer::getFile(tablePath);
  if (json && mlir::succeeded(ran))
    sharding = nlohmann::json::parse((*json)->getBuffer().str(), nullptr, false);
  if (table && verbose && mlir::succeeded(ran))
    errs() << (*table)->getBuffer();
  sys::fs::remove(jsonPath);
  sys::fs::remove(tablePath);
  if (mlir::failed(ran))
    return mlir::failure();
  auto grid = module->getAttrOfType<mlir::moe::GridAttr>("moe.grid");
  if (!grid || grid.getNumRanks() == 1)
    return mlir::success();
  // Why the runtime cannot run this plan, if it cannot.
  std::string why;
  int64_t replicas = grid.getDp() * grid.getEp();
  if (grid.getTp() > 1)
    why = "it uses tensor parallelism (tp = " + std::to_string(grid.getTp()) +
          "), which moe-partition does not execute yet";
  else if (grid.getDevices())
    why = "it gives the device kinds of a mixed cluster unequal shares of tokens and "
          "experts; the runtime executes equal shares only";
  for (auto fn : module.getOps<mlir::func::FuncOp>()) {
    auto tokens = llvm::dyn_cast<mlir::RankedTensorType>(fn.getArgument(0).getType());
    if (why.empty() && tokens && tokens.getRank() == 2 && tokens.getShape()[0] % replicas)
      why = "the batch of " + std::to_string(tokens.getShape()[0]) +
            " sequences does not split over its " + std::to_string(replicas) +
            " data replicas (dp x ep)";
    break;
  }
  module.walk([&](mlir::moe::ExpertFFNOp ffn) {
    int64_t experts =
        llvm::cast<mlir::RankedTensorType>(ffn.getX().getType()).getShape()[0];
    if (why.empty() && experts % grid.getEp())
      why = std::to_string(experts) + " experts do not split evenly over ep = " +
            std::to_string(grid.getEp());
    // moe-partition executes equal contiguous blocks of experts only.
    if (auto placement = ffn->getAttrOfType<mlir::moe::PlacementAttr>("placement"); why.empty() && placement)
      if (int64_t r = placement.firstNonBlockRank(experts, grid.getEp()); r >= 0)
        why = "its placement (pinned experts) gives ep rank " + std::to_string(r) +
              " experts other than an equal contiguous block";
  });
  std::string shape = "dp " + std::to_string(grid.getDp()) + " x ep " +
                      std::to_string(grid.getEp()) + " x tp " + std::to_string(grid.getTp());
  if (!why.empty()) {
    if (program)
      return fail("the cluster's plan (" + shape + ") is not executable: " + why +
                  "; force degrees the runtime runs with --dp/--ep/--tp, or use "
                  "--emit=plan for the report alone"),
             mlir::failure();
    errs() << "moec: note: the cluster's plan (" << shape << ") is not executable (" << why
           << "); the emitted step stays on one rank\n";
    module->removeAttr("moe.grid");
    module.walk([](mlir::moe::ExpertFFNOp ffn) { ffn->removeAttr("placement"); });
    return mlir::success();
  }
  if (auto zero = module->getAttrOfType<mlir::DictionaryAttr>("moe.plan"))
    if (auto stage = zero.getAs<mlir::IntegerAttr>("zero_stage"); stage && stage.getInt())
      errs() << "moec: note: the plan shards the optimiser state (ZeRO-1); the runtime "
                "keeps it replicated, so each rank holds more than the plan's memory\n";
  if (emit == Emit::Exe)
    errs() << "moec: the step is partitioned for the plan's " << grid.getNumRanks()
           << " ranks (" << shape << "): run it with --ranks " << grid.getNumRanks()
           << " (threads) or under mpirun -n " << grid.getNumRanks() << "\n";
  return mlir::success();
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions({&category, &cl::getGeneralCategory()});
  cl::ParseCommandLineOptions(argc, argv, "MoEC driver: a model description to a training step\n");
  if (modelFile.empty())
    return fail("give a model description: moec model.json -o OUT --emit=...");
  if (outputPath.empty() && (emit == Emit::Kernels || emit == Emit::Exe))
    return fail("give an output path: -o PATH");

  // Frontend.
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  mlir::OwningOpRef<mlir::ModuleOp> module;
  {
    Stage stage("frontend");
    DiagnosticList diags;
    std::optional<ModelSpec> spec;
    if (std::shared_ptr<const JsonDoc> doc = JsonDoc::load(modelFile, diags))
    {
      HFImportOptions hf;
      hf.seqLen = hfSeqLen;
      hf.batchSize = hfBatch;
      if (!hfConfig && (hfSeqLen.getNumOccurrences() || hfBatch.getNumOccurrences()))
        return fail("--seq-len and --batch-size apply to --hf configs (a MoEC model "
                    "JSON states seq_len and batch_size itself)");
      if (hfBatch < 1 || hfBatch > 1048576 || hfSeqLen > 1048576)
        return fail("--batch-size must be in [1, 1048576] and --seq-len at most 1048576");
      spec = hfConfig ? importHFConfig(doc, hf, diags) : readModelJson(doc, diags);
    }
    std::optional<ClusterSpec> cluster;
    if (!clusterFile.empty())
      if (std::shared_ptr<const JsonDoc> doc = JsonDoc::load(clusterFile, diags))
        cluster = readClusterJson(doc, diags);
    errs() << diags.str();
    if (diags.hasErrors() || !spec || (!clusterFile.empty() && !cluster))
      return 1;
    module = buildModule(*spec, context);
    // An evaluation copy of the forward step: no gradients, no update.
    SmallVector<mlir::func::FuncOp> steps(module->getOps<mlir::func::FuncOp>());
    for (auto fn : steps) {
      auto eval = fn.clone();
      eval.setName("eval_step");
      eval->setAttr("moe.no_grad", mlir::UnitAttr::get(&context));
      module->push_back(eval);
    }
    if (cluster)
      (*module)->setAttr(mlir::moe::MoEDialect::kClusterAttrName,
                         clusterAttr(*cluster, context));
    if (ranks < 1)
      return fail("--ranks must be >= 1");
    if (ranks > 1) {
      if (!clusterFile.empty())
        return fail("--ranks partitions the step for N ranks of this machine; with "
                    "--cluster the plan chooses the ranks (force degrees with "
                    "--dp/--ep/--tp): give one of them");
      // The expert count every layer's ep must divide.
      int64_t experts = 0;
      (*module)->walk([&](mlir::moe::ExpertFFNOp ffn) {
        experts = std::gcd(experts, llvm::cast<mlir::RankedTensorType>(
                                        ffn.getX().getType()).getShape()[0]);
      });
      int64_t ep = expertParallel;
      if (ep == 0)
        ep = experts ? std::gcd<int64_t>(experts, ranks.getValue()) : 1;
      if (ranks % ep != 0)
        return fail("--ep " + Twine(ep) + " does not divide --ranks " + Twine(ranks.getValue()));
      if (experts && experts % ep != 0)
        return fail("--ep " + Twine(ep) + " does not divide the " + Twine(experts) +
                    " experts of a layer");
      // Each data replica takes whole sequences of the batch.
      for (auto fn : module->getOps<mlir::func::FuncOp>()) {
        auto tokens = llvm::dyn_cast<mlir::RankedTensorType>(fn.getArgument(0).getType());
        if (tokens && tokens.getRank() == 2 && tokens.getShape()[0] % ranks != 0)
          return fail("--ranks " + Twine(ranks.getValue()) + ": the batch of " +
                      Twine(tokens.getShape()[0]) + " sequences does not split over " +
                      Twine(ranks.getValue()) + " data replicas (dp x ep); choose a "
                      "divisor of the batch size");
        break;
      }
      (*module)->setAttr(mlir::moe::MoEDialect::kGridAttrName,
                         mlir::moe::GridAttr::get(&context, ranks / ep, ep, 1, nullptr));
    } else if (clusterFile.empty() && expertParallel > 1) {
      return fail("--ep needs --ranks or --cluster");
    }
    if (clusterFile.empty() && (dataParallel || tensorParallel || !pinExperts.empty()))
      return fail("--dp, --tp and --pin-experts shape a --cluster plan");
  }

  // Training pipeline.
  nlohmann::json sharding;
  {
    Stage stage("pipeline");
    // With a cluster, moe-plan-sharding chooses the grid on the fused
    // forward step first; moe-partition then executes it when the runtime
    // can (tp = 1, one device kind, whole sequences per replica).
    if (!clusterFile.empty()) {
      if (failed(planOnCluster(*module, sharding)))
        return 1;
    }
    mlir::PassManager pm(&context);
    mlir::moe::TrainPipelineOptions pipeline;
    pipeline.lower = false;
    pipeline.routingGroups = routingGroups;
    pipeline.compressGrad = compressGrad;
    pipeline.compressDispatch = compressDispatch;
    pipeline.compressEmbedding = compressEmbedding;
    pipeline.compressWarmup = compressWarmup;
    pipeline.errorFeedback = !noErrorFeedback;
    auto grid = (*module)->getAttrOfType<mlir::moe::GridAttr>("moe.grid");
    if (pipeline.compresses() && (!grid || grid.getNumRanks() <= 1))
      return fail("--compress-grad, --compress-embedding and --compress-dispatch compress "
                  "the collectives of a partitioned step: give --ranks N (N > 1), or a "
                  "--cluster whose executable plan has more than one rank");
    mlir::moe::buildTrainPipeline(pm, pipeline);
    mlir::moe::LowerToKernelsPassOptions lower;
    lower.savePreactivations = !recompute;
    pm.addPass(mlir::moe::createLowerToKernelsPass(lower));
    if (mlir::failed(pm.run(*module)))
      return 1;
  }

  if (emit == Emit::Mlir) {
    std::string error;
    auto out = mlir::openOutputFile(outputPath.empty() ? std::string("-") : std::string(outputPath), &error);
    if (!out)
      return fail(error);
    module->print(out->os());
    out->keep();
    return 0;
  }

  // Kernel specs -> generator calls.
  nlohmann::json manifest = nlohmann::json::object();
  std::vector<std::pair<std::string, moec::KernelCall>> calls;
  std::map<std::string, moec::KernelCall> callMap;
  for (auto kernel : module->getOps<mlir::moe::KernelOp>()) {
    mlir::FailureOr<moec::KernelCall> call = moec::lookupKernel(kernel, gemm);
    if (mlir::failed(call))
      return 1;
    callMap[kernel.getSymName().str()] = *call;
    nlohmann::json entry = {{"family", kernel.getFamily().str()}};
    if (call->generator.empty())
      entry["runtime"] = call->runtimeRoutine;
    else
      entry["generator"] = call->generator, entry["params"] = call->params,
      entry["scratch_bytes"] = call->scratchBytes;
    manifest[kernel.getSymName().str()] = entry;
    calls.push_back({kernel.getSymName().str(), *call});
  }
  nlohmann::json plan = nlohmann::json::object();
  if (auto dict = (*module)->getAttrOfType<mlir::DictionaryAttr>("moe.buffer_plan"))
    for (auto entry : dict)
      if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(entry.getValue()))
        plan[entry.getName().str()] = i.getInt();
  // Kernels run one at a time: the scratch peak is the largest kernel's.
  int64_t scratch = 0;
  for (auto &entry : calls)
    scratch = std::max(scratch, entry.second.scratchBytes);
  plan["kernel_scratch_bytes"] = scratch;

  if (emit == Emit::Plan) {
    nlohmann::json out = {{"buffer_plan", plan}, {"kernels", manifest}};
    if (!sharding.is_null() && !sharding.is_discarded())
      out["sharding"] = sharding;
    std::string error;
    auto file = mlir::openOutputFile(outputPath.empty() ? std::string("-") : std::string(outputPath), &error);
    if (!file)
      return fail(error);
    file->os() << out.dump(2) << "\n";
    file->keep();
    return 0;
  }

  if (emit == Emit::Cpp) {
    std::string error;
    auto file = mlir::openOutputFile(outputPath.empty() ? std::string("-") : std::string(outputPath), &error);
    if (!file)
      return fail(error);
    if (mlir::failed(moec::emitStepProgram(*module, callMap, file->os())))
      return 1;
    file->keep();
    return 0;
  }

  // Generate every kernel: into <o>/kernels for --emit=kernels, next to the
  // executable (<o>.build/kernels) otherwise.
  std::optional<Stage> kernelStage(std::in_place, "kernels");
  SmallString<256> buildDir(outputPath);
  if (emit == Emit::Exe)
    buildDir += ".build";
  SmallString<256> dir(buildDir);
  sys::path::append(dir, "kernels");
  if (std::error_code ec = sys::fs::create_directories(dir))
    return fail(Twine("cannot create ") + dir + ": " + ec.message());
  std::string gen = generatorPath(argv[0]);
  if (!sys::fs::can_execute(gen))
    return fail("moe-halide-gen not found next to moec (" + gen + ")");
  for (auto &[name, call] : calls) {
    if (call.generator.empty())
      continue;
    SmallVector<std::string> args = {gen, "-g", call.generator, "-f", name, "-o",
                                     std::string(dir), "-e", "static_library,c_header",
                                     "target=host-no_runtime"};
    args.append(call.params.begin(), call.params.end());
    SmallVector<StringRef> refs(args.begin(), args.end());
    std::string error;
    if (verbose)
      errs() << "moec: generating " << name << " (" << call.generator << ")\n";
    int rc = sys::ExecuteAndWait(gen, refs, std::nullopt, {}, 0, 0, &error);
    if (rc != 0)
      return fail("moe-halide-gen failed on kernel " + name + " (" +
                  call.generator + "): " + (error.empty() ? "exit " + std::to_string(rc) : error));
  }
  SmallString<256> manifestPath(buildDir);
  sys::path::append(manifestPath, "kernels.json");
  {
    std::error_code ec;
    raw_fd_ostream os(manifestPath, ec);
    if (ec)
      return fail(Twine("cannot write ") + manifestPath + ": " + ec.message());
    os << nlohmann::json({{"buffer_plan", plan}, {"kernels", manifest}}).dump(2) << "\n";
  }
  if (emit == Emit::Kernels)
    return 0;
  // The Halide runtime, once per binary.
  {
    SmallVector<StringRef> args = {gen, "-r", "halide_runtime", "-o", dir, "-e",
                                   "static_library", "target=host"};
    std::string error;
    if (sys::ExecuteAndWait(gen, args, std::nullopt, {}, 0, 0, &error) != 0)
      return fail("moe-halide-gen failed to emit the Halide runtime: " + error);
  }
  kernelStage.reset();

  // The step program, compiled and linked with the kernels and the runtime.
  Stage link("link");
  SmallString<256> cpp(buildDir);
  sys::path::append(cpp, "step.cpp");
  {
    std::error_code ec;
    raw_fd_ostream os(cpp, ec);
    if (ec)
      return fail(Twine("cannot write ") + cpp + ": " + ec.message());
    if (mlir::failed(moec::emitStepProgram(*module, callMap, os)))
      return 1;
  }
  std::string cxx = MOEC_CXX;
  SmallVector<std::string> args = {cxx, "-O2", "-std=c++17", std::string(cpp),
                                   "-I" + std::string(dir), "-I" MOEC_RUNTIME_INCLUDE,
                                   "-I" MOEC_HALIDE_INCLUDE, "-o", std::string(outputPath)};
  for (auto &[name, call] : calls)
    if (!call.generator.empty())
      args.push_back((dir + "/" + name + ".a").str());
  args.push_back((dir + "/halide_runtime.a").str());
  args.push_back(MOEC_RUNTIME_MAIN_LIB);
#ifdef MOEC_RUNTIME_MPI_LIB
  // A partitioned binary also runs under mpirun, one rank per process.
  if (ranks > 1) {
    // The trainer refers to the MPI backend weakly: pull it in whole.
    args.push_back("-Wl,--whole-archive");
    args.push_back(MOEC_RUNTIME_MPI_LIB);
    args.push_back("-Wl,--no-whole-archive");
    SmallVector<StringRef> libs;
    StringRef(MOEC_MPI_LIBS).split(libs, ';', -1, false);
    for (StringRef lib : libs)
      args.push_back(lib.str());
  }
#endif
  args.push_back(MOEC_RUNTIME_LIB);
  args.push_back(MOEC_OPENBLAS_LIB); // the kernels' extern GEMMs
  args.push_back("-lpthread");
  args.push_back("-ldl");
  SmallVector<StringRef> refs(args.begin(), args.end());
  std::string error;
  if (verbose)
    errs() << "moec: compiling " << cpp << "\n";
  auto cxxPath = sys::findProgramByName(cxx);
  if (!cxxPath)
    return fail("C++ compiler '" + cxx + "' not found");
  if (sys::ExecuteAndWait(*cxxPath, refs, std::nullopt, {}, 0, 0, &error) != 0)
    return fail("compiling the step program failed (" + std::string(cpp) + ")" +
                (error.empty() ? "" : ": " + error));
  if (verbose)
    errs() << "moec: wrote " << outputPath << "\n";
  return 0;
}
