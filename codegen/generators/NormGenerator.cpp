//===- NormGenerator.cpp - Halide generators of rms_norm ------------------===//
//
// `rms_norm`:      y[r, d] = x[r, d] * inv[r] * g[d],  inv = rsqrt(mean(x^2) + eps)
// `rms_norm_grad`: dx[r, d] = inv dy g - x inv^3 <dy g, x> / D;
//                  dg[d] = sum_r dy x inv
// Rows are the flattened leading dimensions.
//
//===----------------------------------------------------------------------===//

#include "Shapes.h"

using namespace Halide;
using moec_codegen::constrainDense;
using moec_codegen::narrowed;
using moec_codegen::widened;

namespace {

class RMSNorm : public moec_codegen::MoEGenerator<RMSNorm> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};
  GeneratorParam<float> epsilon{"epsilon", 1e-5f};

  Input<Buffer<void, 2>> x{"x"};
  Input<Buffer<void, 1>> g{"g"};
  Output<Buffer<void, 2>> y{"y"};

  Var d{"d"}, r{"r"};
  Func inv{"inv"};

  void configure() { storage(x, g, y); }

  void generate() {
    RDom c(0, width);
    Func xf = widened(x), gf = widened(g);
    inv(r) = 1.0f / sqrt(sum(xf(c, r) * xf(c, r)) / (float)(int)width + epsilon);
    y(d, r) = narrowed(y, xf(d, r) * inv(r) * gf(d));
  }

  void schedule() {
    constrainDense(x, {width, rows});
    g.dim(0).set_bounds(0, width);
    constrainDense(y, {width, rows});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    y.parallel(r);
    inv.compute_at(y, r);
    if (width >= vec)
      y.vectorize(d, vec, TailStrategy::GuardWithIf);
  }
};

class RMSNormGrad : public moec_codegen::MoEGenerator<RMSNormGrad> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};
  GeneratorParam<float> epsilon{"epsilon", 1e-5f};

  Input<Buffer<void, 2>> x{"x"};
  Input<Buffer<void, 1>> g{"g"};
  Input<Buffer<void, 2>> dy{"dy"};
  Output<Buffer<void, 2>> dx{"dx"};
  Output<Buffer<void, 1>> dg{"dg"};

  Var d{"d"}, r{"r"};
  Func inv{"inv"}, ax{"ax"};

  void configure() { storage(x, g, dy, dx, dg); }

  void generate() {
    RDom c(0, width), rr(0, rows);
    float n = (float)(int)width;
    Func xf = widened(x), gf = widened(g), dyf = widened(dy);
    inv(r) = 1.0f / sqrt(sum(xf(c, r) * xf(c, r)) / n + epsilon);
    ax(r) = sum(dyf(c, r) * gf(c) * xf(c, r));
    dx(d, r) =
        narrowed(dx, inv(r) * dyf(d, r) * gf(d) - xf(d, r) * inv(r) * inv(r) * inv(r) * ax(r) / n);
    if (moec_codegen::onGpu(get_target())) {
      // One device thread per (d, chunk of rows), then per d over the
      // chunks: every token's sum in one thread would leave the device idle.
      Var k("k");
      RDom rk(0, moec_codegen::gpuChunks(rows));
      Func part("dg_part");
      part(d, k) = moec_codegen::gpuChunkSum(
          k, rows, [&](Expr row) { return dyf(d, row) * xf(d, row) * inv(row); });
      dg(d) = narrowed(dg, sum(part(d, rk)));
    } else {
      dg(d) = narrowed(dg, sum(dyf(d, rr) * xf(d, rr) * inv(rr)));
    }
  }

  void schedule() {
    constrainDense(x, {width, rows});
    constrainDense(dy, {width, rows});
    constrainDense(dx, {width, rows});
    g.dim(0).set_bounds(0, width);
    dg.dim(0).set_bounds(0, width);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    inv.compute_root().parallel(r);
    ax.compute_at(dx, r);
    dx.parallel(r);
    if (width >= vec) {
      dx.vectorize(d, vec, TailStrategy::GuardWithIf);
      dg.vectorize(d, vec, TailStrategy::GuardWithIf);
    }
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(RMSNorm, rms_norm)
HALIDE_REGISTER_GENERATOR(RMSNormGrad, rms_norm_grad)
