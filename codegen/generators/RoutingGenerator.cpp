//===- RoutingGenerator.cpp - fused gating and its gradient ---------------===//
//
// `fused_gate`: per token, logits = x W, scores (softmax or sigmoid), top-k
// by score + bias (ties to the lower expert, successive argmax), gates
// (renormalised, scaled), the token -> slot assignment in token order then
// choice order (prefix counts per expert; -1 past the capacity), per-expert
// counts, and the balancing + z losses. Same semantics as moe.fused_gate.
// With expert_groups > 1 (DeepSeek's group-limited routing) the top-k runs
// over the experts of each token's topk_groups best expert groups only.
// `router_grad`: dx, dW through the selected gates and the losses.
// Rows are the flattened tokens: x[t, d] is x(d, t); W[d, e] is w(e, d).
//
//===----------------------------------------------------------------------===//

#include "Shapes.h"

#include <cstdio>
#include <cstdlib>
#include <limits>

using namespace Halide;
using moec_codegen::constrainDense;
using moec_codegen::MoEGenerator;
using moec_codegen::narrowed;
using moec_codegen::widened;

namespace {

enum class Scoring { Softmax, Sigmoid };
const std::map<std::string, Scoring> kScorings = {{"softmax", Scoring::Softmax},
                                                  {"sigmoid", Scoring::Sigmoid}};

#define MOE_ROUTING_PARAMS                                                                         \
  GeneratorParam<int> tokens{"tokens", 1};                                                         \
  GeneratorParam<int> width{"width", 1};                                                           \
  GeneratorParam<int> num_experts{"num_experts", 1};                                               \
  GeneratorParam<int> top_k{"top_k", 1};                                                           \
  GeneratorParam<Scoring> scoring{"scoring", Scoring::Softmax, kScorings};                         \
  GeneratorParam<bool> renormalize{"renormalize", false};                                          \
  GeneratorParam<bool> has_bias{"has_bias", false};                                                \
  GeneratorParam<float> routed_scaling{"routed_scaling", 1.0f};                                    \
  GeneratorParam<float> aux_loss_coef{"aux_loss_coef", 0.0f};                                      \
  GeneratorParam<float> z_loss_coef{"z_loss_coef", 0.0f};                                          \
  GeneratorParam<int> groups{"groups", 1};                                                         \
  /* Group-limited selection: equal contiguous expert groups (not the */                           \
  /* token routing groups above), of which each token keeps its best. */                           \
  GeneratorParam<int> expert_groups{"expert_groups", 1};                                           \
  GeneratorParam<int> topk_groups{"topk_groups", 1};                                               \
  /* Unequal groups: tokens per group, comma-separated ("" = equal). */                            \
  GeneratorParam<std::string> group_sizes{"group_sizes", ""};                                      \
  /* > 0: the balancing loss per sequence of this many tokens (seq_aux). */                        \
  GeneratorParam<int> aux_seq_len{"aux_seq_len", 0};

/// The routing groups of `tokens` tokens: `count` equal consecutive groups,
/// or the unequal sizes of a "s0,s1,..." list (tokens each).
struct Groups {
  std::vector<int> start, size;
  bool unequal = false;

  Groups(int tokens, int count, const std::string &sizes) {
    if (sizes.empty()) {
      for (int g = 0; g < count; ++g)
        start.push_back(g * (tokens / count)), size.push_back(tokens / count);
      return;
    }
    unequal = true;
    int at = 0;
    for (size_t pos = 0; pos <= sizes.size();) {
      size_t comma = std::min(sizes.find(',', pos), sizes.size());
      int n = std::stoi(sizes.substr(pos, comma - pos));
      start.push_back(at), size.push_back(n);
      at += n;
      pos = comma + 1;
    }
    if (at != tokens || static_cast<int>(size.size()) != count) {
      std::fprintf(stderr, "group_sizes %s do not make %d groups of %d tokens\n", sizes.c_str(),
                   count, tokens);
      std::exit(1);
    }
  }
  /// The group of token `t`.
  Expr of(Expr t) const {
    if (!unequal)
      return t / size[0];
    Expr g = 0;
    for (size_t i = 1; i < start.size(); ++i)
      g += select(t >= start[i], 1, 0);
    return g;
  }
  /// Whether token `t` starts a group.
  Expr starts(Expr t) const {
    if (!unequal)
      return t % size[0] == 0;
    Expr any = t == 0;
    for (size_t i = 1; i < start.size(); ++i)
      any = any || t == start[i];
    return any;
  }
  /// Tokens of group `g` (an Expr over the groups).
  Expr sizeOf(Expr g) const {
    Expr n = size[0];
    for (size_t i = 1; i < size.size(); ++i)
      n = select(g == static_cast<int>(i), size[i], n);
    return n;
  }
};

/// What the forward and the backward both recompute (route()). A
/// default-constructed Routing is a placeholder, a generator's member until
/// generate() defines it: its stages are named there, after the outputs, so
/// an output keeps its name (`counts`).
struct Routing {
  Func logits, logitAcc, lse, score, balance, scoreSum, counts, selectedSum, groupCounts;
  std::vector<Func> chosen;
  /// The group-limited selection's stages (empty without expert groups):
  /// the group scores and each token's best groups.
  std::vector<Func> limit;
};

/// Group-limited routing: `count` equal contiguous groups of experts, of
/// which each token keeps its `topk` best.
struct ExpertGroups {
  int count = 1, topk = 1;
};

/// Whether expert `e` is in one of token `t`'s best groups, each group
/// scored from the selection keys `key(e, t)` by the scoring's rule
/// (softmax: the largest key; sigmoid: the sum of the two largest, the one
/// key of a one-expert group), the best picked by successive argmax (ties
/// to the lower group). Appends its stages to `limit`.
Expr allowedExpert(Func key, Expr e, Expr t, int experts, Scoring scoring, ExpertGroups eg,
                   std::vector<Func> &limit) {
  int per = experts / eg.count;
  Var g("g"), tt("t");
  RDom rc(0, per, "rc");
  Func best("group_best"), groupScore("group_score");
  best(g, tt) = argmax(key(g * per + rc, tt));
  if (scoring == Scoring::Softmax || per == 1) {
    groupScore(g, tt) = best(g, tt)[1];
  } else {
    Expr second = maximum(select(rc == best(g, tt)[0], -std::numeric_limits<float>::infinity(),
                                 key(g * per + rc, tt)));
    groupScore(g, tt) = best(g, tt)[1] + second;
  }
  limit.push_back(best);
  limit.push_back(groupScore);
  RDom rg(0, eg.count, "rg");
  std::vector<Func> picks;
  for (int j = 0; j < eg.topk; ++j) {
    Expr taken = cast<bool>(false);
    for (const Func &prev : picks)
      taken = taken || rg == prev(tt);
    Func pick("group_chosen_" + std::to_string(j));
    pick(tt) =
        argmax(select(taken, -std::numeric_limits<float>::infinity(), groupScore(rg, tt)))[0];
    picks.push_back(pick);
    limit.push_back(pick);
  }
  Expr allowed = cast<bool>(false);
  for (const Func &p : picks)
    allowed = allowed || e / per == p(t);
  return allowed;
}

Routing route(Func x, Func w, Func bias, int tokens, int width, int experts, int k, Scoring scoring,
              bool hasBias, const Groups &groups, ExpertGroups expertGroups) {
  Routing r{Func("logits"),
            Func("logit_acc"),
            Func("lse"),
            Func("score"),
            Func("balance"),
            Func("score_sum"),
            Func("counts"),
            Func("selected_sum"),
            Func("group_counts"),
            {},
            {}};
  Var e, t;
  RDom d(0, width), re(0, experts);
  r.logitAcc(e, t) = 0.0f;
  r.logitAcc(e, t) += x(d, t) * w(e, d);
  r.logits(e, t) = r.logitAcc(e, t);
  Func mx("logit_max"), den("logit_den");
  mx(t) = maximum(r.logits(re, t));
  den(t) = sum(exp(r.logits(re, t) - mx(t)));
  r.lse(t) = mx(t) + log(den(t));
  if (scoring == Scoring::Softmax)
    r.score(e, t) = exp(r.logits(e, t) - r.lse(t));
  else
    r.score(e, t) = 1.0f / (1.0f + exp(-r.logits(e, t)));
  r.scoreSum(t) = sum(r.score(re, t));
  r.balance(e, t) = scoring == Scoring::Softmax ? r.score(e, t) : r.score(e, t) / r.scoreSum(t);
  // Successive argmax of score + bias, excluding experts already chosen
  // (and, with expert groups, those outside the token's best groups).
  Expr outside = cast<bool>(false);
  if (expertGroups.count > 1) {
    Func key("selection_key");
    key(e, t) = r.score(e, t) + (hasBias ? bias(e) : Expr(0.0f));
    outside = !allowedExpert(key, re, t, experts, scoring, expertGroups, r.limit);
  }
  for (int j = 0; j < k; ++j) {
    Expr taken = cast<bool>(false);
    for (const Func &prev : r.chosen)
      taken = taken || re == prev(t);
    if (expertGroups.count > 1)
      taken = taken || outside;
    Expr key = r.score(re, t) + (hasBias ? bias(re) : Expr(0.0f));
    Func pick("chosen_" + std::to_string(j));
    pick(t) = argmax(select(taken, -std::numeric_limits<float>::infinity(), key))[0];
    r.chosen.push_back(pick);
  }
  Expr total = 0.0f;
  for (const Func &c : r.chosen)
    total += r.score(clamp(c(t), 0, experts - 1), t);
  r.selectedSum(t) = total;
  // Token-slots routed to each expert (before capacity), per routing group
  // of tokens / groups consecutive tokens, and in total.
  RDom rt(0, k, 0, tokens);
  Func chosenAt("chosen_at");
  Var j, g;
  Expr which = r.chosen[0](t);
  for (int c = 1; c < k; ++c)
    which = select(j == c, r.chosen[c](t), which);
  chosenAt(j, t) = which;
  r.groupCounts(e, g) = 0;
  r.groupCounts(clamp(chosenAt(rt.x, rt.y), 0, experts - 1), groups.of(rt.y)) += 1;
  RDom rg(0, static_cast<int>(groups.size.size()));
  r.counts(e) = sum(r.groupCounts(e, rg));
  r.chosen.push_back(chosenAt); // the last entry: all choices as (j, t)
  return r;
}

/// The balancing loss per sequence (DeepSeek's seq_aux): token-slots routed
/// to each expert per sequence of `length` tokens, counted before capacity.
Func sequenceCounts(const Routing &r, int tokens, int length, int experts, int k) {
  Func counts("sequence_counts");
  Var e, q;
  RDom rt(0, k, 0, tokens);
  counts(e, q) = 0;
  counts(clamp(r.chosen.back()(rt.x, rt.y), 0, experts - 1), rt.y / length) += 1;
  return counts;
}

/// Schedules what route() defines: every stage at root; the logits
/// vectorised over experts (w is contiguous in e), parallel over tokens.
void scheduleRouting(const Routing &r, int experts, int vec) {
  for (Func f : {r.groupCounts, r.lse, r.score, r.scoreSum, r.selectedSum, r.counts})
    f.compute_root();
  for (Func c : r.chosen) // each choice, and all choices as (j, t)
    c.compute_root();
  for (Func f : r.limit) // the group scores and best groups, once per token
    f.compute_root();
  Func logits = r.logits, logitAcc = r.logitAcc;
  Var e = logitAcc.args()[0], t = logits.args()[1];
  logits.compute_root().parallel(t, 64, TailStrategy::GuardWithIf);
  logitAcc.compute_at(logits, t);
  if (experts >= vec) {
    logitAcc.vectorize(e, vec, TailStrategy::GuardWithIf);
    logitAcc.update().reorder(e, logitAcc.rvars()[0]).vectorize(e, vec, TailStrategy::GuardWithIf);
  }
}

class FusedGate : public MoEGenerator<FusedGate> {
public:
  MOE_ROUTING_PARAMS
  GeneratorParam<int> capacity{"capacity", 1};

  Input<Buffer<void, 2>> x{"x"};
  Input<Buffer<void, 2>> w{"w"};
  Input<Buffer<void, 1>> bias{"bias"};
  Output<Buffer<void, 2>> gates{"gates"};
  Output<Buffer<int32_t, 2>> chosen{"experts"};
  Output<Buffer<int32_t, 2>> slots{"slots"};
  Output<Buffer<int32_t, 1>> counts{"counts"};
  Output<Buffer<float, 0>> aux{"aux"};
  /// For metrics, not differentiated: the balancing loss (Switch's form,
  /// E x sum f_e P_e, 1 when balanced) and the z-loss, unweighted.
  Output<Buffer<float, 1>> loss_parts{"loss_parts"};

  void configure() { storage(x, w, bias, gates); }

  void generate() {
    int k = top_k, T = tokens, E = num_experts, C = capacity, G = groups;
    int Tg = T / G; // tokens per routing group (equal groups)
    Groups groupsOf(T, G, group_sizes);
    r = route(widened(x), widened(w), widened(bias), T, width, E, k, scoring, has_bias, groupsOf,
              {expert_groups, topk_groups});
    Func chosenAt = r.chosen.back();
    Var j, t, e, i;
    Expr raw = r.score(clamp(chosenAt(j, t), 0, E - 1), t);
    gates(j, t) = narrowed(gates, (float)routed_scaling * raw /
                                      (renormalize ? r.selectedSum(t) : Expr(1.0f)));
    chosen(j, t) = chosenAt(j, t);
    counts(e) = r.counts(e);
    // Prefix counts in token order, then choice order, restarting at each
    // group: before(e, i) is the number of token-slots of i's group before
    // flat index i = t * k + j routed to e.
    RDom ri(0, T * k);
    before(e, i) = 0;
    Expr next = ri + 1; // a flat index: restart at each group's first token
    before(e, ri + 1) = select(next % k == 0 && groupsOf.starts(next / k), 0,
                               before(e, ri) + select(chosenAt(ri % k, ri / k) == e, 1, 0));
    Expr ex = clamp(chosenAt(j, t), 0, E - 1);
    Expr c = before(ex, t * k + j);
    slots(j, t) = select(c < C, ex * (G * C) + groupsOf.of(t) * C + c, -1);
    // Losses: the balancing loss is the mean over groups (weighted by their
    // token shares when unequal).
    Var g;
    RDom re(0, E), rt(0, T), rgt(0, Tg), reg(0, E, 0, G);
    Expr balanceLoss;
    if (int L = aux_seq_len; L > 0) { // the mean of the sequences' f_e P_e
      int sequences = T / L;
      RDom rl(0, L), res(0, E, 0, sequences);
      seqCounts = sequenceCounts(r, T, L, E, k);
      meanBalance(e, g) = sum(r.balance(e, g * L + rl)) / (float)L;
      balanceLoss =
          sum(cast<float>(seqCounts(res.x, res.y)) / (float)(L * k) * meanBalance(res.x, res.y)) /
          (float)sequences;
    } else if (groupsOf.unequal) {
      balanceSum(e, g) = 0.0f;
      balanceSum(e, groupsOf.of(rt)) += r.balance(e, rt);
      Expr tg = cast<float>(groupsOf.sizeOf(reg.y));
      // f_e P_e of each group, times its share tg / T.
      balanceLoss = sum(cast<float>(r.groupCounts(reg.x, reg.y)) / (tg * (float)k) *
                        (balanceSum(reg.x, reg.y) / tg) * (tg / (float)T));
    } else {
      meanBalance(e, g) = sum(r.balance(e, g * Tg + rgt)) / (float)Tg;
      balanceLoss = sum(cast<float>(r.groupCounts(reg.x, reg.y)) / (float)(Tg * k) *
                        meanBalance(reg.x, reg.y)) /
                    (float)G;
    }
    parts(i) = select(i == 0, (float)E * balanceLoss, sum(r.lse(rt) * r.lse(rt)) / (float)T);
    loss_parts(i) = parts(i);
    aux() = (float)aux_loss_coef * parts(0) + (float)z_loss_coef * parts(1);
  }

  void schedule() {
    constrainDense(x, {width, tokens});
    constrainDense(w, {num_experts, width});
    bias.dim(0).set_bounds(0, has_bias ? (int)num_experts : 1);
    for (OutputImageParam p :
         {OutputImageParam(gates), OutputImageParam(chosen), OutputImageParam(slots)})
      constrainDense(p, {top_k, tokens});
    counts.dim(0).set_bounds(0, num_experts);
    loss_parts.dim(0).set_bounds(0, 2);
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    scheduleRouting(r, num_experts, natural_vector_size<float>());
    before.compute_root();
    // The balancing term's per-group sums: one form or the other.
    (balanceSum.defined() ? balanceSum : meanBalance).compute_root();
    if (seqCounts.defined())
      seqCounts.compute_root();
    parts.compute_root().bound(parts.args()[0], 0, 2);
  }

private:
  Routing r;
  Func before{"before"}, meanBalance{"mean_balance"}, balanceSum{"balance_sum"},
      parts{"loss_parts_value"}, seqCounts;
};

class RouterGrad : public MoEGenerator<RouterGrad> {
public:
  MOE_ROUTING_PARAMS

  Input<Buffer<void, 2>> x{"x"};
  Input<Buffer<void, 2>> w{"w"};
  Input<Buffer<void, 1>> bias{"bias"};
  Input<Buffer<void, 2>> dgates{"dgates"};
  Input<Buffer<float, 0>> daux{"daux"};
  Output<Buffer<void, 2>> dx{"dx"};
  Output<Buffer<void, 2>> dw{"dw"};

  void configure() { storage(x, w, bias, dgates, dx, dw); }

  void generate() {
    Func x = widened(this->x), w = widened(this->w), bias = widened(this->bias),
         dgates = widened(this->dgates);
    int k = top_k, T = tokens, E = num_experts, G = groups, Tg = T / G;
    Groups groupsOf(T, G, group_sizes);
    r = route(x, w, bias, T, width, E, k, scoring, has_bias, groupsOf,
              {expert_groups, topk_groups});
    Var e, t, d;
    float scaling = routed_scaling;
    // Through the selected gates.
    Expr sumTerm = 0.0f;
    for (int j = 0; j < k; ++j)
      sumTerm += dgates(j, t) * r.score(clamp(r.chosen[j](t), 0, E - 1), t);
    Expr S = r.selectedSum(t);
    Expr gatePart = 0.0f;
    for (int j = 0; j < k; ++j) {
      Expr g =
          renormalize ? scaling * (dgates(j, t) / S - sumTerm / (S * S)) : scaling * dgates(j, t);
      gatePart += select(r.chosen[j](t) == e, g, 0.0f);
    }
    // Through the balancing loss (the fractions are counts: constants), per
    // routing group.
    Func gp("gp");
    Var g;
    if (int L = aux_seq_len; L > 0) {
      // Sequence g's loss weighs 1 / sequences: d/dP_e is f_e / sequences.
      seqCounts = sequenceCounts(r, T, L, E, k);
      gpg(e, g) = daux() * (float)aux_loss_coef * (float)E * cast<float>(seqCounts(e, g)) /
                  (float)(L * k) / (float)L / (float)(T / L);
      gp(e, t) = gpg(e, t / L);
    } else if (groupsOf.unequal) {
      // Group g's loss weighs tg / T: its d/dP_e is f_e / tg * tg / T.
      Expr tg = cast<float>(groupsOf.sizeOf(g));
      gpg(e, g) = daux() * (float)aux_loss_coef * (float)E * cast<float>(r.groupCounts(e, g)) /
                  (tg * (float)k) / (float)T;
    } else {
      gpg(e, g) = daux() * (float)aux_loss_coef * (float)E * cast<float>(r.groupCounts(e, g)) /
                  (float)(Tg * k) / (float)Tg / (float)G;
    }
    if (!gp.defined())
      gp(e, t) = gpg(e, groupsOf.of(t));
    RDom re(0, E);
    if (scoring == Scoring::Softmax) {
      ds(e, t) = gatePart + gp(e, t);
    } else {
      balanceDot(t) = sum(gp(re, t) * r.balance(re, t));
      ds(e, t) = gatePart + (gp(e, t) - balanceDot(t)) / r.scoreSum(t);
    }
    Expr s = r.score(e, t);
    Expr zPart =
        daux() * (float)z_loss_coef * 2.0f * r.lse(t) / (float)T * exp(r.logits(e, t) - r.lse(t));
    if (scoring == Scoring::Softmax) {
      dsDot(t) = sum(ds(re, t) * r.score(re, t));
      dl(e, t) = s * (ds(e, t) - dsDot(t)) + zPart;
    } else {
      dl(e, t) = ds(e, t) * s * (1.0f - s) + zPart;
    }
    RDom rt(0, T);
    // dx = dl w^T, vectorised over d (through w^T); dw = x^T dl as
    // dw^T(d, e), vectorised over d, its (d, e) block in cache over tokens.
    wT(d, e) = w(e, d);
    dxAcc(d, t) = 0.0f;
    dxAcc(d, t) += dl(re, t) * wT(d, re);
    dx(d, t) = narrowed(this->dx, dxAcc(d, t));
    dwT(d, e) = 0.0f;
    if (moec_codegen::onGpu(get_target())) {
      // One device thread per (d, e, chunk of tokens), then per (d, e) over
      // the chunks (GpuSchedule.h's gpuChunkSum).
      Var k("k");
      RDom rk(0, moec_codegen::gpuChunks(T));
      Func part("dw_part");
      part(d, e, k) =
          moec_codegen::gpuChunkSum(k, T, [&](Expr t) { return cast<float>(x(d, t)) * dl(e, t); });
      dwT(d, e) += part(d, e, rk);
    } else {
      dwT(d, e) += x(d, rt) * dl(e, rt);
    }
    dw(e, d) = narrowed(this->dw, dwT(d, e));
  }

  void schedule() {
    constrainDense(x, {width, tokens});
    constrainDense(w, {num_experts, width});
    bias.dim(0).set_bounds(0, has_bias ? (int)num_experts : 1);
    constrainDense(dgates, {top_k, tokens});
    constrainDense(dx, {width, tokens});
    constrainDense(dw, {num_experts, width});
    if (moec_codegen::onGpu(get_target()))
      return moec_codegen::scheduleForGpu(get_pipeline());
    const int vec = natural_vector_size<float>();
    scheduleRouting(r, num_experts, vec);
    // The gradients' stages at root (the balancing term's dot product for
    // sigmoid scores, ds's with the scores for softmax).
    for (Func f : {gpg, ds, dl})
      f.compute_root();
    if (seqCounts.defined())
      seqCounts.compute_root();
    (scoring == Scoring::Softmax ? dsDot : balanceDot).compute_root();
    Var d = dx.args()[0], t = dx.args()[1], e = dwT.args()[1], dO("dO"), dI("dI");
    wT.compute_root();
    Func(dx).parallel(t, 64, TailStrategy::GuardWithIf);
    dxAcc.compute_at(dx, t);
    dwT.compute_root();
    if (width >= vec) {
      Func(dx).vectorize(d, vec, TailStrategy::GuardWithIf);
      dxAcc.vectorize(d, vec, TailStrategy::GuardWithIf);
      dxAcc.update().reorder(d, dxAcc.rvars()[0]).vectorize(d, vec, TailStrategy::GuardWithIf);
      // Each thread sums a block of d over every token.
      dwT.vectorize(d, vec, TailStrategy::GuardWithIf);
      dwT.update()
          .split(d, dO, dI, vec, TailStrategy::GuardWithIf)
          .reorder(dI, e, dwT.rvars()[0], dO)
          .vectorize(dI)
          .parallel(dO);
    }
  }

private:
  Routing r;
  Func gpg{"gp_group"}, balanceDot{"balance_dot"}, ds{"ds"}, dsDot{"ds_dot"}, dl{"dl"}, seqCounts;
  Func wT{"w_t"}, dxAcc{"dx_acc"}, dwT{"dw_t"};
};

} // namespace

HALIDE_REGISTER_GENERATOR(FusedGate, fused_gate)
HALIDE_REGISTER_GENERATOR(RouterGrad, router_grad)
