//===- AttentionGenerator.cpp - Halide generators of causal attention -----===//
//
// `attention`: q [B, S, H*hd], k, v [B, S, KV*hd] -> o [B, S, H*hd]; query
// head h reads kv head h / (H / KV); optional rotary embeddings (rotate-half)
// on q and k; causal softmax of q.k / sqrt(hd).
// `attention_grad`: dq, dk, dv, recomputing the probabilities.
// Halide's dimension 0 is the innermost: q[b, s, h*hd + c] is q(h*hd + c, s, b).
// The probabilities are materialised per (batch, head): O(S^2) memory, fine
// for the sequence lengths trained here; a flash-style schedule is future work.
//
//===----------------------------------------------------------------------===//

#include "Halide.h"

using namespace Halide;

namespace {

struct AttentionParams {
  int batch, seq, heads, kvHeads, headDim;
  bool rope;
  float theta;
  int group() const { return heads / kvHeads; }
};

/// Splits the packed head dimension: X(c, h, s, b) = x(h * hd + c, s, b).
Func split(Func x, int headDim, const std::string &name) {
  Var c, h, s, b;
  Func f(name);
  f(c, h, s, b) = x(h * headDim + c, s, b);
  return f;
}

/// Rotary embedding (rotate-half) of x(c, h, s, b); `sign` -1 undoes it.
Func rotate(Func x, const AttentionParams &p, float sign, const std::string &name) {
  Var c, h, s, b;
  Func f(name);
  if (!p.rope) {
    f(c, h, s, b) = x(c, h, s, b);
    return f;
  }
  int half = p.headDim / 2;
  Expr ci = select(c < half, c, c - half);
  Expr angle = cast<float>(s) *
               pow(p.theta, -2.0f * cast<float>(ci) / (float)p.headDim);
  Expr cs = cos(angle), sn = sign * sin(angle);
  Expr first = x(clamp(c, 0, half - 1), h, s, b);
  Expr second = x(clamp(c + half, half, p.headDim - 1), h, s, b);
  Expr firstOfPair = x(clamp(c - half, 0, half - 1), h, s, b);
  Expr secondOfPair = x(clamp(c, half, p.headDim - 1), h, s, b);
  f(c, h, s, b) = select(c < half, first * cs - second * sn,
                         secondOfPair * cs + firstOfPair * sn);
  return f;
}

/// Causal probabilities p(j, i, h, b) of query i over keys j <= i.
Func probabilities(Func qr, Func kr, const AttentionParams &p) {
  Var j, i, h, b;
  RDom c(0, p.headDim), jj(0, p.seq);
  jj.where(jj <= i);
  float scale = 1.0f / std::sqrt((float)p.headDim);
  Func score("score"), mx("max"), e("exp"), den("den"), prob("prob");
  score(j, i, h, b) = sum(qr(c, h, i, b) * kr(c, h / p.group(), j, b)) * scale;
  mx(i, h, b) = maximum(score(jj, i, h, b));
  e(j, i, h, b) = select(j <= i, exp(score(j, i, h, b) - mx(i, h, b)), 0.0f);
  den(i, h, b) = sum(e(jj, i, h, b));
  prob(j, i, h, b) = e(j, i, h, b) / den(i, h, b);
  score.compute_at(prob, b);
  mx.compute_at(prob, b);
  e.compute_at(prob, b);
  den.compute_at(prob, b);
  return prob;
}

#define MOE_ATTENTION_PARAMS                                                   \
  GeneratorParam<int> batch{"batch", 1};                                       \
  GeneratorParam<int> seq{"seq", 1};                                           \
  GeneratorParam<int> heads{"heads", 1};                                       \
  GeneratorParam<int> kv_heads{"kv_heads", 1};                                 \
  GeneratorParam<int> head_dim{"head_dim", 2};                                 \
  GeneratorParam<bool> rope{"rope", false};                                    \
  GeneratorParam<float> theta{"theta", 10000.0f};                              \
  AttentionParams params() const {                                             \
    return {batch, seq, heads, kv_heads, head_dim, rope, theta};               \
  }

void constrain(OutputImageParam x, int width, int seq, int batch) {
  x.dim(0).set_bounds(0, width).set_stride(1);
  x.dim(1).set_bounds(0, seq).set_stride(width);
  x.dim(2).set_bounds(0, batch).set_stride(width * seq);
}

class Attention : public Generator<Attention> {
public:
  MOE_ATTENTION_PARAMS
  Input<Buffer<float, 3>> q{"q"};
  Input<Buffer<float, 3>> k{"k"};
  Input<Buffer<float, 3>> v{"v"};
  Output<Buffer<float, 3>> o{"o"};

  void generate() {
    AttentionParams p = params();
    Func qr = rotate(split(q, p.headDim, "Q"), p, 1.0f, "qr");
    Func kr = rotate(split(k, p.headDim, "K"), p, 1.0f, "kr");
    Func V = split(v, p.headDim, "V");
    Func prob = probabilities(qr, kr, p);
    Var c, h, i, b, x;
    RDom j(0, p.seq);
    j.where(j <= i);
    Func out("out");
    out(c, h, i, b) = sum(prob(j, i, h, b) * V(c, h / p.group(), j, b));
    o(x, i, b) = out(x % p.headDim, x / p.headDim, i, b);
    qr.compute_root();
    kr.compute_root();
    prob.compute_root().parallel(prob.args()[3]);
    out.compute_root().parallel(b);
  }

  void schedule() {
    AttentionParams p = params();
    constrain(q, p.heads * p.headDim, p.seq, p.batch);
    constrain(k, p.kvHeads * p.headDim, p.seq, p.batch);
    constrain(v, p.kvHeads * p.headDim, p.seq, p.batch);
    constrain(o, p.heads * p.headDim, p.seq, p.batch);
  }
};

class AttentionGrad : public Generator<AttentionGrad> {
public:
  MOE_ATTENTION_PARAMS
  Input<Buffer<float, 3>> q{"q"};
  Input<Buffer<float, 3>> k{"k"};
  Input<Buffer<float, 3>> v{"v"};
  Input<Buffer<float, 3>> dout{"dout"};
  Output<Buffer<float, 3>> dq{"dq"};
  Output<Buffer<float, 3>> dk{"dk"};
  Output<Buffer<float, 3>> dv{"dv"};

  void generate() {
    AttentionParams p = params();
    int group = p.group();
    float scale = 1.0f / std::sqrt((float)p.headDim);
    Func qr = rotate(split(q, p.headDim, "Q"), p, 1.0f, "qr");
    Func kr = rotate(split(k, p.headDim, "K"), p, 1.0f, "kr");
    Func V = split(v, p.headDim, "V"), DO = split(dout, p.headDim, "DO");
    Func prob = probabilities(qr, kr, p);
    Var c, h, g, i, j, b, x;
    RDom rc(0, p.headDim), rj(0, p.seq);
    rj.where(rj <= i);
    Func dp("dp"), dot("dot"), ds("ds"), dqr("dqr"), dkr("dkr"), dV("dV");
    dp(j, i, h, b) = sum(DO(rc, h, i, b) * V(rc, h / group, j, b));
    dot(i, h, b) = sum(prob(rj, i, h, b) * dp(rj, i, h, b));
    ds(j, i, h, b) = prob(j, i, h, b) * (dp(j, i, h, b) - dot(i, h, b)) * scale;
    dqr(c, h, i, b) = sum(ds(rj, i, h, b) * kr(c, h / group, rj, b));
    // Keys and values: sum over the group's query heads and queries i >= j.
    RDom ri(0, group, 0, p.seq);
    ri.where(ri.y >= j);
    dkr(c, g, j, b) = sum(ds(j, ri.y, g * group + ri.x, b) * qr(c, g * group + ri.x, ri.y, b));
    dV(c, g, j, b) = sum(prob(j, ri.y, g * group + ri.x, b) * DO(c, g * group + ri.x, ri.y, b));
    Func dqUnrot = rotate(dqr, p, -1.0f, "dq_unrot");
    Func dkUnrot = rotate(dkr, p, -1.0f, "dk_unrot");
    dq(x, i, b) = dqUnrot(x % p.headDim, x / p.headDim, i, b);
    dk(x, j, b) = dkUnrot(x % p.headDim, x / p.headDim, j, b);
    dv(x, j, b) = dV(x % p.headDim, x / p.headDim, j, b);
    for (Func f : {qr, kr, prob, dp, dot, ds, dqr, dkr, dV})
      f.compute_root();
    prob.parallel(prob.args()[3]);
    dp.parallel(b);
    ds.parallel(b);
  }

  void schedule() {
    AttentionParams p = params();
    constrain(q, p.heads * p.headDim, p.seq, p.batch);
    constrain(k, p.kvHeads * p.headDim, p.seq, p.batch);
    constrain(v, p.kvHeads * p.headDim, p.seq, p.batch);
    constrain(dout, p.heads * p.headDim, p.seq, p.batch);
    constrain(dq, p.heads * p.headDim, p.seq, p.batch);
    constrain(dk, p.kvHeads * p.headDim, p.seq, p.batch);
    constrain(dv, p.kvHeads * p.headDim, p.seq, p.batch);
  }
};

} // namespace

HALIDE_REGISTER_GENERATOR(Attention, attention)
HALIDE_REGISTER_GENERATOR(AttentionGrad, attention_grad)
