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

class Linear : public MoEGenerator<Linear> {
public:
  GeneratorParam<int> rows{"rows", 1}; // M: tokens
  GeneratorParam<int> in{"in", 1};     // K
  GeneratorParam<int> out{"out", 1};   // N
  GeneratorParam<bool> bias{"bias", false};
  GeneratorParam<bool> residual{"residual", false};
  GeneratorParam<bool> blas{"blas", false};

  Input<Buffer<void, 2>> x{"x"};
  Input<Buffer<void, 2>> w{"w"};
  Input<Buffer<void, 1>> b{"b"};
  Input<Buffer<void, 2>> r{"r"};
  Output<Buffer<void, 2>> y{"y"};

  Var n{"n"}, m{"m"}, kv{"kv"};
  Func prod{"prod"}, xf{"x_f"}, wf{"w_f"};

  void configure() { storage(x, w, b, r, y); }

  /// The product is the output itself: an f32 extern GEMM with no epilogue.
  bool direct() const { return blas && !bias && !residual && isF32(y); }

  void generate() {
    if (blas) {
      prod = externGemm("prod_gemm", {n, m}, {gemmInput(x)}, {gemmInput(w)}, in);
    } else {
      RDom k(0, in);
      xf(kv, m) = widened(x)(kv, m);
      wf(n, kv) = widened(w)(n, kv);
      prod(n, m) = 0.0f;
      prod(n, m) += xf(k, m) * wf(n, k);
    }
    if (direct()) {
      y = prod;
      return;
    }
    Expr value = prod(n, m);
    if (bias)
      value += widened(b)(n);
    if (residual)
      value += widened(r)(n, m);
    y(n, m) = narrowed(y, value);
  }

  void schedule() {
    constrainDense(x, {in, rows});
    constrainDense(w, {out, in});
    constrainDense(y, {out, rows});
    b.dim(0).set_bounds(0, bias ? (int)out : 1);
    constrainOptional(r, residual, {out, rows});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleContractionForGpu(y, n, m, prod, {{xf, wf}});
    const int vec = natural_vector_size<float>();
    if (blas) {
      scheduleStaged(vec);
      prod.compute_root();
      if (!direct())
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

class LinearGrad : public MoEGenerator<LinearGrad> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> in{"in", 1};
  GeneratorParam<int> out{"out", 1};
  GeneratorParam<bool> blas{"blas", false};

  Input<Buffer<void, 2>> x{"x"};
  Input<Buffer<void, 2>> w{"w"};
  Input<Buffer<void, 2>> dy{"dy"};
  Output<Buffer<void, 2>> dx{"dx"};
  Output<Buffer<void, 2>> dw{"dw"};

  Var i{"i"}, j{"j"};
  // Transposed operands keep each contraction's broadcast side contiguous.
  Func wT{"w_t"}, xT{"x_t"}, dxSum{"dx_sum"}, dwSum{"dw_sum"}, dyf{"dy_f"};

  void configure() { storage(x, w, dy, dx, dw); }

  void generate() {
    if (blas) {
      ExternFuncArgument xs = gemmInput(x), ws = gemmInput(w), dys = gemmInput(dy);
      dxSum = externGemm("dx_gemm", {i, j}, {dys}, {ws, true}, out);  // dy w^T
      dwSum = externGemm("dw_gemm", {i, j}, {xs, true}, {dys}, rows); // x^T dy
      if (isF32(dx))
        dx = dxSum;
      else
        dx(i, j) = narrowed(dx, dxSum(i, j));
      if (isF32(dw))
        dw = dwSum;
      else
        dw(i, j) = narrowed(dw, dwSum(i, j));
      return;
    }
    RDom n(0, out), m(0, rows);
    dyf(i, j) = widened(dy)(i, j);
    wT(i, j) = widened(w)(j, i); // wT(k, n)
    xT(i, j) = widened(x)(j, i); // xT(m, k)
    // dx(k = i, m = j) = sum_n dy(n, m) w(k, n)
    defineContraction(dxSum, {i, j}, n, dyf(n, j) * wT(i, n));
    dx(i, j) = narrowed(dx, dxSum(i, j));
    // dw(n = i, k = j) = sum_m x(k, m) dy(n, m)
    defineContraction(dwSum, {i, j}, m, xT(m, j) * dyf(i, m));
    dw(i, j) = narrowed(dw, dwSum(i, j));
  }

  void schedule() {
    constrainDense(x, {in, rows});
    constrainDense(w, {out, in});
    constrainDense(dy, {out, rows});
    constrainDense(dx, {in, rows});
    constrainDense(dw, {out, in});
    if (moec_codegen::onGpu(get_target())) {
      // dy feeds both contractions: one shared-memory tile of it for each.
      moec_codegen::scheduleContractionForGpu(dx, i, j, dxSum, {{dyf.in(dxSum), wT}});
      moec_codegen::scheduleContractionForGpu(dw, i, j, dwSum, {{xT, dyf.in(dwSum)}});
      return;
    }
    const int vec = natural_vector_size<float>();
    if (blas) {
      scheduleStaged(vec);
      if (!isF32(dx))
        dxSum.compute_root();
      if (!isF32(dw))
        dwSum.compute_root();
      return;
    }
    scheduleTranspose(wT, i, j, in, out, vec, nullptr);
    scheduleTranspose(xT, i, j, rows, in, vec, nullptr);
    scheduleMatmul(dx, {dxSum}, i, j, in, rows, out, vec, nullptr, false);
    scheduleMatmul(dw, {dwSum}, i, j, out, in, rows, vec, nullptr, false);
  }
};

/// `bias_grad`: db[n] = sum_m dy[m, n], rows accumulated in order.
class BiasGrad : public MoEGenerator<BiasGrad> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> out{"out", 1};

  Input<Buffer<void, 2>> dy{"dy"};
  Output<Buffer<void, 1>> db{"db"};

  Var n{"n"};
  Func acc{"acc"};

  void configure() { storage(dy, db); }

  void generate() {
    RDom m(0, rows);
    acc(n) = 0.0f;
    acc(n) += widened(dy)(n, m);
    db(n) = narrowed(db, acc(n));
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
