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

namespace {

class RMSNorm : public Generator<RMSNorm> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};
  GeneratorParam<float> epsilon{"epsilon", 1e-5f};

  Input<Buffer<float, 2>> x{"x"};
  Input<Buffer<float, 1>> g{"g"};
  Output<Buffer<float, 2>> y{"y"};

  Var d{"d"}, r{"r"};
  Func inv{"inv"};

  void generate() {
    RDom c(0, width);
    inv(r) = 1.0f / sqrt(sum(x(c, r) * x(c, r)) / (float)(int)width + epsilon);
    y(d, r) = x(d, r) * inv(r) * g(d);
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

class RMSNormGrad : public Generator<RMSNormGrad> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};
  GeneratorParam<float> epsilon{"epsilon", 1e-5f};

  Input<Buffer<float, 2>> x{"x"};
  Input<Buffer<float, 1>> g{"g"};
  Input<Buffer<float, 2>> dy{"dy"};
  Output<Buffer<float, 2>> dx{"dx"};
  Output<Buffer<float, 1>> dg{"dg"};

  Var d{"d"}, r{"r"};
  Func inv{"inv"}, ax{"ax"};

  void generate() {
    RDom c(0, width), rr(0, rows);
    float n = (float)(int)width;
    inv(r) = 1.0f / sqrt(sum(x(c, r) * x(c, r)) / n + epsilon);
    ax(r) = sum(dy(c, r) * g(c) * x(c, r));
    dx(d, r) = inv(r) * dy(d, r) * g(d) - x(d, r) * inv(r) * inv(r) * inv(r) * ax(r) / n;
    dg(d) = sum(dy(d, rr) * x(d, rr) * inv(rr));
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
