//===- Options.h - the driver's options, one struct per phase ---*- C++ -*-===//
//
// What `moec` (and `moe-translate`, for the import) is asked to do, as one
// plain struct per phase: importing the model, laying out the parallel
// step, compressing its collectives, shaping the step, and the back end.
// Each struct binds its own flags (`bindOptions`), so a flag has one name
// and one meaning, read as a field by the phase that uses it; a library
// caller (a test, another tool) fills the fields directly.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DRIVER_OPTIONS_H
#define MOE_DRIVER_OPTIONS_H

#include "moe/Codegen/KernelRegistry.h"
#include "moe/Codegen/TargetBackend.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace moec::driver {

/// Owns the command-line options that bind fields of option structs
/// (`llvm::cl` options with external storage), for as long as the tool
/// parses and reads them.
class OptionsBinder {
public:
  explicit OptionsBinder(llvm::cl::OptionCategory &category) : category(category) {}

  /// Binds flag `name` (with `mods`: description, values...) to `field`,
  /// whose present value is the default.
  template <typename T, typename... Mods>
  void opt(llvm::StringRef name, T &field, const Mods &...mods) {
    options.push_back(std::make_unique<llvm::cl::opt<T, true>>(name, llvm::cl::location(field),
                                                               llvm::cl::cat(category), mods...));
  }
  /// Binds repeatable flag `name` to `field` (each occurrence appends).
  template <typename... Mods>
  void list(llvm::StringRef name, std::vector<std::string> &field, const Mods &...mods) {
    options.push_back(std::make_unique<llvm::cl::list<std::string, std::vector<std::string>>>(
        name, llvm::cl::location(field), llvm::cl::cat(category), mods...));
  }
  /// `text` kept for as long as the options (cl::desc holds a reference,
  /// so a description built at run time must outlive them).
  llvm::StringRef keep(std::string text) { return texts.emplace_back(std::move(text)); }
  /// Binds the positional argument to `field`.
  void positional(std::string &field, llvm::StringRef description);
  /// Whether flag `name` was given on the command line.
  bool given(llvm::StringRef name) const;
  /// Hides every option outside this binder's category from --help (LLVM's
  /// and MLIR's stay usable, listed by --help-hidden).
  void hideOtherOptions() const;

private:
  llvm::cl::OptionCategory &category;
  std::vector<std::unique_ptr<llvm::cl::Option>> options;
  std::deque<std::string> texts; ///< stable addresses
};

/// Importing the model (and the cluster it is planned for).
struct ImportOptions {
  std::string model;   ///< a MoEC model JSON, or a HuggingFace config.json with `hf`
  std::string cluster; ///< a cluster JSON, or empty
  bool hf = false;
  // A HuggingFace config's import (frontend/HFConfig.h).
  int64_t seqLen = 0; ///< 0: min(max_position_embeddings, 4096)
  int64_t batchSize = 1;
  std::string dtype = "f32";
  std::string overrides, optimizer, capacityFactor;

  /// --seq-len, --batch-size, --dtype, --override, --optimizer and
  /// --capacity-factor; `hfFlag` names the flag they go with in the help.
  void bindHFOptions(OptionsBinder &binder, llvm::StringRef hfFlag);
  /// Whether any of those was given (with `json`: any but --override and
  /// --optimizer, which a MoEC model JSON takes too).
  static bool anyHFOptionGiven(const OptionsBinder &binder, bool json = false);
};

/// The step's parallel layout: its grid of ranks, ZeRO, routing groups,
/// token shares and expert positions.
struct ParallelOptions {
  unsigned ranks = 1;
  unsigned dp = 0, ep = 0, tp = 0; ///< 0: chosen (ep), or ranks / (ep tp) (dp), or 1 (tp)
  int zero = -1;                   ///< -1: the plan's choice, else off
  std::string pinExperts;
  std::string tokenShares;
  unsigned routingGroups = 0;
  unsigned redundantExperts = 0;
  unsigned expertChunks = 1;

  void bindOptions(OptionsBinder &binder);
  /// Whether the step is partitioned (by --ranks N > 1 or a cluster plan).
  bool partitioned(const ImportOptions &import) const {
    return ranks > 1 || !import.cluster.empty();
  }
};

/// The codecs of the step's collectives.
struct CompressOptions {
  std::string grad = "none", embedding, dispatch = "none";
  unsigned warmup = 0;
  bool noErrorFeedback = false;

  void bindOptions(OptionsBinder &binder);
  bool compresses() const {
    return grad != "none" || dispatch != "none" || (!embedding.empty() && embedding != "none");
  }
};

/// When the gradient all-reduces run.
enum class Schedule { Overlap, Blocking };

/// How the step computes.
struct StepOptions {
  bool denseExperts = false;
  bool recomputeFFN = false;
  bool recompute = false;    ///< off: the plan's choice, else off
  unsigned microBatches = 0; ///< 0: the plan's choice, else 1
  Schedule schedule = Schedule::Overlap;

  void bindOptions(OptionsBinder &binder);
};

/// --gemm: who computes the contractions, with `description`.
void bindGemmOption(OptionsBinder &binder, codegen::Gemm &field, llvm::StringRef description);

/// The back end: where and how the kernels are generated and linked.
struct BackendOptions {
  const codegen::TargetBackend *target = &codegen::defaultTarget();
  /// The options the back ends declare (`cuda-capability`), as given: the
  /// target's are checked and copied to `targetOptions` by resolveOptions.
  std::map<std::string, std::string> targetFlags;
  codegen::TargetOptionValues targetOptions;
  codegen::Gemm gemm = codegen::Gemm::Auto;
  std::string hostTarget = "host";
  unsigned jobs = 0;
  bool noKernelCache = false;
  /// Set by resolveOptions: the cluster's devices chose the target, and
  /// the --gemm given before a device target made it halide.
  bool targetFromCluster = false;
  codegen::Gemm gemmGiven = codegen::Gemm::Auto;

  void bindOptions(OptionsBinder &binder);
};

/// Passes of the user's own in the training pipeline (docs/OutOfTree.md).
struct ExtensionOptions {
  /// --load-pass-plugin: loaded by the tool before its command line is
  /// parsed (mlir::moe::loadPassPlugins), recorded here.
  std::vector<std::string> plugins;
  /// --pass-before / --pass-after, each ANCHOR=PASSES.
  std::vector<std::string> before, after;

  void bindOptions(OptionsBinder &binder);
};

/// The stage a compile stops after.
enum class Emit { Mlir, Plan, Kernels, Cpp, Exe };

/// One compile, every phase.
struct CompileOptions {
  ImportOptions import;
  ParallelOptions parallel;
  CompressOptions compress;
  StepOptions step;
  BackendOptions backend;
  ExtensionOptions extensions;
  Emit emit = Emit::Exe;
  std::string output;
  bool verbose = false;

  /// moec's flags, every phase's.
  void bindOptions(OptionsBinder &binder);
  /// Whether this compile generates kernels (the target matters then).
  bool emitsKernels() const {
    return emit == Emit::Exe || emit == Emit::Kernels || emit == Emit::Cpp;
  }
};

} // namespace moec::driver

#endif // MOE_DRIVER_OPTIONS_H
