//===- Shapes.h - shape constraints every generator shares ------*- C++ -*-===//
//
// Kernels are specialised to exact shapes: each buffer argument is declared
// dense and row-major (Halide dimension 0 innermost, stride 1) with the
// extents of its kernel spec, which Halide checks on every call.
//
//===----------------------------------------------------------------------===//

#ifndef MOEC_CODEGEN_SHAPES_H
#define MOEC_CODEGEN_SHAPES_H

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

} // namespace moec_codegen

#endif // MOEC_CODEGEN_SHAPES_H
