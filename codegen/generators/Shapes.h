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

/// `input` read as f32 (a pure Func: inlined into its consumers).
template <class B> Halide::Func widened(const B &input) {
  Halide::Func f(input.name() + "_f32");
  f(Halide::_) = Halide::cast<float>(input(Halide::_));
  return f;
}

/// `value` rounded to `output`'s element type.
template <class B> Halide::Expr narrowed(const B &output, Halide::Expr value) {
  return Halide::cast(output.type(), value);
}

/// The base of every generator: its float arguments (activations, weights)
/// take their element type from the GeneratorParams `bf16_args` and
/// `f16_args` (comma-separated Halide argument names; the rest are f32),
/// which the kernel registry derives from the kernel's signature. A
/// generator declares those arguments `Buffer<void, N>`, sets their types
/// in configure() with storage(), reads them through widened() (f32, so
/// every sum accumulates in f32) and writes through narrowed() (one
/// rounding, to nearest even).
template <class T> class MoEGenerator : public Halide::Generator<T> {
public:
  Halide::GeneratorParam<std::string> bf16_args{"bf16_args", ""};
  Halide::GeneratorParam<std::string> f16_args{"f16_args", ""};

protected:
  /// Sets each argument's element type: call from configure().
  template <class... Buffers> void storage(Buffers &...buffers) {
    (buffers.set_type(typeOf(buffers.name())), ...);
  }

  /// True when `buffer` is stored in f32.
  template <class B> static bool isF32(const B &buffer) {
    return buffer.type() == Halide::Float(32);
  }

  /// An extern GEMM's (OpenBLAS's) operand: the buffer itself when f32,
  /// else an f32 copy computed at root by scheduleStaged().
  template <class B> Halide::ExternFuncArgument gemmInput(const B &buffer) {
    if (isF32(buffer))
      return Halide::ExternFuncArgument(buffer);
    Halide::Func copy = Halide::Func(buffer.name() + "_staged");
    Halide::Var i, j, k;
    std::vector<Halide::Var> args = {i, j, k};
    args.resize(buffer.dims());
    copy(args) = Halide::cast<float>(buffer(args));
    staged.push_back(copy);
    return copy;
  }
  /// Defines `output` as an extern GEMM's `product`: the product itself when
  /// the output is f32, else the product (at root) rounded.
  template <class O> void fromExtern(O &output, Halide::Func product) {
    if (isF32(output)) {
      output = product;
      return;
    }
    output(Halide::_) = narrowed(output, product(Halide::_));
    products.push_back(product);
    rounded.push_back(Halide::Func(output));
  }
  /// Schedules gemmInput()'s copies and fromExtern()'s products (CPU).
  void scheduleStaged(int vec) {
    auto elementwise = [&](Halide::Func f) {
      f.vectorize(f.args()[0], vec, Halide::TailStrategy::GuardWithIf);
      if (f.args().size() > 1)
        f.parallel(f.args().back());
    };
    for (Halide::Func copy : staged)
      elementwise(copy.compute_root());
    for (Halide::Func product : products)
      product.compute_root();
    for (Halide::Func output : rounded) // outputs: at root already
      elementwise(output);
  }
  std::vector<Halide::Func> staged, products, rounded;

private:
  static bool listed(const std::string &list, const std::string &name) {
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(',', start);
      if (end == std::string::npos)
        end = list.size();
      if (list.compare(start, end - start, name) == 0)
        return true;
      start = end + 1;
    }
    return false;
  }
  Halide::Type typeOf(const std::string &name) const {
    if (listed(bf16_args, name))
      return Halide::BFloat(16);
    if (listed(f16_args, name))
      return Halide::Float(16);
    return Halide::Float(32);
  }
};

} // namespace moec_codegen

#endif // MOEC_CODEGEN_SHAPES_H
