//===- KernelTest.cpp - generated Halide kernels against the interpreter --===//
//
// Kernels are generated at build time by moe-halide-gen for a few shapes
// (the tiled and the small-shape path of each schedule). Each test runs the
// same computation as a moe op in the reference interpreter (double
// precision) and compares.
//
//===----------------------------------------------------------------------===//

#include "HalideBuffer.h"
#include "Interpreter.h"
#include "KernelHeaders.h"

#include "KernelVariants.h"
#include "moe/InitAllDialects.h"
#include "moert/Aligned.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

using Halide::Runtime::Buffer;
// Every buffer handed to a kernel is 64-byte aligned, as in generated
// binaries: Halide may use aligned vector loads and stores on them.
using Floats = moert::AlignedFloats;
using ::moec::reference::Interpreter;
using ::moec::reference::Tensor;

namespace {

/// Kernel errors are recorded here instead of aborting the process (the
/// runtime installs the same kind of handler).
std::string lastError;
void recordError(void *, const char *message) { lastError = message; }
struct InstallHandler {
  InstallHandler() { halide_set_error_handler(recordError); }
} installHandler;

Floats randomVector(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Floats v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

Tensor tensorOf(const Floats &v, std::vector<int64_t> shape) {
  Tensor t = Tensor::zeros(std::move(shape));
  t.data.assign(v.begin(), v.end());
  return t;
}

/// Runs `body` (ops over the arguments, returning its results) as @k in the
/// reference interpreter.
std::vector<Tensor> interpret(const std::string &signature, const std::string &body,
                              const std::vector<Tensor> &args) {
  mlir::DialectRegistry registry;
  mlir::moe::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  std::string source = "func.func @k" + signature + " {\n" + body + "\n}";
  auto module = mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  EXPECT_TRUE(module) << source;
  if (!module)
    return {};
  Interpreter interp(*module);
  std::vector<Tensor> out;
  std::string error;
  EXPECT_TRUE(interp.run("k", args, out, error)) << error;
  return out;
}

/// f32 kernel output against the double-precision reference; the tolerance
/// grows with the length of the reductions involved.
void expectClose(const Floats &got, const Tensor &want, int reduction) {
  ASSERT_EQ(got.size(), want.data.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want.data[i], 1e-5 * reduction * (1.0 + std::fabs(want.data[i])))
        << "element " << i;
}

/// A row-major [outer, inner] array as a Halide buffer (dim 0 innermost).
Buffer<float> view(Floats &v, int inner, int outer) {
  return Buffer<float>(v.data(), inner, outer);
}

std::string type2(int a, int b) {
  return "tensor<" + std::to_string(a) + "x" + std::to_string(b) + "xf32>";
}

template <typename Kernel>
void checkLinear(Kernel kernel, int m, int k, int n, bool bias, bool residual) {
  auto x = randomVector(m * k, 1), w = randomVector(k * n, 2), b = randomVector(bias ? n : 1, 3),
       r = randomVector(residual ? m * n : 1, 4);
  Floats y(m * n, NAN);
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
  auto want =
      interpret(sig, body,
                {tensorOf(x, {m, k}), tensorOf(w, {k, n}), tensorOf(bias ? b : Floats(n), {n}),
                 tensorOf(residual ? r : Floats(m * n), {m, n})});
  ASSERT_EQ(want.size(), 1u);
  expectClose(y, want[0], k);
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

TEST(HalideKernelTest, RMSNormForwardAndBackward) {
  ScratchWithin scratch({"rms_norm_k", "rms_norm_grad_k"});
  const int rows = 5, width = 20;
  auto x = randomVector(rows * width, 8), g = randomVector(width, 9),
       dy = randomVector(rows * width, 10);
  Floats y(rows * width), dx(rows * width), dg(width);
  auto bx = view(x, width, rows), by = view(y, width, rows), bdy = view(dy, width, rows),
       bdx = view(dx, width, rows);
  Buffer<float> bg(g.data(), width), bdg(dg.data(), width);
  ASSERT_EQ(rms_norm_k(bx, bg, by), 0) << lastError;
  ASSERT_EQ(rms_norm_grad_k(bx, bg, bdy, bdx, bdg), 0) << lastError;
  std::string tx = type2(rows, width), tg = "tensor<20xf32>";
  auto want = interpret(
      "(%x: " + tx + ", %g: " + tg + ", %dy: " + tx + ") -> (" + tx + ", " + tx + ", " + tg + ")",
      "  %y = moe.rms_norm %x, %g {epsilon = 1.0e-3 : f32} : " + tx + ", " + tg +
          "\n  %dx, %dg = moe.rms_norm_grad %x, %g, %dy {epsilon = 1.0e-3 : f32} : " + tx + ", " +
          tg + "\n  return %y, %dx, %dg : " + tx + ", " + tx + ", " + tg,
      {tensorOf(x, {rows, width}), tensorOf(g, {width}), tensorOf(dy, {rows, width})});
  ASSERT_EQ(want.size(), 3u);
  expectClose(y, want[0], width);
  expectClose(dx, want[1], width);
  expectClose(dg, want[2], rows * width);
}

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
  EXPECT_NE(embedding_k(bids, bt, by), 0);
  EXPECT_NE(lastError.find("token id out of range: 10"), std::string::npos) << lastError;
}

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
  expectClose(loss, want[0], vocab * tokens);
  expectClose(dl, want[1], vocab);
  targets[0] = -1;
  lastError.clear();
  EXPECT_NE(cross_entropy_k(bl, bt, bloss), 0);
  EXPECT_NE(lastError.find("target out of range: -1"), std::string::npos) << lastError;
}

std::string type3(int a, int b, int c) {
  return "tensor<" + std::to_string(a) + "x" + std::to_string(b) + "x" + std::to_string(c) +
         "xf32>";
}

/// Checks an FFN forward and/or backward kernel pair over `groups` groups
/// (expert_ffn when grouped, ffn otherwise) with activation `act`. `saved`:
/// the forward saves its pre-activations and the backward reads them.
template <typename Fwd, typename Bwd>
void checkFFN(Fwd fwd, Bwd bwd, int groups, int rows, int d, int f, const std::string &act,
              bool saved = false) {
  bool gated = act == "swiglu";
  auto x = randomVector(groups * rows * d, 14), up = randomVector(groups * d * f, 15),
       down = randomVector(groups * f * d, 16), gate = randomVector(gated ? groups * d * f : 1, 17),
       dy = randomVector(groups * rows * d, 18);
  Floats y(x.size()), dx(x.size()), dup(up.size()), ddown(down.size()), dgate(gate.size());
  auto b3 = [](Floats &v, int a, int b, int c) { return Buffer<float>(v.data(), a, b, c); };
  auto bx = b3(x, d, rows, groups), bup = b3(up, f, d, groups), bdown = b3(down, d, f, groups),
       bgate = gated ? b3(gate, f, d, groups) : b3(gate, 1, 1, 1), bdy = b3(dy, d, rows, groups),
       by = b3(y, d, rows, groups), bdx = b3(dx, d, rows, groups), bdup = b3(dup, f, d, groups),
       bddown = b3(ddown, d, f, groups),
       bdgate = gated ? b3(dgate, f, d, groups) : b3(dgate, 1, 1, 1);
  Floats preUp(saved ? groups * rows * f : 1), preGate(saved && gated ? groups * rows * f : 1);
  auto bpu = saved ? b3(preUp, f, rows, groups) : b3(preUp, 1, 1, 1),
       bpg = saved && gated ? b3(preGate, f, rows, groups) : b3(preGate, 1, 1, 1);
  if (fwd) {
    ASSERT_EQ(fwd(bx, bup, bdown, bgate, by, bpu, bpg), 0) << lastError;
  }
  ASSERT_EQ(bwd(bx, bup, bdown, bgate, bdy, bpu, bpg, bdx, bdup, bddown, bdgate), 0) << lastError;

  bool grouped = groups > 1;
  std::string tx = grouped ? type3(groups, rows, d) : type2(rows, d),
              tu = grouped ? type3(groups, d, f) : type2(d, f),
              td = grouped ? type3(groups, f, d) : type2(f, d);
  std::string op = grouped ? "moe.expert_ffn" : "moe.ffn";
  std::string gateOperand = gated ? " gate %g" : "";
  std::string inTypes = tx + ", " + tu + ", " + td + (gated ? ", " + tu : "");
  std::string gradInTypes = tx + ", " + tu + ", " + td + ", " + tx + (gated ? ", " + tu : "");
  std::string gradOutTypes = tx + ", " + tu + ", " + td + (gated ? ", " + tu : "");
  std::string body = "  %y = " + op + " " + act + " %x, %u, %d" + gateOperand + " : (" + inTypes +
                     ") -> " + tx + "\n  %dx, %du, %dd" + (gated ? ", %dg" : "") + " = " + op +
                     "_grad " + act + " %x, %u, %d, %dy" + gateOperand + " : (" + gradInTypes +
                     ") -> (" + gradOutTypes + ")\n  return %y, %dx, %du, %dd" +
                     (gated ? ", %dg" : "") + " : " + tx + ", " + gradOutTypes;
  std::vector<int64_t> sx = grouped ? std::vector<int64_t>{groups, rows, d}
                                    : std::vector<int64_t>{rows, d},
                       su = grouped ? std::vector<int64_t>{groups, d, f}
                                    : std::vector<int64_t>{d, f},
                       sd = grouped ? std::vector<int64_t>{groups, f, d}
                                    : std::vector<int64_t>{f, d};
  std::vector<Tensor> args = {tensorOf(x, sx), tensorOf(up, su), tensorOf(down, sd),
                              tensorOf(gated ? gate : Floats(groups * d * f), su),
                              tensorOf(dy, sx)};
  auto want = interpret("(%x: " + tx + ", %u: " + tu + ", %d: " + td + ", %g: " + tu +
                            ", %dy: " + tx + ") -> (" + tx + ", " + gradOutTypes + ")",
                        body, args);
  ASSERT_EQ(want.size(), gated ? 5u : 4u);
  if (fwd)
    expectClose(y, want[0], d * f);
  expectClose(dx, want[1], d * f);
  expectClose(dup, want[2], rows * d);
  expectClose(ddown, want[3], rows * f);
  if (gated)
    expectClose(dgate, want[4], rows * d);
}

TEST(HalideKernelTest, ExpertFFNSwiGLUForwardAndBackward) {
  ScratchWithin scratch({"expert_ffn_k", "expert_ffn_grad_k"});
  checkFFN(expert_ffn_k, expert_ffn_grad_k, 3, 4, 8, 12, "swiglu");
}

// Shapes the register-blocked schedule tiles: 16 = two AVX2 vectors, 24 =
// three, 12 rows = two blocks of 6 (and, with AVX-512, one-vector blocks).
TEST(HalideKernelTest, ExpertFFNBlockedForwardAndBackward) {
  ScratchWithin scratch({"expert_ffn_blocked_k", "expert_ffn_blocked_grad_k"});
  checkFFN(expert_ffn_blocked_k, expert_ffn_blocked_grad_k, 2, 12, 16, 32, "swiglu");
}

TEST(HalideKernelTest, DenseFFNBlockedReLUForwardAndBackward) {
  ScratchWithin scratch({"ffn_relu_blocked_k", "ffn_relu_blocked_grad_k"});
  checkFFN(ffn_relu_blocked_k, ffn_relu_blocked_grad_k, 1, 10, 32, 16, "relu");
}

TEST(HalideKernelTest, DenseFFNGELUForwardAndBackward) {
  ScratchWithin scratch({"ffn_gelu_k", "ffn_gelu_grad_k"});
  checkFFN(ffn_gelu_k, ffn_gelu_grad_k, 1, 6, 8, 12, "gelu");
}

TEST(HalideKernelTest, DenseFFNReLUBackward) {
  ScratchWithin scratch({"ffn_relu_grad_k"});
  checkFFN(static_cast<int (*)(halide_buffer_t *, halide_buffer_t *, halide_buffer_t *,
                               halide_buffer_t *, halide_buffer_t *, halide_buffer_t *,
                               halide_buffer_t *)>(nullptr),
           ffn_relu_grad_k, 1, 6, 8, 12, "relu");
}

// The backward reading the forward's saved pre-activations instead of
// recomputing them (the default lowering), blocked and unblocked shapes,
// gated and not.
TEST(HalideKernelTest, ExpertFFNSavedPreactivations) {
  ScratchWithin scratch({"expert_ffn_saved_k", "expert_ffn_saved_grad_k"});
  checkFFN(expert_ffn_saved_k, expert_ffn_saved_grad_k, 2, 12, 16, 32, "swiglu", true);
}

// Contractions over 1024 slots or tokens are k-blocked: four experts in
// parallel, and one dense FFN parallel over column blocks.
TEST(HalideKernelTest, ExpertFFNKBlocked) {
  ScratchWithin scratch({"expert_ffn_kblocked_k", "expert_ffn_kblocked_grad_k"});
  checkFFN(expert_ffn_kblocked_k, expert_ffn_kblocked_grad_k, 4, 1024, 16, 32, "swiglu", true);
}

TEST(HalideKernelTest, DenseFFNGELUKBlocked) {
  ScratchWithin scratch({"ffn_gelu_kblocked_k", "ffn_gelu_kblocked_grad_k"});
  checkFFN(ffn_gelu_kblocked_k, ffn_gelu_kblocked_grad_k, 1, 1024, 16, 24, "gelu", true);
}

TEST(HalideKernelTest, DenseFFNGELUSavedPreactivations) {
  ScratchWithin scratch({"ffn_gelu_saved_k", "ffn_gelu_saved_grad_k"});
  checkFFN(ffn_gelu_saved_k, ffn_gelu_saved_grad_k, 1, 6, 8, 12, "gelu", true);
}

TEST(HalideKernelTest, ExpertFFNWithOpenBLAS) {
  ScratchWithin scratch({"expert_ffn_blas_k", "expert_ffn_blas_grad_k",
                         "expert_ffn_blas_recompute_k", "expert_ffn_blas_recompute_grad_k"});
  checkFFN(expert_ffn_blas_k, expert_ffn_blas_grad_k, 3, 200, 16, 24, "swiglu", true);
  checkFFN(expert_ffn_blas_recompute_k, expert_ffn_blas_recompute_grad_k, 4, 12, 16, 32, "swiglu");
}

TEST(HalideKernelTest, DenseFFNWithOpenBLAS) {
  ScratchWithin scratch(
      {"ffn_gelu_blas_k", "ffn_gelu_blas_grad_k", "ffn_relu_blas_k", "ffn_relu_blas_grad_k"});
  checkFFN(ffn_gelu_blas_k, ffn_gelu_blas_grad_k, 1, 130, 16, 72, "gelu", true);
  checkFFN(ffn_relu_blas_k, ffn_relu_blas_grad_k, 1, 10, 32, 16, "relu");
}

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
  EXPECT_NE(permute_k(bx, bs, bbuf), 0);
  EXPECT_NE(lastError.find("slot out of range: 12"), std::string::npos) << lastError;
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
  expectClose(db, want[0], 1);
}

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

template <typename Fwd, typename Bwd>
void checkAttention(Fwd fwd, Bwd bwd, int batch, int seq, int heads, int kvHeads, int hd,
                    bool rope) {
  int qw = heads * hd, kw = kvHeads * hd;
  auto q = randomVector(batch * seq * qw, 40), k = randomVector(batch * seq * kw, 41),
       v = randomVector(batch * seq * kw, 42), dout = randomVector(batch * seq * qw, 43);
  Floats o(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  auto b3 = [&](Floats &x, int w) { return Buffer<float>(x.data(), w, seq, batch); };
  auto bq = b3(q, qw), bk = b3(k, kw), bv = b3(v, kw), bdo = b3(dout, qw), bo = b3(o, qw),
       bdq = b3(dq, qw), bdk = b3(dk, kw), bdv = b3(dv, kw);
  ASSERT_EQ(fwd(bq, bk, bv, bo), 0) << lastError;
  ASSERT_EQ(bwd(bq, bk, bv, bdo, bdq, bdk, bdv), 0) << lastError;
  std::string tq = type3(batch, seq, qw), tk = type3(batch, seq, kw);
  std::string attrs = rope ? " {rope_theta = 1.0e4 : f32}" : "";
  std::string hs = " heads " + std::to_string(heads) + " kv_heads " + std::to_string(kvHeads);
  auto want =
      interpret("(%q: " + tq + ", %k: " + tk + ", %v: " + tk + ", %do: " + tq + ") -> (" + tq +
                    ", " + tq + ", " + tk + ", " + tk + ")",
                "  %o = moe.attention %q, %k, %v" + hs + attrs + " : " + tq + ", " + tk + ", " +
                    tk + "\n  %dq, %dk, %dv = moe.attention_grad %q, %k, %v, %do" + hs + attrs +
                    " : " + tq + ", " + tk + ", " + tk + "\n  return %o, %dq, %dk, %dv : " + tq +
                    ", " + tq + ", " + tk + ", " + tk,
                {tensorOf(q, {batch, seq, qw}), tensorOf(k, {batch, seq, kw}),
                 tensorOf(v, {batch, seq, kw}), tensorOf(dout, {batch, seq, qw})});
  ASSERT_EQ(want.size(), 4u);
  expectClose(o, want[0], seq * hd);
  expectClose(dq, want[1], seq * hd);
  expectClose(dk, want[2], seq * hd * heads);
  expectClose(dv, want[3], seq * heads);
}

TEST(HalideKernelTest, GroupedQueryAttentionWithRotaryEmbeddings) {
  ScratchWithin scratch({"attention_rope_k", "attention_rope_grad_k"});
  checkAttention(attention_rope_k, attention_rope_grad_k, 2, 5, 4, 2, 4, true);
}

// Sequence and head dimension multiples of the vector width: the
// vectorised row schedules (keys-major scores, head-dim loops).
TEST(HalideKernelTest, GroupedQueryAttentionVectorised) {
  ScratchWithin scratch({"attention_vec_k", "attention_vec_grad_k"});
  checkAttention(attention_vec_k, attention_vec_grad_k, 2, 16, 4, 2, 8, true);
}

// A sequence of multiples of 4 vectors: score rows in register blocks of
// keys, rounded up past the diagonal.
TEST(HalideKernelTest, GroupedQueryAttentionBlockedRows) {
  ScratchWithin scratch({"attention_blocked_k", "attention_blocked_grad_k"});
  checkAttention(attention_blocked_k, attention_blocked_grad_k, 2, 64, 4, 2, 16, true);
}

TEST(HalideKernelTest, MultiHeadAttentionWithoutPositionEncoding) {
  ScratchWithin scratch({"attention_mha_k", "attention_mha_grad_k"});
  checkAttention(attention_mha_k, attention_mha_grad_k, 1, 7, 2, 2, 6, false);
}

/// Fused gating and the router gradient against the interpreter; `attrs`
/// are the op attributes matching the kernels' generator parameters.
template <typename Gate, typename Grad>
void checkRouting(Gate gate, Grad grad, const std::string &scoring, bool bias, int capacity,
                  const std::string &attrs, int T = 6, int D = 8, int E = 4) {
  const int K = 2;
  auto x = randomVector(T * D, 50), w = randomVector(D * E, 51), b = randomVector(bias ? E : 1, 52),
       dg = randomVector(T * K, 53);
  for (float &v : b)
    v *= 0.3f;
  Floats gates(T * K), aux(1), dx(T * D), dw(D * E), daux = {0.7f};
  std::vector<int32_t> experts(T * K), slots(T * K), counts(E);
  auto bx = view(x, D, T), bw = view(w, E, D), bdg = view(dg, K, T), bgates = view(gates, K, T),
       bdx = view(dx, D, T), bdw = view(dw, E, D);
  Buffer<float> bb(b.data(), (int)b.size());
  Buffer<int32_t> be(experts.data(), K, T), bs(slots.data(), K, T), bc(counts.data(), E);
  Buffer<float> baux = Buffer<float>::make_scalar(aux.data()),
                bdaux = Buffer<float>::make_scalar(daux.data());
  ASSERT_EQ(gate(bx, bw, bb, bgates, be, bs, bc, baux), 0) << lastError;
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
  expectClose(gates, want[0], E);
  EXPECT_EQ(experts, want[1].ints);
  EXPECT_EQ(slots, want[2].ints);
  EXPECT_EQ(counts, want[3].ints);
  expectClose(aux, want[4], T * E);
  expectClose(dx, want[5], D * E);
  expectClose(dw, want[6], T * E);
}

TEST(HalideKernelTest, SoftmaxFusedGateWithDropsAndRouterGrad) {
  ScratchWithin scratch({"fused_gate_softmax_k", "router_grad_softmax_k"});
  checkRouting(fused_gate_softmax_k, router_grad_softmax_k, "softmax", false, 2,
               "{renormalize = true, aux_loss_coef = 0.1 : f32, z_loss_coef = 0.01 : f32}");
}

TEST(HalideKernelTest, SigmoidFusedGateWithBiasAndRouterGrad) {
  ScratchWithin scratch({"fused_gate_sigmoid_k", "router_grad_sigmoid_k"});
  checkRouting(fused_gate_sigmoid_k, router_grad_sigmoid_k, "sigmoid", true, 6,
               "{routed_scaling = 2.5 : f32, aux_loss_coef = 0.1 : f32}");
}

TEST(HalideKernelTest, RoutingVectorisedWithTails) {
  ScratchWithin scratch({"fused_gate_wide_k", "router_grad_wide_k"});
  // 12 experts (a vector and a tail), width 20, 130 tokens (blocks of 64
  // and a tail).
  checkRouting(fused_gate_wide_k, router_grad_wide_k, "softmax", false, 30,
               "{renormalize = true, aux_loss_coef = 0.1 : f32, z_loss_coef = 0.01 : f32}", 130, 20,
               12);
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
