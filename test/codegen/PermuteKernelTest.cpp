//===- PermuteKernelTest.cpp - permute, unpermute and its gradient ----------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: permute_k permute tokens=6 k=2 slots_total=12 width=8
// kernel: unpermute_k unpermute tokens=6 k=2 slots_total=12 width=8 weighted=true
// kernel: unpermute_plain_k unpermute tokens=6 k=2 slots_total=12 width=8 weighted=false
// kernel: unpermute_grad_k unpermute_grad tokens=6 k=2 slots_total=12 width=8

#include "KernelTestUtil.h"

namespace {

TEST(HalideKernelTest, PermuteUnpermuteAndGradient) {
  ScratchWithin scratch({"permute_k", "unpermute_k", "unpermute_plain_k", "unpermute_grad_k"});
  // 6 tokens x 2 choices into 4 experts x 3 slots; -1 marks drops.
  const int tokens = 6, k = 2, total = 12, d = 8;
  std::vector<int32_t> slots = {0, 3, 1, 4, -1, 6, 2, 9, 7, -1, 10, 5};
  auto x = randomVector(tokens * d, 19), w = randomVector(tokens * k, 20),
       y = randomVector(total * d, 21), dout = randomVector(tokens * d, 22);
  Floats buf(total * d), out(tokens * d), plain(tokens * d), dbuf(total * d), dw(tokens * k);
  Buffer<int32_t> bs(slots.data(), k, tokens);
  auto bx = view(x, d, tokens), bw = view(w, k, tokens), by = view(y, d, total),
       bdout = view(dout, d, tokens), bbuf = view(buf, d, total), bout = view(out, d, tokens),
       bplain = view(plain, d, tokens), bdbuf = view(dbuf, d, total), bdw = view(dw, k, tokens);
  Floats one(1);
  auto bone = view(one, 1, 1);
  ASSERT_EQ(permute_k(bx, bs, bbuf), 0) << lastError;
  ASSERT_EQ(unpermute_k(by, bs, bw, bout), 0) << lastError;
  ASSERT_EQ(unpermute_plain_k(by, bs, bone, bplain), 0) << lastError;
  ASSERT_EQ(unpermute_grad_k(by, bs, bw, bdout, bdbuf, bdw), 0) << lastError;

  std::string tx = type2(tokens, d), ts = "tensor<6x2xi32>", tw = type2(tokens, k),
              tb = type3(4, 3, d);
  auto want = interpret(
      "(%x: " + tx + ", %s: " + ts + ", %w: " + tw + ", %y: " + tb + ", %do: " + tx + ") -> (" +
          tb + ", " + tx + ", " + tx + ", " + tb + ", " + tw + ")",
      "  %b = moe.permute %x, %s : (" + tx + ", " + ts + ") -> " + tb +
          "\n  %o = moe.unpermute %y, %s weights %w : (" + tb + ", " + ts + ", " + tw + ") -> " +
          tx + "\n  %p = moe.unpermute %y, %s : (" + tb + ", " + ts + ") -> " + tx +
          "\n  %db, %dw = moe.unpermute_grad %y, %s, %w, %do : (" + tb + ", " + ts + ", " + tw +
          ", " + tx + ") -> (" + tb + ", " + tw + ")\n  return %b, %o, %p, %db, %dw : " + tb +
          ", " + tx + ", " + tx + ", " + tb + ", " + tw,
      {tensorOf(x, {tokens, d}), Tensor::ids({tokens, k}, slots), tensorOf(w, {tokens, k}),
       tensorOf(y, {4, 3, d}), tensorOf(dout, {tokens, d})});
  ASSERT_EQ(want.size(), 5u);
  expectClose(buf, want[0], 1);
  expectClose(out, want[1], k);
  expectClose(plain, want[2], k);
  expectClose(dbuf, want[3], 1);
  expectClose(dw, want[4], d);
  // A slot beyond the buffer is an error.
  slots[3] = 12;
  lastError.clear();
  if (kDevice) {
    // A device kernel clamps the slot instead (slots come from the routing
    // kernel).
    EXPECT_EQ(permute_k(bx, bs, bbuf), 0) << lastError;
  } else {
    EXPECT_NE(permute_k(bx, bs, bbuf), 0);
    EXPECT_NE(lastError.find("slot out of range: 12"), std::string::npos) << lastError;
  }
}

} // namespace
