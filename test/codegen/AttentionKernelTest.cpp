//===- AttentionKernelTest.cpp - attention and its gradient -----------------===//
//
// The kernel variants this file tests: `kernel: NAME GENERATOR PARAMS...`
// lines, which test/codegen/CMakeLists.txt reads and generates with
// moe-halide-gen (the scratch bound and KernelContractTest see them too).
// kernel: attention_rope_k attention batch=2 seq=5 heads=4 kv_heads=2 head_dim=4 rope=true theta=10000
// kernel: attention_rope_grad_k attention_grad batch=2 seq=5 heads=4 kv_heads=2 head_dim=4 rope=true theta=10000
// kernel: attention_vec_k attention batch=2 seq=16 heads=4 kv_heads=2 head_dim=8 rope=true theta=10000
// kernel: attention_vec_grad_k attention_grad batch=2 seq=16 heads=4 kv_heads=2 head_dim=8 rope=true theta=10000
// kernel: attention_blocked_k attention batch=2 seq=64 heads=4 kv_heads=2 head_dim=16 rope=true theta=10000
// kernel: attention_blocked_grad_k attention_grad batch=2 seq=64 heads=4 kv_heads=2 head_dim=16 rope=true theta=10000
// kernel: attention_mha_k attention batch=1 seq=7 heads=2 kv_heads=2 head_dim=6
// kernel: attention_mha_grad_k attention_grad batch=1 seq=7 heads=2 kv_heads=2 head_dim=6
// kernel: latent_k latent_attention batch=2 seq=5 heads=3 content_dim=4 rope_dim=2 v_dim=3 rope=true theta=10000
// kernel: latent_grad_k latent_attention_grad batch=2 seq=5 heads=3 content_dim=4 rope_dim=2 v_dim=3 rope=true theta=10000
// kernel: latent_vec_k latent_attention batch=2 seq=64 heads=2 content_dim=8 rope_dim=8 v_dim=16 rope=true theta=10000
// kernel: latent_vec_grad_k latent_attention_grad batch=2 seq=64 heads=2 content_dim=8 rope_dim=8 v_dim=16 rope=true theta=10000
// kernel: latent_plain_k latent_attention batch=1 seq=7 heads=2 content_dim=3 rope_dim=3 v_dim=5
// kernel: latent_plain_grad_k latent_attention_grad batch=1 seq=7 heads=2 content_dim=3 rope_dim=3 v_dim=5

#include "KernelTestUtil.h"

namespace {

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
  expectClose(o, want[0], 2 * seq + hd);
  expectClose(dq, want[1], 3 * seq + 2 * hd);
  expectClose(dk, want[2], (heads / kvHeads + 2) * seq + 2 * hd);
  expectClose(dv, want[3], (heads / kvHeads + 1) * seq + hd);
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

/// Latent attention (q [H (dn + dr)], k [H dn], k_rope [dr], v [H dv]) and
/// its gradient against the interpreter.
template <typename Fwd, typename Bwd>
void checkLatent(Fwd fwd, Bwd bwd, int batch, int seq, int heads, int dn, int dr, int dv,
                 bool rope) {
  int qw = heads * (dn + dr), kw = heads * dn, vw = heads * dv;
  auto q = randomVector(batch * seq * qw, 50), k = randomVector(batch * seq * kw, 51),
       kr = randomVector(batch * seq * dr, 52), v = randomVector(batch * seq * vw, 53),
       dout = randomVector(batch * seq * vw, 54);
  Floats o(v.size()), dq(q.size()), dk(k.size()), dkr(kr.size()), dv_(v.size());
  auto b3 = [&](Floats &x, int w) { return Buffer<float>(x.data(), w, seq, batch); };
  auto bq = b3(q, qw), bk = b3(k, kw), bkr = b3(kr, dr), bv = b3(v, vw), bdo = b3(dout, vw),
       bo = b3(o, vw), bdq = b3(dq, qw), bdk = b3(dk, kw), bdkr = b3(dkr, dr), bdv = b3(dv_, vw);
  ASSERT_EQ(fwd(bq, bk, bkr, bv, bo), 0) << lastError;
  ASSERT_EQ(bwd(bq, bk, bkr, bv, bdo, bdq, bdk, bdkr, bdv), 0) << lastError;
  std::string tq = type3(batch, seq, qw), tk = type3(batch, seq, kw), tr = type3(batch, seq, dr),
              tv = type3(batch, seq, vw);
  std::string attrs = rope ? " {rope_theta = 1.0e4 : f32}" : "";
  std::string hs = " heads " + std::to_string(heads);
  std::string types = tq + ", " + tk + ", " + tr + ", " + tv;
  auto want = interpret(
      "(%q: " + tq + ", %k: " + tk + ", %kr: " + tr + ", %v: " + tv + ", %do: " + tv + ") -> (" +
          tv + ", " + types + ")",
      "  %o = moe.latent_attention %q, %k, %kr, %v" + hs + attrs + " : " + types + " -> " + tv +
          "\n  %dq, %dk, %dkr, %dv = moe.latent_attention_grad %q, %k, %kr, "
          "%v, %do" +
          hs + attrs + " : " + types + "\n  return %o, %dq, %dk, %dkr, %dv : " + tv + ", " + types,
      {tensorOf(q, {batch, seq, qw}), tensorOf(k, {batch, seq, kw}), tensorOf(kr, {batch, seq, dr}),
       tensorOf(v, {batch, seq, vw}), tensorOf(dout, {batch, seq, vw})});
  ASSERT_EQ(want.size(), 5u);
  int width = dn + dr + dv;
  expectClose(o, want[0], 2 * seq + width);
  expectClose(dq, want[1], 3 * seq + 2 * width);
  expectClose(dk, want[2], (heads + 2) * seq + 2 * width);
  expectClose(dkr, want[3], (heads + 2) * seq + 2 * width);
  expectClose(dv_, want[4], (heads + 1) * seq + width);
}

TEST(HalideKernelTest, LatentAttentionWithRotaryKey) {
  ScratchWithin scratch({"latent_k", "latent_grad_k"});
  checkLatent(latent_k, latent_grad_k, 2, 5, 3, 4, 2, 3, true);
}

// Widths of whole vectors and a sequence of 4 register blocks: the
// vectorised schedules, with values wider than the query/key heads.
TEST(HalideKernelTest, LatentAttentionVectorised) {
  ScratchWithin scratch({"latent_vec_k", "latent_vec_grad_k"});
  checkLatent(latent_vec_k, latent_vec_grad_k, 2, 64, 2, 8, 8, 16, true);
}

TEST(HalideKernelTest, LatentAttentionWithoutRotation) {
  ScratchWithin scratch({"latent_plain_k", "latent_plain_grad_k"});
  checkLatent(latent_plain_k, latent_plain_grad_k, 1, 7, 2, 3, 3, 5, false);
}

/// Fused gating and the router gradient against the interpreter; `attrs`
/// are the op attributes matching the kernels' generator parameters.

} // namespace
