//===- LinearKernelTest.cpp - linear, linear_grad, bias_grad ----------------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: linear_tiled linear rows=8 in=16 out=24 bias=true residual=true
// kernel: linear_small linear rows=3 in=5 out=6
// kernel: linear_grad_tiled linear_grad rows=8 in=16 out=24
// kernel: linear_grad_small linear_grad rows=3 in=5 out=7
// kernel: linear_grad_kblocked linear_grad rows=1024 in=16 out=32
// kernel: linear_blas linear rows=70 in=16 out=24 bias=true residual=true blas=true
// kernel: linear_blas_plain linear rows=3 in=5 out=6 blas=true
// kernel: linear_grad_blas linear_grad rows=70 in=16 out=200 blas=true
// kernel: bias_grad_k bias_grad rows=7 out=12

#include "KernelTestUtil.h"

namespace {

/// Runs `kernel` (linear, m x k by k x n) and the interpreter; returns the
/// kernel's output and the reference through `y` and `want`.
template <typename Kernel>
void runLinear(Kernel kernel, int m, int k, int n, bool bias, bool residual, Floats &y,
               Tensor &want) {
  auto x = randomVector(m * k, 1), w = randomVector(k * n, 2), b = randomVector(bias ? n : 1, 3),
       r = randomVector(residual ? m * n : 1, 4);
  y.assign(m * n, NAN);
  Buffer<float> bb(b.data(), (int)b.size());
  auto br = residual ? view(r, n, m) : view(r, 1, 1);
  auto bx = view(x, k, m), bw = view(w, n, k), by = view(y, n, m);
  ASSERT_EQ(kernel(bx, bw, bb, br, by), 0) << lastError;

  std::string tx = type2(m, k), tw = type2(k, n), ty = type2(m, n),
              tb = "tensor<" + std::to_string(n) + "xf32>";
  std::string sig = "(%x: " + tx + ", %w: " + tw + ", %b: " + tb + ", %r: " + ty + ") -> " + ty;
  std::string body = std::string("  %y = moe.linear %x, %w") + (bias ? " bias %b" : "") + " : " +
                     tx + ", " + tw + (bias ? ", " + tb : "") + " -> " + ty + "\n" +
                     (residual ? "  %z = moe.add %y, %r : " + ty + "\n  return %z : " + ty
                               : "  return %y : " + ty);
  auto out =
      interpret(sig, body,
                {tensorOf(x, {m, k}), tensorOf(w, {k, n}), tensorOf(bias ? b : Floats(n), {n}),
                 tensorOf(residual ? r : Floats(m * n), {m, n})});
  ASSERT_EQ(out.size(), 1u);
  want = out[0];
}

template <typename Kernel>
void checkLinear(Kernel kernel, int m, int k, int n, bool bias, bool residual) {
  Floats y;
  Tensor want = Tensor::zeros({});
  runLinear(kernel, m, k, n, bias, residual, y, want);
  expectClose(y, want, k);
}

// The tolerance is tight enough to matter: a correct kernel passes, and
// each kind of wrong kernel output fails the same comparison.
TEST(HalideKernelTest, ToleranceCatchesWrongKernels) {
  Floats y;
  Tensor want = Tensor::zeros({});
  runLinear(linear_blas, 70, 16, 24, true, true, y, want);
  expectClose(y, want, 16);
  auto fails = [&](Floats wrong) {
    EXPECT_NONFATAL_FAILURE(expectClose(wrong, want, 16), "chain 16");
  };
  Floats one = y; // one element 0.1% off
  one[123] *= 1.001f;
  fails(one);
  Floats scaled = y; // the whole output scaled by 1 + 1e-4
  for (float &v : scaled)
    v *= 1.0001f;
  fails(scaled);
  Floats shifted = y; // shifted by 1e-4 of its root mean square
  for (float &v : shifted)
    v += static_cast<float>(1e-4 * rootMeanSquare(want));
  fails(shifted);
  Floats swapped = y; // two neighbours exchanged
  std::swap(swapped[10], swapped[11]);
  fails(swapped);
}

TEST(HalideKernelTest, LinearTiledWithBiasAndResidual) {
  ScratchWithin scratch({"linear_tiled"});
  checkLinear(linear_tiled, 8, 16, 24, true, true);
}

TEST(HalideKernelTest, LinearSmallShape) {
  ScratchWithin scratch({"linear_small"});
  checkLinear(linear_small, 3, 5, 6, false, false);
}

template <typename Kernel> void checkLinearGrad(Kernel kernel, int m, int k, int n) {
  auto x = randomVector(m * k, 5), w = randomVector(k * n, 6), dy = randomVector(m * n, 7);
  Floats dx(m * k, NAN), dw(k * n, NAN);
  auto bx = view(x, k, m), bw = view(w, n, k), bdy = view(dy, n, m), bdx = view(dx, k, m),
       bdw = view(dw, n, k);
  ASSERT_EQ(kernel(bx, bw, bdy, bdx, bdw), 0) << lastError;

  std::string tx = type2(m, k), tw = type2(k, n), ty = type2(m, n);
  auto want =
      interpret("(%x: " + tx + ", %w: " + tw + ", %dy: " + ty + ") -> (" + tx + ", " + tw + ")",
                "  %dx, %dw = moe.linear_grad %x, %w, %dy : " + tx + ", " + tw + ", " + ty +
                    "\n  return %dx, %dw : " + tx + ", " + tw,
                {tensorOf(x, {m, k}), tensorOf(w, {k, n}), tensorOf(dy, {m, n})});
  ASSERT_EQ(want.size(), 2u);
  expectClose(dx, want[0], n);
  expectClose(dw, want[1], m);
}

TEST(HalideKernelTest, LinearGradTiled) {
  ScratchWithin scratch({"linear_grad_tiled"});
  checkLinearGrad(linear_grad_tiled, 8, 16, 24);
}
// 1024 rows: the weight gradient's contraction over rows is k-blocked.
TEST(HalideKernelTest, LinearGradKBlocked) {
  ScratchWithin scratch({"linear_grad_kblocked"});
  checkLinearGrad(linear_grad_kblocked, 1024, 16, 32);
}
TEST(HalideKernelTest, LinearWithOpenBLAS) {
  ScratchWithin scratch({"linear_blas", "linear_blas_plain"});
  checkLinear(linear_blas, 70, 16, 24, true, true);
  checkLinear(linear_blas_plain, 3, 5, 6, false, false);
}
TEST(HalideKernelTest, LinearGradWithOpenBLAS) {
  ScratchWithin scratch({"linear_grad_blas"});
  checkLinearGrad(linear_grad_blas, 70, 16, 200);
}
TEST(HalideKernelTest, LinearGradSmallShape) {
  ScratchWithin scratch({"linear_grad_small"});
  checkLinearGrad(linear_grad_small, 3, 5, 7);
}

TEST(HalideKernelTest, BiasGradSumsRows) {
  ScratchWithin scratch({"bias_grad_k"});
  auto dy = randomVector(7 * 12, 26);
  Floats db(12);
  Buffer<float> bdy(dy.data(), 12, 7), bdb(db.data(), 12);
  ASSERT_EQ(bias_grad_k(bdy, bdb), 0) << lastError;
  auto want = interpret("(%dy: tensor<7x12xf32>) -> tensor<12xf32>",
                        "  %db = moe.bias_grad %dy : tensor<7x12xf32> -> tensor<12xf32>\n"
                        "  return %db : tensor<12xf32>",
                        {tensorOf(dy, {7, 12})});
  ASSERT_EQ(want.size(), 1u);
  expectClose(db, want[0], 7);
}

TEST(HalideKernelTest, WrongShapesAreErrorsNotCrashes) {
  // linear_small is specialised to x [3, 5]; a [4, 5] input is refused.
  Floats x(4 * 5), w(5 * 6), b(1), r(1), y(3 * 6);
  Buffer<float> bx(x.data(), 5, 4), bw(w.data(), 6, 5), bb(b.data(), 1), br(r.data(), 1, 1),
      by(y.data(), 6, 3);
  lastError.clear();
  EXPECT_NE(linear_small(bx, bw, bb, br, by), 0);
  EXPECT_NE(lastError.find("x"), std::string::npos) << lastError;
}

} // namespace
