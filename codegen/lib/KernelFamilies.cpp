//===- KernelFamilies.cpp - one row per kernel family ---------------------===//
//
// Each row: the family, its generator in codegen/generators/, the generator's
// argument names in call order (KernelContractTest checks them against the
// generated kernels' metadata), the GeneratorParams of a spec, the scratch
// its compute_root intermediates take under the generator's schedule (keep in
// step with codegen/generators/; each kernel test measures the peak against
// it), and how a launch fills the arguments. Sections follow the generator
// files.
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/KernelRegistry.h"
#include "moec/contract/Abi.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace moec::codegen;
using llvm::StringLiteral;
using llvm::StringRef;

namespace {

using Params = std::vector<std::string>;
using Args = SmallVector<KernelArg>;

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

/// blas=true|false for a family whose per-group product is m n k.
std::string gemmParam(Gemm gemm, int64_t m, int64_t n, int64_t k) {
  bool blas = gemm == Gemm::Blas || (gemm == Gemm::Auto && m * n * k >= kBlasMinMacs);
  return param("blas", blas);
}

KernelArg op(unsigned i, ViewKind v) { return KernelArg{KernelArg::Operand, i, v}; }
KernelArg res(unsigned i, ViewKind v) { return KernelArg{KernelArg::Result, i, v}; }
KernelArg dummy(unsigned rank) {
  KernelArg a{KernelArg::Dummy};
  a.dummyRank = rank;
  return a;
}
KernelArg metric(unsigned floats) { return KernelArg{KernelArg::Metric, floats, ViewKind::Flat}; }
KernelArg dummyInt() {
  KernelArg a = dummy(1);
  a.dummyInt = true;
  return a;
}

//===-- EmbeddingGenerator.cpp, CrossEntropyGenerator.cpp ----------------===//

Params embeddingParams(const KernelSpec &s, Gemm) {
  bool forward = s.family == "embedding";
  ArrayRef<int64_t> table = forward ? s.in(1) : s.out(0);
  return {param("tokens", KernelSpec::numel(s.in(0))), param("vocab", table[0]),
          param("width", table[1])};
}
/// Token ids (operand `ids`) flat, everything else as rows.
template <unsigned Ids> Args idsFlatArgs(const KernelSpec &, unsigned n, unsigned) {
  Args args;
  for (unsigned i = 0; i < n; ++i)
    args.push_back(op(i, i == Ids ? ViewKind::Flat : ViewKind::Rows2));
  args.push_back(res(0, ViewKind::Rows2));
  return args;
}
int64_t embeddingScratch(const GeneratorParams &v) { return v("tokens"); } // ids
int64_t embeddingGradScratch(const GeneratorParams &v) {
  return v("tokens") + v("vocab") * v("width"); // ids, accumulator
}
Params crossEntropyParams(const KernelSpec &s, Gemm) {
  int64_t v = s.in(0).back();
  Params p = {param("tokens", KernelSpec::numel(s.in(0)) / v), param("vocab", v)};
  if (double scale = s.number("scale", 1.0); scale != 1.0) // a replica's share weighs its mean
    p.push_back(param("scale", scale));
  return p;
}

int64_t crossEntropyScratch(const GeneratorParams &v) {
  return 2 * v("tokens");
} // log-sum-exp, target logits
int64_t crossEntropyGradScratch(const GeneratorParams &v) { return v("tokens"); } // target ids

//===-- NormGenerator.cpp ------------------------------------------------===//

/// Rows of gamma's width: the last dimension, or (per-head q/k norms) a
/// head of it.
Params normParams(const KernelSpec &s, Gemm) {
  int64_t d = s.in(1).back();
  return {param("rows", KernelSpec::numel(s.in(0)) / d), param("width", d),
          param("epsilon", s.number("epsilon", 1e-5))};
}

int64_t normGradScratch(const GeneratorParams &v) { return v("rows"); } // inverse norms
/// x, dy, y and dx as rows of gamma's width; gamma and dgamma 1-d.
Args normArgs(const KernelSpec &s, unsigned n, unsigned r) {
  int64_t width = s.in(1).back();
  Args args;
  for (unsigned i = 0; i < n + r; ++i) {
    KernelArg a = i < n ? op(i, ViewKind::Rows2) : res(i - n, ViewKind::Rows2);
    a.rowWidth = i == 1 || i == n + 1 ? 0 : width;
    args.push_back(a);
  }
  return args;
}

//===-- ElementwiseGenerator.cpp: sigmoid_gate ---------------------------===//

Params sigmoidGateParams(const KernelSpec &s, Gemm) {
  int64_t d = s.in(0).back();
  return {param("rows", KernelSpec::numel(s.in(0)) / d), param("width", d)};
}
int64_t sigmoidGateGradScratch(const GeneratorParams &v) { return v("rows"); } // the sigmoids

//===-- LinearGenerator.cpp ----------------------------------------------===//

/// Operands: x, w, then the bias if any, then the residual if fused.
bool linearHasBias(const KernelSpec &s) {
  bool residual = s.hasEpilogue("residual_add");
  return s.numInputs() - (residual ? 1u : 0u) == 3u;
}
Params linearParams(const KernelSpec &s, Gemm gemm) {
  ArrayRef<int64_t> w = s.in(1);
  int64_t rows = KernelSpec::numel(s.in(0)) / w[0];
  return {param("rows", rows),
          param("in", w[0]),
          param("out", w[1]),
          param("bias", linearHasBias(s)),
          param("residual", s.hasEpilogue("residual_add")),
          gemmParam(gemm, rows, w[0], w[1])};
}
Args linearArgs(const KernelSpec &s, unsigned n, unsigned) {
  ViewKind v = ViewKind::Rows2;
  bool residual = s.hasEpilogue("residual_add");
  return {op(0, v), op(1, v), linearHasBias(s) ? op(2, ViewKind::Flat) : dummy(1),
          residual ? op(n - 1, v) : dummy(2), res(0, v)};
}
/// The product before the bias and residual epilogue (OpenBLAS only).
int64_t linearScratch(const GeneratorParams &v) {
  return v("blas") && (v("bias") || v("residual")) ? v("rows") * v("out") : 0;
}
/// w^T, x^T, and dw's accumulator when its contraction over rows is
/// k-blocked (codegen/generators/Matmul.h; counted always, a bound);
/// nothing with OpenBLAS.
int64_t linearGradScratch(const GeneratorParams &v) {
  return v("blas") ? 0 : 2 * v("in") * v("out") + v("rows") * v("in");
}
Params linearGradParams(const KernelSpec &s, Gemm gemm) {
  ArrayRef<int64_t> w = s.in(1);
  int64_t rows = KernelSpec::numel(s.in(0)) / w[0];
  return {param("rows", rows), param("in", w[0]), param("out", w[1]),
          gemmParam(gemm, rows, w[0], w[1])};
}
Params biasGradParams(const KernelSpec &s, Gemm) {
  int64_t n = s.in(0).back();
  return {param("rows", KernelSpec::numel(s.in(0)) / n), param("out", n)};
}

//===-- AttentionGenerator.cpp -------------------------------------------===//

Params attentionParams(const KernelSpec &s, Gemm) {
  ArrayRef<int64_t> q = s.in(0);
  int64_t heads = static_cast<int64_t>(s.number("num_heads", 1));
  Params p = {param("batch", q[0]),
              param("seq", q[1]),
              param("heads", heads),
              param("kv_heads", static_cast<int64_t>(s.number("num_kv_heads", 1))),
              param("head_dim", q[2] / heads),
              param("rope", s.has("rope_theta"))};
  if (s.has("rope_theta"))
    p.push_back(param("theta", s.number("rope_theta")));
  return p;
}

template <bool Grad> int64_t attentionScratch(const GeneratorParams &v) {
  int64_t b = v("batch"), s = v("seq"), h = v("heads"), hk = v("kv_heads"), dh = v("head_dim");
  int64_t q = b * s * h * dh, k = b * s * hk * dh, probs = b * h * s * s;
  int64_t rotary = s * dh; // the (cos, sin) table
  if (!Grad)
    return q + 2 * k + probs + q + rotary; // qr, kr, kr^T, prob, out
  // qr, kr, kr^T, v^T, prob, ds, dqr, dkr, dv
  return q + 3 * k + 2 * probs + q + 2 * k + rotary;
}

/// latent_attention(_grad): operands q, k, k_rope, v (, dout).
Params latentAttentionParams(const KernelSpec &s, Gemm) {
  ArrayRef<int64_t> q = s.in(0);
  int64_t heads = static_cast<int64_t>(s.number("num_heads", 1));
  Params p = {param("batch", q[0]),
              param("seq", q[1]),
              param("heads", heads),
              param("content_dim", s.in(1)[2] / heads),
              param("rope_dim", s.in(2)[2]),
              param("v_dim", s.in(3)[2] / heads),
              param("rope", s.has("rope_theta"))};
  if (s.has("rope_theta"))
    p.push_back(param("theta", s.number("rope_theta")));
  return p;
}

template <bool Grad> int64_t latentAttentionScratch(const GeneratorParams &v) {
  int64_t b = v("batch"), s = v("seq"), h = v("heads"), dn = v("content_dim"), dr = v("rope_dim"),
          dv = v("v_dim");
  int64_t qk = b * s * h * (dn + dr), val = b * s * h * dv, probs = b * h * s * s;
  int64_t rotary = s * dr;
  if (!Grad)
    return 3 * qk + probs + val + rotary; // qr, kr, kr^T, prob, out
  // qr, kr, kr^T, v^T, prob, ds, dqr, dkr, dk_unrot, dv
  return 3 * qk + val + 2 * probs + 3 * qk + val + rotary;
}

//===-- FFNGenerator.cpp (dense and grouped expert FFNs) -----------------===//

const char *activationName(double value) {
  switch (static_cast<int>(value)) {
  case MOERT_ACTIVATION_GELU:
    return "gelu";
  case MOERT_ACTIVATION_RELU:
    return "relu";
  default:
    return "swiglu";
  }
}
/// The launch operand holding an expert FFN's routed rows (its only i32
/// operand), or -1.
int routedRowsOperand(const KernelSpec &s) {
  for (unsigned i = 0; i < s.numInputs(); ++i)
    if (cast<RankedTensorType>(s.signature.getInput(i)).getElementType().isInteger(32))
      return static_cast<int>(i);
  return -1;
}
Params ffnParams(const KernelSpec &s, Gemm gemm) {
  StringRef family = s.family;
  bool grouped = family.starts_with("expert");
  ArrayRef<int64_t> x = s.in(0), up = s.in(1);
  int64_t d = x.back(), f = up.back();
  int64_t rows = grouped ? x[1] : KernelSpec::numel(x) / d;
  Params p = {param("groups", grouped ? x[0] : int64_t(1)), param("rows", rows), param("width", d),
              param("hidden", f),
              "activation=" + std::string(activationName(s.number("activation")))};
  // Pre-activations kept by the forward for the backward.
  if (family.ends_with("_grad"))
    p.push_back(param("saved", s.hasEpilogue("saved_preactivations")));
  else
    p.push_back(param("save", s.hasEpilogue("save_preactivations")));
  p.push_back(gemmParam(gemm, rows, d, f));
  // Routed rows: segments per expert.
  if (int r = routedRowsOperand(s); r >= 0)
    p.push_back(param("segments", KernelSpec::numel(s.in(r)) / x[0]));
  return p;
}
/// Operands: x, up, down, [gate], [rows]; results: y, then the saved
/// pre-activations (x Wu, x Wg) if any.
template <ViewKind V> Args ffnArgs(const KernelSpec &s, unsigned n, unsigned r) {
  int rows = routedRowsOperand(s);
  bool gated = n - (rows >= 0 ? 1 : 0) == 4;
  return {op(0, V),
          op(1, V),
          op(2, V),
          gated ? op(3, V) : dummy(3),
          rows >= 0 ? op(rows, ViewKind::Flat) : dummyInt(),
          res(0, V),
          r >= 2 ? res(1, V) : dummy(3),
          r == 3 ? res(2, V) : dummy(3)};
}
/// Operands: x, up, down, dy, [gate], [rows], then the saved
/// pre-activations.
template <ViewKind V> Args ffnGradArgs(const KernelSpec &s, unsigned n, unsigned r) {
  bool gated = r == 4;
  int rows = routedRowsOperand(s);
  unsigned base = (gated ? 5 : 4) + (rows >= 0 ? 1 : 0);
  bool saved = n > base;
  return {op(0, V),
          op(1, V),
          op(2, V),
          gated ? op(4, V) : dummy(3),
          op(3, V),
          saved ? op(base, V) : dummy(3),
          saved && gated ? op(base + 1, V) : dummy(3),
          rows >= 0 ? op(rows, ViewKind::Flat) : dummyInt(),
          res(0, V),
          res(1, V),
          res(2, V),
          gated ? res(3, V) : dummy(3)};
}

template <bool Grad> int64_t ffnScratch(const GeneratorParams &v) {
  int64_t e = v("groups"), c = v("rows"), d = v("width"), f = v("hidden");
  bool gated = v.text("activation") == "swiglu";
  int64_t preacts = v("save") || v("saved") ? 0 : gated ? 2 : 1;
  if (v("blas") && !Grad)
    return (1 + preacts) * e * c * f; // h, recomputed pre-activations
  if (v("blas"))                      // dh, h, dhu (and dhg), recomputed pre-activations
    return ((gated ? 4 : 3) + preacts) * e * c * f;
  if (!Grad)
    return e * c * f; // h
  // down^T, up^T, gate^T, x^T, (h, dhu, dhg), h^T, and one weight gradient's
  // per-group accumulators when k-blocked (a bound)
  return (gated ? 4 : 3) * e * d * f + e * c * d + (gated ? 4 : 3) * e * c * f;
}

//===-- RoutingGenerator.cpp ---------------------------------------------===//

Params routingParams(const KernelSpec &s, Gemm) {
  ArrayRef<int64_t> x = s.in(0), w = s.in(1);
  bool isGate = s.family == "fused_gate";
  Params p = {param("tokens", KernelSpec::numel(x) / x.back()),
              param("width", w[0]),
              param("num_experts", w[1]),
              param("top_k", static_cast<int64_t>(s.number("top_k", 1))),
              std::string("scoring=") + (s.number("scoring") == 1 ? "sigmoid" : "softmax"),
              param("renormalize", s.flag("renormalize")),
              param("has_bias", s.numInputs() == (isGate ? 3u : 5u)),
              param("routed_scaling", s.number("routed_scaling", 1.0)),
              param("aux_loss_coef", s.number("aux_loss_coef")),
              param("z_loss_coef", s.number("z_loss_coef")),
              param("groups", static_cast<int64_t>(s.number("groups", 1)))};
  if (isGate)
    p.push_back(param("capacity", static_cast<int64_t>(s.number("capacity", 1))));
  // Group-limited selection, only when set: a kernel without expert groups
  // keeps its parameters (and its name in the kernel cache).
  if (int64_t eg = static_cast<int64_t>(s.number("expert_groups", 1)); eg > 1) {
    p.push_back(param("expert_groups", eg));
    p.push_back(param("topk_groups", static_cast<int64_t>(s.number("topk_groups", 1))));
  }
  // The balancing loss per sequence (of x's second-to-last dimension and
  // those between it and the batch).
  if (s.flag("aux_per_sequence"))
    p.push_back(param("aux_seq_len", KernelSpec::numel(x) / x.front() / x.back()));
  if (auto sizes = s.config.getAs<DenseI64ArrayAttr>("group_sizes")) { // unequal groups
    std::string list;
    for (int64_t n : sizes.asArrayRef())
      list += (list.empty() ? "" : ",") + std::to_string(n);
    p.push_back("group_sizes=" + list);
  }
  return p;
}
Args fusedGateArgs(const KernelSpec &, unsigned n, unsigned r) {
  ViewKind v = ViewKind::Rows2;
  Args args = {op(0, v), op(1, v), n == 3 ? op(2, ViewKind::Flat) : dummy(1)};
  for (unsigned i = 0; i < r; ++i)
    args.push_back(res(i, i == 3 ? ViewKind::Flat : v));
  args.push_back(metric(2)); // loss_parts: balancing and z-loss, unweighted
  return args;
}
Args routerGradArgs(const KernelSpec &, unsigned n, unsigned) {
  ViewKind v = ViewKind::Rows2;
  return {op(0, v),  op(1, v), n == 5 ? op(4, ViewKind::Flat) : dummy(1), op(2, v), op(3, v),
          res(0, v), res(1, v)};
}

//===-- PermuteGenerator.cpp ---------------------------------------------===//

Params permuteParams(const KernelSpec &s, Gemm) {
  bool forward = s.family == "permute";
  ArrayRef<int64_t> slots = s.in(1), buf = forward ? s.out(0) : s.in(0);
  Params p = {param("tokens", KernelSpec::numel(slots) / slots.back()), param("k", slots.back()),
              param("slots_total", buf[0] * buf[1]), param("width", buf[2])};
  if (s.family == "unpermute")
    p.push_back(param("weighted", s.numInputs() == 3));
  return p;
}
Args unpermuteArgs(const KernelSpec &, unsigned n, unsigned) {
  ViewKind v = ViewKind::Rows2;
  return {op(0, v), op(1, v), n == 3 ? op(2, v) : dummy(2), res(0, v)};
}

//===-- ElementwiseGenerator.cpp -----------------------------------------===//

Params addParams(const KernelSpec &s, Gemm) { return {param("size", KernelSpec::numel(s.in(0)))}; }
Params clampParams(const KernelSpec &s, Gemm) {
  return {param("size", KernelSpec::numel(s.in(0))), param("limit", s.number("limit", 1.0))};
}
Params sumSquaresParams(const KernelSpec &s, Gemm) {
  return {param("size", KernelSpec::numel(s.in(0))), param("rows", s.out(0)[0]),
          param("chunks", s.out(0)[1])};
}
Params adamwParams(const KernelSpec &s, Gemm) {
  return {param("size", KernelSpec::numel(s.in(0))),
          param("beta1", s.number("beta1")),
          param("beta2", s.number("beta2")),
          param("eps", s.number("eps")),
          param("weight_decay", s.number("weight_decay")),
          param("grad_clip", s.number("grad_clip"))};
}
/// The parameter and its moments are read and written in place; the
/// launch's operands are the gradient, the learning rate, the norm and the
/// step.
Args adamwArgs(const KernelSpec &, unsigned, unsigned) {
  ViewKind v = ViewKind::Flat;
  KernelArg p{KernelArg::Param, 0, v}, m{KernelArg::MomentM, 0, v}, s{KernelArg::MomentV, 0, v};
  return {p, m, s, op(0, v), op(1, v), op(2, v), op(3, v), p, m, s};
}

/// The FFN generators serve the dense and the grouped expert families.
const std::vector<StringLiteral> kFFNSignature = {"x",      "up", "down",   "gate",
                                                  "routed", "y",  "pre_up", "pre_gate"};
const std::vector<StringLiteral> kFFNGradSignature = {
    "x", "up", "down", "gate", "dy", "pre_up", "pre_gate", "routed", "dx", "dup", "ddown", "dgate"};

const std::vector<KernelFamily> &rows() {
  using V = ViewKind;
  static const std::vector<KernelFamily> table = {
      {"embedding",
       "embedding",
       {"ids", "table", "y"},
       embeddingParams,
       embeddingScratch,
       idsFlatArgs<0>},
      {"embedding_grad",
       "embedding_grad",
       {"ids", "dy", "dtable"},
       embeddingParams,
       embeddingGradScratch,
       idsFlatArgs<0>},
      {"cross_entropy",
       "cross_entropy",
       {"logits", "targets", "loss"},
       crossEntropyParams,
       crossEntropyScratch,
       idsFlatArgs<1>},
      {"cross_entropy_grad",
       "cross_entropy_grad",
       {"logits", "targets", "dloss", "dlogits"},
       crossEntropyParams,
       crossEntropyGradScratch,
       idsFlatArgs<1>},
      {"rms_norm", "rms_norm", {"x", "g", "y"}, normParams, nullptr, normArgs},
      {"rms_norm_grad",
       "rms_norm_grad",
       {"x", "g", "dy", "dx", "dg"},
       normParams,
       normGradScratch,
       normArgs},
      {"linear", "linear", {"x", "w", "b", "r", "y"}, linearParams, linearScratch, linearArgs},
      {"linear_grad",
       "linear_grad",
       {"x", "w", "dy", "dx", "dw"},
       linearGradParams,
       linearGradScratch},
      {"bias_grad", "bias_grad", {"dy", "db"}, biasGradParams, nullptr},
      {"attention",
       "attention",
       {"q", "k", "v", "o"},
       attentionParams,
       attentionScratch<false>,
       nullptr,
       V::Reversed},
      {"attention_grad",
       "attention_grad",
       {"q", "k", "v", "dout", "dq", "dk", "dv"},
       attentionParams,
       attentionScratch<true>,
       nullptr,
       V::Reversed},
      {"latent_attention",
       "latent_attention",
       {"q", "k", "k_rope", "v", "o"},
       latentAttentionParams,
       latentAttentionScratch<false>,
       nullptr,
       V::Reversed},
      {"latent_attention_grad",
       "latent_attention_grad",
       {"q", "k", "k_rope", "v", "dout", "dq", "dk", "dk_rope", "dv"},
       latentAttentionParams,
       latentAttentionScratch<true>,
       nullptr,
       V::Reversed},
      {"ffn", "ffn", kFFNSignature, ffnParams, ffnScratch<false>, ffnArgs<V::Rows3>, V::Rows3},
      {"expert_ffn", "ffn", kFFNSignature, ffnParams, ffnScratch<false>, ffnArgs<V::Reversed>,
       V::Reversed},
      {"ffn_grad", "ffn_grad", kFFNGradSignature, ffnParams, ffnScratch<true>,
       ffnGradArgs<V::Rows3>, V::Rows3},
      {"expert_ffn_grad", "ffn_grad", kFFNGradSignature, ffnParams, ffnScratch<true>,
       ffnGradArgs<V::Reversed>, V::Reversed},
      {"fused_gate",
       "fused_gate",
       {"x", "w", "bias", "gates", "experts", "slots", "counts", "aux", "loss_parts"},
       routingParams,
       nullptr,
       fusedGateArgs},
      {"router_grad",
       "router_grad",
       {"x", "w", "bias", "dgates", "daux", "dx", "dw"},
       routingParams,
       nullptr,
       routerGradArgs},
      {"permute", "permute", {"x", "slots", "buf"}, permuteParams, nullptr},
      {"unpermute",
       "unpermute",
       {"buf", "slots", "weights", "out"},
       permuteParams,
       nullptr,
       unpermuteArgs},
      {"unpermute_grad",
       "unpermute_grad",
       {"buf", "slots", "weights", "dout", "dbuf", "dweights"},
       permuteParams,
       nullptr},
      {"add", "add", {"a", "b", "z"}, addParams, nullptr, nullptr, V::Vector},
      {"cast", "cast", {"a", "z"}, addParams, nullptr, nullptr, V::Vector},
      {"clamp", "clamp", {"a", "z"}, clampParams, nullptr, nullptr, V::Vector},
      {"clamp_grad", "clamp_grad", {"x", "dy", "dx"}, clampParams, nullptr, nullptr, V::Vector},
      {"sigmoid_gate", "sigmoid_gate", {"x", "g", "z"}, sigmoidGateParams, nullptr},
      {"sigmoid_gate_grad",
       "sigmoid_gate_grad",
       {"x", "g", "dy", "dx", "dg"},
       sigmoidGateParams,
       sigmoidGateGradScratch},
      {"sum_squares", "sum_squares", {"x", "s"}, sumSquaresParams, nullptr, nullptr, V::Flat},
      {"adamw_update",
       "adamw_update",
       {"w", "m", "v", "g", "lr", "norm", "step", "updated.0", "updated.1", "updated.2"},
       adamwParams,
       nullptr,
       adamwArgs,
       V::Flat},
      // Scalar work the runtime does (runtime/lib/Program.cpp).
      {"lr_schedule", "", {}},
      {"global_norm", "", {}},
      {"place_slots", "", {}},
  };
  return table;
}

} // namespace

ArrayRef<KernelFamily> moec::codegen::kernelFamilies() { return rows(); }

const KernelFamily *moec::codegen::lookupFamily(StringRef family) {
  for (const KernelFamily &row : rows())
    if (row.family == family)
      return &row;
  return nullptr;
}
