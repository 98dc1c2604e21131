//===- NormKernelTest.cpp - rms_norm and its gradient -----------------------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: rms_norm_k rms_norm rows=5 width=20 epsilon=0.001
// kernel: rms_norm_grad_k rms_norm_grad rows=5 width=20 epsilon=0.001
// kernel: rms_norm_grad_rows_k rms_norm_grad rows=150 width=12 epsilon=0.001
// kernel: rms_norm_heads_k rms_norm rows=10 width=4 epsilon=0.001
// kernel: rms_norm_grad_heads_k rms_norm_grad rows=10 width=4 epsilon=0.001

#include "KernelTestUtil.h"

namespace {

/// rms_norm and rms_norm_grad kernels on a [tokens, width] tensor with a gain
/// of `group` (the kernels see rows of `group`: KernelFamilies.cpp's
/// normArgs) against the interpreter.
template <typename Forward, typename Backward>
void expectNormAgrees(Forward forward, Backward backward, int tokens, int width, int group,
                      int seed) {
  const int rows = tokens * width / group;
  auto x = randomVector(tokens * width, seed), g = randomVector(group, seed + 1),
       dy = randomVector(tokens * width, seed + 2);
  Floats y(tokens * width), dx(tokens * width), dg(group);
  auto bx = view(x, group, rows), by = view(y, group, rows), bdy = view(dy, group, rows),
       bdx = view(dx, group, rows);
  Buffer<float> bg(g.data(), group), bdg(dg.data(), group);
  ASSERT_EQ(forward(bx, bg, by), 0) << lastError;
  ASSERT_EQ(backward(bx, bg, bdy, bdx, bdg), 0) << lastError;
  std::string tx = type2(tokens, width), tg = "tensor<" + std::to_string(group) + "xf32>";
  auto want = interpret(
      "(%x: " + tx + ", %g: " + tg + ", %dy: " + tx + ") -> (" + tx + ", " + tx + ", " + tg + ")",
      "  %y = moe.rms_norm %x, %g {epsilon = 1.0e-3 : f32} : " + tx + ", " + tg +
          "\n  %dx, %dg = moe.rms_norm_grad %x, %g, %dy {epsilon = 1.0e-3 : f32} : " + tx + ", " +
          tg + "\n  return %y, %dx, %dg : " + tx + ", " + tx + ", " + tg,
      {tensorOf(x, {tokens, width}), tensorOf(g, {group}), tensorOf(dy, {tokens, width})});
  ASSERT_EQ(want.size(), 3u);
  expectClose(y, want[0], group);
  expectClose(dx, want[1], 2 * group);
  expectClose(dg, want[2], rows + group);
}

TEST(HalideKernelTest, RMSNormForwardAndBackward) {
  ScratchWithin scratch({"rms_norm_k", "rms_norm_grad_k"});
  expectNormAgrees(rms_norm_k, rms_norm_grad_k, 5, 20, 20, 8);
}

// More rows than one of a GPU schedule's chunks (GpuSchedule.h's
// gpuChunkSum: 64 rows, the last chunk partly past the rows).
TEST(HalideKernelTest, RMSNormGradOverManyRows) {
  const int rows = 150, width = 12;
  auto x = randomVector(rows * width, 18), g = randomVector(width, 19),
       dy = randomVector(rows * width, 20);
  Floats dx(rows * width), dg(width);
  auto bx = view(x, width, rows), bdy = view(dy, width, rows), bdx = view(dx, width, rows);
  Buffer<float> bg(g.data(), width), bdg(dg.data(), width);
  ASSERT_EQ(rms_norm_grad_rows_k(bx, bg, bdy, bdx, bdg), 0) << lastError;
  std::string tx = type2(rows, width), tg = "tensor<12xf32>";
  auto want = interpret(
      "(%x: " + tx + ", %g: " + tg + ", %dy: " + tx + ") -> (" + tx + ", " + tg + ")",
      "  %dx, %dg = moe.rms_norm_grad %x, %g, %dy {epsilon = 1.0e-3 : f32} : " + tx + ", " + tg +
          "\n  return %dx, %dg : " + tx + ", " + tg,
      {tensorOf(x, {rows, width}), tensorOf(g, {width}), tensorOf(dy, {rows, width})});
  ASSERT_EQ(want.size(), 2u);
  expectClose(dx, want[0], 2 * width);
  expectClose(dg, want[1], rows + width);
}

// Per-head norms (Qwen3-MoE's q/k norm): a [5, 8] tensor with a gain of 4.
TEST(HalideKernelTest, RMSNormPerHeadGroups) {
  ScratchWithin scratch({"rms_norm_heads_k", "rms_norm_grad_heads_k"});
  expectNormAgrees(rms_norm_heads_k, rms_norm_grad_heads_k, 5, 8, 4, 28);
}

} // namespace
