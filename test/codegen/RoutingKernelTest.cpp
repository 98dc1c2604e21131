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

#include "KernelTestUtil.h"

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
/// coefficients (a trailing ", " when not empty).
template <typename Gate, typename Grad>
void checkRouting(Gate gate, Grad grad, const std::string &scoring, bool bias, int capacity,
                  const std::string &base, float auxCoef, float zCoef, int T = 6, int D = 8,
                  int E = 4) {
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

  std::string tx = type2(T, D), tw = type2(D, E), tg = type2(T, K),
              ti = "tensor<" + std::to_string(T) + "x2xi32>",
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
      {tensorOf(x, {T, D}), tensorOf(w, {D, E}), tensorOf(bias ? b : Floats(E), {E}),
       tensorOf(dg, {T, K}), half});
  ASSERT_EQ(want.size(), 7u);
  expectClose(gates, want[0], E + D);
  EXPECT_EQ(experts, want[1].ints);
  EXPECT_EQ(slots, want[2].ints);
  EXPECT_EQ(counts, want[3].ints);
  expectClose(aux, want[4], T + E + D);
  // The unweighted parts: the total with coefficients 1, 0 and 0, 1.
  std::vector<Tensor> gateInputs = {tensorOf(x, {T, D}), tensorOf(w, {D, E}),
                                    tensorOf(bias ? b : Floats(E), {E})};
  float balance = referenceAux(scoring, base, coefs(1, 0), bias, capacity, gateInputs, T, D, E),
        z = referenceAux(scoring, base, coefs(0, 1), bias, capacity, gateInputs, T, D, E);
  EXPECT_NEAR(parts[0], balance, 1e-5f * (T + E + D) * std::max(1.0f, std::fabs(balance)));
  EXPECT_NEAR(parts[1], z, 1e-5f * (T + E + D) * std::max(1.0f, std::fabs(z)));
  EXPECT_GT(parts[0], 0.0f);
  EXPECT_GT(parts[1], 0.0f);
  expectClose(dx, want[5], 2 * E + D);
  expectClose(dw, want[6], T + 2 * E + D);
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

} // namespace
