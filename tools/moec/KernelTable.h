//===- KernelTable.h - kernel specs to Halide generator calls ---*- C++ -*-===//
//
// Maps a `moe.kernel` spec (family, signature, settings, epilogue) to the
// moe-halide-gen generator and GeneratorParams that produce it, or to a
// runtime routine for the scalar families (lr_schedule, global_norm).
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_KERNELTABLE_H
#define MOEC_KERNELTABLE_H

#include "moe/Dialect/MoE/MoEOps.h"

#include <string>
#include <vector>

namespace moec {

struct KernelCall {
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

/// Who computes the contractions of the linear and FFN families: Halide
/// schedules, OpenBLAS sgemm through extern stages (runtime/lib/Gemm.cpp),
/// or, `Auto`, OpenBLAS for products of at least kBlasMinMacs multiply-adds
/// per group, Halide below (where OpenBLAS's per-call cost dominates).
enum class Gemm { Auto, Halide, Blas };

/// Multiply-adds (m n k, per group) from which `Gemm::Auto` takes OpenBLAS.
constexpr int64_t kBlasMinMacs = int64_t(1) << 22;

/// The call producing `kernel`; fails with a diagnostic on the kernel op
/// when no generator exists for its family (yet).
mlir::FailureOr<KernelCall> lookupKernel(mlir::moe::KernelOp kernel,
                                         Gemm gemm = Gemm::Auto);

} // namespace moec

#endif // MOEC_KERNELTABLE_H
