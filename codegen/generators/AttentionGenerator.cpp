//===- AttentionGenerator.cpp - Halide generators of causal attention -----===//
//
// `attention`: q [B, S, H*hd], k, v [B, S, KV*hd] -> o [B, S, H*hd]; query
// head h reads kv head h / (H / KV); optional rotary embeddings (rotate-half)
// on q and k; causal softmax of q.k / sqrt(hd).
// `attention_grad`: dq, dk, dv, recomputing the probabilities.
// `latent_attention`, `latent_attention_grad`: the same stages for DeepSeek's
// multi-head latent attention (per-head content keys and one shared rotary
// key; value heads of their own width).
// Halide's dimension 0 is the innermost: q[b, s, h*hd + c] is q(h*hd + c, s, b).
// The probabilities are materialised per (batch, head): O(S^2) memory, fine
// for the sequence lengths trained here; scores, exponentials and their
// gradients are computed for the causal half only (keys j <= query i), and
// the rotary angles come from one (cos, sin) table per kernel. Score and
// dp rows run in register blocks of 2 vectors x 4 query rows; the softmax's
// max and sum and the dS row dot are per-lane vector reductions; the four
// contractions with the probabilities (P V, dS K, dS^T Q, P^T dO) run in
// register blocks of query (or key) rows. A flash-style schedule (no S^2
// buffer) is future work.
//
//===----------------------------------------------------------------------===//

#include "Shapes.h"

#include <limits>

using namespace Halide;
using moec_codegen::constrainDense;
using moec_codegen::MoEGenerator;
using moec_codegen::narrowed;
using moec_codegen::widened;

namespace {

/// The shapes of one attention: query/key heads of width headDim, value
/// heads of vDim, and the rotary embedding on columns [ropeOffset,
/// ropeOffset + ropeDim) of each query and key head (all of it for plain
/// attention; the rotary part of latent attention's).
struct AttentionParams {
  int batch, seq, heads, kvHeads, headDim;
  bool rope;
  float theta;
  int vDim = headDim, ropeOffset = 0, ropeDim = headDim;
  int group() const { return heads / kvHeads; }
};

/// Splits the packed head dimension: X(c, h, s, b) = x(h * hd + c, s, b).
Func split(Func x, int headDim, const std::string &name) {
  Var c, h, s, b;
  Func f(name);
  f(c, h, s, b) = x(h * headDim + c, s, b);
  return f;
}

/// The rotary angles' (cos, sin) per (pair index c < head_dim / 2, position
/// s), computed once per kernel at root (scheduleAttentionInputs): the
/// rotations read them instead of evaluating pow, cos and sin for every head
/// and batch row.
Func ropeTable(const AttentionParams &p) {
  Var c, s;
  Func t("rope");
  Expr angle = cast<float>(s) * pow(p.theta, -2.0f * cast<float>(c) / (float)p.ropeDim);
  t(c, s) = Tuple(cos(angle), sin(angle));
  return t;
}

/// Rotary embedding (rotate-half over the rotary columns) of x(c, h, s, b)
/// with the angles of `table`; `sign` -1 undoes it. Columns outside the
/// rotary part pass through.
Func rotate(Func x, Func table, const AttentionParams &p, float sign, const std::string &name) {
  Var c, h, s, b;
  Func f(name);
  if (!p.rope) {
    f(c, h, s, b) = x(c, h, s, b);
    return f;
  }
  int half = p.ropeDim / 2, lo = p.ropeOffset, hi = p.ropeOffset + p.ropeDim;
  Expr r = c - lo; // the column within the rotary part
  Expr ci = clamp(select(r < half, r, r - half), 0, half - 1);
  Expr cs = table(ci, s)[0], sn = sign * table(ci, s)[1];
  Expr first = x(clamp(c, lo, lo + half - 1), h, s, b);
  Expr second = x(clamp(c + half, lo + half, hi - 1), h, s, b);
  Expr firstOfPair = x(clamp(c - half, lo, lo + half - 1), h, s, b);
  Expr secondOfPair = x(clamp(c, lo + half, hi - 1), h, s, b);
  Expr rotated = select(r < half, first * cs - second * sn, secondOfPair * cs + firstOfPair * sn);
  f(c, h, s, b) = p.ropeOffset == 0 && p.ropeDim == p.headDim
                      ? rotated
                      : select(c >= lo && c < hi, rotated, x(c, h, s, b));
  return f;
}

/// Keys (or values) x(c, h, j, b) transposed to (j, c, h, b): contiguous
/// in the key index, so score rows vectorise over keys.
Func keysMajor(Func x, const std::string &name) {
  Var j, c, h, b;
  Func t(name);
  t(j, c, h, b) = x(c, h, j, b);
  return t;
}

/// Row-wise dot products rows(j, i, h, b) = sum_c a(c, h, i, b) bT(j, c,
/// h / group, b) over c < width, vectorised over keys j; `acc` accumulates
/// them (scheduled per register block, so the sums stay in registers).
struct RowDots {
  Func rows, acc;
};
RowDots rowDots(Func a, Func bT, const AttentionParams &p, int width, const std::string &name) {
  Var j, i, h, b;
  RDom c(0, width);
  RowDots r{Func(name), Func(name + "_acc")};
  r.acc(j, i, h, b) = 0.0f;
  r.acc(j, i, h, b) += a(c, h, i, b) * bT(j, c, h / p.group(), b);
  r.rows(j, i, h, b) = r.acc(j, i, h, b);
  return r;
}

/// Query rows per block of score (and dp) rows: each key vector loaded is
/// used for kRowBlock rows.
constexpr int kRowBlock = 4;

/// Splits `consumer`'s query rows `i` into blocks of kRowBlock when the
/// sequence allows; returns the (block, row) loop variables (block = row =
/// i when it does not).
std::pair<Var, Var> blockRows(Func consumer, Var i, int seq) {
  if (seq % kRowBlock != 0)
    return {i, i};
  Var io("io"), ii("ii");
  consumer.split(i, io, ii, kRowBlock);
  return {io, ii};
}

/// Schedules `r` (a rowDots) at `at`, a block of kRowBlock query rows of
/// `consumer` (or one row), vectorised over keys: register blocks of 2
/// vectors x kRowBlock rows (4 vectors x 1 row) accumulated over the head
/// dimension, each key vector loaded once per block and each query element
/// broadcast once per 2 (4) fused multiply-adds; the last block of a causal
/// row rounds up past the diagonal, within the sequence.
void scheduleRow(const RowDots &r, Func consumer, Var at, bool blocked, int seq, int vec) {
  Func row = r.rows, acc = r.acc;
  Var j = row.args()[0], i = row.args()[1], jo("jo"), ji("ji");
  // A causal row's length depends on the query: on the stack, Halide grows
  // one allocation instead of a heap block per row (per row and head).
  row.compute_at(consumer, at).store_in(MemoryType::Stack);
  int width = blocked ? 2 * vec : 4 * vec;
  if (seq % width == 0) {
    row.split(j, jo, ji, width, TailStrategy::RoundUp)
        .reorder(ji, i, jo)
        .vectorize(ji, vec)
        .unroll(ji);
    acc.compute_at(row, jo).vectorize(j, vec).unroll(j);
    acc.update().reorder(j, i, acc.rvars()[0]).vectorize(j, vec).unroll(j);
    if (blocked) {
      row.unroll(i);
      acc.unroll(i);
      acc.update().unroll(i);
    }
  } else {
    acc.compute_at(row, i);
    if (seq % vec == 0) {
      row.vectorize(j, vec);
      acc.vectorize(j, vec);
      acc.update().reorder(j, acc.rvars()[0]).vectorize(j, vec);
    }
  }
}

/// Row i's keys j <= i in vectors of `lanes` (the vector width when it
/// divides the sequence, else 1): the vectors of a row cover [0, lanes *
/// (i / lanes + 1)), within the sequence. `jv` is key rb * lanes + l (lane
/// l a pure Var, for per-lane reductions; lanes past i are to be masked),
/// `je` key re.y * lanes + re.x (an update over the row's vectors), `rl`
/// the lanes.
struct CausalVectors {
  int lanes = 1;
  RDom rb, re, rl;
  Expr jv, je;
  CausalVectors() = default;
  CausalVectors(Var i, Var l, int seq, int vec)
      : lanes(seq % vec == 0 ? vec : 1), rb(0, seq / lanes), re(0, lanes, 0, seq / lanes),
        rl(0, lanes) {
    rb.where(rb * lanes <= i);
    re.where(re.y * lanes <= i);
    jv = rb * lanes + l;
    je = re.y * lanes + re.x;
  }
};

/// A row stage of the causal attention, out(j, i, h, b) for keys j of
/// query i (the probabilities, dS), and what its schedule needs: the
/// dot-product rows it reads (scores, dp), the stages computed per query
/// row, the row buffer written vector by vector over the row's keys, and
/// the per-lane reductions.
struct CausalRowStage {
  Func out;
  RowDots dots;
  std::vector<Func> perRow;
  Func rowBuffer;
  std::vector<Func> laneSums;
  CausalVectors cv;
};

/// Causal probabilities p(j, i, h, b) of query i over keys j <= i, row by
/// row: scores against the keys-major keys, then a stable softmax.
CausalRowStage probabilities(Func qr, Func krT, const AttentionParams &p, int vec) {
  Var j, i, h, b, l;
  float scale = 1.0f / std::sqrt((float)p.headDim);
  RowDots dots = rowDots(qr, krT, p, p.headDim, "score");
  Func score = dots.rows;
  // Lanes past i are masked in the reductions and zeroed in the
  // probabilities.
  CausalVectors cv(i, l, p.seq, vec);
  const float inf = std::numeric_limits<float>::infinity();
  Expr jv = cv.jv, je = cv.je;
  RDom rl = cv.rl;
  // Per-lane maxima and sums (vector operations), then across the lanes.
  Func mxV("max_lanes"), mx("max"), e("exp"), denV("den_lanes"), den("den"), prob("prob");
  mxV(l, i, h, b) = -inf;
  mxV(l, i, h, b) = max(mxV(l, i, h, b), select(jv <= i, score(jv, i, h, b), -inf));
  mx(i, h, b) = maximum(mxV(rl, i, h, b));
  // Exponentials of the row's vectors only; the rest of the row's buffer
  // is never computed, and never used: the probabilities select before
  // any arithmetic.
  e(j, i, h, b) = undef<float>();
  e(je, i, h, b) = exp((score(je, i, h, b) - mx(i, h, b)) * scale);
  denV(l, i, h, b) = 0.0f;
  denV(l, i, h, b) += select(jv <= i, e(jv, i, h, b), 0.0f);
  den(i, h, b) = 1.0f / sum(denV(rl, i, h, b));
  prob(j, i, h, b) = select(j <= i, e(j, i, h, b), 0.0f) * den(i, h, b);
  return {prob, dots, {mxV, mx, denV, den, e}, e, {mxV, denV}, cv};
}

/// dS(j, i, h, b) = P (dP - rowsum(P dP)) / sqrt(hd), dP = dO V^T, for the
/// causal part only, as for the probabilities: dp for the vectors of keys
/// j <= i, copied into a row (dp itself is laid out per block of rows) that
/// ds reads without a clamp; per-lane sums for the dot.
CausalRowStage scoreGradients(Func prob, Func DO, Func VT, const AttentionParams &p, int vec) {
  float scale = 1.0f / std::sqrt((float)p.headDim);
  Var h, i, j, b, l;
  RowDots dpDots = rowDots(DO, VT, p, p.vDim, "dp");
  Func dp = dpDots.rows, dot("dot"), ds("ds");
  CausalVectors cv(i, l, p.seq, vec);
  Expr jv = cv.jv, je = cv.je;
  Func dpRow("dp_row"), dotV("dot_lanes");
  dpRow(j, i, h, b) = undef<float>();
  dpRow(je, i, h, b) = dp(je, i, h, b);
  dotV(l, i, h, b) = 0.0f;
  dotV(l, i, h, b) += select(jv <= i, prob(jv, i, h, b) * dpRow(jv, i, h, b), 0.0f);
  dot(i, h, b) = sum(dotV(cv.rl, i, h, b));
  ds(j, i, h, b) =
      select(j <= i, prob(j, i, h, b) * (dpRow(j, i, h, b) - dot(i, h, b)) * scale, 0.0f);
  return {ds, dpDots, {dpRow, dotV, dot}, dpRow, {dotV}, cv};
}

/// Schedules a causal row stage: at root, parallel over batch and heads,
/// row by row (in blocks of kRowBlock query rows for its dot products,
/// scheduleRow), vectorised over keys; the per-row stages at each row, its
/// row buffer on the stack.
void scheduleCausalRowStage(const CausalRowStage &st, const AttentionParams &p, int vec) {
  Func out = st.out;
  Var j = out.args()[0], i = out.args()[1], h = out.args()[2], b = out.args()[3];
  out.compute_root().parallel(b).parallel(h);
  auto [block, row] = blockRows(out, i, p.seq);
  if (st.cv.lanes > 1)
    out.vectorize(j, st.cv.lanes);
  scheduleRow(st.dots, out, block, p.seq % kRowBlock == 0, p.seq, vec);
  for (Func f : st.perRow)
    f.compute_at(out, row);
  // Its length depends on the query, as the dot rows' (scheduleRow).
  Func buffer = st.rowBuffer;
  buffer.store_in(MemoryType::Stack);
  if (st.cv.lanes > 1) {
    for (Func f : st.laneSums) {
      f.vectorize(f.args()[0]);
      f.update().vectorize(f.args()[0]);
    }
    // Each lane writes its own element (y V + x, x < V): no race, which
    // Halide cannot prove through the multiplication.
    buffer.update().allow_race_conditions().vectorize(st.cv.re.x);
  }
}

/// The register block of a causal contraction with results of `width`
/// columns per head: (vectors per chunk, rows per block), or rows 0 when the
/// width is not a multiple of the vector width or no block of 2..12/chunk
/// rows divides the sequence.
std::pair<int, int> registerBlock(const AttentionParams &p, int width, int vec) {
  int chunkVecs = width % vec == 0 ? std::min(width / vec, 4) : 0;
  for (int t = chunkVecs ? 12 / chunkVecs : 0; t >= 2; --t)
    if (p.seq % t == 0)
      return {chunkVecs, t};
  return {chunkVecs, 0};
}

/// Schedules r(c, h, row, b) = acc(c, row % rows, row / rows, h, b), acc's
/// one update reducing over its RDom: at root, (chunk x rows) blocks of acc
/// in registers over the reduction, parallel over batch and heads.
void scheduleCausalBlocks(Func r, Func acc, int rows, int chunk, int vec) {
  Var c = r.args()[0], h = r.args()[1], row = r.args()[2], b = r.args()[3];
  Var ro("ro"), ri("ri"), co("co"), ci("ci");
  r.compute_root()
      .split(row, ro, ri, rows)
      .split(c, co, ci, chunk)
      .reorder(ci, ri, co, ro, h, b)
      .vectorize(ci, vec)
      .unroll(ci)
      .unroll(ri)
      .parallel(b)
      .parallel(h);
  Var ac = acc.args()[0], ar = acc.args()[1];
  acc.compute_at(r, co).vectorize(ac, vec).unroll(ac).unroll(ar);
  std::vector<VarOrRVar> order = {ac, ar};
  for (RVar v : acc.rvars(0))
    order.push_back(v);
  acc.update().reorder(order).vectorize(ac, vec).unroll(ac).unroll(ar);
}

/// A causal contraction r(c, h, row, b) (causalRows, causalCols): its
/// accumulator `acc` when it runs in register blocks of `rows` rows (0:
/// one sum per element, `acc` undefined), and whether it is parallel over
/// heads (the query side) or over the batch only (the key side).
struct CausalSum {
  Func r, acc;
  int rows = 0, chunk = 0;
  bool perHead = true;
  int width = 0; ///< r's columns per head
};

/// Schedules a causal contraction at root: register blocks
/// (scheduleCausalBlocks), or one sum per element, vectorised over the head
/// dimension when it is a multiple of the vector width.
void scheduleCausalSum(const CausalSum &s, const AttentionParams &p, int vec) {
  if (s.rows) {
    scheduleCausalBlocks(s.r, s.acc, s.rows, s.chunk, vec);
    return;
  }
  Func r = s.r;
  Var c = r.args()[0], h = r.args()[1], b = r.args()[3];
  r.compute_root().parallel(b);
  if (s.perHead)
    r.parallel(h);
  if (s.width % vec == 0)
    r.vectorize(c, vec);
}

/// r(c, h, i, b) = sum over keys j <= i of w(j, i, h, b) x(c, h / group, j,
/// b), for w zero above the diagonal (the probabilities, dS). When the head
/// dimension is a multiple of the vector width, query rows run in blocks of
/// R and the head dimension in chunks of up to 4 vectors, (chunk x R) held
/// in registers over the keys up to the block's last row (the zeros past
/// each row's diagonal add nothing): one load of x per R fused
/// multiply-adds instead of two loads per one. Computed at root, parallel
/// over batch and heads.
CausalSum causalRows(Func w, Func x, int width, const AttentionParams &p, int vec,
                     const std::string &name) {
  Var c("c"), h("h"), i("i"), b("b");
  Func r(name);
  auto [chunkVecs, rows] = registerBlock(p, width, vec);
  if (!rows) {
    RDom j(0, p.seq);
    j.where(j <= i);
    r(c, h, i, b) = sum(w(j, i, h, b) * x(c, h / p.group(), j, b));
    return {r, Func(), 0, 0, true, width};
  }
  Var ii("ii"), io("io");
  Func acc(name + "_acc");
  RDom j(0, p.seq);
  j.where(j < io * rows + rows);
  acc(c, ii, io, h, b) = 0.0f;
  acc(c, ii, io, h, b) += w(j, io * rows + ii, h, b) * x(c, h / p.group(), j, b);
  r(c, h, i, b) = acc(c, i % rows, i / rows, h, b);
  return {r, acc, rows, chunkVecs * vec, true, width};
}

/// r(c, g, j, b) = sum over the group's query heads and queries i >= j of
/// w(j, i, g * group + x, b) y(c, g * group + x, i, b) (dK from dS and the
/// queries, dV from the probabilities and dO), for w zero above the
/// diagonal: blocks of R keys as in causalRows, from the block's first key.
CausalSum causalCols(Func w, Func y, int width, const AttentionParams &p, int vec,
                     const std::string &name) {
  Var c("c"), g("g"), j("j"), b("b");
  Func r(name);
  int group = p.group();
  auto [chunkVecs, rows] = registerBlock(p, width, vec);
  RDom ri(0, group, 0, p.seq);
  if (!rows) {
    ri.where(ri.y >= j);
    r(c, g, j, b) = sum(w(j, ri.y, g * group + ri.x, b) * y(c, g * group + ri.x, ri.y, b));
    return {r, Func(), 0, 0, false, width};
  }
  Var ji("ji"), jo("jo");
  Func acc(name + "_acc");
  ri.where(ri.y >= jo * rows);
  acc(c, ji, jo, g, b) = 0.0f;
  acc(c, ji, jo, g, b) +=
      w(jo * rows + ji, ri.y, g * group + ri.x, b) * y(c, g * group + ri.x, ri.y, b);
  r(c, g, j, b) = acc(c, j % rows, j / rows, g, b);
  return {r, acc, rows, chunkVecs * vec, false, width};
}

/// Schedules what both generators compute the same way: the rotary table
/// at root, and the rotated and keys-major operands at root, parallel over
/// the batch.
void scheduleAttentionInputs(Func table, const std::vector<Func> &operands,
                             const AttentionParams &p) {
  if (p.rope)
    table.compute_root();
  for (Func f : operands)
    f.compute_root().parallel(f.args()[3]);
}

/// The forward's stages from the queries, keys and values split into
/// heads, X(c, h, s, b): rotated queries and keys (the keys also keys-major),
/// the causal probabilities, and their sum over the values.
struct ForwardStages {
  Func table, qr, kr, krT;
  CausalRowStage prob;
  CausalSum out;

  void define(Func Q, Func K, Func V, const AttentionParams &p, int vec) {
    table = ropeTable(p);
    qr = rotate(Q, table, p, 1.0f, "qr");
    kr = rotate(K, table, p, 1.0f, "kr");
    krT = keysMajor(kr, "kr_t");
    prob = probabilities(qr, krT, p, vec);
    out = causalRows(prob.out, V, p.vDim, p, vec, "out");
  }
  /// Every stage runs in parallel over the batch.
  void schedule(const AttentionParams &p, int vec) {
    scheduleCausalRowStage(prob, p, vec);
    scheduleCausalSum(out, p, vec);
    scheduleAttentionInputs(table, {qr, kr, krT}, p);
  }
};

/// The backward's stages, recomputing the probabilities: the gradients of
/// the rotated queries and keys, rotated back (dqUnrot, dkUnrot: per head,
/// X(c, h, s, b)), and of the values (dV.r).
struct BackwardStages {
  Func table, qr, kr, krT, VT, dqUnrot, dkUnrot;
  CausalRowStage prob, ds;
  CausalSum dqr, dkr, dV;

  void define(Func Q, Func K, Func V, Func DO, const AttentionParams &p, int vec) {
    table = ropeTable(p);
    qr = rotate(Q, table, p, 1.0f, "qr");
    kr = rotate(K, table, p, 1.0f, "kr");
    krT = keysMajor(kr, "kr_t");
    VT = keysMajor(V, "v_t");
    prob = probabilities(qr, krT, p, vec);
    ds = scoreGradients(prob.out, DO, VT, p, vec);
    dqr = causalRows(ds.out, kr, p.headDim, p, vec, "dqr");
    // Keys and values: sum over the group's query heads and queries i >= j.
    dkr = causalCols(ds.out, qr, p.headDim, p, vec, "dkr");
    dV = causalCols(prob.out, DO, p.vDim, p, vec, "dV");
    dqUnrot = rotate(dqr.r, table, p, -1.0f, "dq_unrot");
    dkUnrot = rotate(dkr.r, table, p, -1.0f, "dk_unrot");
  }
  void schedule(const AttentionParams &p, int vec) {
    scheduleCausalRowStage(prob, p, vec);
    // ds row by row: dp and its dot with the probabilities per query row.
    scheduleCausalRowStage(ds, p, vec);
    for (const CausalSum &s : {dqr, dkr, dV})
      scheduleCausalSum(s, p, vec);
    scheduleAttentionInputs(table, {qr, kr, krT, VT}, p);
  }
};

#define MOE_ATTENTION_PARAMS                                                                       \
  GeneratorParam<int> batch{"batch", 1};                                                           \
  GeneratorParam<int> seq{"seq", 1};                                                               \
  GeneratorParam<int> heads{"heads", 1};                                                           \
  GeneratorParam<int> kv_heads{"kv_heads", 1};                                                     \
  GeneratorParam<int> head_dim{"head_dim", 2};                                                     \
  GeneratorParam<bool> rope{"rope", false};                                                        \
  GeneratorParam<float> theta{"theta", 10000.0f};                                                  \
  AttentionParams params() const { return {batch, seq, heads, kv_heads, head_dim, rope, theta}; }

class Attention : public MoEGenerator<Attention> {
public:
  MOE_ATTENTION_PARAMS
  Input<Buffer<void, 3>> q{"q"};
  Input<Buffer<void, 3>> k{"k"};
  Input<Buffer<void, 3>> v{"v"};
  Output<Buffer<void, 3>> o{"o"};

  void configure() { storage(q, k, v, o); }

  void generate() {
    AttentionParams p = params();
    int hd = p.headDim;
    f.define(split(widened(q), hd, "Q"), split(widened(k), hd, "K"), split(widened(v), hd, "V"), p,
             natural_vector_size<float>());
    Var i, b, x;
    o(x, i, b) = narrowed(o, f.out.r(x % hd, x / hd, i, b));
  }

  void schedule() {
    AttentionParams p = params();
    constrainDense(q, {p.heads * p.headDim, p.seq, p.batch});
    constrainDense(k, {p.kvHeads * p.headDim, p.seq, p.batch});
    constrainDense(v, {p.kvHeads * p.headDim, p.seq, p.batch});
    constrainDense(o, {p.heads * p.headDim, p.seq, p.batch});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    f.schedule(p, natural_vector_size<float>());
    Func(o).parallel(o.args()[2]);
  }

private:
  ForwardStages f;
};

class AttentionGrad : public MoEGenerator<AttentionGrad> {
public:
  MOE_ATTENTION_PARAMS
  Input<Buffer<void, 3>> q{"q"};
  Input<Buffer<void, 3>> k{"k"};
  Input<Buffer<void, 3>> v{"v"};
  Input<Buffer<void, 3>> dout{"dout"};
  Output<Buffer<void, 3>> dq{"dq"};
  Output<Buffer<void, 3>> dk{"dk"};
  Output<Buffer<void, 3>> dv{"dv"};

  void configure() { storage(q, k, v, dout, dq, dk, dv); }

  void generate() {
    AttentionParams p = params();
    int hd = p.headDim;
    g.define(split(widened(q), hd, "Q"), split(widened(k), hd, "K"), split(widened(v), hd, "V"),
             split(widened(dout), hd, "DO"), p, natural_vector_size<float>());
    Var i, j, b, x;
    dq(x, i, b) = narrowed(dq, g.dqUnrot(x % hd, x / hd, i, b));
    dk(x, j, b) = narrowed(dk, g.dkUnrot(x % hd, x / hd, j, b));
    dv(x, j, b) = narrowed(dv, g.dV.r(x % hd, x / hd, j, b));
  }

  void schedule() {
    AttentionParams p = params();
    constrainDense(q, {p.heads * p.headDim, p.seq, p.batch});
    constrainDense(k, {p.kvHeads * p.headDim, p.seq, p.batch});
    constrainDense(v, {p.kvHeads * p.headDim, p.seq, p.batch});
    constrainDense(dout, {p.heads * p.headDim, p.seq, p.batch});
    constrainDense(dq, {p.heads * p.headDim, p.seq, p.batch});
    constrainDense(dk, {p.kvHeads * p.headDim, p.seq, p.batch});
    constrainDense(dv, {p.kvHeads * p.headDim, p.seq, p.batch});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    g.schedule(p, natural_vector_size<float>());
    for (Func f : {Func(dq), Func(dk), Func(dv)})
      f.parallel(f.args()[2]);
  }

private:
  BackwardStages g;
};

/// Latent attention's per-head keys K(c, h, j, b): head h's content key
/// (c < dn), then the shared rotary key.
Func latentKeys(Func k, Func kRope, const AttentionParams &p) {
  Var c, h, j, b;
  Func f("K");
  int dn = p.ropeOffset;
  f(c, h, j, b) = select(c < dn, k(h * dn + clamp(c, 0, dn - 1), j, b),
                         kRope(clamp(c - dn, 0, p.ropeDim - 1), j, b));
  return f;
}

#define MOE_LATENT_ATTENTION_PARAMS                                                                \
  GeneratorParam<int> batch{"batch", 1};                                                           \
  GeneratorParam<int> seq{"seq", 1};                                                               \
  GeneratorParam<int> heads{"heads", 1};                                                           \
  GeneratorParam<int> content_dim{"content_dim", 1};                                               \
  GeneratorParam<int> rope_dim{"rope_dim", 2};                                                     \
  GeneratorParam<int> v_dim{"v_dim", 1};                                                           \
  GeneratorParam<bool> rope{"rope", false};                                                        \
  GeneratorParam<float> theta{"theta", 10000.0f};                                                  \
  AttentionParams params() const {                                                                 \
    int dn = content_dim, dr = rope_dim;                                                           \
    AttentionParams p{batch, seq, heads, heads, dn + dr, rope, theta};                             \
    p.vDim = v_dim;                                                                                \
    p.ropeOffset = dn;                                                                             \
    p.ropeDim = dr;                                                                                \
    return p;                                                                                      \
  }                                                                                                \
  void constrainInputs(const AttentionParams &p) {                                                 \
    constrainDense(q, {p.heads * p.headDim, p.seq, p.batch});                                      \
    constrainDense(k, {p.heads * p.ropeOffset, p.seq, p.batch});                                   \
    constrainDense(k_rope, {p.ropeDim, p.seq, p.batch});                                           \
    constrainDense(v, {p.heads * p.vDim, p.seq, p.batch});                                         \
  }

/// DeepSeek's multi-head latent attention after its projections (see
/// moe.latent_attention): the plain attention's stages over per-head keys
/// assembled from the content keys and the shared rotary key, rotated on
/// their last rope_dim columns, and values of their own width.
class LatentAttention : public MoEGenerator<LatentAttention> {
public:
  MOE_LATENT_ATTENTION_PARAMS
  Input<Buffer<void, 3>> q{"q"};
  Input<Buffer<void, 3>> k{"k"};
  Input<Buffer<void, 3>> k_rope{"k_rope"};
  Input<Buffer<void, 3>> v{"v"};
  Output<Buffer<void, 3>> o{"o"};

  void configure() { storage(q, k, k_rope, v, o); }

  void generate() {
    AttentionParams p = params();
    f.define(split(widened(q), p.headDim, "Q"), latentKeys(widened(k), widened(k_rope), p),
             split(widened(v), p.vDim, "V"), p, natural_vector_size<float>());
    Var i, b, x;
    o(x, i, b) = narrowed(o, f.out.r(x % p.vDim, x / p.vDim, i, b));
  }

  void schedule() {
    AttentionParams p = params();
    constrainInputs(p);
    constrainDense(o, {p.heads * p.vDim, p.seq, p.batch});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    f.schedule(p, natural_vector_size<float>());
    Func(o).parallel(o.args()[2]);
  }

private:
  ForwardStages f;
};

class LatentAttentionGrad : public MoEGenerator<LatentAttentionGrad> {
public:
  MOE_LATENT_ATTENTION_PARAMS
  Input<Buffer<void, 3>> q{"q"};
  Input<Buffer<void, 3>> k{"k"};
  Input<Buffer<void, 3>> k_rope{"k_rope"};
  Input<Buffer<void, 3>> v{"v"};
  Input<Buffer<void, 3>> dout{"dout"};
  Output<Buffer<void, 3>> dq{"dq"};
  Output<Buffer<void, 3>> dk{"dk"};
  Output<Buffer<void, 3>> dk_rope{"dk_rope"};
  Output<Buffer<void, 3>> dv{"dv"};

  void configure() { storage(q, k, k_rope, v, dout, dq, dk, dk_rope, dv); }

  void generate() {
    AttentionParams p = params();
    g.define(split(widened(q), p.headDim, "Q"), latentKeys(widened(k), widened(k_rope), p),
             split(widened(v), p.vDim, "V"), split(widened(dout), p.vDim, "DO"), p,
             natural_vector_size<float>());
    Var i, j, b, x;
    int dn = p.ropeOffset;
    dq(x, i, b) = narrowed(dq, g.dqUnrot(x % p.headDim, x / p.headDim, i, b));
    dk(x, j, b) = narrowed(dk, g.dkUnrot(x % dn, x / dn, j, b));
    // The shared rotary key's gradient: the heads' rotary parts summed.
    RDom h(0, p.heads);
    dk_rope(x, j, b) = narrowed(dk_rope, sum(g.dkUnrot(dn + x, h, j, b)));
    dv(x, j, b) = narrowed(dv, g.dV.r(x % p.vDim, x / p.vDim, j, b));
  }

  void schedule() {
    AttentionParams p = params();
    constrainInputs(p);
    constrainDense(dout, {p.heads * p.vDim, p.seq, p.batch});
    constrainDense(dq, {p.heads * p.headDim, p.seq, p.batch});
    constrainDense(dk, {p.heads * p.ropeOffset, p.seq, p.batch});
    constrainDense(dk_rope, {p.ropeDim, p.seq, p.batch});
    constrainDense(dv, {p.heads * p.vDim, p.seq, p.batch});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    g.schedule(p, natural_vector_size<float>());
    // dk and dk_rope both read every head's rotated-back key gradient.
    g.dkUnrot.compute_root().parallel(g.dkUnrot.args()[3]);
    for (Func f : {Func(dq), Func(dk), Func(dk_rope), Func(dv)})
      f.parallel(f.args()[2]);
  }

private:
  BackwardStages g;
};

} // namespace

HALIDE_REGISTER_GENERATOR(Attention, attention)
HALIDE_REGISTER_GENERATOR(AttentionGrad, attention_grad)
HALIDE_REGISTER_GENERATOR(LatentAttention, latent_attention)
HALIDE_REGISTER_GENERATOR(LatentAttentionGrad, latent_attention_grad)
