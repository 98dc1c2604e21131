//===- ElementwiseGenerator.cpp - add and the AdamW update ----------------===//
//
// `add`:          z = a + b over `size` elements (residuals, loss terms,
//                 gradient accumulation).
// `clamp`:        z = min(max(a, -limit), limit) (OLMoE's clip_qkv), and
//                 `clamp_grad`: dx = dy where -limit <= x <= limit, else 0.
// `sigmoid_gate`: z[d, r] = x[d, r] * sigmoid(g[r]) (Qwen2-MoE's shared
//                 expert gate), and its gradient `sigmoid_gate_grad`:
//                 dx = dy s, dg[r] = s (1 - s) <dy[., r], x[., r]>.
// `sum_squares`:  strided partial sums of squares of a gradient, per row
//                 (a device target's global norm reads these back).
// `adamw_update`: one AdamW step of a parameter of `size` elements, with
//                 global-norm clipping, bias correction and decoupled decay;
//                 the new parameter and moments are one tuple computed from
//                 the old values element by element, so the runtime may pass
//                 the same memory as input and output (in place).
//
//===----------------------------------------------------------------------===//

#include "Shapes.h"

using namespace Halide;
using moec_codegen::narrowed;
using moec_codegen::widened;

namespace {

/// The CPU schedule of an elementwise output over `size` elements:
/// vectorised by `vec` lanes, and split across threads when large.
void scheduleElementwise(Func out, Var i, int size, int vec) {
  if (size >= 4 * vec)
    out.vectorize(i, vec, TailStrategy::GuardWithIf);
  if (size >= 1 << 16)
    out.parallel(i, 1 << 14, TailStrategy::GuardWithIf);
}

class Add : public moec_codegen::MoEGenerator<Add> {
public:
  GeneratorParam<int> size{"size", 1};
  Input<Buffer<void, 1>> a{"a"};
  Input<Buffer<void, 1>> b{"b"};
  Output<Buffer<void, 1>> z{"z"};
  Var i{"i"};

  void configure() { storage(a, b, z); }

  void generate() { z(i) = narrowed(z, widened(a)(i) + widened(b)(i)); }

  void schedule() {
    for (OutputImageParam p : {OutputImageParam(a), OutputImageParam(b), OutputImageParam(z)})
      p.dim(0).set_bounds(0, size);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    if (size >= 4 * vec)
      z.vectorize(i, vec, TailStrategy::GuardWithIf);
  }
};

/// moe.cast: one element type to another (mixed precision's weight copies
/// and their gradients), rounding to nearest even.
class Cast : public moec_codegen::MoEGenerator<Cast> {
public:
  GeneratorParam<int> size{"size", 1};
  Input<Buffer<void, 1>> a{"a"};
  Output<Buffer<void, 1>> z{"z"};
  Var i{"i"};

  void configure() { storage(a, z); }

  void generate() { z(i) = narrowed(z, widened(a)(i)); }

  void schedule() {
    a.dim(0).set_bounds(0, size);
    z.dim(0).set_bounds(0, size);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    scheduleElementwise(z, i, size, natural_vector_size<float>());
  }
};

/// moe.clamp over `size` elements.
class Clamp : public moec_codegen::MoEGenerator<Clamp> {
public:
  GeneratorParam<int> size{"size", 1};
  GeneratorParam<float> limit{"limit", 1.0f};
  Input<Buffer<void, 1>> a{"a"};
  Output<Buffer<void, 1>> z{"z"};
  Var i{"i"};

  void configure() { storage(a, z); }

  void generate() {
    Expr c = (float)limit;
    z(i) = narrowed(z, clamp(widened(a)(i), -c, c));
  }

  void schedule() {
    a.dim(0).set_bounds(0, size);
    z.dim(0).set_bounds(0, size);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    scheduleElementwise(z, i, size, natural_vector_size<float>());
  }
};

class ClampGrad : public moec_codegen::MoEGenerator<ClampGrad> {
public:
  GeneratorParam<int> size{"size", 1};
  GeneratorParam<float> limit{"limit", 1.0f};
  Input<Buffer<void, 1>> x{"x"};
  Input<Buffer<void, 1>> dy{"dy"};
  Output<Buffer<void, 1>> dx{"dx"};
  Var i{"i"};

  void configure() { storage(x, dy, dx); }

  void generate() {
    Expr c = (float)limit, v = widened(x)(i);
    dx(i) = narrowed(dx, select(v >= -c && v <= c, widened(dy)(i), 0.0f));
  }

  void schedule() {
    for (OutputImageParam p : {OutputImageParam(x), OutputImageParam(dy), OutputImageParam(dx)})
      p.dim(0).set_bounds(0, size);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    scheduleElementwise(dx, i, size, natural_vector_size<float>());
  }
};

/// moe.sigmoid_gate: `rows` rows of `width`, each scaled by the sigmoid of
/// its gate logit (g is [1, rows]).
class SigmoidGate : public moec_codegen::MoEGenerator<SigmoidGate> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};
  Input<Buffer<void, 2>> x{"x"};
  Input<Buffer<void, 2>> g{"g"};
  Output<Buffer<void, 2>> z{"z"};
  Var d{"d"}, r{"r"};
  Func s{"s"};

  void configure() { storage(x, g, z); }

  void generate() {
    Func xf = widened(x), gf = widened(g);
    s(r) = 1.0f / (1.0f + exp(-gf(0, r)));
    z(d, r) = narrowed(z, xf(d, r) * s(r));
  }

  void schedule() {
    constrainDense(x, {width, rows});
    constrainDense(g, {1, rows});
    constrainDense(z, {width, rows});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    s.compute_at(z, r);
    z.parallel(r);
    if (width >= vec)
      z.vectorize(d, vec, TailStrategy::GuardWithIf);
  }
};

class SigmoidGateGrad : public moec_codegen::MoEGenerator<SigmoidGateGrad> {
public:
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};
  Input<Buffer<void, 2>> x{"x"};
  Input<Buffer<void, 2>> g{"g"};
  Input<Buffer<void, 2>> dy{"dy"};
  Output<Buffer<void, 2>> dx{"dx"};
  Output<Buffer<void, 2>> dg{"dg"};
  Var d{"d"}, r{"r"};
  Func s{"s"};

  void configure() { storage(x, g, dy, dx, dg); }

  void generate() {
    RDom c(0, width);
    Func xf = widened(x), gf = widened(g), dyf = widened(dy);
    s(r) = 1.0f / (1.0f + exp(-gf(0, r)));
    dx(d, r) = narrowed(dx, dyf(d, r) * s(r));
    dg(d, r) = narrowed(dg, s(r) * (1.0f - s(r)) * sum(dyf(c, r) * xf(c, r)));
  }

  void schedule() {
    constrainDense(x, {width, rows});
    constrainDense(g, {1, rows});
    constrainDense(dy, {width, rows});
    constrainDense(dx, {width, rows});
    constrainDense(dg, {1, rows});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    s.compute_root();
    dx.parallel(r);
    if (width >= vec)
      dx.vectorize(d, vec, TailStrategy::GuardWithIf);
  }
};

/// moe.sum_squares: `size` elements as `rows` rows; s(r * chunks + j) is
/// the sum of the squares of row r's elements j, j + chunks, ... (so
/// neighbouring outputs read neighbouring elements: coalesced on a GPU).
class SumSquares : public Generator<SumSquares> {
public:
  GeneratorParam<int> size{"size", 1};
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> chunks{"chunks", 1};
  Input<Buffer<float, 1>> x{"x"};
  Output<Buffer<float, 1>> s{"s"};
  Var k{"k"};

  void generate() {
    const int n = size, r = rows, j = chunks, row = n / r;
    RDom c(0, row / j, "c");
    Expr v = x(k / j * row + k % j + c * j);
    s(k) = sum(v * v);
  }

  void schedule() {
    x.dim(0).set_bounds(0, size);
    s.dim(0).set_bounds(0, static_cast<int>(rows) * static_cast<int>(chunks));
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    if (static_cast<int>(chunks) % vec == 0)
      s.vectorize(k, vec);
  }
};

class AdamWUpdate : public Generator<AdamWUpdate> {
public:
  GeneratorParam<int> size{"size", 1};
  GeneratorParam<float> beta1{"beta1", 0.9f};
  GeneratorParam<float> beta2{"beta2", 0.95f};
  GeneratorParam<float> eps{"eps", 1e-8f};
  GeneratorParam<float> weight_decay{"weight_decay", 0.0f};
  GeneratorParam<float> grad_clip{"grad_clip", 0.0f};

  Input<Buffer<float, 1>> w{"w"};
  Input<Buffer<float, 1>> m{"m"};
  Input<Buffer<float, 1>> v{"v"};
  Input<Buffer<float, 1>> g{"g"};
  Input<Buffer<float, 0>> lr{"lr"};
  Input<Buffer<float, 0>> norm{"norm"};
  Input<Buffer<int32_t, 0>> step{"step"};
  Output<Buffer<void, 1>> updated{"updated", {Float(32), Float(32), Float(32)}};

  Var i{"i"};

  void generate() {
    Expr t = cast<float>(step() + 1);
    Expr clip = grad_clip > 0.0f ? min(1.0f, (float)grad_clip / (norm() + 1e-6f)) : Expr(1.0f);
    Expr gi = clip * g(i);
    Expr mi = beta1 * m(i) + (1.0f - beta1) * gi;
    Expr vi = beta2 * v(i) + (1.0f - beta2) * gi * gi;
    Expr mh = mi / (1.0f - pow((float)beta1, t));
    Expr vh = vi / (1.0f - pow((float)beta2, t));
    Expr wi = w(i) - lr() * (mh / (sqrt(vh) + eps) + weight_decay * w(i));
    updated(i) = Tuple(wi, mi, vi);
  }

  void schedule() {
    // `size` elements at most: the step program updates a placed expert
    // tensor one run of occupied positions at a time.
    for (OutputImageParam p :
         {OutputImageParam(w), OutputImageParam(m), OutputImageParam(v), OutputImageParam(g)})
      p.dim(0).set_min(0).set_estimate(0, size);
    // The other tuple buffers share the first one's bounds.
    Func(updated).output_buffers()[0].dim(0).set_min(0).set_estimate(0, size);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    if (size >= 4 * vec)
      updated.vectorize(i, vec, TailStrategy::GuardWithIf);
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Add, add)
HALIDE_REGISTER_GENERATOR(Cast, cast)
HALIDE_REGISTER_GENERATOR(AdamWUpdate, adamw_update)
HALIDE_REGISTER_GENERATOR(SumSquares, sum_squares)
HALIDE_REGISTER_GENERATOR(Clamp, clamp)
HALIDE_REGISTER_GENERATOR(ClampGrad, clamp_grad)
HALIDE_REGISTER_GENERATOR(SigmoidGate, sigmoid_gate)
HALIDE_REGISTER_GENERATOR(SigmoidGateGrad, sigmoid_gate_grad)
