//===- ElementwiseGenerator.cpp - add and the AdamW update ----------------===//
//
// `add`:          z = a + b over `size` elements (residuals, loss terms,
//                 gradient accumulation).
// `adamw_update`: one AdamW step of a parameter of `size` elements, with
//                 global-norm clipping, bias correction and decoupled decay;
//                 the new parameter and moments are one tuple computed from
//                 the old values element by element, so the runtime may pass
//                 the same memory as input and output (in place).
//
//===----------------------------------------------------------------------===//

#include "Shapes.h"

using namespace Halide;

namespace {

class Add : public Generator<Add> {
public:
  GeneratorParam<int> size{"size", 1};
  Input<Buffer<float, 1>> a{"a"};
  Input<Buffer<float, 1>> b{"b"};
  Output<Buffer<float, 1>> z{"z"};
  Var i{"i"};

  void generate() { z(i) = a(i) + b(i); }

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
    for (OutputImageParam p :
         {OutputImageParam(w), OutputImageParam(m), OutputImageParam(v), OutputImageParam(g)})
      p.dim(0).set_bounds(0, size);
    // The other tuple buffers share the first one's bounds.
    Func(updated).output_buffers()[0].dim(0).set_bounds(0, size);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    if (size >= 4 * vec)
      updated.vectorize(i, vec, TailStrategy::GuardWithIf);
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Add, add)
HALIDE_REGISTER_GENERATOR(AdamWUpdate, adamw_update)
