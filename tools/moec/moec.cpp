//===- moec.cpp - the MoEC driver ------------------------------------------===//
//
//   moec examples/models/tiny.json [--cluster c.json] -o out/tiny --emit=kernels [-v]
//
// A driver only: the frontend reads the model (and cluster) into moe IR,
// the training pipeline (passes/lib/Pipelines.cpp, the one moe-opt
// --moe-train-pipeline runs) lowers it to kernel specs and a buffer plan,
// and the back end (codegen/lib) generates the kernels, emits the step
// program and links the training executable. `--emit=mlir|plan|kernels|cpp`
// stops after a stage.
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/HostTarget.h"
#include "moe/Codegen/StepProgram.h"
#include "moe/Codegen/Toolchain.h"
#include "moe/Frontend/ClusterToMLIR.h"
#include "moe/Frontend/HFConfig.h"
#include "moe/Frontend/ModelToMLIR.h"
#include "moe/InitAllDialects.h"
#include "moe/Transforms/Passes.h"
#include "moe/Transforms/Pipelines.h"
#include "moert/Abi.h"
#include "moert/CpuTarget.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <limits>
#include <set>

using namespace llvm;
using namespace moec::frontend;

static cl::OptionCategory category("moec options");
static cl::opt<std::string> modelFile(cl::Positional, cl::desc("<model.json>"), cl::cat(category));
static cl::opt<bool> hfConfig("hf", cl::desc("The model is a HuggingFace config.json"),
                              cl::cat(category));
static cl::opt<std::string> clusterFile("cluster", cl::desc("Cluster description"),
                                        cl::value_desc("cluster.json"), cl::cat(category));
static cl::opt<std::string> outputPath("o", cl::desc("Output (file or directory)"),
                                       cl::value_desc("path"), cl::cat(category));
enum class Emit { Mlir, Plan, Kernels, Cpp, Exe };
static cl::opt<Emit>
    emit("emit", cl::desc("Stop after a stage"),
         cl::values(clEnumValN(Emit::Mlir, "mlir", "the lowered training step (moe IR)"),
                    clEnumValN(Emit::Plan, "plan", "the buffer plan and kernel list (JSON)"),
                    clEnumValN(Emit::Kernels, "kernels",
                               "generate every kernel into <o>/kernels with a manifest"),
                    clEnumValN(Emit::Cpp, "cpp", "the C++ step program"),
                    clEnumValN(Emit::Exe, "exe", "the training executable (default)")),
         cl::init(Emit::Exe), cl::cat(category));
static cl::opt<bool>
    recompute("recompute-ffn",
              cl::desc("FFN backward recomputes the pre-activations instead of saving "
                       "them in the forward (less activation memory, slower step)"),
              cl::init(false), cl::cat(category));
static cl::opt<bool> denseExperts(
    "dense-experts",
    cl::desc("Expert FFNs compute every capacity slot, empty ones included, instead of the "
             "routed rows only (for comparison)"),
    cl::init(false), cl::cat(category));
static cl::opt<unsigned> expertChunks(
    "expert-chunks",
    cl::desc("With --ranks: pipeline each expert phase's dispatch, expert FFNs and combine in N "
             "chunks of experts, so that chunks compute while others are on the wire "
             "(moe-pipeline-experts; default 1: off)"),
    cl::init(1), cl::cat(category));
enum class Schedule { Overlap, Blocking };
static cl::opt<Schedule> schedule(
    "schedule", cl::desc("When the gradient all-reduces run"),
    cl::values(clEnumValN(Schedule::Overlap, "overlap",
                          "in the background, each bucket from when its last gradient exists "
                          "to the optimiser (moe-schedule; default)"),
               clEnumValN(Schedule::Blocking, "blocking",
                          "one after another after the backward, each blocking the step")),
    cl::init(Schedule::Overlap), cl::cat(category));
static cl::opt<moec::codegen::Gemm>
    gemm("gemm", cl::desc("Who computes the linear and FFN contractions"),
         cl::values(clEnumValN(moec::codegen::Gemm::Auto, "auto",
                               "OpenBLAS for large products, Halide for small ones (default)"),
                    clEnumValN(moec::codegen::Gemm::Halide, "halide", "Halide schedules only"),
                    clEnumValN(moec::codegen::Gemm::Blas, "blas", "OpenBLAS sgemm extern stages")),
         cl::init(moec::codegen::Gemm::Auto), cl::cat(category));
static cl::opt<moec::codegen::Target> target(
    "target", cl::desc("Where the kernels run"),
    cl::values(clEnumValN(moec::codegen::Target::Host, "host", "the host CPU (default)"),
               clEnumValN(moec::codegen::Target::OpenCL, "opencl",
                          "an OpenCL device (Halide's OpenCL back end; implies --gemm=halide)"),
               clEnumValN(moec::codegen::Target::Cuda, "cuda",
                          "an NVIDIA GPU (Halide's CUDA back end; implies --gemm=halide)")),
    cl::init(moec::codegen::Target::Host), cl::cat(category));
static cl::opt<unsigned> cudaCapability(
    "cuda-capability",
    cl::desc("With --target=cuda: the compute capability the kernels' PTX targets, one of 30, "
             "32, 35, 50, 61, 70, 75, 80, 86 (default 80: Ampere, Hopper and later GPUs run it)"),
    cl::init(80), cl::cat(category));
static cl::opt<std::string> hostTarget(
    "host-target",
    cl::desc("The CPU the host kernels (and the host side of device kernels) run on: 'host' "
             "(default: this machine's CPU features), an x86-64 level or LLVM CPU name "
             "(x86-64-v3, x86-64-v4, znver4, sapphirerapids), several names comma-separated "
             "(the features all have: a cluster of mixed CPUs), or a Halide target "
             "arch-bits-os-features, e.g. x86-64-linux-avx-avx2-f16c-fma-sse41"),
    cl::init("host"), cl::cat(category));
static cl::opt<bool> printHostTarget(
    "print-host-target",
    cl::desc("Print the Halide target --host-target resolves to and the CPU features its "
             "kernels need, then exit (no model needed)"),
    cl::init(false), cl::cat(category));
static cl::opt<bool> verbose("v", cl::desc("Show each stage and its time"), cl::cat(category));
static cl::opt<unsigned>
    jobs("j",
         cl::desc("Run N kernel generators (and step-program compiles) at once (default: one "
                  "per hardware thread, at most 8)"),
         cl::value_desc("N"), cl::init(0), cl::cat(category));
static cl::opt<bool> noKernelCache(
    "no-kernel-cache",
    cl::desc("Generate every kernel, ignoring the kernel cache ($MOEC_KERNEL_CACHE, else "
             "~/.cache/moec/kernels; MOEC_KERNEL_CACHE=none disables it)"),
    cl::init(false), cl::cat(category));
static cl::opt<unsigned> hfSeqLen("seq-len",
                                  cl::desc("With --hf: tokens per sequence (default: "
                                           "min(max_position_embeddings, 4096))"),
                                  cl::init(0), cl::cat(category));
static cl::opt<std::string>
    hfOverride("override",
               cl::desc("With --hf: set top-level config.json fields first, KEY=VALUE,... "
                        "(e.g. num_hidden_layers=2,hidden_size=256,num_experts=8)"),
               cl::value_desc("list"), cl::init(""), cl::cat(category));
static cl::opt<std::string>
    hfOptimizer("optimizer",
                cl::desc("With --hf: optimiser settings, KEY=VALUE,... (the model JSON's "
                         "optimizer fields: lr, warmup_steps, total_steps, min_lr, schedule, "
                         "weight_decay, grad_clip, eps)"),
                cl::value_desc("list"), cl::init(""), cl::cat(category));
static cl::opt<std::string>
    hfCapacity("capacity-factor",
               cl::desc("With --hf: expert capacity factor, a number or 'dropless' (default: the "
                        "family's own routing: dropless, Switch Transformers' expert_capacity)"),
               cl::value_desc("F|dropless"), cl::init(""), cl::cat(category));
static cl::opt<std::string>
    hfDtype("dtype",
            cl::desc("With --hf: the type the step computes in, f32 (default), or bf16 or f16 "
                     "(mixed precision: f32 master weights, docs/MixedPrecision.md)"),
            cl::value_desc("f32|bf16|f16"), cl::init("f32"), cl::cat(category));
static cl::opt<unsigned> hfBatch("batch-size",
                                 cl::desc("With --hf: sequences per step (default 1)"), cl::init(1),
                                 cl::cat(category));
static cl::opt<unsigned>
    ranks("ranks",
          cl::desc("Partition the step over N ranks (data x expert parallel): the "
                   "binary runs them as threads, or one per process under mpirun"),
          cl::init(1), cl::cat(category));
static cl::opt<unsigned>
    expertParallel("ep",
                   cl::desc("Expert-parallel degree of --ranks (default: the largest divisor "
                            "of N that divides every layer's experts; dp = N / ep), or forced "
                            "on a --cluster plan"),
                   cl::init(0), cl::cat(category));
static cl::opt<unsigned>
    dataParallel("dp",
                 cl::desc("Data-parallel degree of --ranks (ep = N / (dp tp)), or forced "
                          "on a --cluster plan"),
                 cl::init(0), cl::cat(category));
static cl::opt<unsigned>
    tensorParallel("tp",
                   cl::desc("Tensor-parallel degree of --ranks (attention heads and FFN "
                            "widths split, Megatron-style), or forced on a --cluster plan"),
                   cl::init(0), cl::cat(category));
static cl::opt<int>
    zeroStage("zero",
              cl::desc("ZeRO stage of a partitioned step: 1 shards the AdamW moments over the "
                       "data replicas (reduce-scatter the gradients, update the shard, "
                       "all-gather the parameters), 2 frees each full gradient once reduced "
                       "too, 0 keeps both replicated (default: 0, or the --cluster plan's "
                       "choice)"),
              cl::value_desc("0|1|2"), cl::init(-1), cl::cat(category));
static cl::opt<std::string> pinExperts(
    "pin-experts",
    cl::desc("With --cluster: pin experts to ep ranks, EXPERT@RANK,... (moe-plan-sharding pin=)"),
    cl::value_desc("list"), cl::init(""), cl::cat(category));
static cl::opt<std::string>
    compressGrad("compress-grad",
                 cl::desc("With --ranks: compress the gradient all-reduces with CODEC (fp16, bf16, "
                          "int8[:block], topk[:ratio], sign, powersgd[:rank]; error feedback on)"),
                 cl::value_desc("codec"), cl::init("none"), cl::cat(category));
static cl::opt<std::string> compressEmbedding(
    "compress-embedding",
    cl::desc("With --ranks: the codec of the token embedding and LM head gradients "
             "(default: --compress-grad's; alone, only they are compressed). They are "
             "row-sparse, not low-rank: e.g. int8 or none beside powersgd"),
    cl::value_desc("codec"), cl::init(""), cl::cat(category));
static cl::opt<std::string> compressDispatch(
    "compress-dispatch",
    cl::desc("With --ranks: send the dispatch/combine token payloads as fp16, bf16 or "
             "int8[:block]"),
    cl::value_desc("codec"), cl::init("none"), cl::cat(category));
static cl::opt<unsigned> compressWarmup("compress-warmup",
                                        cl::desc("Uncompressed steps before the codec applies"),
                                        cl::init(0), cl::cat(category));
static cl::opt<bool>
    noErrorFeedback("no-error-feedback",
                    cl::desc("Drop what topk, sign and powersgd do not send (for comparison)"),
                    cl::init(false), cl::cat(category));
static cl::opt<unsigned> redundantExperts(
    "redundant-experts",
    cl::desc("Spare expert positions per MoE layer of a partitioned step (ep > 1), empty "
             "until the binary's --rebalance-every fills them with replicas of hot experts"),
    cl::init(0), cl::cat(category));
static cl::opt<unsigned>
    routingGroups("routing-groups",
                  cl::desc("Route tokens in G groups of whole sequences (default: --ranks); "
                           "a one-rank binary with G groups trains exactly as G ranks"),
                  cl::init(0), cl::cat(category));
static cl::opt<std::string> tokenShares(
    "token-shares",
    cl::desc("Sequences of the batch per data replica, B0,B1,... (unequal shares for devices of "
             "unequal speed: each replica runs its own step program); with one rank, routing "
             "groups of these sizes, which trains exactly as the replicas do"),
    cl::cat(category));

namespace {
using Clock = std::chrono::steady_clock;

/// Prints a stage's time under -v.
struct Stage {
  explicit Stage(const char *name) : name(name), start(Clock::now()) {}
  ~Stage() {
    if (verbose)
      errs() << "moec: " << name << ": "
             << static_cast<long long>(
                    std::chrono::duration<double, std::milli>(Clock::now() - start).count())
             << " ms\n";
  }
  const char *name;
  Clock::time_point start;
};

int fail(const Twine &message) {
  errs() << "moec: error: " << message << "\n";
  return 1;
}

/// True when the cluster's device kinds chose the target (no --target),
/// and the --gemm given before a device target made it halide.
bool targetFromCluster = false;
moec::codegen::Gemm gemmGiven = moec::codegen::Gemm::Auto;

/// Whether this compile generates kernels (the target matters then).
bool emitsKernels() { return emit == Emit::Exe || emit == Emit::Kernels || emit == Emit::Cpp; }

/// Without --target, a --cluster chooses it: the back end of every device
/// kind its nodes use (each kind's `target`: the presets' own, or declared
/// in the file), else the host. A cluster with errors is left to readModel
/// to report.
void chooseTargetFromCluster() {
  DiagnosticList diags;
  std::shared_ptr<const JsonDoc> doc = JsonDoc::load(clusterFile, diags);
  std::optional<ClusterSpec> cluster;
  if (doc)
    cluster = readClusterJson(doc, diags);
  if (!cluster || diags.hasErrors())
    return;
  std::vector<std::string> kinds;
  std::set<std::string> targets;
  for (const NodeGroup &group : cluster->nodes) {
    auto kind = cluster->kinds.find(group.device);
    if (kind == cluster->kinds.end())
      return;
    if (!llvm::is_contained(kinds, group.device))
      kinds.push_back(group.device);
    targets.insert(kind->second.target);
  }
  std::string names = llvm::join(kinds, ", ");
  if (targets.size() == 1 && (*targets.begin() == "cuda" || *targets.begin() == "opencl")) {
    if (gemm == moec::codegen::Gemm::Blas) {
      if (emitsKernels())
        errs() << "moec: note: kernels for --target host: --gemm=blas calls OpenBLAS on the host "
                  "(the cluster's "
               << names << " devices would take --target " << *targets.begin() << ")\n";
      return;
    }
    target =
        *targets.begin() == "cuda" ? moec::codegen::Target::Cuda : moec::codegen::Target::OpenCL;
    targetFromCluster = true;
    if (emitsKernels())
      errs() << "moec: note: kernels for --target " << *targets.begin() << ", the cluster's "
             << names << " devices (--target host builds for this CPU)\n";
    return;
  }
  if (emitsKernels() && (targets.size() > 1 || *targets.begin() != "host")) {
    // Several back ends among the kinds, or none at all.
    targets.erase("");
    errs() << "moec: note: kernels for --target host: the cluster's devices (" << names << ") "
           << (targets.empty() ? "have no moec back end" : "share no moec back end")
           << " (a kind's \"target\" names one; --target chooses)\n";
  }
}

/// moe-halide-gen beside this executable.
std::string generatorPath(const char *argv0) {
  std::string self = sys::fs::getMainExecutable(argv0, (void *)&generatorPath);
  SmallString<256> path(sys::path::parent_path(self));
  sys::path::append(path, "moe-halide-gen");
  return std::string(path);
}

/// Prints a pass diagnostic as `file:line:col: error: message` (the
/// location of the model file's element it concerns), or `moec: error:`.
mlir::LogicalResult printDiagnostic(mlir::Diagnostic &diag) {
  auto print = [](mlir::Location loc, mlir::DiagnosticSeverity severity, const Twine &text) {
    if (auto file = dyn_cast<mlir::FileLineColLoc>(loc))
      errs() << file.getFilename().getValue() << ":" << file.getLine() << ":" << file.getColumn()
             << ": ";
    else
      errs() << "moec: ";
    errs() << (severity == mlir::DiagnosticSeverity::Error     ? "error: "
               : severity == mlir::DiagnosticSeverity::Warning ? "warning: "
                                                               : "note: ")
           << text << "\n";
  };
  print(diag.getLocation(), diag.getSeverity(), diag.str());
  for (mlir::Diagnostic &note : diag.getNotes())
    print(note.getLocation(), note.getSeverity(), note.str());
  return mlir::success();
}

/// Writes `text` to `path` ("-": stdout).
int writeOutput(StringRef path, llvm::function_ref<void(raw_ostream &)> text) {
  std::string error;
  auto file = mlir::openOutputFile(path.empty() ? StringRef("-") : path, &error);
  if (!file)
    return fail(error);
  text(file->os());
  file->keep();
  return 0;
}

/// The model (and cluster) as moe IR, or null after printing the errors.
mlir::OwningOpRef<mlir::ModuleOp> readModel(mlir::MLIRContext &context) {
  Stage stage("frontend");
  DiagnosticList diags;
  std::optional<ModelSpec> spec;
  if (std::shared_ptr<const JsonDoc> doc = JsonDoc::load(modelFile, diags)) {
    HFImportOptions hf;
    hf.seqLen = hfSeqLen;
    hf.batchSize = hfBatch;
    hf.dtype = hfDtype;
    if (!hfConfig)
      spec = readModelJson(doc, diags);
    else if (parseHFOverrides(hfOverride, "--override", hf.overrides, diags) &&
             parseHFOverrides(hfOptimizer, "--optimizer", hf.optimizer, diags) &&
             (hfCapacity.empty() || parseHFCapacity(hfCapacity, hf.capacityFactor, diags)))
      spec = importHFConfig(doc, hf, diags);
    // Halide 14's OpenCL back end has no bf16 (f16 needs cl_khr_fp16), and
    // its CUDA back end fails on bf16: low precision runs on the host.
    bool backEnd = emitsKernels();
    if (spec && spec->dtype != "f32" && targetFromCluster) {
      // A target the cluster chose gives way to the model's precision.
      if (backEnd)
        errs() << "moec: note: kernels for --target host after all: " << spec->dtype
               << " models run on the host only (docs/Targets.md)\n";
      target = moec::codegen::Target::Host;
      gemm = gemmGiven;
      targetFromCluster = false;
    }
    if (spec && spec->dtype != "f32" && backEnd && target != moec::codegen::Target::Host)
      diags.error(doc->file(), hfConfig ? SourcePos() : doc->valuePos("/dtype"),
                  "/dtype: \"" + spec->dtype + "\" models run on --target host only (Halide 14's " +
                      moec::codegen::targetName(target).str() +
                      " back end does not generate 16-bit float kernels); train with dtype f32 on "
                      "--target " +
                      moec::codegen::targetName(target).str());
  }
  std::optional<ClusterSpec> cluster;
  if (!clusterFile.empty())
    if (std::shared_ptr<const JsonDoc> doc = JsonDoc::load(clusterFile, diags))
      cluster = readClusterJson(doc, diags);
  errs() << diags.str();
  if (diags.hasErrors() || !spec || (!clusterFile.empty() && !cluster))
    return nullptr;
  mlir::OwningOpRef<mlir::ModuleOp> module = buildModule(*spec, context);
  if (module && cluster)
    (*module)->setAttr(mlir::moe::MoEDialect::kClusterAttrName, clusterAttr(*cluster, context));
  return module;
}

/// Without a cluster the binary runs here: say at compile time when this
/// machine cannot hold the plan (the binary refuses to start then).
void warnIfThisHostIsTooSmall(mlir::ModuleOp module) {
  auto plan =
      module->getAttrOfType<mlir::DictionaryAttr>(mlir::moe::MoEDialect::kBufferPlanAttrName);
  auto total = plan ? plan.getAs<mlir::IntegerAttr>("total_bytes") : nullptr;
  auto grid = module->getAttrOfType<mlir::moe::GridAttr>(mlir::moe::MoEDialect::kGridAttrName);
  if (!total)
    return;
  double need = static_cast<double>(total.getInt()) * (grid ? grid.getNumRanks() : 1);
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

/// Flag combinations the pipeline does not judge.
void pipelineOptions(mlir::moe::TrainPipelineOptions &options, StringRef reportJson,
                     StringRef reportTable);

/// --print-host-target: the target and the CPU features it needs.
int printResolvedHostTarget() {
  Expected<std::string> resolved = moec::codegen::resolveHostTarget(hostTarget);
  if (!resolved)
    return fail(toString(resolved.takeError()));
  std::vector<std::string> needs = moert::cpuFeaturesOf(*resolved);
  outs() << *resolved << "\n  needs: " << (needs.empty() ? "the x86-64 baseline" : "")
         << llvm::join(needs, " ") << "\n";
  return 0;
}

int checkFlags() {
  if (modelFile.empty())
    return fail("give a model description: moec model.json -o OUT --emit=...");
  if (outputPath.empty() && (emit == Emit::Kernels || emit == Emit::Exe))
    return fail("give an output path: -o PATH");
  // The executable is a file (its build folder goes beside it, PATH.build).
  if (emit == Emit::Exe && sys::fs::is_directory(outputPath)) {
    SmallString<128> example(StringRef(outputPath).rtrim('/'));
    sys::path::append(example, "train");
    return fail("-o " + outputPath + " is a directory: give the executable's path, e.g. -o " +
                example);
  }
  if (!hfConfig &&
      (hfSeqLen.getNumOccurrences() || hfBatch.getNumOccurrences() || !hfOverride.empty() ||
       !hfOptimizer.empty() || hfCapacity.getNumOccurrences() || hfDtype.getNumOccurrences()))
    return fail("--seq-len, --batch-size, --override, --optimizer, --capacity-factor and --dtype "
                "apply to --hf configs (a MoEC model JSON states its fields itself)");
  if (hfDtype != "f32" && hfDtype != "bf16" && hfDtype != "f16")
    return fail("--dtype must be f32, bf16 or f16, got '" + hfDtype + "'");
  if (hfBatch < 1 || hfBatch > 1048576 || hfSeqLen > 1048576)
    return fail("--batch-size must be in [1, 1048576] and --seq-len at most 1048576");
  if (ranks < 1)
    return fail("--ranks must be >= 1");
  if (!clusterFile.empty() && !target.getNumOccurrences())
    chooseTargetFromCluster();
  if (target != moec::codegen::Target::Host) {
    // The OpenBLAS extern stages run on the host; a device step computes
    // every contraction in its kernels.
    if (gemm == moec::codegen::Gemm::Blas)
      return fail("--gemm=blas calls OpenBLAS on the host: with --target=" +
                  moec::codegen::targetName(target) + " give --gemm=halide or auto");
    gemmGiven = gemm;
    gemm = moec::codegen::Gemm::Halide;
  }
  if (expertChunks < 1 || expertChunks > 64)
    return fail("--expert-chunks must be in [1, 64], got " + Twine(expertChunks.getValue()));
  // The chunks are views into planned buffers; a device step keeps a copy
  // of each tensor per value (moert/Device.h).
  if (expertChunks > 1 && target != moec::codegen::Target::Host)
    return fail("--expert-chunks pipelines host steps only (--target=host)");
  if (cudaCapability.getNumOccurrences()) {
    if (target != moec::codegen::Target::Cuda)
      return fail("--cuda-capability applies to --target=cuda");
    if (!llvm::is_contained(ArrayRef<unsigned>{30, 32, 35, 50, 61, 70, 75, 80, 86}, cudaCapability))
      return fail("--cuda-capability " + Twine(cudaCapability) +
                  ": Halide targets 30, 32, 35, 50, 61, 70, 75, 80 or 86");
  }
  if (Expected<std::string> resolved = moec::codegen::resolveHostTarget(hostTarget))
    hostTarget = *resolved;
  else
    return fail(toString(resolved.takeError()));
  if (ranks > 1 && !clusterFile.empty())
    return fail("--ranks partitions the step for N ranks of this machine; with "
                "--cluster the plan chooses the ranks (force degrees with "
                "--dp/--ep/--tp): give one of them");
  mlir::moe::TrainPipelineOptions options;
  pipelineOptions(options, "", "");
  if (options.compresses() && ranks <= 1 && clusterFile.empty())
    return fail("--compress-grad, --compress-embedding and --compress-dispatch compress "
                "the collectives of a partitioned step: give --ranks N (N > 1), or a "
                "--cluster whose executable plan has more than one rank");
  if (redundantExperts && ranks <= 1 && clusterFile.empty())
    return fail("--redundant-experts adds expert positions to a partitioned step: give "
                "--ranks N (ep > 1) or a --cluster");
  if (expertChunks > 1 && ranks <= 1 && clusterFile.empty())
    return fail("--expert-chunks pipelines the expert phases' all-to-alls of a partitioned "
                "step: give --ranks N (ep > 1) or a --cluster");
  if (zeroStage.getNumOccurrences() && (zeroStage < 0 || zeroStage > 2))
    return fail("--zero must be 0, 1 or 2");
  if (zeroStage > 0 && ranks <= 1 && clusterFile.empty())
    return fail("--zero shards the optimiser over the ranks of a partitioned step: give "
                "--ranks N (N > 1) or a --cluster");
  if (zeroStage > 0 && redundantExperts)
    return fail("--zero with --redundant-experts is not supported yet: replicas' moments "
                "would be sharded over different groups");
  if (clusterFile.empty() && !pinExperts.empty())
    return fail("--pin-experts shapes a --cluster plan");
  if (clusterFile.empty() && (dataParallel || tensorParallel) && ranks <= 1 &&
      dataParallel * std::max(1u, unsigned(tensorParallel)) > 1)
    return fail("--dp and --tp force the degrees of --ranks N (N > 1) or of a --cluster plan");
  if (clusterFile.empty() && dataParallel) {
    // --ranks N --dp D [--tp T] [--ep E]: D x E x T = N.
    unsigned tp = std::max(1u, unsigned(tensorParallel));
    if (ranks % (dataParallel * tp) != 0 ||
        (expertParallel && dataParallel * expertParallel * tp != ranks))
      return fail("--dp " + std::to_string(dataParallel) +
                  (expertParallel ? " x --ep " + std::to_string(expertParallel) : "") + " x --tp " +
                  std::to_string(tp) + " does not make --ranks " + std::to_string(ranks));
  }
  return 0;
}

/// The training pipeline as moec's flags configure it. With a cluster, the
/// plan's JSON report goes to `reportJson` and its table to `reportTable`.
void pipelineOptions(mlir::moe::TrainPipelineOptions &options, StringRef reportJson,
                     StringRef reportTable) {
  // A step program on a mixed cluster runs the plan's unequal token shares
  // in whole sequences (moe.token_shares: one step program per share) and
  // its uneven expert placement; its plans are chosen among tp = 1 unless
  // --tp says otherwise (runPipeline frees tp on a cluster of one kind),
  // and a plan it cannot execute is an error (a warning for
  // --emit=plan|mlir, whose step stays on one rank).
  bool program = emit == Emit::Exe || emit == Emit::Kernels || emit == Emit::Cpp;
  options.evalStep = true;
  options.ranks = ranks;
  options.ep = expertParallel;
  if (clusterFile.empty() && dataParallel && !expertParallel)
    options.ep = ranks / (dataParallel * std::max(1u, unsigned(tensorParallel)));
  options.plan = !clusterFile.empty();
  options.dp = dataParallel;
  options.tp = tensorParallel ? tensorParallel : (program ? 1 : 0);
  options.pinExperts = pinExperts;
  options.reportJson = reportJson.str();
  options.reportTable = reportTable.str();
  options.strictPlan = program;
  options.equalShares = false;
  options.tokenShares = true;
  options.routingGroups = routingGroups;
  options.redundantExperts = redundantExperts;
  options.compressGrad = compressGrad;
  options.compressDispatch = compressDispatch;
  options.compressEmbedding = compressEmbedding;
  options.compressWarmup = compressWarmup;
  options.errorFeedback = !noErrorFeedback;
  options.savePreactivations = !recompute;
  // OpenCL sub-buffers (a kernel argument in an arena) start at a multiple
  // of the device's base alignment: 1024 bits on PoCL and Intel, 2048 on
  // AMD, 4096 on NVIDIA (moert/Device.h).
  options.bufferAlignment = target == moec::codegen::Target::Host ? 64 : 512;
  // The global norm reads partial sums from the device, not the gradients.
  options.deviceNorm = target != moec::codegen::Target::Host;
  options.routedRows = !denseExperts;
  options.overlap = schedule == Schedule::Overlap;
  options.expertChunks = expertChunks;
  options.zero = zeroStage;
}

/// A step program of the binary: its lowered module, kernels and C++.
struct Program {
  mlir::ModuleOp module;
  moec::codegen::KernelCalls calls;
  std::string text;
  std::string file;
  mlir::OwningOpRef<mlir::ModuleOp> owned; // another share's
  /// The translation units of the parts of a long step (compiled beside it).
  std::vector<std::string> units;
};

/// Runs the training pipeline; with a cluster, reads the plan's report into
/// `sharding` and prints its table under -v.
mlir::LogicalResult runPipeline(mlir::ModuleOp module, nlohmann::json &sharding,
                                int64_t replica = -1) {
  Stage stage("pipeline");
  bool quiet = replica > 0; // another share's program: reported already
  SmallString<128> jsonPath, tablePath;
  if (!clusterFile.empty() && !quiet)
    for (auto *path : {&jsonPath, &tablePath}) {
      int fd;
      if (sys::fs::createTemporaryFile("moec-plan", "txt", fd, *path))
        return fail("cannot create a temporary file for the plan report"), mlir::failure();
      sys::Process::SafelyCloseFileDescriptor(fd);
    }
  mlir::PassManager pm(module.getContext());
  mlir::moe::TrainPipelineOptions options;
  pipelineOptions(options, jsonPath, tablePath);
  options.replica = replica;
  // On a cluster of one device kind a step program runs the planner's
  // tensor parallelism too; a mixed cluster's binary keeps tp = 1 (its
  // unequal token shares and uneven experts balance the devices).
  if (!tensorParallel && options.tp == 1)
    if (auto cluster =
            module->getAttrOfType<mlir::DictionaryAttr>(mlir::moe::MoEDialect::kClusterAttrName))
      if (auto kinds = cluster.getAs<mlir::DictionaryAttr>("device_kinds");
          kinds && kinds.size() == 1)
        options.tp = 0;
  mlir::moe::buildTrainPipeline(pm, options);
  mlir::LogicalResult ran = pm.run(module);
  if (quiet)
    return ran;
  if (!clusterFile.empty()) {
    auto json = MemoryBuffer::getFile(jsonPath);
    auto table = MemoryBuffer::getFile(tablePath);
    if (json && mlir::succeeded(ran))
      sharding = nlohmann::json::parse((*json)->getBuffer().str(), nullptr, false);
    if (table && verbose && mlir::succeeded(ran))
      errs() << (*table)->getBuffer();
    sys::fs::remove(jsonPath);
    sys::fs::remove(tablePath);
  }
  if (mlir::succeeded(ran) && clusterFile.empty() && emit == Emit::Exe)
    warnIfThisHostIsTooSmall(module);
  if (mlir::failed(ran) || clusterFile.empty())
    return ran;
  auto grid = module->getAttrOfType<mlir::moe::GridAttr>(mlir::moe::MoEDialect::kGridAttrName);
  if (!grid || grid.getNumRanks() == 1)
    return mlir::success();
  if (auto plan = module->getAttrOfType<mlir::DictionaryAttr>(mlir::moe::MoEDialect::kPlanAttrName))
    if (auto stage = plan.getAs<mlir::IntegerAttr>("zero_stage");
        stage && stage.getInt() && zeroStage == 0)
      errs() << "moec: note: the plan shards the optimiser state (ZeRO-1) and --zero 0 keeps "
                "it replicated, so each rank holds more than the plan's memory\n";
  if (emit == Emit::Exe)
    errs() << "moec: the step is partitioned for the plan's " << grid.getNumRanks() << " ranks (dp "
           << grid.getDp() << " x ep " << grid.getEp() << " x tp " << grid.getTp()
           << "): run it with --ranks " << grid.getNumRanks() << " (threads) or under mpirun -n "
           << grid.getNumRanks() << "\n";
  return mlir::success();
}

/// The step program, or nothing after a diagnostic. For an executable, the
/// parts of a long step go to `units` (translation units of their own, which
/// compile side by side); --emit=cpp writes one file.
std::optional<std::string> emitProgram(mlir::ModuleOp module,
                                       const moec::codegen::KernelCalls &calls,
                                       const moec::codegen::StepProgramNames &names,
                                       std::vector<std::string> &units) {
  std::string text;
  raw_string_ostream os(text);
  if (mlir::failed(moec::codegen::emitStepProgram(module, calls, os, names, target,
                                                  emit == Emit::Exe ? &units : nullptr)))
    return std::nullopt;
  return text;
}

/// The kernels index their buffers with 32-bit integers (Halide): a tensor
/// of 2^31 elements or more compiles into a kernel certain to fail when it
/// runs. Such a step is refused here, at the op (its model field) that
/// makes the first one.
int checkKernelExtents(mlir::ModuleOp module) {
  constexpr int64_t kMost = std::numeric_limits<int32_t>::max();
  int rc = 0;
  module.walk([&](mlir::Operation *op) {
    for (mlir::Type type :
         llvm::concat<const mlir::Type>(op->getOperandTypes(), op->getResultTypes()))
      if (auto t = dyn_cast<mlir::RankedTensorType>(type);
          t && t.hasStaticShape() && t.getNumElements() > kMost) {
        op->emitError() << "a tensor of " << t.getNumElements() << " elements (" << t
                        << "): the kernels index with 32-bit integers, at most " << kMost
                        << " elements; lower the batch, the sequence length or the sizes it "
                           "multiplies, or partition the step (--ranks, --cluster)";
        rc = 1;
        return mlir::WalkResult::interrupt();
      }
    return mlir::WalkResult::advance();
  });
  return rc;
}

/// --token-shares on the module: moe.token_shares, or, when the shares are
/// equal, that many equal routing groups.
int setTokenShares(mlir::ModuleOp module) {
  if (tokenShares.empty())
    return 0;
  SmallVector<StringRef> parts;
  StringRef(tokenShares).split(parts, ',');
  SmallVector<int64_t> shares;
  for (StringRef part : parts) {
    int64_t n;
    if (part.trim().getAsInteger(10, n) || n < 1)
      return fail("--token-shares takes positive sequence counts B0,B1,..., got '" + part + "'");
    shares.push_back(n);
  }
  int64_t replicas = 1;
  if (ranks > 1) {
    unsigned tp = std::max(1u, unsigned(tensorParallel));
    replicas = ranks / tp;
  }
  if (!clusterFile.empty())
    return fail("--token-shares sets the shares of --ranks N (a --cluster plan sets its own)");
  if (ranks > 1 && static_cast<int64_t>(shares.size()) != replicas)
    return fail("--token-shares has " + Twine(shares.size()) + " entries for the " +
                Twine(replicas) + " data replicas of --ranks " + Twine(unsigned(ranks)));
  if (routingGroups && routingGroups != shares.size())
    return fail("--routing-groups and --token-shares disagree on the groups");
  if (llvm::all_equal(shares)) {
    // Equal shares are routing groups; they must still make the batch.
    int64_t batch = mlir::moe::batchSequences(module);
    int64_t count = static_cast<int64_t>(shares.size());
    if (batch > 0 && (batch % count != 0 || batch / count != shares.front()))
      return fail("--token-shares: " + Twine(count) + " shares of " + Twine(shares.front()) +
                  " sequences do not make the batch of " + Twine(batch) + " sequences");
    routingGroups = shares.size();
    return 0;
  }
  module->setAttr(mlir::moe::MoEDialect::kTokenSharesAttrName,
                  mlir::Builder(module.getContext()).getDenseI64ArrayAttr(shares));
  return 0;
}

/// Renames the kernels of `module` with `prefix` (another share's program
/// links beside the first's).
void prefixKernels(mlir::ModuleOp module, StringRef prefix) {
  for (auto kernel : llvm::to_vector(module.getOps<mlir::moe::KernelOp>())) {
    auto name = mlir::StringAttr::get(module.getContext(), prefix + kernel.getSymName());
    if (mlir::failed(mlir::SymbolTable::replaceAllSymbolUses(kernel, name, module)))
      continue;
    kernel.setSymName(name);
  }
}

/// The programs of the binary: `module`'s (data replica 0's), and with
/// unequal token shares one more per other share, partitioned from
/// `source` for its first replica.
int shareProgram(mlir::ModuleOp module, mlir::ModuleOp source,
                 const moec::codegen::KernelCalls &calls, std::vector<Program> &programs) {
  auto shares =
      module->getAttrOfType<mlir::DenseI64ArrayAttr>(mlir::moe::MoEDialect::kTokenSharesAttrName);
  auto grid = module->getAttrOfType<mlir::moe::GridAttr>(mlir::moe::MoEDialect::kGridAttrName);
  moec::codegen::StepProgramNames names;
  // Replica r's program symbol when it is the first of its share.
  auto symbolOf = [&](size_t r) {
    return r == 0 ? names.symbol : "moec_program_r" + std::to_string(r);
  };
  if (shares && grid && grid.getDp() * grid.getEp() > 1)
    for (int64_t share : shares.asArrayRef()) // the first replica with that share
      names.replicaPrograms.push_back(
          symbolOf(llvm::find(shares.asArrayRef(), share) - shares.asArrayRef().begin()));
  std::vector<std::string> units;
  std::optional<std::string> text = emitProgram(module, calls, names, units);
  if (!text)
    return 1;
  programs.push_back({module, calls, *text, "step.cpp", {}, std::move(units)});
  for (size_t r = 1; r < names.replicaPrograms.size(); ++r) {
    std::string symbol = symbolOf(r);
    if (names.replicaPrograms[r] != symbol)
      continue;
    Program p;
    p.owned = source.clone();
    nlohmann::json unused;
    if (mlir::failed(runPipeline(*p.owned, unused, static_cast<int64_t>(r))))
      return 1;
    prefixKernels(*p.owned, "r" + std::to_string(r) + "_");
    mlir::FailureOr<moec::codegen::KernelCalls> own =
        moec::codegen::KernelCalls::collect(*p.owned, gemm);
    if (mlir::failed(own))
      return 1;
    moec::codegen::StepProgramNames variant;
    variant.symbol = symbol;
    std::optional<std::string> variantText = emitProgram(*p.owned, *own, variant, p.units);
    if (!variantText)
      return 1;
    p.module = *p.owned;
    p.calls = std::move(*own);
    p.text = std::move(*variantText);
    p.file = "step_r" + std::to_string(r) + ".cpp";
    programs.push_back(std::move(p));
  }
  return 0;
}

/// Generates the kernels and, for an executable, links the trainer.
int build(const std::vector<Program> &programs, const nlohmann::json &manifest, const char *argv0) {
  mlir::ModuleOp module = programs.front().module;
  moec::codegen::KernelCalls calls;
  for (const Program &p : programs)
    calls.append(p.calls);
  std::optional<Stage> kernelStage(std::in_place, "kernels");
  // Into <o>/kernels for --emit=kernels, next to the executable
  // (<o>.build/kernels) otherwise.
  SmallString<256> buildDir(outputPath);
  if (emit == Emit::Exe)
    buildDir += ".build";
  SmallString<256> dir(buildDir), manifestPath(buildDir);
  sys::path::append(dir, "kernels");
  sys::path::append(manifestPath, "kernels.json");
  if (std::error_code ec = sys::fs::create_directories(dir))
    return fail(Twine("cannot create ") + dir + ": " + ec.message());
  moec::codegen::ToolchainOptions toolchain;
  toolchain.generator = generatorPath(argv0);
  toolchain.verbose = verbose;
  toolchain.cacheDir = noKernelCache ? "" : moec::codegen::defaultKernelCache();
  toolchain.target = target;
  toolchain.cudaCapability = static_cast<int>(cudaCapability);
  toolchain.hostTarget = hostTarget;
  toolchain.jobs = jobs;
  if (!sys::fs::can_execute(toolchain.generator))
    return fail("moe-halide-gen not found next to moec (" + toolchain.generator + ")");
  if (Error e = moec::codegen::generateKernels(calls, dir, toolchain))
    return fail(toString(std::move(e)));
  if (int rc = writeOutput(manifestPath, [&](raw_ostream &os) { os << manifest.dump(2) << "\n"; }))
    return rc;
  if (emit == Emit::Kernels)
    return 0;
  kernelStage.reset();

  Stage link("link");
  std::vector<std::string> cpps;
  for (const Program &p : programs) {
    SmallString<256> cpp(buildDir);
    sys::path::append(cpp, p.file);
    if (int rc = writeOutput(cpp, [&](raw_ostream &os) { os << p.text; }))
      return rc;
    cpps.push_back(std::string(cpp));
    for (size_t u = 0; u < p.units.size(); ++u) {
      SmallString<256> unit(buildDir);
      sys::path::append(unit, sys::path::stem(p.file) + ".part" + Twine(u) + ".cpp");
      if (int rc = writeOutput(unit, [&](raw_ostream &os) { os << p.units[u]; }))
        return rc;
      cpps.push_back(std::string(unit));
    }
  }
  // A partitioned binary also runs under mpirun, one rank per process.
  auto grid = module->getAttrOfType<mlir::moe::GridAttr>(mlir::moe::MoEDialect::kGridAttrName);
  bool mpi = grid && grid.getNumRanks() > 1;
  if (Error e = moec::codegen::linkTrainer(cpps, dir, calls, outputPath, mpi, toolchain))
    return fail(toString(std::move(e)));
  if (verbose)
    errs() << "moec: wrote " << outputPath << "\n";
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  // --help lists this tool's options; LLVM's and MLIR's stay usable and
  // are listed by --help-hidden.
  for (auto &entry : cl::getRegisteredOptions())
    if (entry.second->getOptionHiddenFlag() == cl::NotHidden &&
        !llvm::is_contained(entry.second->Categories, &category) &&
        !llvm::is_contained(ArrayRef<StringRef>{"help", "help-list", "version"}, entry.first))
      entry.second->setHiddenFlag(cl::Hidden);
  // LLVM reads an unknown flag that starts with h (a typo such as --hf-tiny)
  // as -h, its alias of --help, grouped with other letters: the help and
  // exit 0, so a broken build script looked like a build. Only known
  // options pass.
  for (int i = 1; i < argc; ++i) {
    StringRef arg(argv[i]);
    if (arg == "--")
      break;
    StringRef name = arg.ltrim('-').split('=').first;
    if (arg.starts_with("-") && name.starts_with("h") && name != "h" &&
        !cl::getRegisteredOptions().count(name)) {
      errs() << "moec: Unknown command line argument '" << arg << "'.  Try: 'moec --help'\n";
      return 1;
    }
  }
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "moec (MoEC) " << MOEC_VERSION << "\n  step-program ABI " << MOERT_ABI_VERSION
       << "\n  built with LLVM/MLIR " << LLVM_VERSION_STRING << "\n";
  });
  cl::ParseCommandLineOptions(argc, argv, "MoEC driver: a model description to a training step\n");
  if (printHostTarget)
    return printResolvedHostTarget();
  if (int rc = checkFlags())
    return rc;

  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  // Diagnostics as `file:line:col: error: message`, without the IR dump.
  context.printOpOnDiagnostic(false);
  mlir::ScopedDiagnosticHandler diagnostics(&context, printDiagnostic);
  mlir::OwningOpRef<mlir::ModuleOp> module = readModel(context);
  if (!module)
    return 1;
  if (int rc = setTokenShares(*module))
    return rc;
  // Other token shares' programs start from the same input.
  mlir::OwningOpRef<mlir::ModuleOp> source = module->clone();
  nlohmann::json sharding;
  if (mlir::failed(runPipeline(*module, sharding, /*replica=*/0)))
    return 1;
  if (emit == Emit::Mlir)
    return writeOutput(outputPath, [&](raw_ostream &os) { module->print(os); });

  mlir::FailureOr<moec::codegen::KernelCalls> calls =
      moec::codegen::KernelCalls::collect(*module, gemm);
  if (mlir::failed(calls))
    return 1;
  nlohmann::json manifest = moec::codegen::kernelManifest(*module, *calls);
  manifest["target"] = moec::codegen::targetName(target).str();
  manifest["host_target"] = hostTarget.getValue();
  if (emit == Emit::Plan) {
    if (!sharding.is_null() && !sharding.is_discarded())
      manifest["sharding"] = sharding;
    return writeOutput(outputPath, [&](raw_ostream &os) { os << manifest.dump(2) << "\n"; });
  }
  if (int rc = checkKernelExtents(*module))
    return rc;
  std::vector<Program> programs;
  if (int rc = shareProgram(*module, *source, *calls, programs))
    return rc;
  if (emit == Emit::Cpp) {
    if (programs.size() > 1)
      errs() << "moec: note: replicas of other token shares run other step programs, not "
                "written by --emit=cpp (the executable's build folder has them)\n";
    return writeOutput(outputPath, [&](raw_ostream &os) { os << programs.front().text; });
  }
  return build(programs, manifest, argv[0]);
}
