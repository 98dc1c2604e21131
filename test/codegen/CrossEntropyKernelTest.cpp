//===- CrossEntropyKernelTest.cpp - cross_entropy and its gradient ----------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: cross_entropy_k cross_entropy tokens=6 vocab=11
// kernel: cross_entropy_grad_k cross_entropy_grad tokens=6 vocab=11

#include "KernelTestUtil.h"

namespace {

TEST(HalideKernelTest, CrossEntropyForwardAndBackward) {
  ScratchWithin scratch({"cross_entropy_k", "cross_entropy_grad_k"});
  const int tokens = 6, vocab = 11;
  std::vector<int32_t> targets = {0, 10, 5, 5, 2, 7};
  auto logits = randomVector(tokens * vocab, 13);
  Floats loss(1), dl(tokens * vocab), dloss = {0.5f};
  Buffer<int32_t> bt(targets.data(), tokens);
  auto bl = view(logits, vocab, tokens), bdl = view(dl, vocab, tokens);
  Buffer<float> bloss = Buffer<float>::make_scalar(loss.data());
  Buffer<float> bdloss = Buffer<float>::make_scalar(dloss.data());
  ASSERT_EQ(cross_entropy_k(bl, bt, bloss), 0) << lastError;
  ASSERT_EQ(cross_entropy_grad_k(bl, bt, bdloss, bdl), 0) << lastError;
  std::string tl = type2(tokens, vocab), tt = "tensor<6xi32>";
  Tensor half = Tensor::zeros({});
  half.data[0] = 0.5;
  auto want =
      interpret("(%l: " + tl + ", %t: " + tt + ", %d: tensor<f32>) -> (tensor<f32>, " + tl + ")",
                "  %c = moe.cross_entropy %l, %t : " + tl + ", " + tt + " -> tensor<f32>" +
                    "\n  %g = moe.cross_entropy_grad %l, %t, %d : " + tl + ", " + tt +
                    ", tensor<f32>\n  return %c, %g : tensor<f32>, " + tl,
                {tensorOf(logits, {tokens, vocab}), Tensor::ids({tokens}, targets), half});
  ASSERT_EQ(want.size(), 2u);
  expectClose(loss, want[0], vocab + tokens);
  expectClose(dl, want[1], vocab);
  targets[0] = -1;
  lastError.clear();
  if (kDevice) {
    // A device kernel clamps the index instead (the trainer checks ids).
    EXPECT_EQ(cross_entropy_k(bl, bt, bloss), 0) << lastError;
  } else {
    EXPECT_NE(cross_entropy_k(bl, bt, bloss), 0);
    EXPECT_NE(lastError.find("target out of range: -1"), std::string::npos) << lastError;
  }
}

} // namespace
