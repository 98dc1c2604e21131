//===- PermuteGenerator.cpp - token <-> slot movement of fused gating -----===//
//
// Slots are flat indices `e * C + c` into the [E, C, D] buffer, viewed here
// as [E * C, D]; -1 marks a dropped token-slot.
// `permute`:        buf[s, :] = x[t, :] for slots[t, j] = s >= 0; 0 elsewhere
// `unpermute`:      out[t, :] = sum_j w[t, j] buf[slots[t, j], :] (w = 1 if unweighted)
// `unpermute_grad`: dbuf[s, :] = w[t, j] dout[t, :]; dw[t, j] = <buf[s, :], dout[t, :]>
// A slot outside [-1, E * C) makes a host kernel fail with an error (a GPU
// kernel clamps it: Shapes.h's checkedIndex).
//
//===----------------------------------------------------------------------===//

#include "Shapes.h"

using namespace Halide;
using moec_codegen::constrainDense;
using moec_codegen::constrainOptional;
using moec_codegen::MoEGenerator;
using moec_codegen::narrowed;
using moec_codegen::widened;

namespace {

/// The common shape: tokens x k slots, E*C buffer rows of width D.
#define MOE_PERMUTE_PARAMS                                                                         \
  GeneratorParam<int> tokens{"tokens", 1};                                                         \
  GeneratorParam<int> k{"k", 1};                                                                   \
  GeneratorParam<int> slots_total{"slots_total", 1};                                               \
  GeneratorParam<int> width{"width", 1};

/// slots(j, t) checked to lie in [-1, total).
Func checkedSlots(const Target &target, Func slots, int total) {
  Var j, t;
  Func s("checked_slots");
  s(j, t) = moec_codegen::checkedIndex(target, slots(j, t), -1, total, "slot out of range:");
  return s;
}

/// Schedules a scatter into slots (permute's, unpermute_grad's) and the
/// output that copies it: the scatter at root, both vectorised over the
/// width when it spans a vector.
void scheduleScatter(Func scatter, Func out, int width, int vec) {
  Var d = scatter.args()[0];
  scatter.compute_root();
  if (width >= vec) {
    scatter.vectorize(d, vec, TailStrategy::GuardWithIf);
    scatter.update().vectorize(d, vec, TailStrategy::GuardWithIf);
    out.vectorize(out.args()[0], vec, TailStrategy::GuardWithIf);
  }
}

class Permute : public MoEGenerator<Permute> {
public:
  MOE_PERMUTE_PARAMS
  Input<Buffer<void, 2>> x{"x"};            // (d, t)
  Input<Buffer<int32_t, 2>> slots{"slots"}; // (j, t)
  Output<Buffer<void, 2>> buf{"buf"};       // (d, s)

  void configure() { storage(x, buf); }

  void generate() {
    Var d, s;
    checked = checkedSlots(get_target(), slots, slots_total);
    RDom r(0, k, 0, tokens);
    r.where(checked(r.x, r.y) >= 0);
    scatter(d, s) = 0.0f;
    scatter(d, clamp(checked(r.x, r.y), 0, slots_total - 1)) = widened(x)(d, r.y);
    buf(d, s) = narrowed(buf, scatter(d, s));
  }

  void schedule() {
    constrainDense(x, {width, tokens});
    constrainDense(slots, {k, tokens});
    constrainDense(buf, {width, slots_total});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    checked.compute_root();
    scheduleScatter(scatter, buf, width, natural_vector_size<float>());
  }

private:
  Func checked, scatter{"scatter"};
};

class Unpermute : public MoEGenerator<Unpermute> {
public:
  MOE_PERMUTE_PARAMS
  GeneratorParam<bool> weighted{"weighted", true};
  Input<Buffer<void, 2>> buf{"buf"};         // (d, s)
  Input<Buffer<int32_t, 2>> slots{"slots"};  // (j, t)
  Input<Buffer<void, 2>> weights{"weights"}; // (j, t)
  Output<Buffer<void, 2>> out{"out"};        // (d, t)

  void configure() { storage(buf, weights, out); }

  void generate() {
    Var d, t;
    checked = checkedSlots(get_target(), slots, slots_total);
    RDom j(0, k);
    Expr s = checked(j, t);
    Expr w = weighted ? widened(weights)(j, t) : Expr(1.0f);
    out(d, t) =
        narrowed(out, sum(select(s >= 0, w * widened(buf)(d, clamp(s, 0, slots_total - 1)), 0.0f)));
  }

  void schedule() {
    constrainDense(buf, {width, slots_total});
    constrainDense(slots, {k, tokens});
    constrainOptional(weights, weighted, {k, tokens});
    constrainDense(out, {width, tokens});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    checked.compute_root();
    Var d = out.args()[0], t = out.args()[1];
    out.parallel(t);
    const int vec = natural_vector_size<float>();
    if (width >= vec)
      out.vectorize(d, vec, TailStrategy::GuardWithIf);
  }

private:
  Func checked;
};

class UnpermuteGrad : public MoEGenerator<UnpermuteGrad> {
public:
  MOE_PERMUTE_PARAMS
  Input<Buffer<void, 2>> buf{"buf"};
  Input<Buffer<int32_t, 2>> slots{"slots"};
  Input<Buffer<void, 2>> weights{"weights"};
  Input<Buffer<void, 2>> dout{"dout"};          // (d, t)
  Output<Buffer<void, 2>> dbuf{"dbuf"};         // (d, s)
  Output<Buffer<void, 2>> dweights{"dweights"}; // (j, t)

  void configure() { storage(buf, weights, dout, dbuf, dweights); }

  void generate() {
    Var d, s, j, t;
    Func weights = widened(this->weights), dout = widened(this->dout), buf = widened(this->buf);
    checked = checkedSlots(get_target(), slots, slots_total);
    RDom r(0, k, 0, tokens);
    r.where(checked(r.x, r.y) >= 0);
    scatter(d, s) = 0.0f;
    scatter(d, clamp(checked(r.x, r.y), 0, slots_total - 1)) += weights(r.x, r.y) * dout(d, r.y);
    dbuf(d, s) = narrowed(dbuf, scatter(d, s));
    RDom c(0, width);
    Expr slot = checked(j, t);
    dweights(j, t) =
        narrowed(dweights, select(slot >= 0,
                                  sum(buf(c, clamp(slot, 0, slots_total - 1)) * dout(c, t)), 0.0f));
  }

  void schedule() {
    constrainDense(buf, {width, slots_total});
    constrainDense(slots, {k, tokens});
    constrainDense(weights, {k, tokens});
    constrainDense(dout, {width, tokens});
    constrainDense(dbuf, {width, slots_total});
    constrainDense(dweights, {k, tokens});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    checked.compute_root();
    scheduleScatter(scatter, dbuf, width, natural_vector_size<float>());
  }

private:
  Func checked, scatter{"scatter"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(Permute, permute)
HALIDE_REGISTER_GENERATOR(Unpermute, unpermute)
HALIDE_REGISTER_GENERATOR(UnpermuteGrad, unpermute_grad)
