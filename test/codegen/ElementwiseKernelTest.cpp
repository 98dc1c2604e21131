//===- ElementwiseKernelTest.cpp - add, sum_squares, adamw_update ---------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: add_k add size=40
// kernel: sum_squares_k sum_squares size=96 rows=3 chunks=4
// kernel: sigmoid_gate_k sigmoid_gate rows=6 width=20
// kernel: clamp_k clamp size=40 limit=0.5
// kernel: clamp_grad_k clamp_grad size=40 limit=0.5
// kernel: sigmoid_gate_grad_k sigmoid_gate_grad rows=6 width=20
// kernel: adamw_k adamw_update size=37 beta1=0.9 beta2=0.95 eps=1e-8 weight_decay=0.1 grad_clip=1.0

#include "KernelTestUtil.h"

namespace {

TEST(HalideKernelTest, Add) {
  ScratchWithin scratch({"add_k"});
  auto a = randomVector(40, 23), b = randomVector(40, 24);
  Floats z(40);
  Buffer<float> ba(a.data(), 40), bb(b.data(), 40), bz(z.data(), 40);
  ASSERT_EQ(add_k(ba, bb, bz), 0) << lastError;
  auto want = interpret("(%a: tensor<40xf32>, %b: tensor<40xf32>) -> tensor<40xf32>",
                        "  %z = moe.add %a, %b : tensor<40xf32>\n  return %z : tensor<40xf32>",
                        {tensorOf(a, {40}), tensorOf(b, {40})});
  ASSERT_EQ(want.size(), 1u);
  expectClose(z, want[0], 1);
}

TEST(HalideKernelTest, ClampForwardAndBackward) {
  ScratchWithin scratch({"clamp_k", "clamp_grad_k"});
  auto x = randomVector(40, 34), dy = randomVector(40, 35);
  x[0] = 0.5f; // on the limit: passes the gradient, as PyTorch's clamp
  Floats z(40), dx(40);
  Buffer<float> bx(x.data(), 40), bz(z.data(), 40), bdy(dy.data(), 40), bdx(dx.data(), 40);
  ASSERT_EQ(clamp_k(bx, bz), 0) << lastError;
  ASSERT_EQ(clamp_grad_k(bx, bdy, bdx), 0) << lastError;
  auto want = interpret("(%x: tensor<40xf32>, %dy: tensor<40xf32>) -> (tensor<40xf32>, tensor<40xf32>)",
                        "  %z = moe.clamp %x {limit = 0.5 : f32} : tensor<40xf32>\n"
                        "  %dx = moe.clamp_grad %x, %dy {limit = 0.5 : f32} : tensor<40xf32>\n"
                        "  return %z, %dx : tensor<40xf32>, tensor<40xf32>",
                        {tensorOf(x, {40}), tensorOf(dy, {40})});
  ASSERT_EQ(want.size(), 2u);
  expectClose(z, want[0], 1);
  expectClose(dx, want[1], 1);
  int clipped = 0;
  for (float v : x)
    clipped += v < -0.5f || v > 0.5f;
  EXPECT_GT(clipped, 0) << "no element was clipped: the test would prove nothing";
  EXPECT_LT(clipped, 40);
}

TEST(HalideKernelTest, SigmoidGateForwardAndBackward) {
  ScratchWithin scratch({"sigmoid_gate_k", "sigmoid_gate_grad_k"});
  const int rows = 6, width = 20;
  auto x = randomVector(rows * width, 31), g = randomVector(rows, 32),
       dy = randomVector(rows * width, 33);
  Floats z(rows * width), dx(rows * width), dg(rows);
  auto bx = view(x, width, rows), bg = view(g, 1, rows), bz = view(z, width, rows),
       bdy = view(dy, width, rows), bdx = view(dx, width, rows), bdg = view(dg, 1, rows);
  ASSERT_EQ(sigmoid_gate_k(bx, bg, bz), 0) << lastError;
  ASSERT_EQ(sigmoid_gate_grad_k(bx, bg, bdy, bdx, bdg), 0) << lastError;
  std::string tx = type2(rows, width), tg = type2(rows, 1);
  auto want = interpret(
      "(%x: " + tx + ", %g: " + tg + ", %dy: " + tx + ") -> (" + tx + ", " + tx + ", " + tg + ")",
      "  %z = moe.sigmoid_gate %x, %g : " + tx + ", " + tg +
          "\n  %dx, %dg = moe.sigmoid_gate_grad %x, %g, %dy : " + tx + ", " + tg +
          "\n  return %z, %dx, %dg : " + tx + ", " + tx + ", " + tg,
      {tensorOf(x, {rows, width}), tensorOf(g, {rows, 1}), tensorOf(dy, {rows, width})});
  ASSERT_EQ(want.size(), 3u);
  expectClose(z, want[0], 1);
  expectClose(dx, want[1], 1);
  expectClose(dg, want[2], width);
}

TEST(HalideKernelTest, SumSquaresPerRowAndStridedChunk) {
  ScratchWithin scratch({"sum_squares_k"});
  // 3 rows of 32 elements, 4 chunks each: s[r, j] sums row r's elements
  // j, j + 4, ..., j + 28.
  auto x = randomVector(96, 26);
  Floats s(12);
  Buffer<float> bx(x.data(), 96), bs(s.data(), 12);
  ASSERT_EQ(sum_squares_k(bx, bs), 0) << lastError;
  auto want =
      interpret("(%x: tensor<3x32xf32>) -> tensor<3x4xf32>",
                "  %s = moe.sum_squares %x : tensor<3x32xf32> -> tensor<3x4xf32>\n  return %s : "
                "tensor<3x4xf32>",
                {tensorOf(x, {3, 32})});
  ASSERT_EQ(want.size(), 1u);
  expectClose(s, want[0], 2);
  double direct = 0;
  for (int e = 0; e < 32; ++e)
    if (e % 4 == 1)
      direct += double(x[32 + e]) * x[32 + e];
  EXPECT_NEAR(s[4 + 1], direct, 1e-5 * direct);
}

TEST(HalideKernelTest, AdamWUpdatesInPlaceLikeTheInterpreter) {
  ScratchWithin scratch({"adamw_k"});
  // Three steps with clipping active; the kernel updates w, m, v in place.
  const int n = 37;
  auto w = randomVector(n, 25);
  Floats m(n, 0.0f), v(n, 0.0f);
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"mlir(
    moe.param @w : tensor<37xf32> init <zeros>
    func.func @k(%g: tensor<37xf32>, %lr: tensor<f32>, %n: tensor<f32>, %s: tensor<i32>) {
      moe.adamw_update @w, %g, %lr, %n, %s {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64, grad_clip = 1.0 : f64} : tensor<37xf32>
      return
    })mlir",
                                                        &context);
  ASSERT_TRUE(module);
  Interpreter interp(*module);
  interp.params["w"] = tensorOf(w, {n});
  for (int32_t s = 0; s < 3; ++s) {
    auto g = randomVector(n, 30 + s);
    float lr = 0.01f * (s + 1), norm = 2.5f; // clip factor 1 / 2.5
    Buffer<float> bw(w.data(), n), bm(m.data(), n), bv(v.data(), n), bg(g.data(), n);
    Buffer<float> blr = Buffer<float>::make_scalar(&lr), bn = Buffer<float>::make_scalar(&norm);
    Buffer<int32_t> bs = Buffer<int32_t>::make_scalar(&s);
    ASSERT_EQ(adamw_k(bw, bm, bv, bg, blr, bn, bs, bw, bm, bv), 0) << lastError;
    Tensor tlr = Tensor::zeros({}), tn = Tensor::zeros({});
    tlr.data[0] = lr;
    tn.data[0] = norm;
    std::vector<Tensor> out;
    std::string error;
    ASSERT_TRUE(interp.run("k", {tensorOf(g, {n}), tlr, tn, Tensor::ids({}, {s})}, out, error))
        << error;
  }
  expectClose(w, interp.params["w"], 3);
  Tensor mt = tensorOf(Floats(n), {n}), vt = mt;
  mt.data = interp.moments["w"].first;
  vt.data = interp.moments["w"].second;
  expectClose(m, mt, 3);
  expectClose(v, vt, 3);
}

} // namespace
