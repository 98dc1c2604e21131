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

/// Fused gating and the router gradient against the interpreter; `attrs`
/// are the op attributes matching the kernels' generator parameters.

} // namespace
