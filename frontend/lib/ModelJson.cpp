//===- ModelJson.cpp - reads MoEC's JSON model description ----------------===//
//
// The schema is documented field by field in docs/ModelJSON.md; keep the two
// in step.
//
//===----------------------------------------------------------------------===//

#include "moe/Frontend/ModelSpec.h"
#include "moe/Frontend/ObjectReader.h"

#include <algorithm>
#include <limits>
#include <sstream>

using namespace moec::frontend;
using nlohmann::json;

namespace {
std::string formatNumber(double value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

const std::vector<std::string> kMoEFields = {"num_experts",
                                             "top_k",
                                             "expert_ffn_dim",
                                             "activation",
                                             "num_shared_experts",
                                             "shared_expert_ffn_dim",
                                             "capacity_factor",
                                             "router_scoring",
                                             "renormalize",
                                             "aux_loss_coef",
                                             "router_z_loss_coef",
                                             "routed_scaling",
                                             "router_bias",
                                             "router_bias_update_rate",
                                             "n_groups",
                                             "topk_groups",
                                             "aux_loss_per_sequence"};

/// Checks the expert groups of `m` against its experts and top_k, each
/// message at the first of the named fields this object sets (none set
/// here: every value is inherited, and was checked where it was set).
void checkExpertGroups(ObjectReader &r, const MoESettings &m) {
  auto at = [&](std::initializer_list<const char *> keys) {
    for (const char *k : keys)
      if (r.has(k))
        return std::string(k);
    return std::string();
  };
  auto report = [&](std::initializer_list<const char *> keys, const std::string &message) {
    std::string key = at(keys);
    if (!key.empty())
      r.error(key, message);
  };
  if (m.numExperts % m.numGroups != 0)
    return report({"n_groups", "num_experts"}, "n_groups (" + std::to_string(m.numGroups) +
                                                   ") does not divide num_experts (" +
                                                   std::to_string(m.numExperts) + ")");
  if (m.topkGroups > m.numGroups)
    return report({"topk_groups", "n_groups"}, "topk_groups (" + std::to_string(m.topkGroups) +
                                                   ") exceeds n_groups (" +
                                                   std::to_string(m.numGroups) + ")");
  int64_t reachable = m.topkGroups * (m.numExperts / m.numGroups);
  if (m.topK > reachable)
    report({"top_k", "topk_groups", "n_groups", "num_experts"},
           "top_k (" + std::to_string(m.topK) + ") exceeds the " + std::to_string(reachable) +
               " experts of topk_groups (" + std::to_string(m.topkGroups) + ") groups of " +
               std::to_string(m.numExperts / m.numGroups));
}

/// Reads MoE settings from `r`, each field defaulting to `base`. `expertsAt`
/// names where num_experts was set, for the top_k message.
MoESettings readMoE(ObjectReader &r, const MoESettings &base, std::string &expertsAt) {
  MoESettings m = base;
  if (r.has("num_experts"))
    expertsAt = r.at("num_experts");
  m.numExperts = r.getInt("num_experts", base.numExperts, 1, 1 << 16);
  m.topK = r.getInt("top_k", base.topK, 1, 1 << 16);
  if (r.has("top_k") || r.has("num_experts"))
    if (m.topK > m.numExperts) {
      if (r.has("top_k"))
        r.error("top_k", std::to_string(m.topK) + " exceeds " + expertsAt + " (" +
                             std::to_string(m.numExperts) + ")");
      else
        r.error("num_experts", std::to_string(m.numExperts) + " is below the top_k it inherits (" +
                                   std::to_string(m.topK) + ")");
    }
  std::optional<int64_t> ffnFallback;
  if (base.expertFfnDim)
    ffnFallback = base.expertFfnDim;
  m.expertFfnDim = r.getInt("expert_ffn_dim", ffnFallback, 1, kMaxDim);
  m.activation = r.getString("activation", base.activation, {"swiglu", "gelu", "relu"});
  m.numSharedExperts = r.getInt("num_shared_experts", base.numSharedExperts, 0, 1 << 10);
  m.sharedFfnDim = r.getInt("shared_expert_ffn_dim", base.sharedFfnDim, 0, kMaxDim);
  m.sharedExpertGate = r.getBool("shared_expert_gate", base.sharedExpertGate);
  if (m.sharedExpertGate && m.numSharedExperts == 0) {
    if (r.has("shared_expert_gate"))
      r.error("shared_expert_gate", "gates the shared experts' output, and there are none "
                                    "(num_shared_experts: 0)");
    m.sharedExpertGate = false; // inherited by a layer without shared experts
  }
  // Absent keeps the base value; null asks for dropless routing.
  if (r.isNull("capacity_factor"))
    m.capacityFactor = std::nullopt;
  if (r.has("capacity_factor")) // the router computes in f32
    m.capacityFactor = r.getPositiveF32("capacity_factor", 1.0, 1e6);
  r.claim("capacity_factor");
  m.scoring = r.getString("router_scoring", base.scoring, {"softmax", "sigmoid"});
  m.renormalize = r.getBool("renormalize", base.renormalize);
  m.auxLossCoef = r.getNumber("aux_loss_coef", base.auxLossCoef, 0.0, 1e3);
  m.auxPerSequence = r.getBool("aux_loss_per_sequence", base.auxPerSequence);
  m.zLossCoef = r.getNumber("router_z_loss_coef", base.zLossCoef, 0.0, 1e3);
  m.routedScaling = r.getPositiveF32("routed_scaling", base.routedScaling, 1e6);
  m.routerBias = r.getBool("router_bias", base.routerBias);
  m.biasUpdateRate = r.getNumber("router_bias_update_rate", base.biasUpdateRate, 0.0, 1.0);
  m.numGroups = r.getInt("n_groups", base.numGroups, 1, 1 << 16);
  m.topkGroups = r.getInt("topk_groups", base.topkGroups, 1, 1 << 16);
  if (m.topK <= m.numExperts) // else top_k's own error says it
    checkExpertGroups(r, m);
  return m;
}

/// The "latent_attention" object: its widths, and the standard attention's
/// fields it replaces left at their defaults.
void readLatentAttention(const JsonDoc &doc, DiagnosticList &diags, ObjectReader &model,
                         ModelSpec &s) {
  ObjectReader r(doc, diags, "/latent_attention");
  if (!r.valid())
    return;
  LatentAttentionSpec l;
  l.qLoraRank = r.getInt("q_lora_rank", 0, 0, kMaxDim);
  l.kvLoraRank = r.getInt("kv_lora_rank", std::nullopt, 1, kMaxDim);
  l.qkNopeDim = r.getInt("qk_nope_head_dim", std::nullopt, 1, kMaxDim);
  l.qkRopeDim = r.getInt("qk_rope_head_dim", std::nullopt, 1, kMaxDim);
  l.vHeadDim = r.getInt("v_head_dim", std::nullopt, 1, kMaxDim);
  r.finish();
  s.latent = l;
  s.latentPtr = "/latent_attention";
  if (diags.hasErrors())
    return;
  if (s.ropeTheta && l.qkRopeDim % 2 != 0)
    r.error("qk_rope_head_dim",
            "rotary embeddings need an even width, got " + std::to_string(l.qkRopeDim));
  // Every head has its own content key and value.
  if (model.has("n_kv_heads") && s.numKvHeads != s.numHeads)
    model.error("n_kv_heads",
                "latent attention has a key and value per head: " + std::to_string(s.numKvHeads) +
                    " is not n_heads (" + std::to_string(s.numHeads) + ")");
  s.numKvHeads = s.numHeads;
  if (model.has("head_dim") && s.headDim != l.qkNopeDim + l.qkRopeDim)
    model.error("head_dim", "with latent attention the query/key head width is "
                            "qk_nope_head_dim + qk_rope_head_dim (" +
                                std::to_string(l.qkNopeDim + l.qkRopeDim) + "), not " +
                                std::to_string(s.headDim));
  s.headDim = l.qkNopeDim + l.qkRopeDim;
  s.headDimPtr = r.at("qk_rope_head_dim");
  const char *standardOnly[] = {"qk_norm", "qkv_bias", "clip_qkv"};
  for (const char *key : standardOnly)
    if (model.has(key) && !model.isNull(key) &&
        !(std::string(key) == "qk_norm" && s.qkNorm == "none") &&
        !(std::string(key) == "qkv_bias" && !s.qkvBias))
      model.error(key, "applies to standard attention, not latent_attention");
}

OptimizerSpec readOptimizer(ObjectReader &r, DiagnosticList &diags, const JsonDoc &doc) {
  OptimizerSpec o;
  r.getString("type", std::string("adamw"), {"adamw"});
  o.lr = r.getNumber("lr", o.lr, 0.0, 10.0, true);
  if (r.has("betas")) {
    r.claim("betas");
    const json &betas = doc.root().at(json::json_pointer(r.at("betas")));
    if (!betas.is_array() || betas.size() != 2 || !betas[0].is_number() || !betas[1].is_number()) {
      r.error("betas", "expected [beta1, beta2], got " + ObjectReader::show(betas));
    } else {
      o.beta1 = betas[0].get<double>();
      o.beta2 = betas[1].get<double>();
      for (int i = 0; i < 2; ++i) {
        double b = i ? o.beta2 : o.beta1;
        if (!(b >= 0.0 && b < 1.0))
          diags.error(doc.file(), doc.valuePos(r.at("betas") + "/" + std::to_string(i)),
                      r.at("betas") + "/" + std::to_string(i) + ": " +
                          ObjectReader::show(betas[i]) +
                          " is out of range (allowed: >= 0 and < 1)");
      }
    }
  } else {
    r.claim("betas");
  }
  o.eps = r.getNumber("eps", o.eps, 0.0, 1.0, true);
  o.weightDecay = r.getNumber("weight_decay", o.weightDecay, 0.0, 10.0);
  o.gradClip = r.getNumber("grad_clip", o.gradClip, 0.0, 1e9);
  // The learning-rate schedule computes in f64: step counts stay exact there.
  constexpr int64_t kMaxSteps = int64_t(1) << 53;
  o.totalSteps = r.getInt("total_steps", o.totalSteps, 1, kMaxSteps);
  o.warmupSteps = r.getInt("warmup_steps", o.warmupSteps, 0, kMaxSteps);
  o.schedule = r.getString("schedule", o.schedule, {"cosine", "linear", "constant"});
  o.minLr = r.getNumber("min_lr", std::min(o.minLr, o.lr), 0.0, 10.0);
  if (o.minLr > o.lr)
    r.error("min_lr",
            formatNumber(o.minLr) + " exceeds " + r.at("lr") + " (" + formatNumber(o.lr) + ")");
  if (o.warmupSteps > o.totalSteps)
    r.error("warmup_steps", std::to_string(o.warmupSteps) + " exceeds " + r.at("total_steps") +
                                " (" + std::to_string(o.totalSteps) + ")");
  r.finish();
  return o;
}
} // namespace

std::optional<OptimizerSpec> moec::frontend::readOptimizerJson(const JsonDoc &doc,
                                                               const std::string &pointer,
                                                               DiagnosticList &diags) {
  ObjectReader r(doc, diags, pointer);
  if (!r.valid())
    return std::nullopt;
  size_t before = diags.errorCount();
  OptimizerSpec o = readOptimizer(r, diags, doc);
  if (diags.errorCount() != before)
    return std::nullopt;
  return o;
}

/// `base` with `fields` merged in: objects member by member, any other
/// value replaced.
static nlohmann::json merged(nlohmann::json base, const nlohmann::json &fields) {
  if (!base.is_object() || !fields.is_object())
    return fields;
  for (auto it = fields.begin(); it != fields.end(); ++it)
    base[it.key()] =
        merged(base.contains(it.key()) ? base[it.key()] : nlohmann::json(), it.value());
  return base;
}

std::shared_ptr<const JsonDoc> moec::frontend::withModelFields(std::shared_ptr<const JsonDoc> doc,
                                                               const nlohmann::json &fields) {
  if (!doc->root().is_object() || !fields.is_object() || fields.empty())
    return doc;
  nlohmann::json members = nlohmann::json::object();
  for (auto it = fields.begin(); it != fields.end(); ++it)
    members[it.key()] = merged(
        doc->root().contains(it.key()) ? doc->root()[it.key()] : nlohmann::json(), it.value());
  return doc->withMembers(members);
}

std::optional<ModelSpec> moec::frontend::readModelJson(std::shared_ptr<const JsonDoc> doc,
                                                       DiagnosticList &diags) {
  ModelSpec s;
  s.doc = doc;
  ObjectReader r(*doc, diags, "");
  if (!r.valid())
    return std::nullopt;
  // A HuggingFace config.json read as a MoEC description would give an
  // error per field; one error says what to do instead.
  if (doc->root().contains("model_type") && !doc->root().contains("d_model")) {
    r.error("model_type", "this is a HuggingFace config.json, not a MoEC model description; "
                          "import it with moec --hf FILE or moe-translate --import-hf-config FILE");
    return std::nullopt;
  }
  s.name = r.getString("name", std::string("model"));
  s.vocabSize = r.getInt("vocab_size", std::nullopt, 2, int64_t(1) << 31);
  s.dModel = r.getInt("d_model", std::nullopt, 1, kMaxDim);
  s.numLayers = r.getInt("n_layers", std::nullopt, 1, 1 << 14);
  s.numHeads = r.getInt("n_heads", std::nullopt, 1, 1 << 14);
  s.numKvHeads = r.getInt("n_kv_heads", s.numHeads, 1, 1 << 14);
  if (r.has("head_dim"))
    s.headDim = r.getInt("head_dim", std::nullopt, 1, kMaxDim);
  else {
    r.claim("head_dim");
    // (Latent attention sets its head widths itself.)
    bool latent = r.has("latent_attention") && !r.isNull("latent_attention");
    if (!diags.hasErrors() && s.numHeads && s.dModel % s.numHeads != 0 && !latent)
      r.error("n_heads", std::to_string(s.numHeads) + " does not divide " + r.at("d_model") + " (" +
                             std::to_string(s.dModel) + "); set head_dim explicitly");
    s.headDim = s.numHeads ? s.dModel / s.numHeads : 0;
  }
  s.ffnDim = r.getInt("ffn_dim", 4 * s.dModel, 1, kMaxDim);
  s.seqLen = r.getInt("seq_len", std::nullopt, 1, 1 << 20);
  s.batchSize = r.getInt("batch_size", std::nullopt, 1, 1 << 20);
  s.dtype = r.getString("dtype", std::string("f32"), {"f32", "bf16", "f16"});
  // null: no rotary embedding.
  if (r.isNull("rope_theta"))
    s.ropeTheta = std::nullopt;
  if (r.has("rope_theta"))
    s.ropeTheta = r.getPositiveF32("rope_theta", std::nullopt, 1e12);
  r.claim("rope_theta");
  s.normEps = r.getPositiveF32("norm_eps", s.normEps, 1.0);
  s.qkNorm = r.getString("qk_norm", std::string("none"), {"none", "head", "full"});
  s.qkvBias = r.getBool("qkv_bias", false);
  if (r.has("clip_qkv") && !r.isNull("clip_qkv")) // the kernels compare in f32
    s.clipQkv = r.getPositiveF32("clip_qkv", std::nullopt, 1e30);
  r.claim("clip_qkv");
  s.initStd = r.getNumber("init_std", s.initStd, 0.0, 10.0, true);
  s.seed = static_cast<uint64_t>(r.getInt("seed", 0, 0, kMaxInt));
  s.embeddingPtr = r.at("vocab_size");
  s.attentionPtr = r.at("n_heads");
  s.kvHeadsPtr = r.has("n_kv_heads") ? r.at("n_kv_heads") : r.at("n_heads");
  s.headDimPtr = r.has("head_dim") ? r.at("head_dim") : r.at("n_heads");
  r.claim("latent_attention");
  if (r.has("latent_attention") && !r.isNull("latent_attention"))
    readLatentAttention(*doc, diags, r, s);
  s.headPtr = r.at("vocab_size");
  s.lossPtr = "";
  s.ffnPtr = r.at("ffn_dim");

  // Global MoE settings; a model without "moe" is dense.
  MoESettings global;
  std::vector<int64_t> denseLayers;
  bool hasMoE = r.has("moe");
  r.claim("moe");
  std::string expertsAt = "/moe/num_experts";
  if (hasMoE) {
    ObjectReader m(*doc, diags, "/moe");
    if (m.valid()) {
      global = readMoE(m, global, expertsAt);
      m.claim("dense_layers");
      if (m.has("dense_layers")) {
        const json &list = doc->root()["moe"]["dense_layers"];
        if (!list.is_array()) {
          m.error("dense_layers",
                  "expected an array of layer indices, got " + ObjectReader::show(list));
        } else {
          for (size_t i = 0; i < list.size(); ++i) {
            std::optional<int64_t> index = m.layerIndex("dense_layers", i, s.numLayers);
            if (!index)
              continue;
            if (std::find(denseLayers.begin(), denseLayers.end(), *index) != denseLayers.end()) {
              std::string at = m.at("dense_layers") + "/" + std::to_string(i);
              diags.error(doc->file(), doc->valuePos(at),
                          at + ": layer " + std::to_string(*index) + " is listed twice");
            } else {
              denseLayers.push_back(*index);
            }
          }
        }
      }
      std::vector<std::string> known = kMoEFields;
      known.push_back("dense_layers");
      m.finish(known);
    }
  }

  // Layers, with per-layer overrides.
  s.layers.resize(static_cast<size_t>(std::max<int64_t>(s.numLayers, 0)));
  for (size_t i = 0; i < s.layers.size(); ++i) {
    s.layers[i].dense = !hasMoE || std::find(denseLayers.begin(), denseLayers.end(), int64_t(i)) !=
                                       denseLayers.end();
    s.layers[i].moe = global;
    s.layers[i].ptr = hasMoE ? "/moe" : "/ffn_dim";
  }
  r.claim("layers");
  if (r.has("layers")) {
    ObjectReader layers(*doc, diags, "/layers");
    if (layers.valid()) {
      for (auto it = doc->root()["layers"].begin(); it != doc->root()["layers"].end(); ++it) {
        const std::string &key = it.key();
        layers.claim(key);
        char *end = nullptr;
        long index = std::strtol(key.c_str(), &end, 10);
        // The index as written, once: "01" or "+1" would name layer 1 a
        // second time.
        if (key.empty() || *end || index < 0 || index >= s.numLayers ||
            std::to_string(index) != key) {
          diags.error(doc->file(), doc->keyPos(layers.at(key)),
                      layers.at(key) + ": \"" + key + "\" is not a layer index (allowed: 0 to " +
                          std::to_string(s.numLayers - 1) + ")");
          continue;
        }
        ObjectReader l(*doc, diags, layers.at(key));
        if (!l.valid())
          continue;
        LayerSpec &layer = s.layers[static_cast<size_t>(index)];
        layer.dense = l.getBool("dense", layer.dense);
        if (!layer.dense && !hasMoE && !l.has("num_experts"))
          l.error("dense", "a MoE layer needs \"num_experts\" when the model "
                           "has no \"moe\" section");
        std::string layerExpertsAt = expertsAt;
        layer.moe = readMoE(l, layer.moe, layerExpertsAt);
        layer.ptr = layers.at(key);
        std::vector<std::string> known = kMoEFields;
        known.push_back("dense");
        l.finish(known);
      }
    }
  }

  r.claim("optimizer");
  if (r.has("optimizer")) {
    ObjectReader o(*doc, diags, "/optimizer");
    if (o.valid())
      s.optimizer = readOptimizer(o, diags, *doc);
  }
  r.finish({"name", "vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim",
            "ffn_dim", "seq_len", "batch_size", "dtype", "rope_theta", "norm_eps", "init_std",
            "seed", "moe", "layers", "optimizer"});
  if (diags.hasErrors())
    return std::nullopt;
  checkModelSpec(s, diags);
  if (diags.hasErrors())
    return std::nullopt;
  return s;
}
