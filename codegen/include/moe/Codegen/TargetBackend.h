//===- TargetBackend.h - where the kernels run, as registered back ends -*- C++ -*-===//
//
// A `moec --target` is a TargetBackend: everything the compiler decides by
// the target is a query of it (the Halide target of the kernels, what the
// step program includes and how it moves buffers, the buffer plan's
// alignment, what the target supports, its own options and the training
// binary's extra flags). Each back end lives in a folder of its own,
// codegen/targets/<name>/, and registers itself through one function that
// TargetRegistry.cpp calls (docs/AddingATarget.md). The runtime's side of a
// device target is runtime/devices/<name>/.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CODEGEN_TARGETBACKEND_H
#define MOE_CODEGEN_TARGETBACKEND_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moec::codegen {

/// An option of one back end, given as `moec --<name>=<value>`, such as
/// CUDA's `cuda-capability`.
struct TargetOption {
  llvm::StringLiteral name;
  llvm::StringLiteral description;
  llvm::StringLiteral defaultValue;
};

/// The values given to a back end's options, by name; an option not given
/// takes its default (TargetBackend::option).
using TargetOptionValues = std::map<std::string, std::string>;

/// One target: a Halide back end for the kernels plus what the step program
/// and the training binary need to run them.
class TargetBackend {
public:
  virtual ~TargetBackend() = default;

  /// The `moec --target` value (`host`, `opencl`, `cuda`), also the name
  /// the step program passes to the runtime's device layer and a cluster
  /// file's device kinds name (`"target"`, docs/ClusterJSON.md).
  virtual llvm::StringRef name() const = 0;
  /// One line for `moec --help` and error messages.
  virtual llvm::StringRef description() const = 0;

  /// The back end's own options (none by default).
  virtual llvm::ArrayRef<TargetOption> options() const { return {}; }
  /// Checks `value` for option `name` (one of options()): an error message
  /// without the flag's name, such as "Halide targets 30, ..., 86".
  virtual llvm::Error checkOption(llvm::StringRef name, llvm::StringRef value) const;
  /// Option `name`'s value in `values`, else its default.
  std::string option(const TargetOptionValues &values, llvm::StringRef name) const;

  /// The Halide target features the kernels (and the Halide runtime) add to
  /// the host's Halide target: empty, or `-feature...` (`-opencl`).
  virtual std::string halideFeatures(const TargetOptionValues &values) const = 0;

  /// The Halide runtime function that returns the device interface of the
  /// kernels' buffers (`halide_opencl_device_interface`); empty when the
  /// kernels run on host memory. A device target keeps the step's arenas on
  /// the device through moert/Device.h: its kernel calls take device crops,
  /// host code brackets its reads and writes, the program table lists the
  /// layer's sync, wrote-all and free.
  virtual llvm::StringRef deviceInterface() const = 0;
  /// Whether the kernels run on a device (deviceInterface() is not empty).
  bool onDevice() const { return !deviceInterface().empty(); }
  /// Headers the step program includes after its preamble, in order.
  virtual llvm::ArrayRef<llvm::StringRef> preludeIncludes() const = 0;

  /// The byte alignment of every planned buffer (moe-lower-to-kernels'
  /// `alignment`).
  virtual int64_t bufferAlignment() const = 0;
  /// Whether the global norm adds partial sums of squares computed by
  /// `moe.sum_squares` kernels (moe-lower-to-kernels' `device-norm`) rather
  /// than reading every gradient on the host.
  virtual bool deviceNorm() const = 0;

  /// Whether the kernels can generate bf16 and f16 arguments (a 16-bit
  /// model on a target without them is an error, or, with a target a
  /// cluster chose, runs on the host).
  virtual bool sixteenBitFloats() const = 0;
  /// Whether kernels may call OpenBLAS through extern stages (`--gemm=auto`
  /// or `blas`); without, the target implies `--gemm=halide` and refuses
  /// `--gemm=blas`.
  virtual bool blasGemm() const = 0;
  /// Whether the step may split expert phases into chunks that are views
  /// of planned buffers (`moec --expert-chunks`, moe-pipeline-experts).
  virtual bool expertChunks() const = 0;

  /// Flags the step program's compile adds, and libraries (or linker
  /// flags) the training binary links after moert. None of the three
  /// targets needs any: Halide's runtime loads the device API (libOpenCL,
  /// libcuda) when the binary starts its first kernel.
  virtual std::vector<std::string> compileFlags(const TargetOptionValues &values) const;
  virtual std::vector<std::string> linkFlags(const TargetOptionValues &values) const;
};

/// Every registered back end, in registration order (host first).
llvm::ArrayRef<const TargetBackend *> targetBackends();

/// The back end named `name`, or null.
const TargetBackend *lookupTarget(llvm::StringRef name);

/// The back end moec uses without `--target` (`host`).
const TargetBackend &defaultTarget();

/// The registered names, `separator` between them ("host, opencl, cuda").
std::string targetNames(llvm::StringRef separator = ", ");

/// The back end `name`, or an error listing the registered ones.
llvm::Expected<const TargetBackend *> parseTarget(llvm::StringRef name);

/// Checks `--name=value` for `backend`: an error when `backend` has no
/// such option ("--cuda-capability applies to --target=cuda", naming the
/// back ends that have it) or rejects the value ("--cuda-capability 71:
/// Halide targets ...").
llvm::Error checkTargetOption(const TargetBackend &backend, llvm::StringRef name,
                              llvm::StringRef value);

/// The Halide target of the kernels of `backend` whose CPU side is
/// `hostTarget`: `hostTarget` plus the back end's features.
std::string halideTarget(const TargetBackend &backend, llvm::StringRef hostTarget,
                         const TargetOptionValues &values);

/// The back end whose Halide features `halideTarget` names (a feature of
/// its default options, as a substring: `cuda` also finds
/// `cuda_capability_75`), or null: a CPU's target names none.
const TargetBackend *targetInHalideTarget(llvm::StringRef halideTarget);

/// An `llvm::cl::opt<const TargetBackend *>` modifier (like `cl::values`):
/// every registered back end is a value of the flag, with its description.
struct TargetValues {
  template <typename Opt> void apply(Opt &option) const {
    for (const TargetBackend *backend : targetBackends())
      option.getParser().addLiteralOption(backend->name(), backend, backend->description());
  }
};

/// Adds `backend` to the registry (each target folder's register function
/// calls it once, from registerAllTargets).
void registerTarget(const TargetBackend &backend);

} // namespace moec::codegen

#endif // MOE_CODEGEN_TARGETBACKEND_H
