//===- OptimizerTest.cpp - the appended optimiser in the interpreter ------===//
//
// The learning-rate schedule at known steps, one AdamW step against its
// closed form, and a whole model (frontend -> moe-autodiff -> interpreter)
// fitting one batch: forward, backward and optimiser together.
//
//===----------------------------------------------------------------------===//

#include "Interpreter.h"
#include "TestUtils.h"

#include "moe/Frontend/ModelSpec.h"
#include "moe/Frontend/ModelToMLIR.h"
#include "moe/Transforms/Passes.h"

#include "mlir/Pass/PassManager.h"

#include <cmath>
#include <random>

using namespace mlir;
using moe_test::MoETest;
using ::moec::reference::Interpreter;
using ::moec::reference::Tensor;

namespace {

class OptimizerTest : public MoETest {
protected:
  void autodiff(ModuleOp module) {
    PassManager pm(&context);
    pm.addPass(mlir::moe::createAutodiffPass());
    ASSERT_TRUE(succeeded(pm.run(module))) << (errors.empty() ? "" : errors[0]);
  }
  static Tensor step(int32_t s) { return Tensor::ids({}, {s}); }
};

TEST_F(OptimizerTest, WarmupThenCosineDecay) {
  OwningOpRef<ModuleOp> module = parse(R"mlir(
    func.func @lr(%s: tensor<i32>) -> tensor<f32> {
      %lr = moe.lr_schedule %s {lr = 1.0 : f64, min_lr = 0.1 : f64, warmup_steps = 10 : i64, total_steps = 110 : i64, schedule = "cosine"}
      return %lr : tensor<f32>
    })mlir");
  ASSERT_TRUE(module);
  Interpreter interp(*module);
  auto at = [&](int32_t s) {
    std::vector<Tensor> out;
    std::string error;
    EXPECT_TRUE(interp.run("lr", {step(s)}, out, error)) << error;
    return out.at(0).data[0];
  };
  EXPECT_DOUBLE_EQ(at(0), 0.1);     // t = 1 of 10 warmup steps
  EXPECT_DOUBLE_EQ(at(9), 1.0);     // end of warmup
  EXPECT_NEAR(at(59), 0.55, 1e-12); // halfway: min + (max-min)/2
  EXPECT_NEAR(at(109), 0.1, 1e-12); // end of the schedule
  EXPECT_NEAR(at(500), 0.1, 1e-12); // stays at min_lr
}

TEST_F(OptimizerTest, FirstAdamWStepMovesEachWeightByTheLearningRate) {
  // Without clipping and decay, the first bias-corrected step is
  // -lr * g / (|g| + eps): every weight moves by lr against its gradient.
  OwningOpRef<ModuleOp> module = parse(R"mlir(
    module attributes {moe.optimizer = {type = "adamw", lr = 0.01 : f64, min_lr = 0.01 : f64, warmup_steps = 0 : i64, total_steps = 10 : i64, schedule = "constant", weight_decay = 0.0 : f64, grad_clip = 0.0 : f64, beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-12 : f64}} {
      moe.param @x : tensor<3x4xf32> init <normal, scale = 1.0>
      moe.param @w : tensor<4x5xf32> init <normal, scale = 1.0>
      func.func @step(%t: tensor<3xi32>) -> tensor<f32> {
        %x = moe.get_param @x : tensor<3x4xf32>
        %w = moe.get_param @w : tensor<4x5xf32>
        %h = moe.linear %x, %w : tensor<3x4xf32>, tensor<4x5xf32> -> tensor<3x5xf32>
        %c = moe.cross_entropy %h, %t : tensor<3x5xf32>, tensor<3xi32> -> tensor<f32>
        return %c : tensor<f32>
      }
    })mlir");
  ASSERT_TRUE(module) << (errors.empty() ? "" : errors[0]);
  autodiff(*module);
  Interpreter interp(*module);
  interp.initParams(3);
  auto before = interp.params;
  std::vector<Tensor> out;
  std::string error;
  Tensor targets = Tensor::ids({3}, {0, 2, 4});
  ASSERT_TRUE(interp.run("step", {targets, step(0)}, out, error)) << error;
  for (const char *name : {"x", "w"})
    for (size_t i = 0; i < before[name].data.size(); ++i)
      EXPECT_NEAR(std::fabs(interp.params[name].data[i] - before[name].data[i]), 0.01, 1e-9)
          << name << "[" << i << "]";
}

TEST_F(OptimizerTest, TinyModelFitsOneBatch) {
  moec::frontend::DiagnosticList diags;
  auto doc = moec::frontend::JsonDoc::parse("m.json", R"({
    "vocab_size": 16, "d_model": 16, "n_layers": 1, "n_heads": 2,
    "n_kv_heads": 1, "seq_len": 8, "batch_size": 2, "init_std": 0.1,
    "moe": {"num_experts": 4, "top_k": 2, "expert_ffn_dim": 16,
            "num_shared_experts": 1, "aux_loss_coef": 0.01},
    "optimizer": {"lr": 0.01, "warmup_steps": 0, "total_steps": 60,
                  "schedule": "constant", "weight_decay": 0.0}
  })",
                                            diags);
  ASSERT_TRUE(doc) << diags.str();
  auto spec = moec::frontend::readModelJson(std::move(doc), diags);
  ASSERT_TRUE(spec) << diags.str();
  OwningOpRef<ModuleOp> module = moec::frontend::buildModule(*spec, context);
  autodiff(*module);
  Interpreter interp(*module);
  interp.initParams(spec->seed);
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(16), targets(16);
  for (int i = 0; i < 16; ++i) {
    tokens[i] = static_cast<int32_t>(rng() % 16);
    targets[i] = static_cast<int32_t>(rng() % 16);
  }
  std::vector<Tensor> args = {Tensor::ids({2, 8}, tokens), Tensor::ids({2, 8}, targets), Tensor()};
  double first = 0, last = 0;
  for (int32_t s = 0; s < 60; ++s) {
    args[2] = step(s);
    std::vector<Tensor> out;
    std::string error;
    ASSERT_TRUE(interp.run("train_step", args, out, error)) << error;
    double loss = out[0].data[0];
    ASSERT_TRUE(std::isfinite(loss));
    if (s == 0)
      first = loss;
    last = loss;
  }
  // Random targets on 16 classes start near ln 16 = 2.77 and are memorised.
  EXPECT_NEAR(first, std::log(16.0), 0.3);
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
}

} // namespace
