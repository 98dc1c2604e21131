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
// OpenBLAS form computes the routed rows only, its GEMMs and the activation
// stages between them (update definitions over the routed rows, the other
// rows of those intermediates never written or read); the other rows of y
// and dx are zero, as the full product gives, and those of the saved
// pre-activations are left unwritten (the backward reads routed rows only).
// The Halide schedule computes every row.
//
//===----------------------------------------------------------------------===//

#include "Matmul.h"
#include "Shapes.h"

#include <functional>

using namespace Halide;
using namespace moec_codegen;

namespace {

enum class Act { SwiGLU, GELU, ReLU };
const std::map<std::string, Act> kActivations = {
    {"swiglu", Act::SwiGLU}, {"gelu", Act::GELU}, {"relu", Act::ReLU}};

Expr sigmoidOf(Expr z) { return 1.0f / (1.0f + exp(-z)); }

/// GELU's tanh approximation: 1 + tanh(u) and 1 - tanh(u)^2 at
/// u = sqrt(2/pi) (z + 0.044715 z^3), from e = exp(-2|u|). Neither cancels
/// where |tanh u| -> 1: with 1 - t*t, a tanh one ulp short of +-1 (OpenCL's
/// on PoCL) made the gradient err by (z^3 ulp), 1e-4 relative.
struct GeluParts {
  Expr onePlusT, oneMinusT2;
};
GeluParts geluParts(Expr z) {
  Expr u = 0.7978845608f * (z + 0.044715f * z * z * z);
  Expr e = exp(-2.0f * abs(u));
  Expr r = 1.0f / (1.0f + e);
  return {select(u >= 0.0f, 2.0f * r, 2.0f * e * r), 4.0f * e * r * r};
}

Expr activate(Act a, Expr z) {
  switch (a) {
  case Act::SwiGLU:
    return z * sigmoidOf(z);
  case Act::GELU:
    return 0.5f * z * geluParts(z).onePlusT;
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
    GeluParts p = geluParts(z);
    return 0.5f * p.onePlusT +
           0.5f * z * p.oneMinusT2 * 0.7978845608f * (1.0f + 3.0f * 0.044715f * z * z);
  }
  case Act::ReLU:
    return select(z > 0.0f, 1.0f, 0.0f);
  }
  return z;
}

/// The routed rows of a `[E, rows, .]` buffer: `r.x` the row within a
/// segment, `r.y` the segment, only rows before the segment's count of
/// `routed` (expert `e`'s entries `e * segments + g`).
RDom routedRows(Func routed, Var e, int rows, int segments) {
  int length = rows / segments;
  RDom r(0, length, 0, segments, "routed_row");
  r.where(r.x < clamp(routed(e * segments + r.y), 0, length));
  return r;
}

/// Defines fn(f, c, e) = value(c) on the routed rows `r` only (the other
/// rows are left unwritten: nothing reads them).
void defineOnRows(Func fn, Var f, Var e, RDom r, int rows, int segments,
                  const std::function<Expr(Expr)> &value) {
  Var c("c");
  fn(f, c, e) = undef<float>();
  Expr row = r.y * (rows / segments) + r.x;
  fn(f, row, e) = value(row);
}

/// Schedules a Func defined by defineOnRows: vectorised over f, parallel
/// over experts, the routed rows in order.
void scheduleOnRows(Func fn, Var f, Var e, RDom r, int extentF, int vec) {
  fn.compute_root();
  Stage update = fn.update(0);
  update.reorder(f, r.x, r.y, e).parallel(e);
  if (extentF >= vec)
    update.vectorize(f, vec, TailStrategy::GuardWithIf);
}

class FFN : public MoEGenerator<FFN> {
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

  Input<Buffer<void, 3>> x{"x"};              // (d, c, e)
  Input<Buffer<void, 3>> up{"up"};            // (f, d, e)
  Input<Buffer<void, 3>> down{"down"};        // (d, f, e)
  Input<Buffer<void, 3>> gate{"gate"};        // (f, d, e)
  Input<Buffer<int32_t, 1>> routed{"routed"}; // (segment, e), or a 1-element dummy
  Output<Buffer<void, 3>> y{"y"};
  Output<Buffer<void, 3>> preUp{"pre_up"};     // (f, c, e)
  Output<Buffer<void, 3>> preGate{"pre_gate"}; // (f, c, e)

  Var d{"d"}, f{"f"}, c{"c"}, e{"e"};
  Func hu{"hu"}, hg{"hg"}, h{"h"}, yAcc{"y_acc"};
  // The operands as f32 (inlined on the CPU; shared-memory tiles on a GPU).
  Func xf{"x_f"}, upf{"up_f"}, gatef{"gate_f"}, downf{"down_f"};

  void configure() { storage(x, up, down, gate, y, preUp, preGate); }

  void generate() {
    if (blas)
      return generateBlas();
    bool gated = activation == Act::SwiGLU;
    RDom rd(0, width), rf(0, hidden);
    xf(d, c, e) = widened(x)(d, c, e);
    upf(f, d, e) = widened(up)(f, d, e);
    downf(d, f, e) = widened(down)(d, f, e);
    defineContraction(hu, {f, c, e}, rd, xf(rd, c, e) * upf(f, rd, e));
    if (gated) {
      gatef(f, d, e) = widened(gate)(f, d, e);
      defineContraction(hg, {f, c, e}, rd, xf(rd, c, e) * gatef(f, rd, e));
    }
    if (save) {
      // h from the saved (rounded) pre-activations, as the backward sees them.
      preUp(f, c, e) = narrowed(preUp, hu(f, c, e));
      preGate(f, c, e) = narrowed(preGate, gated ? hg(f, c, e) : Expr(0.0f));
      Expr u = cast<float>(preUp(f, c, e));
      h(f, c, e) =
          gated ? activate(activation, cast<float>(preGate(f, c, e))) * u : activate(activation, u);
    } else {
      // h from the pre-activations rounded as saved ones are (to the
      // activations' type, y's): the same values whether or not they are
      // kept for the backward.
      preUp(f, c, e) = narrowed(preUp, 0.0f);
      preGate(f, c, e) = narrowed(preGate, 0.0f);
      Expr u = cast<float>(narrowed(y, hu(f, c, e)));
      h(f, c, e) = gated ? activate(activation, cast<float>(narrowed(y, hg(f, c, e)))) * u
                         : activate(activation, u);
    }
    defineContraction(yAcc, {d, c, e}, rf, h(rf, c, e) * downf(d, rf, e));
    y(d, c, e) = narrowed(y, yAcc(d, c, e));
  }

  void generateBlas() {
    bool gated = activation == Act::SwiGLU;
    GemmRows r{routed, segments, (int)groups * (int)segments};
    // With routed rows the backward reads the saved pre-activations' routed
    // rows only, so their other rows are left unwritten (zeroing them cost a
    // fixed time per expert, whatever its load). Without, the mode is moot.
    ExternFuncArgument xs = gemmInput(x);
    hu =
        externGemm("hu_gemm", {f, c, e}, {xs}, {gemmInput(up)}, width, r, GemmRows::RoutedRowsOnly);
    if (gated)
      hg = externGemm("hg_gemm", {f, c, e}, {xs}, {gemmInput(gate)}, width, r,
                      GemmRows::RoutedRowsOnly);
    if (save) {
      fromExtern(preUp, hu);
      if (gated)
        fromExtern(preGate, hg);
      else
        preGate(f, c, e) = narrowed(preGate, 0.0f);
    } else {
      preUp(f, c, e) = narrowed(preUp, 0.0f);
      preGate(f, c, e) = narrowed(preGate, 0.0f);
    }
    // h from the pre-activations rounded as saved ones are.
    auto act = [&](Expr row) {
      Expr u = cast<float>(narrowed(y, hu(f, row, e)));
      return gated ? activate(activation, cast<float>(narrowed(y, hg(f, row, e)))) * u
                   : activate(activation, u);
    };
    if (segments > 0) {
      // The activation over the routed rows only.
      rowsDomain = routedRows(routed, e, rows, segments);
      defineOnRows(h, f, e, rowsDomain, rows, segments, act);
    } else {
      h(f, c, e) = act(c);
    }
    fromExtern(y, externGemm("y_gemm", {d, c, e}, {h}, {gemmInput(down)}, hidden, r));
  }
  RDom rowsDomain;

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
    if (moec_codegen::onGpu(get_target())) {
      if (!save) // evaluation: h from the contractions, plain
        return moec_codegen::scheduleForGpu(get_pipeline());
      // Training: each pre-activation output is a tiled contraction of x,
      // the activation h one pass over them, y a tiled contraction of h.
      using moec_codegen::scheduleContractionForGpu;
      scheduleContractionForGpu(preUp, f, c, hu, {{xf.in(hu), upf}}, {e});
      if (gated)
        scheduleContractionForGpu(preGate, f, c, hg, {{xf.in(hg), gatef}}, {e});
      else
        moec_codegen::computeRootOnGpu(preGate, {f, c, e});
      moec_codegen::computeRootOnGpu(h, {f, c, e});
      scheduleContractionForGpu(y, d, c, yAcc, {{h.in(yAcc), downf}}, {e});
      return;
    }
    const int vec = natural_vector_size<float>();
    if (blas) {
      scheduleStaged(vec);
      if (!save)
        for (Func fn : gated ? std::vector<Func>{hu, hg} : std::vector<Func>{hu})
          fn.compute_root();
      if (segments > 0)
        scheduleOnRows(h, f, e, rowsDomain, hidden, vec);
      else
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

class FFNGrad : public MoEGenerator<FFNGrad> {
public:
  GeneratorParam<int> groups{"groups", 1};
  GeneratorParam<int> rows{"rows", 1};
  GeneratorParam<int> width{"width", 1};
  GeneratorParam<int> hidden{"hidden", 1};
  GeneratorParam<Act> activation{"activation", Act::SwiGLU, kActivations};

  Input<Buffer<void, 3>> x{"x"};
  Input<Buffer<void, 3>> up{"up"};
  Input<Buffer<void, 3>> down{"down"};
  Input<Buffer<void, 3>> gate{"gate"};
  Input<Buffer<void, 3>> dy{"dy"};
  // saved: the forward's pre-activations (x Wu, x Wg) instead of recomputing
  // them; 1x1x1 dummies otherwise.
  GeneratorParam<bool> saved{"saved", false};
  GeneratorParam<bool> blas{"blas", false};
  GeneratorParam<int> segments{"segments", 0};
  Input<Buffer<void, 3>> preUp{"pre_up"};
  Input<Buffer<void, 3>> preGate{"pre_gate"};
  Input<Buffer<int32_t, 1>> routed{"routed"};
  Output<Buffer<void, 3>> dx{"dx"};
  Output<Buffer<void, 3>> dup{"dup"};
  Output<Buffer<void, 3>> ddown{"ddown"};
  Output<Buffer<void, 3>> dgate{"dgate"};

  Var d{"d"}, f{"f"}, c{"c"}, e{"e"};
  // Accumulators of the recomputed pre-activations and of dh; `act` holds,
  // per (f, c), the activation h and the pre-activation gradients (dhu,
  // dhg), all from one register block. Transposed operands keep every
  // contraction's broadcast side contiguous in k.
  Func huAcc{"hu_acc"}, hgAcc{"hg_acc"}, dhAcc{"dh_acc"}, act{"act"};
  Func upT{"up_t"}, gateT{"gate_t"}, downT{"down_t"}, xT{"x_t"}, hT{"h_t"};
  Func dxAcc{"dx_acc"}, dupAcc{"dup_acc"}, dgateAcc{"dgate_acc"}, ddownAcc{"ddown_acc"};
  // dy as f32, and act's pre-activation gradients as Funcs of (f, c, e):
  // inlined on the CPU, shared-memory tiles on a GPU.
  Func dyf{"dy_f"}, dhuF{"dhu_f"}, dhgF{"dhg_f"};

  void configure() { storage(x, up, down, gate, dy, preUp, preGate, dx, dup, ddown, dgate); }

  void generate() {
    if (blas)
      return generateBlas();
    bool gated = activation == Act::SwiGLU;
    RDom rd(0, width), rf(0, hidden), rc(0, rows);
    dyf(d, c, e) = widened(this->dy)(d, c, e);
    Func x = widened(this->x), up = widened(this->up), down = widened(this->down),
         gate = widened(this->gate), dy = dyf, preUp = widened(this->preUp),
         preGate = widened(this->preGate);
    if (!saved)
      defineContraction(huAcc, {f, c, e}, rd, x(rd, c, e) * up(f, rd, e));
    // dh = dy down^T; down^T is contiguous in f.
    downT(f, d, e) = down(d, f, e);
    defineContraction(dhAcc, {f, c, e}, rd, dy(rd, c, e) * downT(f, rd, e));
    // Recomputed pre-activations rounded as the forward's saved ones are.
    Expr hu = saved ? preUp(f, c, e) : cast<float>(narrowed(this->x, huAcc(f, c, e)));
    Expr dh = dhAcc(f, c, e);
    if (gated) {
      if (!saved)
        defineContraction(hgAcc, {f, c, e}, rd, x(rd, c, e) * gate(f, rd, e));
      Expr hg = saved ? preGate(f, c, e) : cast<float>(narrowed(this->x, hgAcc(f, c, e)));
      Expr a = activate(activation, hg);
      act(f, c, e) = Tuple(a * hu, dh * a, dh * hu * activateGrad(activation, hg));
    } else {
      act(f, c, e) = Tuple(activate(activation, hu), dh * activateGrad(activation, hu));
    }
    dhuF(f, c, e) = act(f, c, e)[1];
    if (gated)
      dhgF(f, c, e) = act(f, c, e)[2];
    auto h = [&](Expr ff, Expr cc) { return act(ff, cc, e)[0]; };
    auto dhu = [&](Expr ff, Expr cc) { return dhuF(ff, cc, e); };
    auto dhg = [&](Expr ff, Expr cc) { return dhgF(ff, cc, e); };
    xT(c, d, e) = x(d, c, e);
    hT(c, f, e) = h(f, c);
    // ddown(d, f) = sum_c h(f, c) dy(d, c)
    defineContraction(ddownAcc, {d, f, e}, rc, hT(rc, f, e) * dy(d, rc, e));
    ddown(d, f, e) = narrowed(ddown, ddownAcc(d, f, e));
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
      dgate(f, d, e) = narrowed(dgate, dgateAcc(f, d, e));
    } else {
      dgate(f, d, e) = narrowed(dgate, 0.0f);
    }
    dx(d, c, e) = narrowed(dx, dxAcc(d, c, e));
    defineContraction(dupAcc, {f, d, e}, rc, xT(rc, d, e) * dhu(f, rc));
    dup(f, d, e) = narrowed(dup, dupAcc(f, d, e));
  }

  // The activation's values and gradients of the BLAS path, one Func each
  // (an extern stage reads whole buffers), and with routed rows their domain.
  Func hB{"h"}, dhuB{"dhu"}, dhgB{"dhg"};
  RDom rowsDomain;

  void generateBlas() {
    bool gated = activation == Act::SwiGLU;
    GemmRows r{routed, segments, (int)groups * (int)segments};
    const auto overK = GemmRows::SlotsAreK, inner = GemmRows::RoutedRowsOnly;
    // dh = dy down^T
    ExternFuncArgument xs = gemmInput(x), dys = gemmInput(dy), ups = gemmInput(up);
    ExternFuncArgument gates = gated ? gemmInput(gate) : ExternFuncArgument(gate);
    dhAcc = externGemm("dh_gemm", {f, c, e}, {dys}, {gemmInput(down), true}, width, r, inner);
    if (!saved) {
      huAcc = externGemm("hu_gemm", {f, c, e}, {xs}, {ups}, width, r, inner);
      if (gated)
        hgAcc = externGemm("hg_gemm", {f, c, e}, {xs}, {gates}, width, r, inner);
    }
    Func preUpF = widened(preUp), preGateF = widened(preGate);
    // Recomputed pre-activations rounded as the forward's saved ones are.
    auto hu = [&](Expr row) {
      return saved ? preUpF(f, row, e) : cast<float>(narrowed(x, huAcc(f, row, e)));
    };
    auto hg = [&](Expr row) {
      return saved ? preGateF(f, row, e) : cast<float>(narrowed(x, hgAcc(f, row, e)));
    };
    auto dh = [&](Expr row) { return dhAcc(f, row, e); };
    std::function<Expr(Expr)> hOf, dhuOf, dhgOf;
    if (gated) {
      hOf = [&](Expr row) { return activate(activation, hg(row)) * hu(row); };
      dhuOf = [&](Expr row) { return dh(row) * activate(activation, hg(row)); };
      dhgOf = [&](Expr row) { return dh(row) * hu(row) * activateGrad(activation, hg(row)); };
    } else {
      hOf = [&](Expr row) { return activate(activation, hu(row)); };
      dhuOf = [&](Expr row) { return dh(row) * activateGrad(activation, hu(row)); };
    }
    std::vector<std::pair<Func, std::function<Expr(Expr)>>> acts = {{hB, hOf}, {dhuB, dhuOf}};
    if (gated)
      acts.push_back({dhgB, dhgOf});
    if (segments > 0) {
      // Over the routed rows only.
      rowsDomain = routedRows(routed, e, rows, segments);
      for (auto &[fn, value] : acts)
        defineOnRows(fn, f, e, rowsDomain, rows, segments, value);
    } else {
      for (auto &[fn, value] : acts)
        fn(f, c, e) = value(c);
    }
    fromExtern(ddown, externGemm("ddown_gemm", {d, f, e}, {hB, true}, {dys}, rows, r, overK));
    if (gated) {
      fromExtern(dx, externGemm2("dx_gemm", {d, c, e}, {dhuB}, {ups, true}, hidden, {dhgB},
                                 {gates, true}, hidden, r));
      fromExtern(dgate, externGemm("dgate_gemm", {f, d, e}, {xs, true}, {dhgB}, rows, r, overK));
    } else {
      fromExtern(dx, externGemm("dx_gemm", {d, c, e}, {dhuB}, {ups, true}, hidden, r));
      dgate(f, d, e) = narrowed(dgate, 0.0f);
    }
    fromExtern(dup, externGemm("dup_gemm", {f, d, e}, {xs, true}, {dhuB}, rows, r, overK));
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
    if (moec_codegen::onGpu(get_target())) {
      if (!saved) // recomputing the pre-activations: plain
        return moec_codegen::scheduleForGpu(get_pipeline());
      // act (h and the pre-activation gradients) once, after the tiled dh;
      // each weight or input gradient a tiled contraction reading it.
      using moec_codegen::scheduleContractionForGpu;
      act.compute_root();
      scheduleContractionForGpu(act, f, c, dhAcc, {{dyf.in(dhAcc), downT}}, {e});
      scheduleContractionForGpu(ddown, d, f, ddownAcc, {{hT, dyf.in(ddownAcc)}}, {e});
      std::vector<std::vector<Func>> dxTiles = {{dhuF.in(dxAcc), upT}};
      if (gated)
        dxTiles.push_back({dhgF.in(dxAcc), gateT});
      scheduleContractionForGpu(dx, d, c, dxAcc, dxTiles, {e});
      if (gated)
        scheduleContractionForGpu(dgate, f, d, dgateAcc, {{xT.in(dgateAcc), dhgF.in(dgateAcc)}},
                                  {e});
      else
        moec_codegen::computeRootOnGpu(dgate, {f, d, e});
      scheduleContractionForGpu(dup, f, d, dupAcc, {{xT.in(dupAcc), dhuF.in(dupAcc)}}, {e});
      return;
    }
    if (blas) {
      scheduleStaged(vec);
      dhAcc.compute_root();
      if (!saved)
        for (Func fn : gated ? std::vector<Func>{huAcc, hgAcc} : std::vector<Func>{huAcc})
          fn.compute_root();
      // One loop nest over blocks of rows for h, dhu (and dhg): each block's
      // pre-activations and dh are read once from cache for all of them.
      std::vector<Func> acts =
          gated ? std::vector<Func>{hB, dhuB, dhgB} : std::vector<Func>{hB, dhuB};
      if (segments > 0) {
        // Each expert's routed rows, the three in one loop over them.
        for (Func fn : acts)
          scheduleOnRows(fn, f, e, rowsDomain, hidden, vec);
        for (size_t k = 1; k < acts.size(); ++k)
          acts[k].update(0).compute_with(acts[0].update(0), rowsDomain.x);
        if (!gated)
          Func(dgate).parallel(e);
        return;
      }
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
