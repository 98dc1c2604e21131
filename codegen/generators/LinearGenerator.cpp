//===- LinearGenerator.cpp - Halide generators of the linear family -------===//
//
// `linear`:      y[m, n] = sum_k x[m, k] w[k, n] (+ bias[n]) (+ residual[m, n])
// `linear_grad`: dx[m, k] = sum_n dy[m, n] w[k, n];  dw[k, n] = sum_m x[m, k] dy[m, n]
// `bias_grad`:   db[n] = sum_m dy[m, n]
//
// Tensors are row-major; Halide's dimension 0 is the innermost, so x[m, k]
// is x(k, m). Shapes are GeneratorParams: every kernel is specialised to
// the shapes of its `moe.kernel` spec. generate() holds the algorithm,
// schedule() the CPU schedule. `blas=true`: the products are OpenBLAS
// extern stages (runtime/lib/Gemm.cpp), the epilogue stays here.
//
//===----------------------------------------------------------------------===//

#include "Matmul.h"
#include "Shapes.h"

#include <utility>

using namespace Halide;
using namespace moec_codegen;

namespace {

class Linear : public Generator<Linear> {
public:
  GeneratorParam<int> rows{"rows", 1}; // M: tokens
  GeneratorParam<int> in{"in", 1};     // K
  GeneratorParam<int> out{"out", 1};   // N
  GeneratorParam<bool> bias{"bias", false};
  GeneratorParam<bool> residual{"residual", false};
  GeneratorParam<bool> blas{"blas", false};

  Input<Buffer<float, 2>> x{"x"};
  Input<Buffer<float, 2>> w{"w"};
  Input<Buffer<float, 1>> b{"b"};
  Input<Buffer<float, 2>> r{"r"};
  Output<Buffer<float, 2>> y{"y"};

  Var n{"n"}, m{"m"};
  Func prod{"prod"};

  void generate() {
    if (blas) {
      prod = externGemm("prod_gemm", {n, m}, {x}, {w}, in);
    } else {
      RDom k(0, in);
      prod(n, m) = 0.0f;
      prod(n, m) += x(k, m) * w(n, k);
    }
    if (blas && !bias && !residual) {
      y = prod;
      return;
    }
    Expr value = prod(n, m);
    if (bias)
      value += b(n);
    if (residual)
      value += r(n, m);
    y(n, m) = value;
  }

  void schedule() {
    constrainDense(x, {in, rows});
    constrainDense(w, {out, in});
    constrainDense(y, {out, rows});
    b.dim(0).set_bounds(0, bias ? (int)out : 1);
    constrainOptional(r, residual, {out, rows});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    if (blas) {
      prod.compute_root();
      if (bias || residual)
        scheduleElementwise(y, n, m, out, vec, nullptr);
      return;
    }
    Var no{"no"}, ni{"ni"}, mo{"mo"}, mi{"mi"};
    if (out >= 2 * vec && rows >= 4) {
      y.tile(n, m, no, mo, ni, mi, 2 * vec, 4, TailStrategy::ShiftInwards)
          .vectorize(ni, vec)
          .unroll(mi)
          .parallel(mo);
      prod.compute_at(y, no).vectorize(n, vec).unroll(m);
      prod.update().reorder(n, m, prod.rvars()[0]).vectorize(n, vec).unroll(m);
    } else {
      prod.compute_at(y, m);
    }
  }
};

class LinearGrad : public Generator<LinearGrad> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> in{"in", 1};
  GeneratorParam<int> out{"out", 1};
  GeneratorParam<bool> blas{"blas", false};

  Input<Buffer<float, 2>> x{"x"};
  Input<Buffer<float, 2>> w{"w"};
  Input<Buffer<float, 2>> dy{"dy"};
  Output<Buffer<float, 2>> dx{"dx"};
  Output<Buffer<float, 2>> dw{"dw"};

  Var i{"i"}, j{"j"};
  // Transposed operands keep each contraction's broadcast side contiguous.
  Func wT{"w_t"}, xT{"x_t"}, dxSum{"dx_sum"}, dwSum{"dw_sum"};

  void generate() {
    if (blas) {
      dx = externGemm("dx_gemm", {i, j}, {dy}, {w, true}, out);  // dy w^T
      dw = externGemm("dw_gemm", {i, j}, {x, true}, {dy}, rows); // x^T dy
      return;
    }
    RDom n(0, out), m(0, rows);
    wT(i, j) = w(j, i); // wT(k, n)
    xT(i, j) = x(j, i); // xT(m, k)
    // dx(k = i, m = j) = sum_n dy(n, m) w(k, n)
    defineContraction(dxSum, {i, j}, n, dy(n, j) * wT(i, n));
    dx(i, j) = dxSum(i, j);
    // dw(n = i, k = j) = sum_m x(k, m) dy(n, m)
    defineContraction(dwSum, {i, j}, m, xT(m, j) * dy(i, m));
    dw(i, j) = dwSum(i, j);
  }

  void schedule() {
    constrainDense(x, {in, rows});
    constrainDense(w, {out, in});
    constrainDense(dy, {out, rows});
    constrainDense(dx, {in, rows});
    constrainDense(dw, {out, in});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    if (blas)
      return;
    const int vec = natural_vector_size<float>();
    scheduleTranspose(wT, i, j, in, out, vec, nullptr);
    scheduleTranspose(xT, i, j, rows, in, vec, nullptr);
    scheduleMatmul(dx, {dxSum}, i, j, in, rows, out, vec, nullptr, false);
    scheduleMatmul(dw, {dwSum}, i, j, out, in, rows, vec, nullptr, false);
  }
};

/// `bias_grad`: db[n] = sum_m dy[m, n], rows accumulated in order.
class BiasGrad : public Generator<BiasGrad> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> out{"out", 1};

  Input<Buffer<float, 2>> dy{"dy"};
  Output<Buffer<float, 1>> db{"db"};

  Var n{"n"};
  Func acc{"acc"};

  void generate() {
    RDom m(0, rows);
    acc(n) = 0.0f;
    acc(n) += dy(n, m);
    db(n) = acc(n);
  }

  void schedule() {
    constrainDense(dy, {out, rows});
    constrainDense(db, {out});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    // The sum runs vectorised in an internal (aligned) buffer; the output,
    // one row, is copied out element by element, which assumes nothing
    // about the caller's alignment.
    const int vec = natural_vector_size<float>();
    acc.compute_root();
    if (out >= vec) {
      acc.vectorize(n, vec, TailStrategy::GuardWithIf);
      acc.update().vectorize(n, vec, TailStrategy::GuardWithIf);
    }
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Linear, linear)
HALIDE_REGISTER_GENERATOR(BiasGrad, bias_grad)
HALIDE_REGISTER_GENERATOR(LinearGrad, linear_grad)
