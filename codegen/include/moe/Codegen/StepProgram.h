//===- StepProgram.h - the step program as C++ ------------------*- C++ -*-===//
//
// The back end's second half: a lowered module (after moe-lower-to-kernels)
// becomes a C++ step program that defines `moec_program` (moert/Program.h):
// the parameter table, and a train_step / eval_step running every launch and
// collective in order over the planned arenas, calling the generated kernels
// (KernelRegistry.h says with which arguments) and the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CODEGEN_STEPPROGRAM_H
#define MOE_CODEGEN_STEPPROGRAM_H

#include "moe/Codegen/KernelRegistry.h"
#include "moe/Codegen/TargetBackend.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <utility>
#include <vector>

namespace moec::codegen {

/// The calls producing every `moe.kernel` of a module, in module order.
class KernelCalls {
public:
  /// Looks up every kernel of `module`; fails with a diagnostic on the first
  /// kernel no family row serves.
  static mlir::FailureOr<KernelCalls> collect(mlir::ModuleOp module, Gemm gemm);

  const KernelCall &at(llvm::StringRef kernel) const;
  /// Adds another program's kernels (their names are distinct).
  void append(const KernelCalls &other) {
    calls.insert(calls.end(), other.calls.begin(), other.calls.end());
  }
  const std::vector<std::pair<std::string, KernelCall>> &all() const { return calls; }
  /// Kernels run one at a time: the scratch peak is the largest kernel's.
  int64_t scratchBytes() const;

private:
  std::vector<std::pair<std::string, KernelCall>> calls;
};

/// How a step program is named and which others it lists.
struct StepProgramNames {
  /// The moert_program's symbol.
  std::string symbol = "moec_program";
  /// With unequal token shares (moe.token_shares): per data replica, the
  /// symbol of the program it runs (defined in another step program of the
  /// same binary, or this one's). Empty: none.
  std::vector<std::string> replicaPrograms;
};

/// Writes the C++ step program of a lowered module, calling kernels
/// generated for `target` (a device target's kernels take crops of the
/// arenas' device copies, moert/Device.h).
///
/// A step function of more than 150 ops is cut into parts that it calls in
/// order. With `units` not null, those parts go to separate translation
/// units (each a whole C++ file, of up to 8 parts, appended to `units`) so
/// that they compile side by side; `os` then gets the program that calls
/// them. Null: one file.
mlir::LogicalResult emitStepProgram(mlir::ModuleOp module, const KernelCalls &calls,
                                    llvm::raw_ostream &os,
                                    const StepProgramNames &names = StepProgramNames(),
                                    const TargetBackend &target = defaultTarget(),
                                    std::vector<std::string> *units = nullptr);

} // namespace moec::codegen

#endif // MOE_CODEGEN_STEPPROGRAM_H
