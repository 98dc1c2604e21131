//===- FFNKernelTest.cpp - dense and expert FFNs, forward and backward ------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: expert_ffn_k ffn groups=3 rows=4 width=8 hidden=12 activation=swiglu
// kernel: expert_ffn_grad_k ffn_grad groups=3 rows=4 width=8 hidden=12 activation=swiglu
// kernel: expert_ffn_blocked_k ffn groups=2 rows=12 width=16 hidden=32 activation=swiglu
// kernel: expert_ffn_blocked_grad_k ffn_grad groups=2 rows=12 width=16 hidden=32 activation=swiglu
// kernel: ffn_relu_blocked_k ffn groups=1 rows=10 width=32 hidden=16 activation=relu
// kernel: ffn_relu_blocked_grad_k ffn_grad groups=1 rows=10 width=32 hidden=16 activation=relu
// kernel: expert_ffn_saved_k ffn groups=2 rows=12 width=16 hidden=32 activation=swiglu save=true
// kernel: expert_ffn_saved_grad_k ffn_grad groups=2 rows=12 width=16 hidden=32 activation=swiglu saved=true
// kernel: ffn_gelu_saved_k ffn groups=1 rows=6 width=8 hidden=12 activation=gelu save=true
// kernel: ffn_gelu_saved_grad_k ffn_grad groups=1 rows=6 width=8 hidden=12 activation=gelu saved=true
// Long contractions over rows (>= 1024): the weight gradients are k-blocked,
// parallel over groups (4) or over column blocks (1).
// kernel: expert_ffn_kblocked_k ffn groups=4 rows=1024 width=16 hidden=32 activation=swiglu save=true
// kernel: expert_ffn_kblocked_grad_k ffn_grad groups=4 rows=1024 width=16 hidden=32 activation=swiglu saved=true
// kernel: ffn_gelu_kblocked_k ffn groups=1 rows=1024 width=16 hidden=24 activation=gelu save=true
// kernel: ffn_gelu_kblocked_grad_k ffn_grad groups=1 rows=1024 width=16 hidden=24 activation=gelu saved=true
// The same families with OpenBLAS extern GEMMs (blas=true): row and column
// blocks with tails, groups below and at 4, saved and recomputed
// pre-activations.
// kernel: expert_ffn_blas_k ffn groups=3 rows=200 width=16 hidden=24 activation=swiglu save=true blas=true
// kernel: expert_ffn_blas_grad_k ffn_grad groups=3 rows=200 width=16 hidden=24 activation=swiglu saved=true blas=true
// kernel: expert_ffn_blas_recompute_k ffn groups=4 rows=12 width=16 hidden=32 activation=swiglu blas=true
// kernel: expert_ffn_blas_recompute_grad_k ffn_grad groups=4 rows=12 width=16 hidden=32 activation=swiglu blas=true
// kernel: ffn_gelu_blas_k ffn groups=1 rows=130 width=16 hidden=72 activation=gelu save=true blas=true
// kernel: ffn_gelu_blas_grad_k ffn_grad groups=1 rows=130 width=16 hidden=72 activation=gelu saved=true blas=true
// kernel: ffn_relu_blas_k ffn groups=1 rows=10 width=32 hidden=16 activation=relu blas=true
// kernel: ffn_relu_blas_grad_k ffn_grad groups=1 rows=10 width=32 hidden=16 activation=relu blas=true
// Routed rows only (moe.expert_ffn's `rows`): the OpenBLAS form skips the
// empty slots of each segment; the Halide schedule takes the counts and
// computes every row.
// kernel: expert_ffn_routed_k ffn groups=3 rows=200 width=16 hidden=24 activation=swiglu save=true blas=true segments=2
// kernel: expert_ffn_routed_grad_k ffn_grad groups=3 rows=200 width=16 hidden=24 activation=swiglu saved=true blas=true segments=2
// kernel: expert_ffn_routed_gelu_k ffn groups=4 rows=96 width=16 hidden=32 activation=gelu blas=true segments=1
// kernel: expert_ffn_routed_gelu_grad_k ffn_grad groups=4 rows=96 width=16 hidden=32 activation=gelu blas=true segments=1
// kernel: expert_ffn_routed_halide_k ffn groups=2 rows=12 width=16 hidden=32 activation=swiglu save=true segments=3
// kernel: expert_ffn_routed_halide_grad_k ffn_grad groups=2 rows=12 width=16 hidden=32 activation=swiglu saved=true segments=3
// kernel: ffn_gelu_k ffn groups=1 rows=6 width=8 hidden=12 activation=gelu
// kernel: ffn_gelu_grad_k ffn_grad groups=1 rows=6 width=8 hidden=12 activation=gelu
// kernel: ffn_relu_grad_k ffn_grad groups=1 rows=6 width=8 hidden=12 activation=relu

#include "KernelTestUtil.h"

#include <cmath>

namespace {

/// Checks an FFN forward and/or backward kernel pair over `groups` groups
/// (expert_ffn when grouped, ffn otherwise) with activation `act`. `saved`:
/// the forward saves its pre-activations and the backward reads them.
///
/// `segments` > 0: each group's rows are that many segments, segment s of
/// group g routed in its first counts[g * segments + s] rows (some empty,
/// some full, some counted past the segment's end), x and dy zero in the
/// others; the kernels get the counts, and y and dx start as NaN so that
/// rows a kernel skips without zeroing show.
template <typename Fwd, typename Bwd>
void checkFFN(Fwd fwd, Bwd bwd, int groups, int rows, int d, int f, const std::string &act,
              bool saved = false, int segments = 0) {
  bool gated = act == "swiglu";
  auto x = randomVector(groups * rows * d, 14), up = randomVector(groups * d * f, 15),
       down = randomVector(groups * f * d, 16), gate = randomVector(gated ? groups * d * f : 1, 17),
       dy = randomVector(groups * rows * d, 18);
  std::vector<int32_t> counts(segments ? groups * segments : 1, 0);
  if (segments) {
    int length = rows / segments;
    for (int i = 0; i < groups * segments; ++i) {
      counts[i] = i % 4 == 0 ? 0 : i % 4 == 1 ? length + 5 : (i * 7919) % length;
      for (int c = std::min(counts[i], length); c < length; ++c)
        for (int k = 0; k < d; ++k)
          x[(i * length + c) * d + k] = dy[(i * length + c) * d + k] = 0.0f;
    }
  }
  Buffer<int32_t> bcounts(counts.data(), static_cast<int>(counts.size()));
  Floats y(x.size(), segments ? NAN : 0.0f), dx(x.size(), segments ? NAN : 0.0f), dup(up.size()),
      ddown(down.size()), dgate(gate.size());
  auto b3 = [](Floats &v, int a, int b, int c) { return Buffer<float>(v.data(), a, b, c); };
  auto bx = b3(x, d, rows, groups), bup = b3(up, f, d, groups), bdown = b3(down, d, f, groups),
       bgate = gated ? b3(gate, f, d, groups) : b3(gate, 1, 1, 1), bdy = b3(dy, d, rows, groups),
       by = b3(y, d, rows, groups), bdx = b3(dx, d, rows, groups), bdup = b3(dup, f, d, groups),
       bddown = b3(ddown, d, f, groups),
       bdgate = gated ? b3(dgate, f, d, groups) : b3(dgate, 1, 1, 1);
  // Saved pre-activations a routed forward writes: NaN in the rows it may
  // leave unwritten, which the backward must not read.
  float unwritten = segments && fwd ? NAN : 0.0f;
  Floats preUp(saved ? groups * rows * f : 1, unwritten),
      preGate(saved && gated ? groups * rows * f : 1, unwritten);
  auto bpu = saved ? b3(preUp, f, rows, groups) : b3(preUp, 1, 1, 1),
       bpg = saved && gated ? b3(preGate, f, rows, groups) : b3(preGate, 1, 1, 1);
  if (fwd) {
    ASSERT_EQ(fwd(bx, bup, bdown, bgate, bcounts, by, bpu, bpg), 0) << lastError;
  }
  ASSERT_EQ(bwd(bx, bup, bdown, bgate, bdy, bpu, bpg, bcounts, bdx, bdup, bddown, bdgate), 0)
      << lastError;

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
    expectClose(y, want[0], d + f);
  expectClose(dx, want[1], 2 * (d + f));
  expectClose(dup, want[2], rows + d + f);
  expectClose(ddown, want[3], rows + d);
  if (gated)
    expectClose(dgate, want[4], rows + d + f);
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
                               halide_buffer_t *, halide_buffer_t *)>(nullptr),
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

TEST(HalideKernelTest, ExpertFFNRoutedRowsOnly) {
  ScratchWithin scratch({"expert_ffn_routed_k", "expert_ffn_routed_grad_k",
                         "expert_ffn_routed_gelu_k", "expert_ffn_routed_gelu_grad_k",
                         "expert_ffn_routed_halide_k", "expert_ffn_routed_halide_grad_k"});
  checkFFN(expert_ffn_routed_k, expert_ffn_routed_grad_k, 3, 200, 16, 24, "swiglu", true, 2);
  checkFFN(expert_ffn_routed_gelu_k, expert_ffn_routed_gelu_grad_k, 4, 96, 16, 32, "gelu", false,
           1);
  checkFFN(expert_ffn_routed_halide_k, expert_ffn_routed_halide_grad_k, 2, 12, 16, 32, "swiglu",
           true, 3);
}

TEST(HalideKernelTest, DenseFFNWithOpenBLAS) {
  ScratchWithin scratch(
      {"ffn_gelu_blas_k", "ffn_gelu_blas_grad_k", "ffn_relu_blas_k", "ffn_relu_blas_grad_k"});
  checkFFN(ffn_gelu_blas_k, ffn_gelu_blas_grad_k, 1, 130, 16, 72, "gelu", true);
  checkFFN(ffn_relu_blas_k, ffn_relu_blas_grad_k, 1, 10, 32, 16, "relu");
}

} // namespace
