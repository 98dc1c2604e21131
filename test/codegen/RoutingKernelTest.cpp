//===- RoutingKernelTest.cpp - fused_gate, router_grad ----------------------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: fused_gate_softmax_k fused_gate tokens=6 width=8 num_experts=4 top_k=2 capacity=2 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01
// kernel: fused_gate_sigmoid_k fused_gate tokens=6 width=8 num_experts=4 top_k=2 capacity=6 scoring=sigmoid has_bias=true routed_scaling=2.5 aux_loss_coef=0.1
// kernel: router_grad_softmax_k router_grad tokens=6 width=8 num_experts=4 top_k=2 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01
// kernel: router_grad_sigmoid_k router_grad tokens=6 width=8 num_experts=4 top_k=2 scoring=sigmoid has_bias=true routed_scaling=2.5 aux_loss_coef=0.1
// kernel: fused_gate_wide_k fused_gate tokens=130 width=20 num_experts=12 top_k=2 capacity=30 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01
// kernel: fused_gate_groups_k fused_gate tokens=10 width=8 num_experts=4 top_k=2 capacity=3 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01 groups=2 group_sizes=6,4
// kernel: router_grad_groups_k router_grad tokens=10 width=8 num_experts=4 top_k=2 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01 groups=2 group_sizes=6,4
// kernel: router_grad_wide_k router_grad tokens=130 width=20 num_experts=12 top_k=2 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01
// kernel: fused_gate_limited_sigmoid_k fused_gate tokens=64 width=8 num_experts=8 top_k=2 capacity=64 scoring=sigmoid has_bias=true renormalize=true routed_scaling=2.5 aux_loss_coef=0.1 expert_groups=4 topk_groups=2
// kernel: router_grad_limited_sigmoid_k router_grad tokens=64 width=8 num_experts=8 top_k=2 scoring=sigmoid has_bias=true renormalize=true routed_scaling=2.5 aux_loss_coef=0.1 expert_groups=4 topk_groups=2
// kernel: fused_gate_limited_softmax_k fused_gate tokens=64 width=8 num_experts=6 top_k=2 capacity=16 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01 expert_groups=3 topk_groups=1
// kernel: router_grad_limited_softmax_k router_grad tokens=64 width=8 num_experts=6 top_k=2 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01 expert_groups=3 topk_groups=1
// kernel: fused_gate_seq_aux_k fused_gate tokens=12 width=8 num_experts=4 top_k=2 capacity=12 scoring=sigmoid has_bias=true renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01 aux_seq_len=4
// kernel: router_grad_seq_aux_k router_grad tokens=12 width=8 num_experts=4 top_k=2 scoring=sigmoid has_bias=true renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01 aux_seq_len=4

#include "KernelTestUtil.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace {

/// The interpreter's losses of `moe.fused_gate` with other coefficients.
float referenceAux(const std::string &scoring, const std::string &base, const std::string &coefs,
                   bool bias, int capacity, const std::vector<Tensor> &inputs, int T, int D,
                   int E) {
  std::string tx = type2(T, D), tw = type2(D, E), tg = type2(T, 2),
              ti = "tensor<" + std::to_string(T) + "x2xi32>",
              tb = "tensor<" + std::to_string(E) + "xf32>",
              tc = "tensor<" + std::to_string(E) + "xi32>";
  auto got = interpret("(%x: " + tx + ", %w: " + tw + ", %b: " + tb + ") -> tensor<f32>",
                       "  %g, %e, %s, %c, %a = moe.fused_gate " + scoring + " %x, %w" +
                           (bias ? " bias %b" : "") + " top_k 2 capacity " +
                           std::to_string(capacity) + " {" + base + coefs + "} : (" + tx + ", " +
                           tw + (bias ? ", " + tb : "") + ") -> (" + tg + ", " + ti + ", " + ti +
                           ", " + tc + ", tensor<f32>)\n  return %a : tensor<f32>",
                       inputs);
  return static_cast<float>(got.at(0).data[0]);
}

/// Checks the fused gate and the router gradient kernels against the
/// interpreter; `base` holds the attributes other than the loss
/// coefficients (a trailing ", " when not empty). With `seq` the tokens
/// are sequences of `seq` in the interpreted IR ([T / seq, seq, ...]).
template <typename Gate, typename Grad>
void checkRouting(Gate gate, Grad grad, const std::string &scoring, bool bias, int capacity,
                  const std::string &base, float auxCoef, float zCoef, int T = 6, int D = 8,
                  int E = 4, std::vector<int32_t> *selected = nullptr, int seq = 0) {
  auto coefs = [](float a, float z) {
    return "aux_loss_coef = " + std::to_string(a) + " : f32, z_loss_coef = " + std::to_string(z) +
           " : f32";
  };
  std::string attrs = "{" + base + coefs(auxCoef, zCoef) + "}";
  const int K = 2;
  auto x = randomVector(T * D, 50), w = randomVector(D * E, 51), b = randomVector(bias ? E : 1, 52),
       dg = randomVector(T * K, 53);
  for (float &v : b)
    v *= 0.3f;
  Floats gates(T * K), aux(1), parts(2), dx(T * D), dw(D * E), daux = {0.7f};
  std::vector<int32_t> experts(T * K), slots(T * K), counts(E);
  auto bx = view(x, D, T), bw = view(w, E, D), bdg = view(dg, K, T), bgates = view(gates, K, T),
       bdx = view(dx, D, T), bdw = view(dw, E, D);
  Buffer<float> bb(b.data(), (int)b.size());
  Buffer<int32_t> be(experts.data(), K, T), bs(slots.data(), K, T), bc(counts.data(), E);
  Buffer<float> baux = Buffer<float>::make_scalar(aux.data()),
                bdaux = Buffer<float>::make_scalar(daux.data());
  Buffer<float> bparts(parts.data(), 2);
  ASSERT_EQ(gate(bx, bw, bb, bgates, be, bs, bc, baux, bparts), 0) << lastError;
  ASSERT_EQ(grad(bx, bw, bb, bdg, bdaux, bdx, bdw), 0) << lastError;

  auto tokens = [&](int inner) { return seq ? type3(T / seq, seq, inner) : type2(T, inner); };
  auto shape = [&](int inner) {
    return seq ? std::vector<int64_t>{T / seq, seq, inner} : std::vector<int64_t>{T, inner};
  };
  std::string tx = tokens(D), tw = type2(D, E), tg = tokens(K),
              ti = (seq ? "tensor<" + std::to_string(T / seq) + "x" + std::to_string(seq)
                        : "tensor<" + std::to_string(T)) +
                   "x2xi32>",
              tb = "tensor<" + std::to_string(E) + "xf32>",
              tc = "tensor<" + std::to_string(E) + "xi32>";
  std::string biasOp = bias ? " bias %b" : "", biasType = bias ? ", " + tb : "";
  Tensor half = Tensor::zeros({});
  half.data[0] = 0.7;
  auto want = interpret(
      "(%x: " + tx + ", %w: " + tw + ", %b: " + tb + ", %dg: " + tg + ", %da: tensor<f32>) -> (" +
          tg + ", " + ti + ", " + ti + ", " + tc + ", tensor<f32>, " + tx + ", " + tw + ")",
      "  %g, %e, %s, %c, %a = moe.fused_gate " + scoring + " %x, %w" + biasOp +
          " top_k 2 capacity " + std::to_string(capacity) + " " + attrs + " : (" + tx + ", " + tw +
          biasType + ") -> (" + tg + ", " + ti + ", " + ti + ", " + tc +
          ", tensor<f32>)\n  %dx, %dw = moe.router_grad " + scoring + " %x, %w, %dg, %da" + biasOp +
          " top_k 2 " + attrs + " : (" + tx + ", " + tw + ", " + tg + ", tensor<f32>" + biasType +
          ") -> (" + tx + ", " + tw + ")\n  return %g, %e, %s, %c, %a, %dx, %dw : " + tg + ", " +
          ti + ", " + ti + ", " + tc + ", tensor<f32>, " + tx + ", " + tw,
      {tensorOf(x, shape(D)), tensorOf(w, {D, E}), tensorOf(bias ? b : Floats(E), {E}),
       tensorOf(dg, shape(K)), half});
  ASSERT_EQ(want.size(), 7u);
  expectClose(gates, want[0], E + D);
  EXPECT_EQ(experts, want[1].ints);
  EXPECT_EQ(slots, want[2].ints);
  EXPECT_EQ(counts, want[3].ints);
  expectClose(aux, want[4], T + E + D);
  // The unweighted parts: the total with coefficients 1, 0 and 0, 1.
  if (!seq) { // referenceAux interprets [T, D] tokens
    std::vector<Tensor> gateInputs = {tensorOf(x, {T, D}), tensorOf(w, {D, E}),
                                      tensorOf(bias ? b : Floats(E), {E})};
    float balance = referenceAux(scoring, base, coefs(1, 0), bias, capacity, gateInputs, T, D, E),
          z = referenceAux(scoring, base, coefs(0, 1), bias, capacity, gateInputs, T, D, E);
    EXPECT_NEAR(parts[0], balance, 1e-5f * (T + E + D) * std::max(1.0f, std::fabs(balance)));
    EXPECT_NEAR(parts[1], z, 1e-5f * (T + E + D) * std::max(1.0f, std::fabs(z)));
  }
  EXPECT_GT(parts[0], 0.0f);
  EXPECT_GT(parts[1], 0.0f);
  expectClose(dx, want[5], 2 * E + D);
  expectClose(dw, want[6], T + 2 * E + D);
  if (selected)
    *selected = experts;
}

/// The experts each token selects, written from moe.router's description
/// rather than the interpreter's code, in double: keys = score + bias; with
/// `groups` > 1 each of the equal contiguous expert groups is scored
/// (softmax: its largest key; sigmoid: the sum of its two largest), the
/// `topkGroups` best kept (ties to the lower group), and the top 2 keys
/// taken among their experts (ties to the lower expert). The inputs are
/// checkRouting's.
std::vector<std::vector<int>> plainSelection(bool sigmoid, bool bias, int T, int D, int E,
                                             int groups, int topkGroups) {
  Floats x = randomVector(T * D, 50), w = randomVector(D * E, 51), b = randomVector(E, 52);
  std::vector<std::vector<int>> out;
  for (int t = 0; t < T; ++t) {
    std::vector<double> logit(E, 0.0), key(E);
    for (int e = 0; e < E; ++e)
      for (int d = 0; d < D; ++d)
        logit[e] += double(x[t * D + d]) * double(w[d * E + e]);
    double mx = *std::max_element(logit.begin(), logit.end()), den = 0;
    for (double l : logit)
      den += std::exp(l - mx);
    for (int e = 0; e < E; ++e)
      key[e] = (sigmoid ? 1.0 / (1.0 + std::exp(-logit[e])) : std::exp(logit[e] - mx) / den) +
               (bias ? double(b[e] * 0.3f) : 0.0); // checkRouting's bias
    int per = E / groups;
    std::vector<std::pair<double, int>> groupScore;
    for (int g = 0; g < groups; ++g) {
      std::vector<double> mine(key.begin() + g * per, key.begin() + (g + 1) * per);
      std::sort(mine.rbegin(), mine.rend());
      groupScore.push_back({sigmoid && per > 1 ? mine[0] + mine[1] : mine[0], g});
    }
    // Larger score first, then the lower index.
    auto better = [](const std::pair<double, int> &a, const std::pair<double, int> &b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    std::sort(groupScore.begin(), groupScore.end(), better);
    std::vector<std::pair<double, int>> candidates;
    for (int i = 0; i < topkGroups; ++i)
      for (int c = 0; c < per; ++c)
        candidates.push_back({key[groupScore[i].second * per + c], groupScore[i].second * per + c});
    std::sort(candidates.begin(), candidates.end(), better);
    out.push_back({candidates[0].second, candidates[1].second});
  }
  return out;
}

/// Checks a group-limited fused gate and router gradient against the
/// interpreter, the selection against plainSelection, and that the groups
/// change the selection of some tokens (else the instance proves nothing);
/// prints how many.
template <typename Gate, typename Grad>
void checkGroupLimited(Gate gate, Grad grad, const std::string &scoring, int capacity,
                       const std::string &base, float zCoef, int E, int groups, int topkGroups) {
  const int T = 64, D = 8;
  bool sigmoid = scoring == "sigmoid";
  std::vector<int32_t> experts;
  checkRouting(gate, grad, scoring, sigmoid, capacity,
               base + "expert_groups = " + std::to_string(groups) +
                   " : i64, topk_groups = " + std::to_string(topkGroups) + " : i64, ",
               0.1f, zCoef, T, D, E, &experts);
  ASSERT_EQ(experts.size(), size_t(2 * T));
  auto limited = plainSelection(sigmoid, sigmoid, T, D, E, groups, topkGroups);
  auto unlimited = plainSelection(sigmoid, sigmoid, T, D, E, 1, 1);
  int changed = 0;
  for (int t = 0; t < T; ++t) {
    EXPECT_EQ(experts[2 * t], limited[t][0]) << "token " << t;
    EXPECT_EQ(experts[2 * t + 1], limited[t][1]) << "token " << t;
    changed += limited[t] != unlimited[t];
  }
  std::printf("%s, %d expert groups, best %d kept: the groups change the selection of %d of %d "
              "tokens\n",
              scoring.c_str(), groups, topkGroups, changed, T);
  EXPECT_GT(changed, 0);
}

TEST(HalideKernelTest, SoftmaxFusedGateWithDropsAndRouterGrad) {
  ScratchWithin scratch({"fused_gate_softmax_k", "router_grad_softmax_k"});
  checkRouting(fused_gate_softmax_k, router_grad_softmax_k, "softmax", false, 2,
               "renormalize = true, ", 0.1f, 0.01f);
}

TEST(HalideKernelTest, SigmoidFusedGateWithBiasAndRouterGrad) {
  ScratchWithin scratch({"fused_gate_sigmoid_k", "router_grad_sigmoid_k"});
  checkRouting(fused_gate_sigmoid_k, router_grad_sigmoid_k, "sigmoid", true, 6,
               "routed_scaling = 2.5 : f32, ", 0.1f, 0.0f);
}

TEST(HalideKernelTest, RoutingVectorisedWithTails) {
  ScratchWithin scratch({"fused_gate_wide_k", "router_grad_wide_k"});
  // 12 experts (a vector and a tail), width 20, 130 tokens (blocks of 64
  // and a tail).
  checkRouting(fused_gate_wide_k, router_grad_wide_k, "softmax", false, 30, "renormalize = true, ",
               0.1f, 0.01f, 130, 20, 12);
}

TEST(HalideKernelTest, UnequalRoutingGroups) {
  ScratchWithin scratch({"fused_gate_groups_k", "router_grad_groups_k"});
  // Groups of 6 and 4 tokens at a common capacity of 3 (a mixed cluster's
  // unequal token shares): drops restart per group, the balancing loss
  // weighs each group by its share.
  checkRouting(fused_gate_groups_k, router_grad_groups_k, "softmax", false, 3,
               "renormalize = true, groups = 2 : i64, group_sizes = array<i64: 6, 4>, ", 0.1f,
               0.01f, 10, 8, 4);
}

TEST(HalideKernelTest, GroupLimitedSigmoidRouting) {
  ScratchWithin scratch({"fused_gate_limited_sigmoid_k", "router_grad_limited_sigmoid_k"});
  // DeepSeek-V3's rule: 4 groups of 2 experts scored by the sum of their
  // two keys (score + bias), the best 2 kept.
  checkGroupLimited(fused_gate_limited_sigmoid_k, router_grad_limited_sigmoid_k, "sigmoid", 64,
                    "renormalize = true, routed_scaling = 2.5 : f32, ", 0.0f, 8, 4, 2);
}

TEST(HalideKernelTest, GroupLimitedSoftmaxRouting) {
  ScratchWithin scratch({"fused_gate_limited_softmax_k", "router_grad_limited_softmax_k"});
  // DeepSeek-V2's rule: 3 groups of 2 experts scored by their best score,
  // the best one kept (so both its experts are chosen); capacity 16 drops.
  checkGroupLimited(fused_gate_limited_softmax_k, router_grad_limited_softmax_k, "softmax", 16,
                    "renormalize = true, ", 0.01f, 6, 3, 1);
}

TEST(HalideKernelTest, BalancingLossPerSequence) {
  ScratchWithin scratch({"fused_gate_seq_aux_k", "router_grad_seq_aux_k"});
  // DeepSeek's seq_aux: 3 sequences of 4 tokens, the balancing loss of each
  // averaged (the interpreter's IR has the sequences as x's leading dimension).
  checkRouting(fused_gate_seq_aux_k, router_grad_seq_aux_k, "sigmoid", true, 12,
               "renormalize = true, aux_per_sequence = true, ", 0.1f, 0.01f, 12, 8, 4, nullptr, 4);
}

} // namespace
