//===- FFNGenerator.cpp - Halide generators of the (grouped) FFN ----------===//
//
// `ffn` / `expert_ffn` (groups = E): per group e,
//   swiglu: y = (silu(x Wg) * (x Wu)) Wd;  gelu / relu: y = act(x Wu) Wd
// `ffn_grad` / `expert_ffn_grad`: dx, dWu, dWd (and dWg), as the reference
// interpreter computes them. A dense FFN is one group; its rows are the
// flattened tokens, an expert's rows are its capacity slots. The gate
// buffer is always an argument; it is read only for swiglu.
//
//===----------------------------------------------------------------------===//

#include "Halide.h"

using namespace Halide;

namespace {

enum class Act { SwiGLU, GELU, ReLU };
const std::map<std::string, Act> kActivations = {
    {"swiglu", Act::SwiGLU}, {"gelu", Act::GELU}, {"relu", Act::ReLU}};

Expr sigmoidOf(Expr z) { return 1.0f / (1.0f + exp(-z)); }

Expr activate(Act a, Expr z) {
  switch (a) {
  case Act::SwiGLU:
    return z * sigmoidOf(z);
  case Act::GELU:
    return 0.5f * z *
           (1.0f + tanh(0.7978845608f * (z + 0.044715f * z * z * z)));
  case Act::ReLU:
    return max(z, 0.0f);
  }
  return z;
}

Expr activateGrad(Act a, Expr z) {
  switch (a) {
  case Act::SwiGLU: {
    Expr s = sigmoidOf(z);
    return s * (1.0f + z * (1.0f - s));
  }
  case Act::GELU: {
    Expr t = tanh(0.7978845608f * (z + 0.044715f * z * z * z));
    return 0.5f * (1.0f + t) +
           0.5f * z * (1.0f - t * t) * 0.7978845608f *
               (1.0f + 3.0f * 0.044715f * z * z);
  }
  case Act::ReLU:
    return select(z > 0.0f, 1.0f, 0.0f);
  }
  return z;
}

/// A dense row-major 3-d buffer of extents (d0, d1, d2), d0 innermost.
void constrain3(OutputImageParam b, int d0, int d1, int d2) {
  b.dim(0).set_bounds(0, d0).set_stride(1);
  b.dim(1).set_bounds(0, d1).set_stride(d0);
  b.dim(2).set_bounds(0, d2).set_stride(d0 * d1);
}

class FFN : public Generator<FFN> {
public:
  GeneratorParam<int> groups{"groups", 1};
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};   // D
  GeneratorParam<int> hidden{"hidden", 1}; // F
  GeneratorParam<Act> activation{"activation", Act::SwiGLU, kActivations};

  Input<Buffer<float, 3>> x{"x"};       // (d, c, e)
  Input<Buffer<float, 3>> up{"up"};     // (f, d, e)
  Input<Buffer<float, 3>> down{"down"}; // (d, f, e)
  Input<Buffer<float, 3>> gate{"gate"}; // (f, d, e)
  Output<Buffer<float, 3>> y{"y"};

  Var d{"d"}, f{"f"}, c{"c"}, e{"e"};
  Func hu{"hu"}, hg{"hg"}, h{"h"};

  void generate() {
    RDom rd(0, width), rf(0, hidden);
    hu(f, c, e) = sum(x(rd, c, e) * up(f, rd, e));
    if (activation == Act::SwiGLU) {
      hg(f, c, e) = sum(x(rd, c, e) * gate(f, rd, e));
      h(f, c, e) = activate(activation, hg(f, c, e)) * hu(f, c, e);
    } else {
      h(f, c, e) = activate(activation, hu(f, c, e));
    }
    y(d, c, e) = sum(h(rf, c, e) * down(d, rf, e));
  }

  void schedule() {
    bool gated = activation == Act::SwiGLU;
    constrain3(x, width, rows, groups);
    constrain3(up, hidden, width, groups);
    constrain3(down, width, hidden, groups);
    constrain3(gate, gated ? (int)hidden : 1,
                              gated ? (int)width : 1, gated ? (int)groups : 1);
    constrain3(y, width, rows, groups);
    const int vec = natural_vector_size<float>();
    h.compute_root().parallel(e).parallel(c);
    if (hidden >= vec)
      h.vectorize(f, vec, TailStrategy::GuardWithIf);
    y.parallel(e).parallel(c);
    if (width >= vec)
      y.vectorize(d, vec, TailStrategy::GuardWithIf);
  }
};

class FFNGrad : public Generator<FFNGrad> {
public:
  GeneratorParam<int> groups{"groups", 1};
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};
  GeneratorParam<int> hidden{"hidden", 1};
  GeneratorParam<Act> activation{"activation", Act::SwiGLU, kActivations};

  Input<Buffer<float, 3>> x{"x"};
  Input<Buffer<float, 3>> up{"up"};
  Input<Buffer<float, 3>> down{"down"};
  Input<Buffer<float, 3>> gate{"gate"};
  Input<Buffer<float, 3>> dy{"dy"};
  Output<Buffer<float, 3>> dx{"dx"};
  Output<Buffer<float, 3>> dup{"dup"};
  Output<Buffer<float, 3>> ddown{"ddown"};
  Output<Buffer<float, 3>> dgate{"dgate"};

  Var d{"d"}, f{"f"}, c{"c"}, e{"e"};
  Func hu{"hu"}, hg{"hg"}, h{"h"}, dh{"dh"}, dhu{"dhu"}, dhg{"dhg"};

  void generate() {
    bool gated = activation == Act::SwiGLU;
    RDom rd(0, width), rf(0, hidden), rc(0, rows);
    hu(f, c, e) = sum(x(rd, c, e) * up(f, rd, e));
    if (gated) {
      hg(f, c, e) = sum(x(rd, c, e) * gate(f, rd, e));
      h(f, c, e) = activate(activation, hg(f, c, e)) * hu(f, c, e);
    } else {
      h(f, c, e) = activate(activation, hu(f, c, e));
    }
    dh(f, c, e) = sum(dy(rd, c, e) * down(rd, f, e));
    ddown(d, f, e) = sum(h(f, rc, e) * dy(d, rc, e));
    if (gated) {
      dhu(f, c, e) = dh(f, c, e) * activate(activation, hg(f, c, e));
      dhg(f, c, e) = dh(f, c, e) * hu(f, c, e) * activateGrad(activation, hg(f, c, e));
      dgate(f, d, e) = sum(x(d, rc, e) * dhg(f, rc, e));
      dx(d, c, e) = sum(dhu(rf, c, e) * up(rf, d, e) + dhg(rf, c, e) * gate(rf, d, e));
    } else {
      dhu(f, c, e) = dh(f, c, e) * activateGrad(activation, hu(f, c, e));
      dgate(f, d, e) = 0.0f;
      dx(d, c, e) = sum(dhu(rf, c, e) * up(rf, d, e));
    }
    dup(f, d, e) = sum(x(d, rc, e) * dhu(f, rc, e));
  }

  void schedule() {
    bool gated = activation == Act::SwiGLU;
    constrain3(x, width, rows, groups);
    constrain3(dy, width, rows, groups);
    constrain3(dx, width, rows, groups);
    constrain3(up, hidden, width, groups);
    constrain3(dup, hidden, width, groups);
    constrain3(down, width, hidden, groups);
    constrain3(ddown, width, hidden, groups);
    int gf = gated ? (int)hidden : 1, gd = gated ? (int)width : 1,
        ge = gated ? (int)groups : 1;
    constrain3(gate, gf, gd, ge);
    constrain3(dgate, gf, gd, ge);
    const int vec = natural_vector_size<float>();
    for (Func *fn : {&hu, &h, &dh, &dhu})
      fn->compute_root().parallel(e);
    if (gated) {
      hg.compute_root().parallel(e);
      dhg.compute_root().parallel(e);
    }
    for (Func out : {Func(dx), Func(dup), Func(ddown), Func(dgate)})
      out.parallel(e);
    if (hidden >= vec) {
      h.vectorize(f, vec, TailStrategy::GuardWithIf);
      dup.vectorize(f, vec, TailStrategy::GuardWithIf);
    }
    if (width >= vec) {
      dx.vectorize(d, vec, TailStrategy::GuardWithIf);
      ddown.vectorize(d, vec, TailStrategy::GuardWithIf);
    }
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(FFN, ffn)
HALIDE_REGISTER_GENERATOR(FFNGrad, ffn_grad)
