//===- Resolve.cpp - flag combinations checked, targets resolved ----------===//
//
// What the pipeline does not judge: flags that need other flags (a
// partitioned step, a cluster, --hf), their ranges, and what follows from
// them (the target a cluster's devices choose, the gemm a device target
// implies, the host CPU's Halide target).
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/HostTarget.h"
#include "moe/Driver/Driver.h"
#include "moe/Frontend/ClusterToMLIR.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <set>

using namespace llvm;
using namespace moec::driver;
using namespace moec::frontend;
using moec::codegen::Gemm;

namespace {


/// Without --target, a --cluster chooses it: the back end of every device
/// kind its nodes use (each kind's `target`: the presets' own, or declared
/// in the file), else the host. A cluster with errors is left to the
/// import to report.
void chooseTargetFromCluster(CompileOptions &options) {
  BackendOptions &backend = options.backend;
  DiagnosticList diags;
  std::shared_ptr<const JsonDoc> doc = JsonDoc::load(options.import.cluster, diags);
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
  bool say = options.emitsKernels();
  const moec::codegen::TargetBackend *only =
      targets.size() == 1 ? moec::codegen::lookupTarget(*targets.begin()) : nullptr;
  if (only && only->onDevice()) {
    if (backend.gemm == Gemm::Blas && !only->blasGemm()) {
      if (say)
        errs() << "moec: note: kernels for --target host: --gemm=blas calls OpenBLAS on the host "
                  "(the cluster's "
               << names << " devices would take --target " << *targets.begin() << ")\n";
      return;
    }
    backend.target = only;
    backend.targetFromCluster = true;
    if (say)
      errs() << "moec: note: kernels for --target " << *targets.begin() << ", the cluster's "
             << names << " devices (--target host builds for this CPU)\n";
    return;
  }
  if (say && (targets.size() > 1 || *targets.begin() != "host")) {
    // Several back ends among the kinds, or none at all.
    targets.erase("");
    errs() << "moec: note: kernels for --target host: the cluster's devices (" << names << ") "
           << (targets.empty() ? "have no moec back end" : "share no moec back end")
           << " (a kind's \"target\" names one; --target chooses)\n";
  }
}

/// The back end's flags: the target, the gemm it implies, its own options.
Error resolveBackend(CompileOptions &options, const OptionsBinder *flags) {
  BackendOptions &backend = options.backend;
  if (!options.import.cluster.empty() && !(flags && flags->given("target")))
    chooseTargetFromCluster(options);
  if (!backend.target->blasGemm()) {
    // The OpenBLAS extern stages run on the host; a device step computes
    // every contraction in its kernels.
    if (backend.gemm == Gemm::Blas)
      return createStringError("--gemm=blas calls OpenBLAS on the host: with --target=" +
                   backend.target->name() + " give --gemm=halide or auto");
    backend.gemmGiven = backend.gemm;
    backend.gemm = Gemm::Halide;
  }
  unsigned chunks = options.parallel.expertChunks;
  if (chunks < 1 || chunks > 64)
    return createStringError("--expert-chunks must be in [1, 64], got " + Twine(chunks));
  // The chunks are views into planned buffers; a device step keeps a copy
  // of each tensor per value (moert/Device.h).
  if (chunks > 1 && !backend.target->expertChunks())
    return createStringError("--expert-chunks pipelines host steps only (--target=host)");
  // The back end's own options (--cuda-capability), those given.
  for (const auto &[name, value] : backend.targetFlags)
    if (flags && flags->given(name)) {
      if (Error e = moec::codegen::checkTargetOption(*backend.target, name, value))
        return e;
      backend.targetOptions[name] = value;
    }
  Expected<std::string> resolved = moec::codegen::resolveHostTarget(backend.hostTarget);
  if (!resolved)
    return resolved.takeError();
  backend.hostTarget = *resolved;
  return Error::success();
}

/// The flags that shape a partitioned step (they need --ranks or a cluster).
Error checkParallel(const CompileOptions &options, const OptionsBinder *flags) {
  const ParallelOptions &p = options.parallel;
  bool cluster = !options.import.cluster.empty();
  bool partitioned = p.partitioned(options.import);
  if (p.ranks > 1 && cluster)
    return createStringError("--ranks partitions the step for N ranks of this machine; with "
                 "--cluster the plan chooses the ranks (force degrees with "
                 "--dp/--ep/--tp): give one of them");
  if (options.compress.compresses() && !partitioned)
    return createStringError("--compress-grad, --compress-embedding and --compress-dispatch compress "
                 "the collectives of a partitioned step: give --ranks N (N > 1), or a "
                 "--cluster whose executable plan has more than one rank");
  if (p.redundantExperts && !partitioned)
    return createStringError("--redundant-experts adds expert positions to a partitioned step: give "
                 "--ranks N (ep > 1) or a --cluster");
  if (p.expertChunks > 1 && !partitioned)
    return createStringError("--expert-chunks pipelines the expert phases' all-to-alls of a partitioned "
                 "step: give --ranks N (ep > 1) or a --cluster");
  if (flags && flags->given("zero") && (p.zero < 0 || p.zero > 2))
    return createStringError("--zero must be 0, 1 or 2");
  if (p.zero > 0 && !partitioned)
    return createStringError("--zero shards the optimiser over the ranks of a partitioned step: give "
                 "--ranks N (N > 1) or a --cluster");
  if (p.zero > 0 && p.redundantExperts)
    return createStringError("--zero with --redundant-experts is not supported yet: replicas' moments "
                 "would be sharded over different groups");
  if (!cluster && !p.pinExperts.empty())
    return createStringError("--pin-experts shapes a --cluster plan");
  if (!cluster && p.dp * std::max(1u, p.tp) > 1 && !partitioned)
    return createStringError("--dp and --tp force the degrees of --ranks N (N > 1) or of a --cluster plan");
  return Error::success();
}

} // namespace

Expected<std::vector<mlir::moe::PipelineInsertion>>
moec::driver::pipelineInsertions(const ExtensionOptions &options) {
  std::vector<mlir::moe::PipelineInsertion> insertions;
  for (bool after : {false, true})
    for (const std::string &value : after ? options.after : options.before) {
      const char *flag = after ? "--pass-after" : "--pass-before";
      auto [anchor, passes] = StringRef(value).split('=');
      if (anchor.trim().empty() || passes.trim().empty())
        return createStringError(Twine(flag) + " takes ANCHOR=PASSES (e.g. " + flag +
                                 "=moe-fuse-gating=moe-count-routers), got '" + value + "'");
      std::string error;
      raw_string_ostream os(error);
      mlir::OpPassManager scratch("builtin.module");
      if (mlir::failed(mlir::parsePassPipeline(passes, scratch, os)))
        return createStringError(Twine(flag) + "=" + value + ": " + StringRef(error).trim() +
                                 (options.plugins.empty()
                                      ? "\nmoec: note: a plugin's passes need --load-pass-plugin LIB"
                                      : ""));
      insertions.push_back({anchor.trim().str(), after, passes.trim().str()});
    }
  return insertions;
}

Error moec::driver::checkImportOptions(const ImportOptions &options) {
  if (options.dtype != "f32" && options.dtype != "bf16" && options.dtype != "f16")
    return createStringError("--dtype must be f32, bf16 or f16, got '" + options.dtype + "'");
  if (options.seqLen < 0 || options.seqLen > (1 << 20) || options.batchSize < 1 ||
      options.batchSize > (1 << 20))
    return createStringError("--seq-len must be in [1, 1048576] and --batch-size in [1, 1048576]");
  return Error::success();
}

Error moec::driver::resolveOptions(CompileOptions &options, const OptionsBinder *flags) {
  if (options.import.model.empty())
    return createStringError("give a model description: moec model.json -o OUT --emit=...");
  if (options.output.empty() && (options.emit == Emit::Kernels || options.emit == Emit::Exe))
    return createStringError("give an output path: -o PATH");
  // The executable is a file (its build folder goes beside it, PATH.build).
  if (options.emit == Emit::Exe && sys::fs::is_directory(options.output)) {
    SmallString<128> example(StringRef(options.output).rtrim('/'));
    sys::path::append(example, "train");
    return createStringError("-o " + options.output + " is a directory: give the executable's path, e.g. -o " +
                 example);
  }
  if (isMlirInput(options.import) && flags && ImportOptions::anyHFOptionGiven(*flags))
    return createStringError("--override, --optimizer, --seq-len, --batch-size, --capacity-factor "
                             "and --dtype edit a model description; moe IR (" +
                             options.import.model + ") states its step itself");
  if (!options.import.hf && flags && ImportOptions::anyHFOptionGiven(*flags, /*json=*/true))
    return createStringError(
        "--seq-len, --batch-size, --capacity-factor and --dtype apply to --hf configs; a MoEC "
        "model JSON states its fields itself, and --override sets them (e.g. --override "
        "seq_len=128,batch_size=4,dtype=bf16,moe.capacity_factor=1.5)");
  if (Error e = checkImportOptions(options.import))
    return e;
  if (options.parallel.ranks < 1)
    return createStringError("--ranks must be >= 1");
  if (Expected<std::vector<mlir::moe::PipelineInsertion>> insertions =
          pipelineInsertions(options.extensions);
      !insertions)
    return insertions.takeError();
  if (Error e = resolveBackend(options, flags))
    return e;
  return checkParallel(options, flags);
}
