//===- KernelTable.cpp - kernel specs to Halide generator calls -----------===//

#include "KernelTable.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace mlir::moe;

namespace {

/// Reads the spec of one kernel.
class Spec {
public:
  explicit Spec(KernelOp kernel)
      : kernel(kernel), signature(kernel.getSignature()),
        config(kernel.getConfig()) {}

  ArrayRef<int64_t> in(unsigned i) const {
    return cast<RankedTensorType>(signature.getInput(i)).getShape();
  }
  ArrayRef<int64_t> out(unsigned i) const {
    return cast<RankedTensorType>(signature.getResult(i)).getShape();
  }
  unsigned numInputs() const { return signature.getNumInputs(); }
  static int64_t numel(ArrayRef<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    return n;
  }
  double number(StringRef key, double fallback = 0) const {
    if (auto f = config.getAs<FloatAttr>(key))
      return f.getValueAsDouble();
    if (auto i = config.getAs<IntegerAttr>(key))
      return static_cast<double>(i.getValue().getSExtValue());
    return fallback;
  }
  bool flag(StringRef key) const {
    auto b = config.getAs<BoolAttr>(key);
    return b && b.getValue();
  }
  bool has(StringRef key) const { return static_cast<bool>(config.get(key)); }
  bool hasEpilogue(StringRef name) {
    for (Attribute e : kernel.getEpilogue())
      if (cast<StringAttr>(e).getValue() == name)
        return true;
    return false;
  }

  KernelOp kernel;
  FunctionType signature;
  DictionaryAttr config;
};

std::string param(StringRef key, int64_t value) {
  return (key + "=" + std::to_string(value)).str();
}
std::string param(StringRef key, double value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << key << "=" << llvm::format("%.9g", value);
  return text;
}
std::string param(StringRef key, bool value) {
  return (key + "=" + (value ? "true" : "false")).str();
}

const char *activationName(double value) {
  switch (static_cast<int>(value)) {
  case 1:
    return "gelu";
  case 2:
    return "relu";
  default:
    return "swiglu";
  }
}

/// The value of `key=` in a call's params (0 when absent).
int64_t paramValue(const moec::KernelCall &call, StringRef key) {
  for (const std::string &p : call.params) {
    StringRef text(p);
    if (text.consume_front(key) && text.consume_front("=")) {
      int64_t v = 0;
      if (!text.getAsInteger(10, v))
        return v;
      return text == "true" ? 1 : 0;
    }
  }
  return 0;
}

/// Scratch of one generated kernel: the compute_root intermediates of its
/// generator's schedule (codegen/generators/*; keep in step with them), all
/// f32 or i32. KernelTest checks every generator's measured peak against
/// this bound.
int64_t scratchBytesOf(const moec::KernelCall &call) {
  auto v = [&](StringRef key) { return paramValue(call, key); };
  StringRef g = call.generator;
  int64_t elements = 0;
  if (g == "embedding") {
    elements = v("tokens"); // ids
  } else if (g == "embedding_grad") {
    elements = v("tokens") + v("vocab") * v("width"); // ids, accumulator
  } else if (g == "rms_norm_grad") {
    elements = v("rows"); // inverse norms
  } else if (g == "linear" && v("blas")) {
    // the product before the bias and residual epilogue
    elements = v("bias") || v("residual") ? v("rows") * v("out") : 0;
  } else if (g == "linear_grad") {
    // w^T, x^T, and dw's accumulator when its contraction over rows is
    // k-blocked (codegen/generators/Matmul.h; counted always, a bound);
    // nothing with OpenBLAS.
    elements = v("blas") ? 0 : 2 * v("in") * v("out") + v("rows") * v("in");
  } else if (g == "attention" || g == "attention_grad") {
    int64_t b = v("batch"), s = v("seq"), h = v("heads"), hk = v("kv_heads"),
            dh = v("head_dim");
    int64_t q = b * s * h * dh, k = b * s * hk * dh, probs = b * h * s * s;
    if (g == "attention")
      elements = q + 2 * k + probs + q; // qr, kr, kr^T, prob, out
    else // qr, kr, kr^T, v^T, prob, ds, dqr, dkr, dv
      elements = q + 3 * k + 2 * probs + q + 2 * k;
    elements += s * dh; // the rotary (cos, sin) table
  } else if (g == "ffn" || g == "ffn_grad") {
    int64_t e = v("groups"), c = v("rows"), d = v("width"), f = v("hidden");
    bool gated = llvm::is_contained(call.params, "activation=swiglu");
    int64_t preacts = v("save") || v("saved") ? 0 : gated ? 2 : 1;
    if (v("blas") && g == "ffn")
      elements = (1 + preacts) * e * c * f; // h, recomputed pre-activations
    else if (v("blas")) // dh, h, dhu (and dhg), recomputed pre-activations
      elements = ((gated ? 4 : 3) + preacts) * e * c * f;
    else if (g == "ffn")
      elements = e * c * f; // h
    else // down^T, up^T, gate^T, x^T, (h, dhu, dhg), h^T, and one weight
         // gradient's per-group accumulators when k-blocked (a bound)
      elements = (gated ? 4 : 3) * e * d * f + e * c * d + (gated ? 4 : 3) * e * c * f;
  } else if (g == "cross_entropy") {
    elements = 2 * v("tokens"); // log-sum-exp, target logits
  } else if (g == "cross_entropy_grad") {
    elements = v("tokens"); // target ids
  }
  // Per block, the pool's 128-byte header and rounding to 128 bytes
  // (runtime/lib/ScratchPool.cpp) and Halide's padding of heap allocations
  // (a few vectors): 512 bytes for each of up to 16 intermediates.
  constexpr int64_t kBlockSlack = 512, kMaxBlocks = 16;
  return 4 * elements + kBlockSlack * kMaxBlocks;
}

} // namespace

FailureOr<moec::KernelCall> moec::lookupKernel(KernelOp kernel, Gemm gemm) {
  Spec s(kernel);
  // blas=true|false for a family whose per-group product is m n k.
  auto gemmParam = [&](int64_t m, int64_t n, int64_t k) {
    bool blas = gemm == Gemm::Blas || (gemm == Gemm::Auto && m * n * k >= kBlasMinMacs);
    return param("blas", blas);
  };
  StringRef family = kernel.getFamily();
  KernelCall call;
  auto &p = call.params;
  if (family == "embedding" || family == "embedding_grad") {
    ArrayRef<int64_t> table = family == "embedding" ? s.in(1) : s.out(0);
    call.generator = family.str();
    p = {param("tokens", Spec::numel(s.in(0))), param("vocab", table[0]),
         param("width", table[1])};
  } else if (family == "rms_norm" || family == "rms_norm_grad") {
    int64_t d = s.in(0).back();
    call.generator = family.str();
    p = {param("rows", Spec::numel(s.in(0)) / d), param("width", d),
         param("epsilon", s.number("epsilon", 1e-5))};
  } else if (family == "linear") {
    ArrayRef<int64_t> w = s.in(1);
    // Operands: x, w, then the bias if any, then the residual if fused.
    bool residual = s.hasEpilogue("residual_add");
    bool bias = s.numInputs() - (residual ? 1u : 0u) == 3u;
    call.generator = "linear";
    p = {param("rows", Spec::numel(s.in(0)) / w[0]), param("in", w[0]),
         param("out", w[1]), param("bias", bias), param("residual", residual),
         gemmParam(Spec::numel(s.in(0)) / w[0], w[0], w[1])};
  } else if (family == "linear_grad") {
    ArrayRef<int64_t> w = s.in(1);
    call.generator = "linear_grad";
    p = {param("rows", Spec::numel(s.in(0)) / w[0]), param("in", w[0]),
         param("out", w[1]), gemmParam(Spec::numel(s.in(0)) / w[0], w[0], w[1])};
  } else if (family == "bias_grad") {
    int64_t n = s.in(0).back();
    call.generator = "bias_grad";
    p = {param("rows", Spec::numel(s.in(0)) / n), param("out", n)};
  } else if (family == "attention" || family == "attention_grad") {
    ArrayRef<int64_t> q = s.in(0);
    int64_t heads = static_cast<int64_t>(s.number("num_heads", 1));
    call.generator = family.str();
    p = {param("batch", q[0]), param("seq", q[1]), param("heads", heads),
         param("kv_heads", static_cast<int64_t>(s.number("num_kv_heads", 1))),
         param("head_dim", q[2] / heads), param("rope", s.has("rope_theta"))};
    if (s.has("rope_theta"))
      p.push_back(param("theta", s.number("rope_theta")));
  } else if (family == "ffn" || family == "ffn_grad" || family == "expert_ffn" ||
             family == "expert_ffn_grad") {
    bool grouped = family.starts_with("expert");
    ArrayRef<int64_t> x = s.in(0), up = s.in(1);
    int64_t d = x.back(), f = up.back();
    call.generator = family.ends_with("_grad") ? "ffn_grad" : "ffn";
    p = {param("groups", grouped ? x[0] : int64_t(1)),
         param("rows", grouped ? x[1] : Spec::numel(x) / d), param("width", d),
         param("hidden", f),
         "activation=" + std::string(activationName(s.number("activation")))};
    // Pre-activations kept by the forward for the backward.
    if (family.ends_with("_grad"))
      p.push_back(param("saved", s.hasEpilogue("saved_preactivations")));
    else
      p.push_back(param("save", s.hasEpilogue("save_preactivations")));
    p.push_back(gemmParam(grouped ? x[1] : Spec::numel(x) / d, d, f));
  } else if (family == "fused_gate" || family == "router_grad") {
    ArrayRef<int64_t> x = s.in(0), w = s.in(1);
    bool isGate = family == "fused_gate";
    call.generator = family.str();
    p = {param("tokens", Spec::numel(x) / x.back()), param("width", w[0]),
         param("num_experts", w[1]),
         param("top_k", static_cast<int64_t>(s.number("top_k", 1))),
         std::string("scoring=") +
             (s.number("scoring") == 1 ? "sigmoid" : "softmax"),
         param("renormalize", s.flag("renormalize")),
         param("has_bias", s.numInputs() == (isGate ? 3u : 5u)),
         param("routed_scaling", s.number("routed_scaling", 1.0)),
         param("aux_loss_coef", s.number("aux_loss_coef")),
         param("z_loss_coef", s.number("z_loss_coef")),
         param("groups", static_cast<int64_t>(s.number("groups", 1)))};
    if (isGate)
      p.push_back(param("capacity", static_cast<int64_t>(s.number("capacity", 1))));
  } else if (family == "permute") {
    ArrayRef<int64_t> slots = s.in(1), buf = s.out(0);
    call.generator = "permute";
    p = {param("tokens", Spec::numel(slots) / slots.back()),
         param("k", slots.back()), param("slots_total", buf[0] * buf[1]),
         param("width", buf[2])};
  } else if (family == "unpermute" || family == "unpermute_grad") {
    ArrayRef<int64_t> buf = s.in(0), slots = s.in(1);
    call.generator = family.str();
    p = {param("tokens", Spec::numel(slots) / slots.back()),
         param("k", slots.back()), param("slots_total", buf[0] * buf[1]),
         param("width", buf[2])};
    if (family == "unpermute")
      p.push_back(param("weighted", s.numInputs() == 3));
  } else if (family == "cross_entropy" || family == "cross_entropy_grad") {
    int64_t v = s.in(0).back();
    call.generator = family.str();
    p = {param("tokens", Spec::numel(s.in(0)) / v), param("vocab", v)};
  } else if (family == "add") {
    call.generator = "add";
    p = {param("size", Spec::numel(s.in(0)))};
  } else if (family == "adamw_update") {
    call.generator = "adamw_update";
    p = {param("size", Spec::numel(s.in(0))), param("beta1", s.number("beta1")),
         param("beta2", s.number("beta2")), param("eps", s.number("eps")),
         param("weight_decay", s.number("weight_decay")),
         param("grad_clip", s.number("grad_clip"))};
  } else if (family == "lr_schedule" || family == "global_norm") {
    call.runtimeRoutine = family.str(); // scalar work, done by the runtime
  } else {
    return kernel.emitOpError()
           << "has no kernel generator for family '" << family
           << "' yet (the default pipeline fuses router/dispatch/combine into "
              "fused_gate/permute/unpermute)";
  }
  call.scratchBytes = scratchBytesOf(call);
  return call;
}
