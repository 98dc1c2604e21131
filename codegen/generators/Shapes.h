//===- Shapes.h - shape constraints every generator shares ------*- C++ -*-===//
//
// Kernels are specialised to exact shapes: each buffer argument is declared
// dense and row-major (Halide dimension 0 innermost, stride 1) with the
// extents of its kernel spec, which Halide checks on every call.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_SHAPES_H
#define MOEC_CODEGEN_SHAPES_H

#include "GpuSchedule.h"
#include "Halide.h"

#include <initializer_list>

namespace moec_codegen {

/// `b` is dense with `extents`, innermost first.
inline void constrainDense(Halide::OutputImageParam b, std::initializer_list<int> extents) {
  int stride = 1, dim = 0;
  for (int extent : extents) {
    b.dim(dim++).set_bounds(0, extent).set_stride(stride);
    stride *= extent;
  }
}

/// An optional argument: `extents` when `present`, else a dummy of the same
/// rank with every extent 1 (the caller passes a 1x...x1 buffer).
inline void constrainOptional(Halide::OutputImageParam b, bool present,
                              std::initializer_list<int> extents) {
  int stride = 1, dim = 0;
  for (int extent : extents) {
    int e = present ? extent : 1;
    b.dim(dim++).set_bounds(0, e).set_stride(stride);
    stride *= e;
  }
}

/// True when the kernel is generated for a GPU target (OpenCL, CUDA): a
/// generator's schedule() declares the shapes, then schedules with
/// scheduleForGpu (GpuSchedule.h) instead of its CPU schedule.
inline bool onGpu(const Halide::Target &target) { return target.has_gpu_feature(); }

/// An index read from a buffer, checked to lie in [lo, hi) (the kernel fails
/// with `what` and the value otherwise). A GPU kernel cannot report an
/// error from device code: there the index is taken as is, and its
/// consumers clamp it (the trainer checks token ids against the vocabulary
/// when it loads the data; slots come from the routing kernel).
inline Halide::Expr checkedIndex(const Halide::Target &target, Halide::Expr index, int lo, int hi,
                                 const char *what) {
  if (onGpu(target))
    return index;
  return Halide::require(index >= lo && index < hi, index, what, index);
}

} // namespace moec_codegen

#endif // MOEC_CODEGEN_SHAPES_H
