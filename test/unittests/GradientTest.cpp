//===- GradientTest.cpp - every gradient rule against finite differences --===//
//
// Each case builds a small step, runs moe-autodiff, and compares the
// gradient of every parameter element computed by the backward ops in the
// reference interpreter with central finite differences of the forward
// loss (double precision). Routing cases cover drops (small capacity) and
// the dropless mode.
//
//===----------------------------------------------------------------------===//

#include "Interpreter.h"
#include "TestUtils.h"

#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"

#include <cmath>
#include <random>
#include <set>

using namespace mlir;
using moe_test::MoETest;
using ::moec::reference::Interpreter;
using ::moec::reference::Tensor;

namespace {

class GradientTest : public MoETest {
protected:
  /// Differentiates `source`'s @step and checks every parameter gradient.
  /// `args` are the step's inputs (ids); parameters get seeded values, with
  /// `scale` widening the normal initialisers so routing is not flat.
  void check(StringRef source, std::vector<Tensor> args, double scale = 1.0,
             bool fuseGating = false, int64_t routingGroups = 1) {
    OwningOpRef<ModuleOp> module = parse(source);
    ASSERT_TRUE(module) << (errors.empty() ? "" : errors[0]);
    PassManager pm(&context);
    if (fuseGating)
      pm.addPass(mlir::moe::createFuseGatingPass());
    if (routingGroups > 1) {
      mlir::moe::RoutingGroupsPassOptions groups;
      groups.groups = routingGroups;
      pm.addPass(mlir::moe::createRoutingGroupsPass(groups));
    }
    mlir::moe::AutodiffPassOptions options;
    options.optimizer = "none"; // return the gradients
    pm.addPass(mlir::moe::createAutodiffPass(options));
    ASSERT_TRUE(succeeded(pm.run(*module))) << (errors.empty() ? "" : errors[0]);

    Interpreter interp(*module);
    interp.initParams(7);
    for (auto &[name, t] : interp.params)
      for (double &v : t.data)
        v *= scale;

    std::vector<Tensor> out;
    std::string error;
    ASSERT_TRUE(interp.run("step", args, out, error)) << error;
    auto fn = module->lookupSymbol<func::FuncOp>("step");
    ASSERT_GT(out.size(), 1u) << "no parameter received a gradient";

    double worst = 0;
    int checked = 0;
    // Central differences of the forward loss in element i of `param`.
    auto numeric = [&](Tensor &param, size_t i) {
      const double eps = 1e-6;
      double saved = param.data[i];
      std::vector<Tensor> plus, minus;
      param.data[i] = saved + eps;
      EXPECT_TRUE(interp.run("step", args, plus, error)) << error;
      param.data[i] = saved - eps;
      EXPECT_TRUE(interp.run("step", args, minus, error)) << error;
      param.data[i] = saved;
      return plus.empty() || minus.empty() ? NAN : (plus[0].data[0] - minus[0].data[0]) / (2 * eps);
    };
    std::set<std::string> differentiated;
    for (unsigned r = 1; r < out.size(); ++r) {
      auto name = cast<FlatSymbolRefAttr>(fn.getResultAttr(r, "moe.grad_of")).getValue().str();
      differentiated.insert(name);
      Tensor &param = interp.params[name];
      const Tensor &grad = out[r];
      ASSERT_EQ(grad.shape, param.shape) << name;
      for (size_t i = 0; i < param.data.size(); ++i) {
        double want = numeric(param, i);
        double diff = std::fabs(want - grad.data[i]);
        worst = std::max(worst, diff / (1e-6 + std::fabs(want)));
        EXPECT_NEAR(grad.data[i], want, 1e-6 + 1e-5 * std::fabs(want)) << name << "[" << i << "]";
        ++checked;
      }
    }
    // A parameter the pass returned no gradient for must not move the loss
    // (a selection-only bias): a dropped gradient fails here.
    for (auto &[name, param] : interp.params) {
      if (differentiated.count(name))
        continue;
      for (size_t i = 0; i < param.data.size(); ++i)
        EXPECT_NEAR(numeric(param, i), 0.0, 1e-6)
            << name << "[" << i << "] moves the loss but received no gradient";
    }
    EXPECT_GT(checked, 0);
    RecordProperty("max_relative_error", std::to_string(worst));
  }

  static Tensor ids(std::vector<int64_t> shape, int32_t bound, unsigned seed) {
    std::mt19937 rng(seed);
    Tensor t = Tensor::ids(shape, {});
    t.ints.resize(static_cast<size_t>(t.numel()));
    for (int32_t &v : t.ints)
      v = static_cast<int32_t>(rng() % bound);
    return t;
  }
};

TEST_F(GradientTest, EmbeddingLinearBiasAndCrossEntropy) {
  check(R"mlir(
    moe.param @emb : tensor<6x4xf32> init <normal, scale = 0.5>
    moe.param @w : tensor<4x6xf32> init <normal, scale = 0.5>
    moe.param @b : tensor<6xf32> init <normal, scale = 0.5>
    func.func @step(%ids: tensor<2x3xi32>, %t: tensor<2x3xi32>) -> tensor<f32> {
      %e = moe.get_param @emb : tensor<6x4xf32>
      %x = moe.embedding %ids, %e : tensor<2x3xi32>, tensor<6x4xf32> -> tensor<2x3x4xf32>
      %w = moe.get_param @w : tensor<4x6xf32>
      %b = moe.get_param @b : tensor<6xf32>
      %l = moe.linear %x, %w bias %b : tensor<2x3x4xf32>, tensor<4x6xf32>, tensor<6xf32> -> tensor<2x3x6xf32>
      %c = moe.cross_entropy %l, %t : tensor<2x3x6xf32>, tensor<2x3xi32> -> tensor<f32>
      return %c : tensor<f32>
    })mlir",
        {ids({2, 3}, 6, 1), ids({2, 3}, 6, 2)});
}

TEST_F(GradientTest, RMSNormAndResidualAdd) {
  check(R"mlir(
    moe.param @x : tensor<3x5xf32> init <normal, scale = 1.0>
    moe.param @g : tensor<5xf32> init <normal, scale = 1.0>
    moe.param @w : tensor<5x4xf32> init <normal, scale = 0.5>
    func.func @step(%t: tensor<3xi32>) -> tensor<f32> {
      %x = moe.get_param @x : tensor<3x5xf32>
      %g = moe.get_param @g : tensor<5xf32>
      %h = moe.rms_norm %x, %g {epsilon = 1.0e-3 : f32} : tensor<3x5xf32>, tensor<5xf32>
      %r = moe.add %x, %h : tensor<3x5xf32>
      %w = moe.get_param @w : tensor<5x4xf32>
      %l = moe.linear %r, %w : tensor<3x5xf32>, tensor<5x4xf32> -> tensor<3x4xf32>
      %c = moe.cross_entropy %l, %t : tensor<3x4xf32>, tensor<3xi32> -> tensor<f32>
      return %c : tensor<f32>
    })mlir",
        {ids({3}, 4, 3)});
}

// Per-head norms (Qwen3-MoE's q/k norm): gamma of one head's width, each
// head of a row normalised on its own.
TEST_F(GradientTest, RMSNormPerHead) {
  check(R"mlir(
    moe.param @x : tensor<3x8xf32> init <normal, scale = 1.0>
    moe.param @g : tensor<4xf32> init <normal, scale = 1.0>
    moe.param @w : tensor<8x4xf32> init <normal, scale = 0.5>
    func.func @step(%t: tensor<3xi32>) -> tensor<f32> {
      %x = moe.get_param @x : tensor<3x8xf32>
      %g = moe.get_param @g : tensor<4xf32>
      %h = moe.rms_norm %x, %g {epsilon = 1.0e-3 : f32} : tensor<3x8xf32>, tensor<4xf32>
      %w = moe.get_param @w : tensor<8x4xf32>
      %l = moe.linear %h, %w : tensor<3x8xf32>, tensor<8x4xf32> -> tensor<3x4xf32>
      %c = moe.cross_entropy %l, %t : tensor<3x4xf32>, tensor<3xi32> -> tensor<f32>
      return %c : tensor<f32>
    })mlir",
        {ids({3}, 4, 3)});
}

// OLMoE's clip_qkv: elements past the limit get no gradient (a limit the
// random values cross, and none lies within the difference step of it).
TEST_F(GradientTest, Clamp) {
  check(R"mlir(
    moe.param @x : tensor<3x5xf32> init <normal, scale = 1.0>
    moe.param @w : tensor<5x4xf32> init <normal, scale = 0.5>
    func.func @step(%t: tensor<3xi32>) -> tensor<f32> {
      %x = moe.get_param @x : tensor<3x5xf32>
      %c = moe.clamp %x {limit = 0.7 : f32} : tensor<3x5xf32>
      %w = moe.get_param @w : tensor<5x4xf32>
      %l = moe.linear %c, %w : tensor<3x5xf32>, tensor<5x4xf32> -> tensor<3x4xf32>
      %e = moe.cross_entropy %l, %t : tensor<3x4xf32>, tensor<3xi32> -> tensor<f32>
      return %e : tensor<f32>
    })mlir",
        {ids({3}, 4, 3)});
}

// Qwen2-MoE's shared expert gate: rows scaled by the sigmoid of a logit
// that is itself a linear map of the input.
TEST_F(GradientTest, SigmoidGate) {
  check(R"mlir(
    moe.param @x : tensor<3x5xf32> init <normal, scale = 1.0>
    moe.param @wg : tensor<5x1xf32> init <normal, scale = 1.0>
    moe.param @w : tensor<5x4xf32> init <normal, scale = 0.5>
    func.func @step(%t: tensor<3xi32>) -> tensor<f32> {
      %x = moe.get_param @x : tensor<3x5xf32>
      %wg = moe.get_param @wg : tensor<5x1xf32>
      %g = moe.linear %x, %wg : tensor<3x5xf32>, tensor<5x1xf32> -> tensor<3x1xf32>
      %h = moe.sigmoid_gate %x, %g : tensor<3x5xf32>, tensor<3x1xf32>
      %w = moe.get_param @w : tensor<5x4xf32>
      %l = moe.linear %h, %w : tensor<3x5xf32>, tensor<5x4xf32> -> tensor<3x4xf32>
      %c = moe.cross_entropy %l, %t : tensor<3x4xf32>, tensor<3xi32> -> tensor<f32>
      return %c : tensor<f32>
    })mlir",
        {ids({3}, 4, 3)});
}

// Mixed precision: the weights read through bf16 copies (moe.cast), whose
// gradients the rule converts back to the f32 parameters' type (the
// reference computes in f64 whatever the types).
TEST_F(GradientTest, CastWeightCopies) {
  check(R"mlir(
    moe.param @x : tensor<3x5xf32> init <normal, scale = 1.0>
    moe.param @g : tensor<5xf32> init <normal, scale = 1.0>
    moe.param @w : tensor<5x4xf32> init <normal, scale = 0.5>
    func.func @step(%t: tensor<3xi32>) -> tensor<f32> {
      %x = moe.get_param @x : tensor<3x5xf32>
      %xc = moe.cast %x : tensor<3x5xf32> -> tensor<3x5xbf16>
      %g = moe.get_param @g : tensor<5xf32>
      %gc = moe.cast %g : tensor<5xf32> -> tensor<5xbf16>
      %h = moe.rms_norm %xc, %gc {epsilon = 1.0e-3 : f32} : tensor<3x5xbf16>, tensor<5xbf16>
      %w = moe.get_param @w : tensor<5x4xf32>
      %wc = moe.cast %w : tensor<5x4xf32> -> tensor<5x4xbf16>
      %l = moe.linear %h, %wc : tensor<3x5xbf16>, tensor<5x4xbf16> -> tensor<3x4xbf16>
      %c = moe.cross_entropy %l, %t : tensor<3x4xbf16>, tensor<3xi32> -> tensor<f32>
      return %c : tensor<f32>
    })mlir",
        {ids({3}, 4, 3)});
}

/// Attention with `rope` ("" or the attribute) over 2 x 4 tokens, 4 query
/// heads on 2 kv heads of width 4.
std::string attentionStep(const std::string &rope) {
  return R"mlir(
    moe.param @q : tensor<2x4x16xf32> init <normal, scale = 0.7>
    moe.param @k : tensor<2x4x8xf32> init <normal, scale = 0.7>
    moe.param @v : tensor<2x4x8xf32> init <normal, scale = 0.7>
    moe.param @w : tensor<16x5xf32> init <normal, scale = 0.5>
    func.func @step(%t: tensor<2x4xi32>) -> tensor<f32> {
      %q = moe.get_param @q : tensor<2x4x16xf32>
      %k = moe.get_param @k : tensor<2x4x8xf32>
      %v = moe.get_param @v : tensor<2x4x8xf32>
      %o = moe.attention %q, %k, %v heads 4 kv_heads 2 )mlir" +
         rope + R"mlir( : tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
      %w = moe.get_param @w : tensor<16x5xf32>
      %l = moe.linear %o, %w : tensor<2x4x16xf32>, tensor<16x5xf32> -> tensor<2x4x5xf32>
      %c = moe.cross_entropy %l, %t : tensor<2x4x5xf32>, tensor<2x4xi32> -> tensor<f32>
      return %c : tensor<f32>
    })mlir";
}

TEST_F(GradientTest, CausalGroupedQueryAttention) { check(attentionStep(""), {ids({2, 4}, 5, 4)}); }

TEST_F(GradientTest, CausalAttentionWithRotaryEmbeddings) {
  check(attentionStep("{rope_theta = 1.0e4 : f32}"), {ids({2, 4}, 5, 5)});
}

/// Latent attention with `rope` ("" or the attribute) over 2 x 4 tokens: 2
/// heads, content keys of 3, a shared rotary key of 4, values of 5.
std::string latentAttentionStep(const std::string &rope) {
  return R"mlir(
    moe.param @q : tensor<2x4x14xf32> init <normal, scale = 0.7>
    moe.param @k : tensor<2x4x6xf32> init <normal, scale = 0.7>
    moe.param @kr : tensor<2x4x4xf32> init <normal, scale = 0.7>
    moe.param @v : tensor<2x4x10xf32> init <normal, scale = 0.7>
    moe.param @w : tensor<10x5xf32> init <normal, scale = 0.5>
    func.func @step(%t: tensor<2x4xi32>) -> tensor<f32> {
      %q = moe.get_param @q : tensor<2x4x14xf32>
      %k = moe.get_param @k : tensor<2x4x6xf32>
      %kr = moe.get_param @kr : tensor<2x4x4xf32>
      %v = moe.get_param @v : tensor<2x4x10xf32>
      %o = moe.latent_attention %q, %k, %kr, %v heads 2 )mlir" +
         rope +
         R"mlir( : tensor<2x4x14xf32>, tensor<2x4x6xf32>, tensor<2x4x4xf32>, tensor<2x4x10xf32> -> tensor<2x4x10xf32>
      %w = moe.get_param @w : tensor<10x5xf32>
      %l = moe.linear %o, %w : tensor<2x4x10xf32>, tensor<10x5xf32> -> tensor<2x4x5xf32>
      %c = moe.cross_entropy %l, %t : tensor<2x4x5xf32>, tensor<2x4xi32> -> tensor<f32>
      return %c : tensor<f32>
    })mlir";
}

TEST_F(GradientTest, LatentAttention) { check(latentAttentionStep(""), {ids({2, 4}, 5, 6)}); }

TEST_F(GradientTest, LatentAttentionWithRotaryEmbeddings) {
  check(latentAttentionStep("{rope_theta = 1.0e2 : f32}"), {ids({2, 4}, 5, 7)});
}

/// A dense FFN with `act` (and a gate for swiglu).
std::string ffnStep(const std::string &act) {
  bool gated = act == "swiglu";
  return std::string(R"mlir(
    moe.param @x : tensor<3x4xf32> init <normal, scale = 1.0>
    moe.param @up : tensor<4x6xf32> init <normal, scale = 0.6>
    moe.param @down : tensor<6x4xf32> init <normal, scale = 0.6>
    moe.param @gate : tensor<4x6xf32> init <normal, scale = 0.6>
    func.func @step(%t: tensor<3xi32>) -> tensor<f32> {
      %x = moe.get_param @x : tensor<3x4xf32>
      %u = moe.get_param @up : tensor<4x6xf32>
      %d = moe.get_param @down : tensor<6x4xf32>
      %g = moe.get_param @gate : tensor<4x6xf32>
      %y = moe.ffn )mlir") +
         act + " %x, %u, %d" + (gated ? " gate %g" : "") +
         " : (tensor<3x4xf32>, tensor<4x6xf32>, tensor<6x4xf32>" +
         (gated ? ", tensor<4x6xf32>" : "") + R"mlir() -> tensor<3x4xf32>
      %c = moe.cross_entropy %y, %t : tensor<3x4xf32>, tensor<3xi32> -> tensor<f32>
      return %c : tensor<f32>
    })mlir";
}

TEST_F(GradientTest, FFNSwiGLU) { check(ffnStep("swiglu"), {ids({3}, 4, 6)}); }
TEST_F(GradientTest, FFNGELU) { check(ffnStep("gelu"), {ids({3}, 4, 7)}); }
TEST_F(GradientTest, FFNReLU) { check(ffnStep("relu"), {ids({3}, 4, 8)}); }

/// A full routed block: router -> dispatch (capacity C) -> experts ->
/// combine, loss = CE + aux. `router` is the router's settings.
std::string moeStep(const std::string &scoring, const std::string &attrs, int capacity, bool bias) {
  std::string c = std::to_string(capacity);
  return R"mlir(
    moe.param @x : tensor<2x3x4xf32> init <normal, scale = 1.0>
    moe.param @router : tensor<4x4xf32> init <normal, scale = 1.0>
    moe.param @bias : tensor<4xf32> init <normal, scale = 0.3>
    moe.param @up : tensor<4x4x5xf32> init <normal, scale = 0.6>
    moe.param @down : tensor<4x5x4xf32> init <normal, scale = 0.6>
    moe.param @gate : tensor<4x4x5xf32> init <normal, scale = 0.6>
    func.func @step(%t: tensor<2x3xi32>) -> tensor<f32> {
      %x = moe.get_param @x : tensor<2x3x4xf32>
      %w = moe.get_param @router : tensor<4x4xf32>
      %b = moe.get_param @bias : tensor<4xf32>
      %g, %e, %aux = moe.router )mlir" +
         scoring + " %x, %w" + (bias ? " bias %b" : "") + " top_k 2 " + attrs +
         " : (tensor<2x3x4xf32>, tensor<4x4xf32>" + (bias ? ", tensor<4xf32>" : "") +
         R"mlir() -> (tensor<2x3x2xf32>, tensor<2x3x2xi32>, tensor<f32>)
      %buf = moe.dispatch %x, %e : (tensor<2x3x4xf32>, tensor<2x3x2xi32>) -> tensor<4x)mlir" +
         c + R"mlir(x4xf32>
      %u = moe.get_param @up : tensor<4x4x5xf32>
      %d = moe.get_param @down : tensor<4x5x4xf32>
      %gt = moe.get_param @gate : tensor<4x4x5xf32>
      %y = moe.expert_ffn swiglu %buf, %u, %d gate %gt : (tensor<4x)mlir" +
         c + "x4xf32>, tensor<4x4x5xf32>, tensor<4x5x4xf32>, tensor<4x4x5xf32>) -> tensor<4x" + c +
         R"mlir(x4xf32>
      %o = moe.combine %y, %g, %e : (tensor<4x)mlir" +
         c + R"mlir(x4xf32>, tensor<2x3x2xf32>, tensor<2x3x2xi32>) -> tensor<2x3x4xf32>
      %r = moe.add %x, %o : tensor<2x3x4xf32>
      %ce = moe.cross_entropy %r, %t : tensor<2x3x4xf32>, tensor<2x3xi32> -> tensor<f32>
      %loss = moe.add %ce, %aux : tensor<f32>
      return %loss : tensor<f32>
    })mlir";
}

TEST_F(GradientTest, SoftmaxRoutingRenormalisedWithDropsAndLosses) {
  // 6 tokens x 2 choices over 4 experts with 2 slots each: some drop.
  check(moeStep("softmax",
                "{renormalize = true, aux_loss_coef = 0.1 : f32, z_loss_coef = 0.01 : f32}", 2,
                false),
        {ids({2, 3}, 4, 9)});
}

TEST_F(GradientTest, SoftmaxRoutingDropless) {
  check(moeStep("softmax", "{aux_loss_coef = 0.05 : f32}", 6, false), {ids({2, 3}, 4, 10)});
}

TEST_F(GradientTest, SigmoidRoutingWithSelectionBiasAndScaling) {
  check(moeStep("sigmoid",
                "{renormalize = true, routed_scaling = 2.5 : f32, aux_loss_coef = 0.1 : f32}", 3,
                true),
        {ids({2, 3}, 4, 11)});
}

TEST_F(GradientTest, FusedGatingWithDrops) {
  check(moeStep("softmax",
                "{renormalize = true, aux_loss_coef = 0.1 : f32, z_loss_coef = 0.01 : f32}", 2,
                false),
        {ids({2, 3}, 4, 9)}, 1.0, /*fuseGating=*/true);
}

TEST_F(GradientTest, FusedGatingDroplessSigmoidWithBias) {
  check(moeStep("sigmoid", "{routed_scaling = 2.5 : f32, aux_loss_coef = 0.1 : f32}", 6, true),
        {ids({2, 3}, 4, 12)}, 1.0, /*fuseGating=*/true);
}

TEST_F(GradientTest, FusedGatingInTwoRoutingGroupsWithDropsAndLosses) {
  // Two groups of one sequence (3 tokens) each: capacity, drops and the
  // balancing loss per group, the loss the mean over groups.
  check(moeStep("softmax",
                "{renormalize = true, capacity_factor = 0.7 : f32, aux_loss_coef = 0.1 : f32, "
                "z_loss_coef = 0.01 : f32}",
                3, false),
        {ids({2, 3}, 4, 13)}, 1.0, /*fuseGating=*/true, /*routingGroups=*/2);
}

TEST_F(GradientTest, BalancingLossPerSequence) {
  // DeepSeek's seq_aux: the balancing loss of each of the 2 sequences,
  // averaged; unfused and fused.
  std::string attrs = "{renormalize = true, aux_loss_coef = 0.3 : f32, aux_per_sequence = true}";
  check(moeStep("sigmoid", attrs, 6, true), {ids({2, 3}, 4, 15)});
  check(moeStep("softmax", attrs, 3, false), {ids({2, 3}, 4, 16)}, 1.0, /*fuseGating=*/true);
}

TEST_F(GradientTest, SigmoidRoutingInExpertGroupsWithSelectionBias) {
  // Group-limited routing: 2 groups of 2 experts scored by the sum of
  // their keys, the best kept, so a token's 2 experts are one group's. The
  // backward must recompute that selection (not the top-2 of all 4, which
  // differs for most tokens here) for its gradients to match.
  check(moeStep("sigmoid",
                "{renormalize = true, aux_loss_coef = 0.1 : f32, expert_groups = 2 : i64, "
                "topk_groups = 1 : i64}",
                3, true),
        {ids({2, 3}, 4, 14)});
}

TEST_F(GradientTest, FusedGatingInExpertGroupsWithDropsAndLosses) {
  // The same through moe.fused_gate (softmax: groups scored by their best
  // expert), with drops (2 slots per expert) and both losses.
  check(moeStep("softmax",
                "{renormalize = true, aux_loss_coef = 0.1 : f32, z_loss_coef = 0.01 : f32, "
                "expert_groups = 2 : i64, topk_groups = 1 : i64}",
                2, false),
        {ids({2, 3}, 4, 15)}, 1.0, /*fuseGating=*/true);
}

TEST_F(GradientTest, FusedGatingComputesWhatItReplaces) {
  // Same parameters, same inputs: the fused and unfused steps give the same
  // loss and gradients, bit for bit; fusion only makes the permutation
  // explicit.
  std::string source =
      moeStep("softmax", "{renormalize = true, aux_loss_coef = 0.1 : f32}", 2, false);
  std::vector<Tensor> results[2];
  for (int fused = 0; fused < 2; ++fused) {
    OwningOpRef<ModuleOp> module = parse(source);
    ASSERT_TRUE(module);
    PassManager pm(&context);
    if (fused)
      pm.addPass(mlir::moe::createFuseGatingPass());
    mlir::moe::AutodiffPassOptions options;
    options.optimizer = "none";
    pm.addPass(mlir::moe::createAutodiffPass(options));
    ASSERT_TRUE(succeeded(pm.run(*module)));
    Interpreter interp(*module);
    interp.initParams(7);
    std::string error;
    ASSERT_TRUE(interp.run("step", {ids({2, 3}, 4, 9)}, results[fused], error)) << error;
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  for (size_t i = 0; i < results[0].size(); ++i)
    EXPECT_EQ(results[0][i].data, results[1][i].data) << "result " << i;
}

} // namespace
