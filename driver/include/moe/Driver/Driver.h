//===- Driver.h - import, plan, emit and build, as library calls -*- C++ -*-===//
//
// The phases of a compile, which `moec` runs in order and other tools and
// tests call alone:
//
//   resolveOptions   flag combinations checked; the target (from a
//                    cluster), the host target and gemm resolved
//   importModule     the model (and cluster) file to moe IR
//   runPipeline      the training pipeline; the plan's report as JSON
//   emitPrograms     the step programs (one per token share) and kernels
//   buildTrainer     the kernels generated, the executable linked
//
// A phase that fails has printed its diagnostics (`file:line:col: error:`)
// or returns them as an llvm::Error; nothing partial is written.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_DRIVER_DRIVER_H
#define MOE_DRIVER_DRIVER_H

#include "moe/Codegen/StepProgram.h"
#include "moe/Driver/Options.h"
#include "moe/Frontend/ClusterToMLIR.h"
#include "moe/Frontend/ModelToMLIR.h"
#include "moe/Transforms/Pipelines.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace moec::driver {

/// Prints a phase's time on stderr when `verbose` (moec -v).
class Stage {
public:
  Stage(const char *name, bool verbose);
  ~Stage();

private:
  const char *name;
  bool verbose;
  std::chrono::steady_clock::time_point start;
};

/// Prints an MLIR diagnostic as `file:line:col: error: message` (the
/// location of the model file's element it concerns), or `moec: error:`.
mlir::LogicalResult printDiagnostic(mlir::Diagnostic &diag);

/// Checks the flag combinations the pipeline does not judge and resolves
/// what follows from them: the target a --cluster's devices choose (when
/// `flags` says --target was not given; null: the fields as they are), the
/// gemm a device target implies, and the host target.
llvm::Error resolveOptions(CompileOptions &options, const OptionsBinder *flags = nullptr);

/// --pass-before/--pass-after as pipeline insertions; an error names the
/// flag whose value is not ANCHOR=PASSES or whose passes do not parse (a
/// plugin's passes need the plugin loaded first).
llvm::Expected<std::vector<mlir::moe::PipelineInsertion>>
pipelineInsertions(const ExtensionOptions &options);

/// The import options' ranges and the HF options' parse; an error names the flag.
llvm::Error checkImportOptions(const ImportOptions &options);

/// Whether the model file is moe IR (`.mlir`, not with --hf).
bool isMlirInput(const ImportOptions &options);

/// The model as a ModelSpec (MoEC JSON or a HuggingFace config), or none
/// after adding the errors to `diags`.
std::optional<frontend::ModelSpec> importModelSpec(const ImportOptions &options,
                                                   frontend::DiagnosticList &diags);

/// The cluster description, or none after adding its errors to `diags`.
std::optional<frontend::ClusterSpec> importCluster(const std::string &path,
                                                   frontend::DiagnosticList &diags);

/// The model as moe IR, with `cluster` (if any) as moe.cluster.
mlir::OwningOpRef<mlir::ModuleOp> buildModule(const frontend::ModelSpec &spec,
                                              const frontend::ClusterSpec *cluster,
                                              mlir::MLIRContext &context);

/// The model (a JSON file, or moe IR from a `.mlir` file) and the cluster
/// (as moe.cluster) as moe IR, or null after
/// printing the errors. A device target the cluster chose gives way to a
/// 16-bit model's precision (`options.backend` is updated).
mlir::OwningOpRef<mlir::ModuleOp> importModule(CompileOptions &options, mlir::MLIRContext &context);

/// --token-shares on the module: moe.token_shares, or, when the shares
/// are equal, that many equal routing groups (in `options`).
llvm::Error applyTokenShares(mlir::ModuleOp module, CompileOptions &options);

/// What moe-plan-sharding chose and why, for a --cluster compile.
struct PlanReport {
  nlohmann::json json; ///< null without a cluster
  std::string table;
};

/// Runs the training pipeline as `options` configure it; `replica` > 0
/// builds another token share's program (quietly). With a cluster, the
/// plan's report goes to `report` (and its table to stderr under -v).
mlir::LogicalResult runPipeline(mlir::ModuleOp module, const CompileOptions &options,
                                PlanReport *report, int64_t replica = -1);

/// Refuses a step with a tensor of 2^31 elements or more (the kernels
/// index with 32-bit integers), at the op that makes the first one.
mlir::LogicalResult checkKernelExtents(mlir::ModuleOp module);

/// A step program of the binary: its lowered module, kernels and C++.
struct Program {
  mlir::ModuleOp module;
  codegen::KernelCalls calls;
  std::string text;
  std::string file;
  mlir::OwningOpRef<mlir::ModuleOp> owned; ///< another share's module
  /// The translation units of the parts of a long step (compiled beside it).
  std::vector<std::string> units;
};

/// The programs of the binary: `module`'s (data replica 0's), and with
/// unequal token shares one per other share, partitioned from `source` (the
/// module before the pipeline) for its first replica.
mlir::LogicalResult emitPrograms(mlir::ModuleOp module, mlir::ModuleOp source,
                                 const codegen::KernelCalls &calls, const CompileOptions &options,
                                 std::vector<Program> &programs);

/// The C++ step program of the lowered moe IR in file `path` (moec
/// --emit=mlir), or none after printing the diagnostics.
std::optional<std::string> stepProgramOf(llvm::StringRef path, codegen::Gemm gemm,
                                         mlir::MLIRContext &context);

/// The kernel manifest (kernels.json): the kernels, target and host target.
nlohmann::json kernelManifest(mlir::ModuleOp module, const codegen::KernelCalls &calls,
                              const CompileOptions &options);

/// Writes what `text` prints to `path` ("-": stdout), created only now.
llvm::Error writeOutput(llvm::StringRef path, llvm::function_ref<void(llvm::raw_ostream &)> text);

/// Generates the programs' kernels with `generator` (moe-halide-gen) and,
/// for an executable, compiles the programs and links the trainer.
llvm::Error buildTrainer(const std::vector<Program> &programs, const nlohmann::json &manifest,
                         const CompileOptions &options, llvm::StringRef generator);

} // namespace moec::driver

#endif // MOE_DRIVER_DRIVER_H
