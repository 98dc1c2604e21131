//===- LowPrecisionKernelTest.cpp - every family in bf16 and f16 -----------===//
//
// Each generator's low-precision variant (its float arguments named in
// bf16_args or f16_args, as the kernel registry names a mixed-precision
// model's, codegen/generators/Shapes.h) against its f32 variant, whose
// results the other kernel tests check against the reference interpreter.
// Both run on the same inputs (rounded to the low-precision type where the
// variant stores them); the low-precision outputs then differ from the f32
// ones by their final rounding (and by rounded saved pre-activations in the
// FFN), a few units of the type's precision. A wrong type, an unwritten
// output or an unconverted read is off by far more.
//
// kernel: cast_k cast size=40
// kernel: lp_cast_to_bf16 cast size=40 bf16_args=z
// kernel: lp_cast_from_bf16 cast size=40 bf16_args=a
// kernel: lp_cast_to_f16 cast size=40 f16_args=z
// kernel: lp_add add size=40 bf16_args=a,b,z
// kernel: lp_embedding embedding tokens=6 vocab=10 width=16 bf16_args=table,y
// kernel: lp_embedding_grad embedding_grad tokens=6 vocab=10 width=16 bf16_args=dy,dtable
// kernel: lp_cross_entropy cross_entropy tokens=6 vocab=11 bf16_args=logits
// kernel: lp_cross_entropy_grad cross_entropy_grad tokens=6 vocab=11 bf16_args=logits,dlogits
// kernel: ce_v40_k cross_entropy tokens=5 vocab=40
// kernel: ce_grad_v40_k cross_entropy_grad tokens=5 vocab=40
// kernel: lp_cross_entropy_f16 cross_entropy tokens=5 vocab=40 f16_args=logits
// kernel: lp_cross_entropy_grad_f16 cross_entropy_grad tokens=5 vocab=40 f16_args=logits,dlogits
// kernel: lp_rms_norm rms_norm rows=5 width=20 epsilon=0.001 bf16_args=x,g,y
// kernel: lp_rms_norm_f16 rms_norm rows=5 width=20 epsilon=0.001 f16_args=x,g,y
// kernel: lp_rms_norm_grad rms_norm_grad rows=5 width=20 epsilon=0.001 bf16_args=x,g,dy,dx,dg
// kernel: lp_sigmoid_gate sigmoid_gate rows=6 width=20 bf16_args=x,g,z
// kernel: lp_clamp clamp size=40 limit=0.5 bf16_args=a,z
// kernel: lp_clamp_grad clamp_grad size=40 limit=0.5 bf16_args=x,dy,dx
// kernel: lp_sigmoid_gate_grad sigmoid_gate_grad rows=6 width=20 bf16_args=x,g,dy,dx,dg
// kernel: lp_linear linear rows=8 in=16 out=24 bias=true residual=true bf16_args=x,w,b,r,y
// kernel: lp_linear_grad linear_grad rows=8 in=16 out=24 bf16_args=x,w,dy,dx,dw
// kernel: lp_linear_blas linear rows=70 in=16 out=24 bias=true residual=true blas=true bf16_args=x,w,b,r,y
// kernel: lp_linear_blas_plain linear rows=3 in=5 out=6 blas=true f16_args=x,w,y
// kernel: lp_linear_grad_blas linear_grad rows=70 in=16 out=200 blas=true bf16_args=x,w,dy,dx,dw
// kernel: lp_bias_grad bias_grad rows=7 out=12 bf16_args=dy,db
// kernel: lp_attention attention batch=2 seq=5 heads=4 kv_heads=2 head_dim=4 rope=true theta=10000 bf16_args=q,k,v,o
// kernel: lp_attention_grad attention_grad batch=2 seq=5 heads=4 kv_heads=2 head_dim=4 rope=true theta=10000 bf16_args=q,k,v,dout,dq,dk,dv
// kernel: lp_attention_mha_f16 attention batch=1 seq=7 heads=2 kv_heads=2 head_dim=6 f16_args=q,k,v,o
// kernel: lp_ffn_saved ffn groups=2 rows=12 width=16 hidden=32 activation=swiglu save=true bf16_args=x,up,down,gate,y,pre_up,pre_gate
// kernel: lp_ffn_saved_grad ffn_grad groups=2 rows=12 width=16 hidden=32 activation=swiglu saved=true bf16_args=x,up,down,gate,dy,pre_up,pre_gate,dx,dup,ddown,dgate
// kernel: lp_ffn_gelu_f16 ffn groups=1 rows=6 width=8 hidden=12 activation=gelu f16_args=x,up,down,y
// kernel: lp_ffn_gelu_grad ffn_grad groups=1 rows=6 width=8 hidden=12 activation=gelu bf16_args=x,up,down,dy,dx,dup,ddown
// kernel: lp_ffn_blas ffn groups=3 rows=200 width=16 hidden=24 activation=swiglu save=true blas=true bf16_args=x,up,down,gate,y,pre_up,pre_gate
// kernel: lp_ffn_blas_grad ffn_grad groups=3 rows=200 width=16 hidden=24 activation=swiglu saved=true blas=true bf16_args=x,up,down,gate,dy,pre_up,pre_gate,dx,dup,ddown,dgate
// kernel: lp_ffn_relu_blas ffn groups=1 rows=10 width=32 hidden=16 activation=relu blas=true bf16_args=x,up,down,y
// kernel: lp_ffn_relu_blas_grad ffn_grad groups=1 rows=10 width=32 hidden=16 activation=relu blas=true bf16_args=x,up,down,dy,dx,dup,ddown
// kernel: lp_permute permute tokens=6 k=2 slots_total=12 width=8 bf16_args=x,buf
// kernel: lp_unpermute unpermute tokens=6 k=2 slots_total=12 width=8 weighted=true bf16_args=buf,weights,out
// kernel: lp_unpermute_grad unpermute_grad tokens=6 k=2 slots_total=12 width=8 bf16_args=buf,weights,dout,dbuf,dweights
// kernel: lp_fused_gate fused_gate tokens=6 width=8 num_experts=4 top_k=2 capacity=2 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01 bf16_args=x,w,gates
// kernel: lp_fused_gate_sigmoid fused_gate tokens=6 width=8 num_experts=4 top_k=2 capacity=6 scoring=sigmoid has_bias=true routed_scaling=2.5 aux_loss_coef=0.1 bf16_args=x,w,gates
// kernel: lp_router_grad router_grad tokens=6 width=8 num_experts=4 top_k=2 scoring=softmax renormalize=true aux_loss_coef=0.1 z_loss_coef=0.01 bf16_args=x,w,dgates,dx,dw
// kernel: lp_router_grad_sigmoid router_grad tokens=6 width=8 num_experts=4 top_k=2 scoring=sigmoid has_bias=true routed_scaling=2.5 aux_loss_coef=0.1 bf16_args=x,w,dgates,dx,dw
// kernel: lp_fused_gate_limited fused_gate tokens=64 width=8 num_experts=8 top_k=2 capacity=64 scoring=sigmoid has_bias=true renormalize=true routed_scaling=2.5 aux_loss_coef=0.1 expert_groups=4 topk_groups=2 bf16_args=x,w,gates
// kernel: lp_router_grad_limited router_grad tokens=64 width=8 num_experts=8 top_k=2 scoring=sigmoid has_bias=true renormalize=true routed_scaling=2.5 aux_loss_coef=0.1 expert_groups=4 topk_groups=2 bf16_args=x,w,dgates,dx,dw
//
//===----------------------------------------------------------------------===//

#include "KernelTestUtil.h"

#include <cstring>
#include <functional>
#include <memory>
#include <utility>

namespace {

/// Calls a kernel on an array of buffers, whatever its arity.
using Invoker = std::function<int(halide_buffer_t **)>;
template <class... B, size_t... I>
int callWith(int (*fn)(B...), halide_buffer_t **bufs, std::index_sequence<I...>) {
  return fn(bufs[I]...);
}
template <class... B> Invoker invoker(int (*fn)(B...)) {
  return
      [fn](halide_buffer_t **bufs) { return callWith(fn, bufs, std::index_sequence_for<B...>{}); };
}

uint16_t toBF16(float f) { // round to nearest, ties to even
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
float fromBF16(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t toF16(float f) {
  _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
float fromF16(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

bool isLow(const halide_type_t &t) {
  return (t.code == halide_type_bfloat || t.code == halide_type_float) && t.bits == 16;
}
float widen(const halide_type_t &t, uint16_t v) {
  return t.code == halide_type_bfloat ? fromBF16(v) : fromF16(v);
}
uint16_t narrow(const halide_type_t &t, float v) {
  return t.code == halide_type_bfloat ? toBF16(v) : toF16(v);
}

/// One argument's storage: its shape (from a bounds query of the f32
/// variant) and its elements.
struct Arg {
  halide_buffer_t buffer = {};
  std::vector<halide_dimension_t> dims;
  moert::AlignedBytes data; // 64-byte aligned, as the step program's arenas
  int64_t count() const {
    int64_t n = 1;
    for (int d = 0; d < buffer.dimensions; ++d)
      n *= dims[d].extent;
    return n;
  }
};

/// Runs `lowp` and its f32 twin `f32` on the same random inputs and
/// compares every float output within `ulps` units of the low-precision
/// type's rounding, relative to the element and to the output's RMS.
void expectTwins(const char *name, Invoker lowp, const halide_filter_metadata_t *lowMeta,
                 Invoker f32, const halide_filter_metadata_t *f32Meta, double ulps = 4) {
  SCOPED_TRACE(name);
  const int n = f32Meta->num_arguments;
  ASSERT_EQ(n, lowMeta->num_arguments);
  // The shapes: a bounds query (null hosts) fills each constrained buffer.
  std::vector<Arg> ref(n), low(n);
  std::vector<halide_buffer_t *> ptrs(n);
  for (int i = 0; i < n; ++i) {
    const halide_filter_argument_t &a = f32Meta->arguments[i];
    ASSERT_TRUE(a.kind == halide_argument_kind_input_buffer ||
                a.kind == halide_argument_kind_output_buffer)
        << a.name;
    ref[i].dims.assign(std::max(a.dimensions, 1), halide_dimension_t{});
    ref[i].buffer.type = a.type;
    ref[i].buffer.dimensions = a.dimensions;
    ref[i].buffer.dim = ref[i].dims.data();
    ptrs[i] = &ref[i].buffer;
  }
  ASSERT_EQ(f32(ptrs.data()), 0) << lastError;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int i = 0; i < n; ++i) {
    const halide_filter_argument_t &a = f32Meta->arguments[i], &b = lowMeta->arguments[i];
    ASSERT_STREQ(a.name, b.name);
    // An argument the kernel does not read (an absent optional one, a
    // dummy) has no required region: one element.
    for (int d = 0; d < a.dimensions; ++d)
      if (ref[i].dims[d].extent == 0)
        ref[i].dims[d].extent = 1;
    int64_t count = ref[i].count(), stride = 1;
    for (int d = 0; d < a.dimensions; ++d) {
      ref[i].dims[d].stride = static_cast<int32_t>(stride);
      stride *= ref[i].dims[d].extent;
    }
    low[i].dims = ref[i].dims;
    low[i].buffer = ref[i].buffer;
    low[i].buffer.type = b.type;
    low[i].buffer.dim = low[i].dims.data();
    ref[i].data.assign(count * 4 + 64, 0);
    low[i].data.assign(count * (b.type.bits / 8) + 64, 0);
    ref[i].buffer.host = reinterpret_cast<uint8_t *>(ref[i].data.data());
    low[i].buffer.host = reinterpret_cast<uint8_t *>(low[i].data.data());
    if (a.kind != halide_argument_kind_input_buffer)
      continue;
    for (int64_t j = 0; j < count; ++j) {
      if (a.type.code == halide_type_int) { // ids, targets, slots: small valid values
        int32_t v = static_cast<int32_t>(j % 2);
        std::memcpy(ref[i].data.data() + 4 * j, &v, 4);
        std::memcpy(low[i].data.data() + 4 * j, &v, 4);
        continue;
      }
      float v = uniform(rng);
      if (isLow(b.type)) {
        uint16_t h = narrow(b.type, v);
        v = widen(b.type, h); // both variants read the rounded value
        std::memcpy(low[i].data.data() + 2 * j, &h, 2);
      } else {
        std::memcpy(low[i].data.data() + 4 * j, &v, 4);
      }
      std::memcpy(ref[i].data.data() + 4 * j, &v, 4);
    }
  }
  ASSERT_EQ(f32(ptrs.data()), 0) << lastError;
  for (int i = 0; i < n; ++i)
    ptrs[i] = &low[i].buffer;
  ASSERT_EQ(lowp(ptrs.data()), 0) << lastError;
  int lowOutputs = 0;
  for (int i = 0; i < n; ++i) {
    const halide_filter_argument_t &a = f32Meta->arguments[i], &b = lowMeta->arguments[i];
    if (a.kind != halide_argument_kind_output_buffer || a.type.code != halide_type_float)
      continue;
    int64_t count = ref[i].count();
    std::vector<float> want(count), got(count);
    std::memcpy(want.data(), ref[i].data.data(), count * 4);
    for (int64_t j = 0; j < count; ++j) {
      if (isLow(b.type)) {
        uint16_t h;
        std::memcpy(&h, low[i].data.data() + 2 * j, 2);
        got[j] = widen(b.type, h);
      } else {
        std::memcpy(&got[j], low[i].data.data() + 4 * j, 4);
      }
    }
    lowOutputs += isLow(b.type);
    double rms = 0;
    for (float v : want)
      rms += double(v) * v;
    rms = std::sqrt(rms / count);
    // The unit roundoff of the narrowest type the variant reads or writes.
    double unit = 0x1p-24;
    for (int k = 0; k < n; ++k)
      if (isLow(lowMeta->arguments[k].type))
        unit = std::max(unit,
                        lowMeta->arguments[k].type.code == halide_type_bfloat ? 0x1p-8 : 0x1p-11);
    int bad = 0;
    for (int64_t j = 0; j < count; ++j) {
      double allowed = ulps * unit * (std::fabs(want[j]) + rms) + 1e-30;
      if (!(std::fabs(double(got[j]) - want[j]) <= allowed) && bad++ < 5)
        ADD_FAILURE() << a.name << "[" << j << "]: " << got[j] << " against f32 " << want[j]
                      << " (allowed " << allowed << ")";
    }
    EXPECT_EQ(bad, 0) << a.name << ": " << bad << " of " << count << " elements";
    if (count > 1) // (absent optional outputs are 1-element dummies, zeroed)
      EXPECT_GT(rms, 0) << a.name << " is all zeros: the comparison would prove nothing";
  }
  // Every variant here stores some output in low precision, except those
  // whose only output is f32 (the cast to f32, the loss).
  std::string variant(name);
  EXPECT_TRUE(
      lowOutputs > 0 || variant == "lp_cast_from_bf16" ||
      (variant.rfind("lp_cross_entropy", 0) == 0 && variant.find("grad") == std::string::npos))
      << name;
}

#define TWINS(LOW, F32, ...)                                                                       \
  expectTwins(#LOW, invoker(LOW), LOW##_metadata(), invoker(F32), F32##_metadata(), ##__VA_ARGS__)

TEST(LowPrecisionKernelTest, CastAndAdd) {
  TWINS(lp_cast_to_bf16, cast_k);
  TWINS(lp_cast_from_bf16, cast_k);
  TWINS(lp_cast_to_f16, cast_k);
  TWINS(lp_add, add_k);
  TWINS(lp_sigmoid_gate, sigmoid_gate_k);
  TWINS(lp_clamp, clamp_k);
  TWINS(lp_clamp_grad, clamp_grad_k);
  TWINS(lp_sigmoid_gate_grad, sigmoid_gate_grad_k);
}

TEST(LowPrecisionKernelTest, EmbeddingAndCrossEntropy) {
  TWINS(lp_embedding, embedding_k);
  TWINS(lp_embedding_grad, embedding_grad_k);
  TWINS(lp_cross_entropy, cross_entropy_k);
  TWINS(lp_cross_entropy_grad, cross_entropy_grad_k);
  // f16 logits staged a row at a time (vectorised, with a tail).
  TWINS(lp_cross_entropy_f16, ce_v40_k);
  TWINS(lp_cross_entropy_grad_f16, ce_grad_v40_k);
}

TEST(LowPrecisionKernelTest, NormAndLinear) {
  TWINS(lp_rms_norm, rms_norm_k);
  TWINS(lp_rms_norm_f16, rms_norm_k);
  TWINS(lp_rms_norm_grad, rms_norm_grad_k);
  TWINS(lp_linear, linear_tiled);
  TWINS(lp_linear_grad, linear_grad_tiled);
  TWINS(lp_linear_blas, linear_blas);
  TWINS(lp_linear_blas_plain, linear_blas_plain);
  TWINS(lp_linear_grad_blas, linear_grad_blas);
  TWINS(lp_bias_grad, bias_grad_k);
}

TEST(LowPrecisionKernelTest, Attention) {
  TWINS(lp_attention, attention_rope_k);
  TWINS(lp_attention_grad, attention_rope_grad_k);
  TWINS(lp_attention_mha_f16, attention_mha_k);
}

TEST(LowPrecisionKernelTest, FFN) {
  // The forward computes h from its rounded saved pre-activations.
  TWINS(lp_ffn_saved, expert_ffn_saved_k, 8);
  TWINS(lp_ffn_saved_grad, expert_ffn_saved_grad_k);
  TWINS(lp_ffn_gelu_f16, ffn_gelu_k);
  TWINS(lp_ffn_gelu_grad, ffn_gelu_grad_k);
  TWINS(lp_ffn_blas, expert_ffn_blas_k, 8);
  TWINS(lp_ffn_blas_grad, expert_ffn_blas_grad_k);
  TWINS(lp_ffn_relu_blas, ffn_relu_blas_k);
  TWINS(lp_ffn_relu_blas_grad, ffn_relu_blas_grad_k);
}

TEST(LowPrecisionKernelTest, PermuteAndRouting) {
  TWINS(lp_permute, permute_k);
  TWINS(lp_unpermute, unpermute_k);
  TWINS(lp_unpermute_grad, unpermute_grad_k);
  TWINS(lp_fused_gate, fused_gate_softmax_k);
  TWINS(lp_fused_gate_sigmoid, fused_gate_sigmoid_k);
  TWINS(lp_router_grad, router_grad_softmax_k);
  TWINS(lp_router_grad_sigmoid, router_grad_sigmoid_k);
  // Group-limited selection (4 groups of 2 experts, the best 2 kept).
  TWINS(lp_fused_gate_limited, fused_gate_limited_sigmoid_k);
  TWINS(lp_router_grad_limited, router_grad_limited_sigmoid_k);
}

} // namespace
