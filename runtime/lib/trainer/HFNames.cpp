//===- HFNames.cpp - MoEC parameters under HuggingFace names --------------===//
//
// The names follow the families' modeling code in HuggingFace transformers
// (modeling_mixtral.py, modeling_qwen2_moe.py, modeling_qwen3_moe.py,
// modeling_olmoe.py, modeling_deepseek_v3.py): the decoder is
// `model.layers.{i}` with `input_layernorm`, `self_attn.{q,k,v,o}_proj`,
// `post_attention_layernorm` and an `mlp` (Mixtral: `block_sparse_moe`)
// whose router is `gate` and whose experts are `experts.{e}`.
//
//===----------------------------------------------------------------------===//

#include "HFNames.h"

#include <cctype>
#include <cstdlib>

using namespace moert::trainer;

namespace {

/// How a family names its MoE block and expert projections.
struct Family {
  const char *name;
  const char *moe;              ///< the MoE block under the layer
  const char *gate, *up, *down; ///< one expert's projections
  const char *shared;           ///< the shared expert(s) under the layer, or null
  const char *routerBias;       ///< the selection bias under the MoE block, or null
};

const Family kFamilies[] = {
    {"mixtral", "block_sparse_moe", "w1", "w3", "w2", nullptr, nullptr},
    {"qwen2_moe", "mlp", "gate_proj", "up_proj", "down_proj", "mlp.shared_expert", nullptr},
    {"qwen3_moe", "mlp", "gate_proj", "up_proj", "down_proj", nullptr, nullptr},
    {"olmoe", "mlp", "gate_proj", "up_proj", "down_proj", nullptr, nullptr},
    {"deepseek_v2", "mlp", "gate_proj", "up_proj", "down_proj", "mlp.shared_experts", nullptr},
    {"deepseek_v3", "mlp", "gate_proj", "up_proj", "down_proj", "mlp.shared_experts",
     "gate.e_score_correction_bias"},
};

const Family *familyNamed(const std::string &name) {
  for (const Family &f : kFamilies)
    if (name == f.name)
      return &f;
  return nullptr;
}

/// "l12.experts.up" -> layer 12, rest "experts.up"; false for other names.
bool splitLayer(const std::string &param, int &layer, std::string &rest) {
  if (param.size() < 3 || param[0] != 'l' || !std::isdigit(static_cast<unsigned char>(param[1])))
    return false;
  size_t dot = param.find('.');
  if (dot == std::string::npos)
    return false;
  for (size_t i = 1; i < dot; ++i)
    if (!std::isdigit(static_cast<unsigned char>(param[i])))
      return false;
  layer = std::atoi(param.substr(1, dot - 1).c_str());
  rest = param.substr(dot + 1);
  return true;
}

HFSource one(const std::string &name, bool transposed) {
  HFSource s;
  s.names = {name};
  s.transposed = transposed;
  return s;
}

/// The HF name of projection `which` (gate, up, down): of a routed expert, or
/// of a dense FFN or shared expert.
const char *projection(const Family &f, const std::string &which, bool expert) {
  if (which == "gate")
    return expert ? f.gate : "gate_proj";
  if (which == "up")
    return expert ? f.up : "up_proj";
  if (which == "down")
    return expert ? f.down : "down_proj";
  return nullptr;
}

/// DeepSeek's multi-head latent attention (modeling_deepseek_v3.py):
/// `q_a_proj`, `q_a_layernorm`, `q_b_proj` (or `q_proj`), the fused
/// `kv_a_proj_with_mqa` ([kv latent; rotary key] rows), `kv_a_layernorm`,
/// `kv_b_proj` (per head [content key; value] rows) and `o_proj`. Its
/// rotary parts rotate interleaved pairs (2i, 2i + 1); MoEC's rotate halves
/// (i, i + dr / 2): their rows are permuted here, which leaves every score
/// unchanged.
std::optional<HFSource> latentSource(const moec::frontend::LatentAttentionSpec &l, int64_t heads,
                                     const std::string &at, const std::string &rest) {
  int64_t dn = l.qkNopeDim, dr = l.qkRopeDim, dv = l.vHeadDim, c = l.kvLoraRank;
  auto rotary = [&](int64_t j) { return j < dr / 2 ? 2 * j : 2 * (j - dr / 2) + 1; };
  auto source = [&](const std::string &hf, int64_t hfRows, int64_t width, auto row) {
    HFSource s;
    s.names = {at + "self_attn." + hf + ".weight"};
    s.transposed = true;
    s.hfRows = hfRows;
    for (int64_t o = 0; o < width; ++o)
      s.rows.push_back(row(o));
    return s;
  };
  int64_t qk = dn + dr;
  auto query = [&](int64_t o) {
    int64_t h = o / qk, j = o % qk;
    return h * qk + (j < dn ? j : dn + rotary(j - dn));
  };
  if (rest == "wq_a")
    return one(at + "self_attn.q_a_proj.weight", true);
  if (rest == "q_a_norm")
    return one(at + "self_attn.q_a_layernorm.weight", false);
  if (rest == "wq_b" || rest == "wq")
    return source(rest == "wq" ? "q_proj" : "q_b_proj", heads * qk, heads * qk, query);
  if (rest == "wkv_a")
    return source("kv_a_proj_with_mqa", c + dr, c, [](int64_t o) { return o; });
  if (rest == "wk_rope")
    return source("kv_a_proj_with_mqa", c + dr, dr, [&](int64_t o) { return c + rotary(o); });
  if (rest == "kv_a_norm")
    return one(at + "self_attn.kv_a_layernorm.weight", false);
  if (rest == "wk_b")
    return source("kv_b_proj", heads * (dn + dv), heads * dn,
                  [&](int64_t o) { return o / dn * (dn + dv) + o % dn; });
  if (rest == "wv_b")
    return source("kv_b_proj", heads * (dn + dv), heads * dv,
                  [&](int64_t o) { return o / dv * (dn + dv) + dn + o % dv; });
  return std::nullopt;
}

} // namespace

bool moert::trainer::hasHFNames(const std::string &family) {
  return familyNamed(family) != nullptr;
}

bool moert::trainer::isHFBuffer(const std::string &name) {
  const std::string suffix = "rotary_emb.inv_freq";
  return name.size() >= suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::optional<HFSource> moert::trainer::hfSourceOf(const std::string &familyName,
                                                   const std::string &param,
                                                   const std::vector<int64_t> &shape,
                                                   const moec::frontend::ModelSpec &spec) {
  const Family *f = familyNamed(familyName);
  if (!f)
    return std::nullopt;
  if (param == "tok_emb")
    return one("model.embed_tokens.weight", false);
  if (param == "norm_f")
    return one("model.norm.weight", false);
  if (param == "lm_head")
    return one("lm_head.weight", true);
  int layer = 0;
  std::string rest;
  if (!splitLayer(param, layer, rest))
    return std::nullopt;
  std::string at = "model.layers." + std::to_string(layer) + ".";
  if (rest == "attn_norm")
    return one(at + "input_layernorm.weight", false);
  if (rest == "ffn_norm")
    return one(at + "post_attention_layernorm.weight", false);
  if (spec.latent)
    if (std::optional<HFSource> s = latentSource(*spec.latent, spec.numHeads, at, rest))
      return s;
  if (rest == "q_norm" || rest == "k_norm") // Qwen3-MoE's per head, OLMoE's whole
    return one(at + "self_attn." + rest + ".weight", false);
  for (auto [moec, hf] : {std::pair<const char *, const char *>{"wq", "q_proj"},
                          {"wk", "k_proj"},
                          {"wv", "v_proj"},
                          {"wo", "o_proj"}})
    if (rest == moec)
      return one(at + "self_attn." + hf + ".weight", true);
  for (auto [moec, hf] :
       {std::pair<const char *, const char *>{"bq", "q_proj"}, {"bk", "k_proj"}, {"bv", "v_proj"}})
    if (rest == moec) // Qwen2-MoE's projection biases
      return one(at + "self_attn." + hf + ".bias", false);
  std::string block = at + f->moe + ".";
  if (rest == "router")
    return one(block + "gate.weight", true);
  if (rest == "router_bias")
    return f->routerBias ? std::optional<HFSource>(one(block + f->routerBias, false))
                         : std::nullopt;
  size_t dot = rest.find('.');
  std::string group = rest.substr(0, dot),
              which = dot == std::string::npos ? "" : rest.substr(dot + 1);
  if (group == "ffn") // a dense layer's FFN
    if (const char *p = projection(*f, which, false))
      return one(at + "mlp." + p + ".weight", true);
  if (group == "shared" && f->shared)
    if (const char *p = projection(*f, which, false))
      return one(at + f->shared + "." + p + ".weight", true);
  if (rest == "shared_gate" && f->shared) // Qwen2-MoE's: a [1, d] nn.Linear
    return one(at + f->shared + "_gate.weight", true);
  if (group == "experts" && !shape.empty())
    if (const char *p = projection(*f, which, true)) {
      HFSource s;
      s.stacked = s.transposed = true;
      for (int64_t e = 0; e < shape[0]; ++e)
        s.names.push_back(block + "experts." + std::to_string(e) + "." + p + ".weight");
      return s;
    }
  return std::nullopt;
}
