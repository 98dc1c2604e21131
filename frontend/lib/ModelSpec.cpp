//===- ModelSpec.cpp - checks shared by the model readers -----------------===//

#include "moe/Frontend/ModelSpec.h"

#include <algorithm>
#include <cstdio>
#include <set>

using namespace moec::frontend;

void moec::frontend::checkModelSpec(const ModelSpec &s, DiagnosticList &diags) {
  const JsonDoc &doc = *s.doc;
  auto error = [&](const std::string &ptr, const std::string &message) {
    diags.error(doc.file(), doc.valuePos(ptr), ptr + ": " + message);
  };
  if (s.numHeads % s.numKvHeads != 0)
    error(s.kvHeadsPtr, std::to_string(s.numKvHeads) + " does not divide " + s.attentionPtr + " (" +
                            std::to_string(s.numHeads) + ")");
  if (s.ropeTheta && s.headDim % 2 != 0 && !s.latent) // latent: the rotary part's, checked
    error(s.headDimPtr,
          "rotary embeddings need an even head width, got " + std::to_string(s.headDim));
  int64_t tokens = s.numTokens();
  std::set<std::string> reported; // one message per place of definition
  for (const LayerSpec &layer : s.layers) {
    if (layer.dense || !reported.insert(layer.ptr).second)
      continue;
    if (layer.moe.topK > layer.moe.numExperts)
      error(layer.ptr, "top_k " + std::to_string(layer.moe.topK) + " exceeds num_experts " +
                           std::to_string(layer.moe.numExperts));
    const MoESettings &m = layer.moe;
    if (m.numGroups < 1 || m.numExperts % m.numGroups != 0)
      error(layer.ptr, "n_groups " + std::to_string(m.numGroups) + " does not divide num_experts " +
                           std::to_string(m.numExperts));
    else if (m.topkGroups < 1 || m.topkGroups > m.numGroups)
      error(layer.ptr, "topk_groups " + std::to_string(m.topkGroups) + " is not in [1, n_groups " +
                           std::to_string(m.numGroups) + "]");
    else if (m.topK > m.topkGroups * (m.numExperts / m.numGroups))
      error(layer.ptr, "top_k " + std::to_string(m.topK) + " exceeds the " +
                           std::to_string(m.topkGroups * (m.numExperts / m.numGroups)) +
                           " experts of its topk_groups best groups");
    if (tokens > (int64_t(1) << 40) / std::max<int64_t>(layer.moe.topK, 1))
      error(layer.ptr, "batch_size * seq_len * top_k is too large");
  }
}

namespace {

/// Collects "FIELD: GIVEN, not COMPILED" lines.
struct Differences {
  std::vector<std::string> lines;
  template <typename T> void add(const std::string &field, const T &compiled, const T &given) {
    if (!(compiled == given))
      lines.push_back(field + ": " + text(given) + ", not " + text(compiled));
  }
  static std::string text(int64_t v) { return std::to_string(v); }
  static std::string text(bool v) { return v ? "true" : "false"; }
  static std::string text(const std::string &v) { return "\"" + v + "\""; }
  static std::string text(float v) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.9g", static_cast<double>(v));
    return buffer;
  }
  static std::string text(const std::optional<float> &v) { return v ? text(*v) : "none"; }
};

/// The value the IR holds (an f32 attribute).
float f32(double v) { return static_cast<float>(v); }
std::optional<float> f32(const std::optional<double> &v) {
  return v ? std::optional<float>(static_cast<float>(*v)) : std::nullopt;
}

} // namespace

std::vector<std::string> moec::frontend::architectureDifferences(const ModelSpec &c,
                                                                 const ModelSpec &g) {
  Differences d;
  d.add("vocab_size", c.vocabSize, g.vocabSize);
  d.add("d_model", c.dModel, g.dModel);
  d.add("n_layers", static_cast<int64_t>(c.layers.size()), static_cast<int64_t>(g.layers.size()));
  d.add("n_heads", c.numHeads, g.numHeads);
  d.add("n_kv_heads", c.numKvHeads, g.numKvHeads);
  d.add("head_dim", c.headDim, g.headDim);
  d.add("rope_theta", f32(c.ropeTheta), f32(g.ropeTheta));
  d.add("norm_eps", f32(c.normEps), f32(g.normEps));
  d.add("qk_norm", c.qkNorm, g.qkNorm);
  d.add("qkv_bias", c.qkvBias, g.qkvBias);
  d.add("clip_qkv", f32(c.clipQkv), f32(g.clipQkv));
  LatentAttentionSpec none;
  const LatentAttentionSpec &cl = c.latent ? *c.latent : none, &gl = g.latent ? *g.latent : none;
  d.add("latent_attention", c.latent.has_value(), g.latent.has_value());
  d.add("q_lora_rank", cl.qLoraRank, gl.qLoraRank);
  d.add("kv_lora_rank", cl.kvLoraRank, gl.kvLoraRank);
  d.add("qk_nope_head_dim", cl.qkNopeDim, gl.qkNopeDim);
  d.add("qk_rope_head_dim", cl.qkRopeDim, gl.qkRopeDim);
  d.add("v_head_dim", cl.vHeadDim, gl.vHeadDim);
  bool anyDense = false;
  for (size_t i = 0; i < std::min(c.layers.size(), g.layers.size()); ++i) {
    const LayerSpec &a = c.layers[i], &b = g.layers[i];
    std::string at = "layer " + std::to_string(i) + " ";
    d.add(at + "dense", a.dense, b.dense);
    anyDense = anyDense || a.dense;
    if (a.dense || b.dense)
      continue;
    const MoESettings &x = a.moe, &y = b.moe;
    auto sharedWidth = [](const MoESettings &m) {
      return m.numSharedExperts * (m.sharedFfnDim ? m.sharedFfnDim : m.expertFfnDim);
    };
    d.add(at + "num_experts", x.numExperts, y.numExperts);
    d.add(at + "top_k", x.topK, y.topK);
    d.add(at + "expert_ffn_dim", x.expertFfnDim, y.expertFfnDim);
    d.add(at + "activation", x.activation, y.activation);
    d.add(at + "shared experts' width", sharedWidth(x), sharedWidth(y));
    d.add(at + "shared_expert_gate", x.sharedExpertGate, y.sharedExpertGate);
    d.add(at + "router_scoring", x.scoring, y.scoring);
    d.add(at + "renormalize", x.renormalize, y.renormalize);
    d.add(at + "routed_scaling", f32(x.routedScaling), f32(y.routedScaling));
    d.add(at + "router_bias", x.routerBias, y.routerBias);
    d.add(at + "n_groups", x.numGroups, y.numGroups);
    d.add(at + "topk_groups", x.topkGroups, y.topkGroups);
  }
  if (anyDense)
    d.add("ffn_dim", c.ffnDim, g.ffnDim);
  return d.lines;
}
