//===- Toolchain.h - generated kernels and the linked trainer ---*- C++ -*-===//
//
// The last stage of the back end: run moe-halide-gen for every kernel of a
// lowered module, write the kernel manifest, and compile the step program
// and link it with the kernels, the Halide runtime and the runtime (moert)
// into one training executable.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CODEGEN_TOOLCHAIN_H
#define MOE_CODEGEN_TOOLCHAIN_H

#include "moe/Codegen/StepProgram.h"

#include "llvm/Support/Error.h"

#include <nlohmann/json.hpp>

#include <string>

namespace moec::codegen {

/// The kernels of `calls` and the buffer plan of `module`, as JSON:
/// {"buffer_plan": {...sizes, "kernel_scratch_bytes"}, "kernels": {name:
/// {"family", "generator", "params", "scratch_bytes"} or {"family",
/// "runtime"}}}.
nlohmann::json kernelManifest(mlir::ModuleOp module, const KernelCalls &calls);

struct ToolchainOptions {
  /// The moe-halide-gen executable.
  std::string generator;
  /// Print each kernel and command.
  bool verbose = false;
  /// Where generated kernels are kept between compiles, keyed by everything
  /// that determines them (empty: no cache).
  std::string cacheDir;
  /// Where the kernels run: the Halide target of every kernel and of the
  /// runtime, the training binary's extra flags (the host when null).
  const TargetBackend *backend = nullptr;
  /// The back end's options, by name (`cuda-capability`).
  TargetOptionValues backendOptions;
  /// The back end, `backend` or the host.
  const TargetBackend &targetBackend() const { return backend ? *backend : defaultTarget(); }
  /// The Halide target of the CPU side, arch-bits-os[-features] (moec
  /// resolves --host-target into one, HostTarget.h; a "host" left here is
  /// resolved from this CPU's features by moe-halide-gen, never by Halide's
  /// family names).
  std::string hostTarget = "host";
  /// How many generator (and compiler) processes run at once; 0: one per
  /// hardware thread, at most 8.
  unsigned jobs = 0;
};

/// The kernel cache moec uses by default: $MOEC_KERNEL_CACHE ("none": no
/// cache), else $XDG_CACHE_HOME/moec/kernels, else ~/.cache/moec/kernels
/// (empty when there is no home).
std::string defaultKernelCache();

/// Generates every kernel of `calls` (static library and header) and the
/// Halide runtime into `dir`, or copies them from `options.cacheDir` when a
/// previous compile generated the same kernel with the same generator
/// binary (its path, size and modification time are in the key).
llvm::Error generateKernels(const KernelCalls &calls, llvm::StringRef dir,
                            const ToolchainOptions &options);

/// Compiles the step programs (C++; one per distinct token share) and links it with the kernels in
/// `dir`, the Halide runtime and moert into `output`; `mpi` also links the MPI communicator (a
/// partitioned binary runs under mpirun).
llvm::Error linkTrainer(llvm::ArrayRef<std::string> stepPrograms, llvm::StringRef dir,
                        const KernelCalls &calls, llvm::StringRef output, bool mpi,
                        const ToolchainOptions &options);

} // namespace moec::codegen

#endif // MOE_CODEGEN_TOOLCHAIN_H
