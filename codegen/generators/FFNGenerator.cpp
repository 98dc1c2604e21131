//===- FFNGenerator.cpp - Halide generators of the (grouped) FFN ----------===//
//
// `ffn` / `expert_ffn` (groups = E): per group e,
//   swiglu: y = (silu(x Wg) * (x Wu)) Wd;  gelu / relu: y = act(x Wu) Wd
// `ffn_grad` / `expert_ffn_grad`: dx, dWu, dWd (and dWg), as the reference
// interpreter computes them, from the forward's saved pre-activations
// (`save` / `saved`) or recomputing them. A dense FFN is one group; its rows are the
// flattened tokens, an expert's rows are its capacity slots. The gate
// buffer is always an argument; it is read only for swiglu.
//
// `blas=true`: the contractions are OpenBLAS extern stages
// (runtime/lib/Gemm.cpp); the activation and its gradient stay here, one
// pass each over the (c, f) pre-activations between the GEMMs.
//
// `segments=G > 0`: the `routed` argument (groups x G counts, moe.expert_ffn's
// `rows`) says which rows hold tokens; the others are zero in x and dy. The
// OpenBLAS form computes the routed rows only (the others of y, dx and the
// pre-activations are zero, as the full product gives); the Halide schedule
// computes every row.
//
//===----------------------------------------------------------------------===//

#include "Matmul.h"
#include "Shapes.h"

using namespace Halide;
using namespace moec_codegen;

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
    return 0.5f * z * (1.0f + tanh(0.7978845608f * (z + 0.044715f * z * z * z)));
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
           0.5f * z * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * z * z);
  }
  case Act::ReLU:
    return select(z > 0.0f, 1.0f, 0.0f);
  }
  return z;
}

class FFN : public Generator<FFN> {
public:
  GeneratorParam<int> groups{"groups", 1};
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};   // D
  GeneratorParam<int> hidden{"hidden", 1}; // F
  GeneratorParam<Act> activation{"activation", Act::SwiGLU, kActivations};

  // save: also write the pre-activations x Wu (and x Wg) for the backward;
  // without it (or for the gate of an ungated FFN) they are 1x1x1 dummies.
  GeneratorParam<bool> save{"save", false};
  GeneratorParam<bool> blas{"blas", false};
  GeneratorParam<int> segments{"segments", 0};

  Input<Buffer<float, 3>> x{"x"};             // (d, c, e)
  Input<Buffer<float, 3>> up{"up"};           // (f, d, e)
  Input<Buffer<float, 3>> down{"down"};       // (d, f, e)
  Input<Buffer<float, 3>> gate{"gate"};       // (f, d, e)
  Input<Buffer<int32_t, 1>> routed{"routed"}; // (segment, e), or a 1-element dummy
  Output<Buffer<float, 3>> y{"y"};
  Output<Buffer<float, 3>> preUp{"pre_up"};     // (f, c, e)
  Output<Buffer<float, 3>> preGate{"pre_gate"}; // (f, c, e)

  Var d{"d"}, f{"f"}, c{"c"}, e{"e"};
  Func hu{"hu"}, hg{"hg"}, h{"h"}, yAcc{"y_acc"};

  void generate() {
    if (blas)
      return generateBlas();
    bool gated = activation == Act::SwiGLU;
    RDom rd(0, width), rf(0, hidden);
    defineContraction(hu, {f, c, e}, rd, x(rd, c, e) * up(f, rd, e));
    if (gated)
      defineContraction(hg, {f, c, e}, rd, x(rd, c, e) * gate(f, rd, e));
    if (save) {
      preUp(f, c, e) = hu(f, c, e);
      preGate(f, c, e) = gated ? hg(f, c, e) : Expr(0.0f);
      Expr u = preUp(f, c, e);
      h(f, c, e) = gated ? activate(activation, preGate(f, c, e)) * u : activate(activation, u);
    } else {
      preUp(f, c, e) = 0.0f;
      preGate(f, c, e) = 0.0f;
      h(f, c, e) = gated ? activate(activation, hg(f, c, e)) * hu(f, c, e)
                         : activate(activation, hu(f, c, e));
    }
    defineContraction(yAcc, {d, c, e}, rf, h(rf, c, e) * down(d, rf, e));
    y(d, c, e) = yAcc(d, c, e);
  }

  void generateBlas() {
    bool gated = activation == Act::SwiGLU;
    GemmRows r{routed, segments, (int)groups * (int)segments};
    hu = externGemm("hu_gemm", {f, c, e}, {x}, {up}, width, r);
    if (gated)
      hg = externGemm("hg_gemm", {f, c, e}, {x}, {gate}, width, r);
    if (save) {
      preUp = hu;
      if (gated)
        preGate = hg;
      else
        preGate(f, c, e) = 0.0f;
    } else {
      preUp(f, c, e) = 0.0f;
      preGate(f, c, e) = 0.0f;
    }
    h(f, c, e) =
        gated ? activate(activation, hg(f, c, e)) * hu(f, c, e) : activate(activation, hu(f, c, e));
    y = externGemm("y_gemm", {d, c, e}, {h}, {down}, hidden, r);
  }

  void schedule() {
    bool gated = activation == Act::SwiGLU;
    constrainDense(x, {width, rows, groups});
    constrainDense(up, {hidden, width, groups});
    constrainDense(down, {width, hidden, groups});
    constrainOptional(gate, gated, {hidden, width, groups});
    constrainDense(y, {width, rows, groups});
    constrainOptional(preUp, save, {hidden, rows, groups});
    constrainOptional(preGate, save && gated, {hidden, rows, groups});
    constrainOptional(routed, segments > 0, {(int)groups * (int)segments});
    const int vec = natural_vector_size<float>();
    if (blas) {
      if (!save)
        for (Func fn : gated ? std::vector<Func>{hu, hg} : std::vector<Func>{hu})
          fn.compute_root();
      scheduleElementwise(h, f, c, hidden, vec, &e);
      return;
    }
    if (save) {
      // The pre-activations are outputs (GEMMs into them); h follows from
      // them elementwise.
      scheduleMatmul(preUp, {hu}, f, c, hidden, rows, width, vec, &e, false, groups);
      if (gated)
        scheduleMatmul(preGate, {hg}, f, c, hidden, rows, width, vec, &e, false, groups);
      h.compute_root().parallel(e).parallel(c);
      if (hidden >= vec)
        h.vectorize(f, vec, TailStrategy::GuardWithIf);
    } else if (gated) {
      scheduleMatmul(h, {hu, hg}, f, c, hidden, rows, width, vec, &e, true, groups);
    } else {
      scheduleMatmul(h, {hu}, f, c, hidden, rows, width, vec, &e, true, groups);
    }
    scheduleMatmul(y, {yAcc}, d, c, width, rows, hidden, vec, &e, false, groups);
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
  // saved: the forward's pre-activations (x Wu, x Wg) instead of recomputing
  // them; 1x1x1 dummies otherwise.
  GeneratorParam<bool> saved{"saved", false};
  GeneratorParam<bool> blas{"blas", false};
  GeneratorParam<int> segments{"segments", 0};
  Input<Buffer<float, 3>> preUp{"pre_up"};
  Input<Buffer<float, 3>> preGate{"pre_gate"};
  Input<Buffer<int32_t, 1>> routed{"routed"};
  Output<Buffer<float, 3>> dx{"dx"};
  Output<Buffer<float, 3>> dup{"dup"};
  Output<Buffer<float, 3>> ddown{"ddown"};
  Output<Buffer<float, 3>> dgate{"dgate"};

  Var d{"d"}, f{"f"}, c{"c"}, e{"e"};
  // Accumulators of the recomputed pre-activations and of dh; `act` holds,
  // per (f, c), the activation h and the pre-activation gradients (dhu,
  // dhg), all from one register block. Transposed operands keep every
  // contraction's broadcast side contiguous in k.
  Func huAcc{"hu_acc"}, hgAcc{"hg_acc"}, dhAcc{"dh_acc"}, act{"act"};
  Func upT{"up_t"}, gateT{"gate_t"}, downT{"down_t"}, xT{"x_t"}, hT{"h_t"};
  Func dxAcc{"dx_acc"}, dupAcc{"dup_acc"}, dgateAcc{"dgate_acc"}, ddownAcc{"ddown_acc"};

  void generate() {
    if (blas)
      return generateBlas();
    bool gated = activation == Act::SwiGLU;
    RDom rd(0, width), rf(0, hidden), rc(0, rows);
    if (!saved)
      defineContraction(huAcc, {f, c, e}, rd, x(rd, c, e) * up(f, rd, e));
    // dh = dy down^T; down^T is contiguous in f.
    downT(f, d, e) = down(d, f, e);
    defineContraction(dhAcc, {f, c, e}, rd, dy(rd, c, e) * downT(f, rd, e));
    Expr hu = saved ? preUp(f, c, e) : huAcc(f, c, e), dh = dhAcc(f, c, e);
    if (gated) {
      if (!saved)
        defineContraction(hgAcc, {f, c, e}, rd, x(rd, c, e) * gate(f, rd, e));
      Expr hg = saved ? preGate(f, c, e) : hgAcc(f, c, e);
      Expr a = activate(activation, hg);
      act(f, c, e) = Tuple(a * hu, dh * a, dh * hu * activateGrad(activation, hg));
    } else {
      act(f, c, e) = Tuple(activate(activation, hu), dh * activateGrad(activation, hu));
    }
    auto h = [&](Expr ff, Expr cc) { return act(ff, cc, e)[0]; };
    auto dhu = [&](Expr ff, Expr cc) { return act(ff, cc, e)[1]; };
    auto dhg = [&](Expr ff, Expr cc) { return act(ff, cc, e)[2]; };
    xT(c, d, e) = x(d, c, e);
    hT(c, f, e) = h(f, c);
    // ddown(d, f) = sum_c h(f, c) dy(d, c)
    defineContraction(ddownAcc, {d, f, e}, rc, hT(rc, f, e) * dy(d, rc, e));
    ddown(d, f, e) = ddownAcc(d, f, e);
    upT(d, f, e) = up(f, d, e);
    // dx = dhu up^T (+ dhg gate^T)
    defineContraction(dxAcc, {d, c, e}, rf, dhu(rf, c) * upT(d, rf, e));
    if (gated) {
      // A second contraction into the same accumulator: one product per k
      // keeps the register block free of spills.
      RDom rf2(0, hidden);
      gateT(d, f, e) = gate(f, d, e);
      dxAcc(d, c, e) += dhg(rf2, c) * gateT(d, rf2, e);
      defineContraction(dgateAcc, {f, d, e}, rc, xT(rc, d, e) * dhg(f, rc));
      dgate(f, d, e) = dgateAcc(f, d, e);
    } else {
      dgate(f, d, e) = 0.0f;
    }
    dx(d, c, e) = dxAcc(d, c, e);
    defineContraction(dupAcc, {f, d, e}, rc, xT(rc, d, e) * dhu(f, rc));
    dup(f, d, e) = dupAcc(f, d, e);
  }

  // The activation's values and gradients of the BLAS path, one Func each
  // (an extern stage reads whole buffers).
  Func hB{"h"}, dhuB{"dhu"}, dhgB{"dhg"};

  void generateBlas() {
    bool gated = activation == Act::SwiGLU;
    GemmRows r{routed, segments, (int)groups * (int)segments};
    const auto overK = GemmRows::SlotsAreK;
    // dh = dy down^T
    dhAcc = externGemm("dh_gemm", {f, c, e}, {dy}, {down, true}, width, r);
    if (!saved) {
      huAcc = externGemm("hu_gemm", {f, c, e}, {x}, {up}, width, r);
      if (gated)
        hgAcc = externGemm("hg_gemm", {f, c, e}, {x}, {gate}, width, r);
    }
    Expr hu = saved ? preUp(f, c, e) : huAcc(f, c, e), dh = dhAcc(f, c, e);
    if (gated) {
      Expr hg = saved ? preGate(f, c, e) : hgAcc(f, c, e);
      Expr a = activate(activation, hg);
      hB(f, c, e) = a * hu;
      dhuB(f, c, e) = dh * a;
      dhgB(f, c, e) = dh * hu * activateGrad(activation, hg);
    } else {
      hB(f, c, e) = activate(activation, hu);
      dhuB(f, c, e) = dh * activateGrad(activation, hu);
    }
    ddown = externGemm("ddown_gemm", {d, f, e}, {hB, true}, {dy}, rows, r, overK);
    if (gated) {
      dx = externGemm2("dx_gemm", {d, c, e}, {dhuB}, {up, true}, hidden, {dhgB}, {gate, true},
                       hidden, r);
      dgate = externGemm("dgate_gemm", {f, d, e}, {x, true}, {dhgB}, rows, r, overK);
    } else {
      dx = externGemm("dx_gemm", {d, c, e}, {dhuB}, {up, true}, hidden, r);
      dgate(f, d, e) = 0.0f;
    }
    dup = externGemm("dup_gemm", {f, d, e}, {x, true}, {dhuB}, rows, r, overK);
  }

  void schedule() {
    bool gated = activation == Act::SwiGLU;
    constrainDense(x, {width, rows, groups});
    constrainDense(dy, {width, rows, groups});
    constrainDense(dx, {width, rows, groups});
    constrainDense(up, {hidden, width, groups});
    constrainDense(dup, {hidden, width, groups});
    constrainDense(down, {width, hidden, groups});
    constrainDense(ddown, {width, hidden, groups});
    constrainOptional(gate, gated, {hidden, width, groups});
    constrainOptional(dgate, gated, {hidden, width, groups});
    const int vec = natural_vector_size<float>();
    constrainOptional(preUp, saved, {hidden, rows, groups});
    constrainOptional(preGate, saved && gated, {hidden, rows, groups});
    constrainOptional(routed, segments > 0, {(int)groups * (int)segments});
    if (blas) {
      dhAcc.compute_root();
      if (!saved)
        for (Func fn : gated ? std::vector<Func>{huAcc, hgAcc} : std::vector<Func>{huAcc})
          fn.compute_root();
      // One loop nest over blocks of rows for h, dhu (and dhg): each block's
      // pre-activations and dh are read once from cache for all of them.
      std::vector<Func> acts =
          gated ? std::vector<Func>{hB, dhuB, dhgB} : std::vector<Func>{hB, dhuB};
      Var ce("ce"), ceo("ceo"), cei("cei");
      for (Func fn : acts) {
        fn.compute_root()
            .fuse(c, e, ce)
            .split(ce, ceo, cei, 8, TailStrategy::GuardWithIf)
            .parallel(ceo);
        if (hidden >= vec)
          fn.vectorize(f, vec, TailStrategy::GuardWithIf);
      }
      for (size_t k = 1; k < acts.size(); ++k)
        acts[k].compute_with(acts[0], ceo);
      if (!gated)
        Func(dgate).parallel(e);
      return;
    }
    auto transpose = [&](Func fn, Var inner, Var outer, int extentInner, int extentOuter) {
      scheduleTranspose(fn, inner, outer, extentInner, extentOuter, vec, &e);
    };
    transpose(downT, f, d, hidden, width);
    transpose(upT, d, f, width, hidden);
    transpose(xT, c, d, rows, width);
    if (saved)
      scheduleMatmul(act, {dhAcc}, f, c, hidden, rows, width, vec, &e, true, groups);
    else if (gated)
      scheduleMatmul(act, {huAcc, hgAcc, dhAcc}, f, c, hidden, rows, width, vec, &e, true, groups);
    else
      scheduleMatmul(act, {huAcc, dhAcc}, f, c, hidden, rows, width, vec, &e, true, groups);
    if (gated) {
      transpose(gateT, d, f, width, hidden);
      scheduleMatmul(dgate, {dgateAcc}, f, d, hidden, width, rows, vec, &e, false, groups);
    } else {
      Func(dgate).parallel(e);
    }
    transpose(hT, c, f, rows, hidden);
    scheduleMatmul(dx, {dxAcc}, d, c, width, rows, hidden, vec, &e, false, groups);
    scheduleMatmul(dup, {dupAcc}, f, d, hidden, width, rows, vec, &e, false, groups);
    scheduleMatmul(ddown, {ddownAcc}, d, f, width, hidden, rows, vec, &e, false, groups);
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(FFN, ffn)
HALIDE_REGISTER_GENERATOR(FFNGrad, ffn_grad)
