//===- KernelRegistry.h - kernel families and their generators --*- C++ -*-===//
//
// The back end's contract with moe-lower-to-kernels: one row per kernel
// family (a `moe.kernel`'s `family`, the mnemonic of the moe op it computes)
// saying which moe-halide-gen generator produces it, the generator's
// argument names in order (its Halide Inputs, then Outputs), how a launch's
// operands and results fill them (and the view each is presented in), the
// GeneratorParams derived from the kernel spec, and the scratch the kernel
// takes. Rows
// live in codegen/lib/KernelFamilies.cpp, one section per generator file.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_CODEGEN_KERNELREGISTRY_H
#define MOE_CODEGEN_KERNELREGISTRY_H

#include "moe/Dialect/MoE/MoEOps.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace moec::codegen {

/// Who computes the contractions of the linear and FFN families: Halide
/// schedules, OpenBLAS sgemm through extern stages (runtime/lib/Gemm.cpp),
/// or, `Auto`, OpenBLAS for products of at least kBlasMinMacs multiply-adds
/// per group, Halide below (where OpenBLAS's per-call cost dominates).
enum class Gemm { Auto, Halide, Blas };

/// Multiply-adds (m n k, per group) from which `Gemm::Auto` takes OpenBLAS.
constexpr int64_t kBlasMinMacs = int64_t(1) << 22;

/// How a tensor is presented to a kernel (Halide extents, innermost first):
/// `Rows2` [last, numel / last] (1-d tensors stay 1-d), `Rows3` the same
/// with a unit group dimension, `Reversed` every dimension reversed, `Flat`
/// and `Vector` [numel] (`Vector` also for rank-0 tensors).
enum class ViewKind { Rows2, Rows3, Reversed, Flat, Vector };

/// One argument of a generated kernel: a launch operand or result, a unit
/// dummy for an absent optional input or output, (for the optimiser) the
/// parameter the launch updates and its two moments, or a metric output the
/// op does not have (`index` floats the step program reads after the launch,
/// such as the fused gate's unweighted losses).
struct KernelArg {
  enum Source { Operand, Result, Dummy, Param, MomentM, MomentV, Metric } source;
  unsigned index = 0;
  ViewKind view = ViewKind::Rows2;
  /// Rows2: rows of this many elements (0: the last dimension).
  int64_t rowWidth = 0;
  unsigned dummyRank = 1;
  bool dummyInt = false; ///< an i32 dummy (else f32)
};

/// Reads one kernel spec (signature shapes, config, epilogue).
class KernelSpec {
public:
  explicit KernelSpec(mlir::moe::KernelOp kernel);
  llvm::ArrayRef<int64_t> in(unsigned i) const;
  llvm::ArrayRef<int64_t> out(unsigned i) const;
  unsigned numInputs() const { return signature.getNumInputs(); }
  unsigned numResults() const { return signature.getNumResults(); }
  static int64_t numel(llvm::ArrayRef<int64_t> shape);
  /// A numeric config entry (integer, float or enum), or `fallback`.
  double number(llvm::StringRef key, double fallback = 0) const;
  bool flag(llvm::StringRef key) const;
  bool has(llvm::StringRef key) const;
  bool hasEpilogue(llvm::StringRef name) const;

  llvm::StringRef family;
  mlir::FunctionType signature;
  mlir::DictionaryAttr config;
  mlir::ArrayAttr epilogue;
};

/// Reads `key=value` GeneratorParams (MLIR-free).
class GeneratorParams {
public:
  explicit GeneratorParams(const std::vector<std::string> &params) : params(params) {}
  /// An integer value, 1 for `true`, 0 when absent or anything else.
  int64_t operator()(llvm::StringRef key) const;
  /// The text of a value, empty when absent.
  llvm::StringRef text(llvm::StringRef key) const;

private:
  const std::vector<std::string> &params;
};

/// One kernel family's row.
struct KernelFamily {
  /// The `moe.kernel` family (the moe op mnemonic).
  llvm::StringLiteral family;
  /// The moe-halide-gen generator; empty for scalar families the runtime
  /// computes (`runtimeRoutine`).
  llvm::StringLiteral generator;
  /// The generator's arguments, by their Halide names, in call order.
  std::vector<llvm::StringLiteral> signature;
  /// The GeneratorParams (`key=value`) of a spec.
  std::vector<std::string> (*params)(const KernelSpec &spec, Gemm gemm) = nullptr;
  /// The elements (4 bytes each) of the kernel's compute_root intermediates
  /// under its generator's schedule, from its params (null: none).
  int64_t (*scratch)(const GeneratorParams &params) = nullptr;
  /// A launch's operands and results in `signature` order, given the
  /// launch's operand and result counts (null: operands, then results, in
  /// `view`).
  llvm::SmallVector<KernelArg> (*arguments)(const KernelSpec &spec, unsigned numOperands,
                                            unsigned numResults) = nullptr;
  /// The view of arguments `arguments` does not say otherwise of.
  ViewKind view = ViewKind::Rows2;
};

/// Every registered family.
llvm::ArrayRef<KernelFamily> kernelFamilies();

/// The row of `family`, or null.
const KernelFamily *lookupFamily(llvm::StringRef family);

/// The scratch bound, in bytes, of a kernel of `generator` under `params`:
/// its row's `scratch` plus the pool's per-block slack. The compiler sums no
/// two kernels (they run one at a time): the largest bound is the program's
/// planned scratch.
int64_t scratchBound(llvm::StringRef generator, const std::vector<std::string> &params);

/// What produces one kernel.
struct KernelCall {
  const KernelFamily *row = nullptr;
  /// Generator name in moe-halide-gen, or empty for a runtime routine.
  std::string generator;
  /// `key=value` GeneratorParams.
  std::vector<std::string> params;
  /// The runtime routine (lr_schedule, global_norm) when generator is empty.
  std::string runtimeRoutine;
  /// Bytes of scratch the kernel allocates while it runs (its compute_root
  /// intermediates under the generator's schedule; an upper bound).
  int64_t scratchBytes = 0;
};

/// The call producing `kernel`; fails with a diagnostic on the kernel op
/// when no generator exists for its family.
mlir::FailureOr<KernelCall> lookupKernel(mlir::moe::KernelOp kernel, Gemm gemm = Gemm::Auto);

/// The arguments of `launch` in its generator's order; fails with a
/// diagnostic when they do not fill the generator's signature.
mlir::FailureOr<llvm::SmallVector<KernelArg>> argumentsOf(mlir::moe::LaunchOp launch,
                                                          mlir::moe::KernelOp kernel);

} // namespace moec::codegen

#endif // MOE_CODEGEN_KERNELREGISTRY_H
