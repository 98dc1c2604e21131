//===- EmbeddingKernelTest.cpp - embedding and its gradient -----------------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: embedding_k embedding tokens=6 vocab=10 width=16
// kernel: embedding_grad_k embedding_grad tokens=6 vocab=10 width=16

#include "KernelTestUtil.h"

namespace {

TEST(HalideKernelTest, EmbeddingForwardAndBackward) {
  ScratchWithin scratch({"embedding_k", "embedding_grad_k"});
  const int tokens = 6, vocab = 10, width = 16;
  std::vector<int32_t> ids = {3, 0, 9, 3, 7, 3};
  auto table = randomVector(vocab * width, 11), dy = randomVector(tokens * width, 12);
  Floats y(tokens * width), dt(vocab * width);
  Buffer<int32_t> bids(ids.data(), tokens);
  auto bt = view(table, width, vocab), by = view(y, width, tokens), bdy = view(dy, width, tokens),
       bdt = view(dt, width, vocab);
  ASSERT_EQ(embedding_k(bids, bt, by), 0) << lastError;
  ASSERT_EQ(embedding_grad_k(bids, bdy, bdt), 0) << lastError;
  std::string ti = "tensor<6xi32>", tt = type2(vocab, width), ty = type2(tokens, width);
  auto want = interpret(
      "(%ids: " + ti + ", %t: " + tt + ", %dy: " + ty + ") -> (" + ty + ", " + tt + ")",
      "  %y = moe.embedding %ids, %t : " + ti + ", " + tt + " -> " + ty +
          "\n  %dt = moe.embedding_grad %ids, %dy : " + ti + ", " + ty + " -> " + tt +
          "\n  return %y, %dt : " + ty + ", " + tt,
      {Tensor::ids({tokens}, ids), tensorOf(table, {vocab, width}), tensorOf(dy, {tokens, width})});
  ASSERT_EQ(want.size(), 2u);
  expectClose(y, want[0], 1);
  expectClose(dt, want[1], tokens);
  // An id outside the vocabulary is an error, not an out-of-bounds read.
  ids[2] = 10;
  lastError.clear();
  if (kDevice) {
    // A device kernel clamps the index instead (the trainer checks ids).
    EXPECT_EQ(embedding_k(bids, bt, by), 0) << lastError;
  } else {
    EXPECT_NE(embedding_k(bids, bt, by), 0);
    EXPECT_NE(lastError.find("token id out of range: 10"), std::string::npos) << lastError;
  }
}

} // namespace
