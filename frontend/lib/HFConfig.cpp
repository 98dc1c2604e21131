//===- HFConfig.cpp - HuggingFace config.json import ----------------------===//

#include "moe/Frontend/HFConfig.h"
#include "moe/Frontend/ObjectReader.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

using namespace moec::frontend;

const std::vector<std::string> &moec::frontend::supportedHFFamilies() {
  static const std::vector<std::string> families = {
      "mixtral",     "qwen2_moe", "qwen3_moe",          "deepseek_v2",
      "deepseek_v3", "olmoe",     "switch_transformers"};
  return families;
}

namespace {

/// Fields that describe packaging, tokenizer ids or inference, not the
/// training step.
const std::vector<std::string> kNoEffect = {"architectures",
                                            "auto_map",
                                            "bos_token_id",
                                            "eos_token_id",
                                            "pad_token_id",
                                            "decoder_start_token_id",
                                            "torch_dtype",
                                            "transformers_version",
                                            "use_cache",
                                            "output_router_logits",
                                            "_name_or_path",
                                            "pretraining_tp",
                                            "ep_size",
                                            "router_dtype",
                                            "task_specific_params",
                                            "max_window_layers",
                                            "is_encoder_decoder",
                                            "use_sliding_window",
                                            "tie_word_embeddings",
                                            "attention_dropout",
                                            "model_type"};

class Importer {
public:
  Importer(std::shared_ptr<const JsonDoc> doc, const HFImportOptions &options,
           DiagnosticList &diags)
      : doc(std::move(doc)), options(options), diags(diags), r(*this->doc, diags, "") {}

  std::optional<ModelSpec> run();

private:
  void warn(const std::string &ptr, const std::string &message) {
    diags.warning(doc->file(), doc->valuePos(ptr), message);
  }
  /// Warns that `key` (when present and not trivially off) is not modelled.
  void unsupported(const std::string &key, const std::string &what) {
    if (!r.has(key))
      return r.claim(key);
    r.claim(key);
    notModelled.push_back(key + " (" + what + ")");
  }

  void common(ModelSpec &s);
  void llamaLike(ModelSpec &s);
  void sparseEvery(ModelSpec &s, int64_t step, const std::vector<int64_t> &dense);

  std::shared_ptr<const JsonDoc> doc;
  const HFImportOptions &options;
  DiagnosticList &diags;
  ObjectReader r;
  std::vector<std::string> notModelled;
};

/// Shape and training settings every family shares.
void Importer::common(ModelSpec &s) {
  s.doc = doc;
  s.dtype = options.dtype;
  s.batchSize = options.batchSize;
  int64_t maxPos = r.getInt("max_position_embeddings", 4096, 1, 1 << 24);
  s.seqLen = options.seqLen ? options.seqLen : std::min<int64_t>(maxPos, 4096);
  if (options.seqLen > maxPos)
    warn(r.at("max_position_embeddings"), "--seq-len " + std::to_string(options.seqLen) +
                                              " exceeds max_position_embeddings (" +
                                              std::to_string(maxPos) + ")");
  s.initStd = r.getNumber("initializer_range", 0.02, 0.0, 10.0, true);
  s.vocabSize = r.getInt("vocab_size", std::nullopt, 2, int64_t(1) << 31);
  s.embeddingPtr = s.headPtr = r.at("vocab_size");
  if (r.has("tie_word_embeddings") && r.getBool("tie_word_embeddings", false))
    warn(r.at("tie_word_embeddings"),
         "tied input and output embeddings are imported untied (a separate "
         "lm_head parameter)");
  double dropout = r.getNumber("attention_dropout", 0.0, 0.0, 1.0);
  if (dropout > 0)
    notModelled.push_back("attention_dropout (dropout)");
}

/// The decoder-only families: Llama-style attention with RMSNorm and SwiGLU.
void Importer::llamaLike(ModelSpec &s) {
  common(s);
  s.dModel = r.getInt("hidden_size", std::nullopt, 1, kMaxDim);
  s.numLayers = r.getInt("num_hidden_layers", std::nullopt, 1, 1 << 14);
  s.numHeads = r.getInt("num_attention_heads", std::nullopt, 1, 1 << 14);
  s.numKvHeads = r.getInt("num_key_value_heads", s.numHeads, 1, 1 << 14);
  s.attentionPtr = r.at("num_attention_heads");
  s.kvHeadsPtr = r.has("num_key_value_heads") ? r.at("num_key_value_heads") : s.attentionPtr;
  s.headDimPtr = s.attentionPtr;
  if (r.has("head_dim")) {
    s.headDim = r.getInt("head_dim", std::nullopt, 1, kMaxDim);
    s.headDimPtr = r.at("head_dim");
  } else {
    r.claim("head_dim");
    s.headDim = s.numHeads ? s.dModel / s.numHeads : 0;
    // (DeepSeek's latent attention sets its head widths itself.)
    bool latent = doc->root().value("model_type", "").rfind("deepseek", 0) == 0;
    if (!diags.hasErrors() && s.numHeads && s.dModel % s.numHeads && !latent)
      r.error("num_attention_heads", std::to_string(s.numHeads) + " does not divide hidden_size (" +
                                         std::to_string(s.dModel) + ")");
  }
  s.ffnDim = r.getInt("intermediate_size", std::nullopt, 1, kMaxDim);
  s.ffnPtr = r.at("intermediate_size");
  // Absent fields take the family's defaults in HuggingFace's config
  // classes (MixtralConfig: eps 1e-5, theta 1e6; OlmoeConfig: eps 1e-5).
  std::string family = doc->root().value("model_type", "");
  s.normEps =
      r.getPositiveF32("rms_norm_eps", family == "mixtral" || family == "olmoe" ? 1e-5 : 1e-6, 1.0);
  s.ropeTheta = r.getPositiveF32("rope_theta", family == "mixtral" ? 1e6 : 10000.0, 1e12);
  std::string act = r.getString("hidden_act", std::string("silu"));
  if (act != "silu" && act != "swish")
    r.error("hidden_act", "\"" + act +
                              "\" is not supported for gated FFNs (allowed: "
                              "silu, swish)");
  if (r.has("rope_scaling"))
    unsupported("rope_scaling", "long-context RoPE scaling");
  else
    r.claim("rope_scaling");
  // Mixtral's window is on when given; Qwen's only with use_sliding_window
  // (false by default in their config classes).
  if (r.has("sliding_window") && r.getBool("use_sliding_window", family == "mixtral"))
    unsupported("sliding_window", "sliding-window attention");
  r.claim("sliding_window");
  r.claim("use_sliding_window");
  if (r.getBool("attention_bias", false))
    notModelled.push_back("attention_bias (biases of the projections)");
}

/// Layer i is MoE when (i + 1) % step == 0 and i is not listed dense.
void Importer::sparseEvery(ModelSpec &s, int64_t step, const std::vector<int64_t> &dense) {
  for (size_t i = 0; i < s.layers.size(); ++i)
    s.layers[i].dense = (step <= 0 || (int64_t(i) + 1) % step != 0) ||
                        std::find(dense.begin(), dense.end(), int64_t(i)) != dense.end();
}

std::optional<ModelSpec> Importer::run() {
  if (!r.valid())
    return std::nullopt;
  ModelSpec s;
  std::string family = r.getString("model_type", std::nullopt);
  // Missing or not a string: reported. An empty name is an unsupported
  // family below (it used to fail without a word).
  if (family.empty() && diags.hasErrors())
    return std::nullopt;
  const auto &families = supportedHFFamilies();
  if (std::find(families.begin(), families.end(), family) == families.end()) {
    std::string list;
    for (const std::string &f : families)
      list += (list.empty() ? "" : ", ") + f;
    r.error("model_type",
            "\"" + family + "\" is not a supported MoE family (supported: " + list + ")");
    return std::nullopt;
  }
  s.name = family;
  MoESettings m;
  // The HF implementations of the decoder families route without capacity
  // (every routed token reaches its expert): dropless.
  m.capacityFactor = std::nullopt;
  std::string moePtr, groupsPtr, topkGroupsPtr; // where the experts and their groups were set

  if (family == "switch_transformers") {
    // The decoder stack of the encoder-decoder, as a causal language model.
    common(s);
    s.dModel = r.getInt("d_model", std::nullopt, 1, kMaxDim);
    s.numLayers = r.getInt("num_decoder_layers", std::nullopt, 1, 1 << 14);
    s.numHeads = s.numKvHeads = r.getInt("num_heads", std::nullopt, 1, 1 << 14);
    s.headDim = r.getInt("d_kv", std::nullopt, 1, kMaxDim);
    s.attentionPtr = s.kvHeadsPtr = r.at("num_heads");
    s.headDimPtr = r.at("d_kv");
    s.ffnDim = r.getInt("d_ff", std::nullopt, 1, kMaxDim);
    s.ffnPtr = r.at("d_ff");
    s.normEps = r.getPositiveF32("layer_norm_epsilon", 1e-6, 1.0);
    s.ropeTheta = std::nullopt;
    std::string act =
        r.getString("dense_act_fn", std::string("relu"), {"relu", "gelu", "gelu_new"});
    r.getString("feed_forward_proj", std::string("relu"));
    if (r.getBool("is_gated_act", false))
      r.error("is_gated_act", "gated FFNs are not supported for this family");
    m.activation = act == "relu" ? "relu" : "gelu";
    m.numExperts = r.getInt("num_experts", std::nullopt, 1, 1 << 16);
    m.topK = r.getInt("num_selected_experts", 1, 1, 1 << 16);
    m.expertFfnDim = s.ffnDim;
    m.renormalize = false;
    m.auxLossCoef = r.getNumber("router_aux_loss_coef", 0.001, 0.0, 1e3);
    m.zLossCoef = r.getNumber("router_z_loss_coef", 0.001, 0.0, 1e3);
    moePtr = r.at("num_experts");
    int64_t capacity = r.getInt("expert_capacity", 64, 1, int64_t(1) << 40);
    int64_t step = r.getInt("decoder_sparse_step", 1, 0, 1 << 14);
    r.getInt("num_sparse_decoder_layers", 0, 0, 1 << 14);
    s.layers.resize(static_cast<size_t>(s.numLayers));
    // HF SwitchTransformers: block i is sparse when i % step == 1 (or step 1).
    for (size_t i = 0; i < s.layers.size(); ++i)
      s.layers[i].dense = !(step > 0 && (step == 1 || int64_t(i) % step == 1));
    int64_t tokens = s.seqLen * s.batchSize;
    m.capacityFactor =
        static_cast<double>(capacity) * m.numExperts / (static_cast<double>(tokens) * m.topK);
    if (r.getBool("router_bias", false))
      notModelled.push_back("router_bias (a bias on router logits)");
    if (r.getNumber("router_jitter_noise", 0.0, 0.0, 1e3) > 0)
      notModelled.push_back("router_jitter_noise (router input noise)");
    if (r.getNumber("dropout_rate", 0.0, 0.0, 1.0) > 0)
      notModelled.push_back("dropout_rate (dropout)");
    r.getBool("batch_prioritized_routing", false);
    r.getString("router_type", std::string("tokens_masked"));
    r.getBool("router_ignore_padding_tokens", false);
    r.getNumber("initializer_factor", 1.0, 0.0, 1e3);
    unsupported("num_layers", "the encoder stack is not imported");
    unsupported("encoder_sparse_step", "the encoder stack is not imported");
    unsupported("num_sparse_encoder_layers", "the encoder stack is not imported");
    unsupported("relative_attention_num_buckets",
                "T5 relative position bias; no position encoding is imported");
    unsupported("relative_attention_max_distance",
                "T5 relative position bias; no position encoding is imported");
    warn("", "switch_transformers: the decoder stack is imported as a causal "
             "language model without cross-attention; the encoder is not "
             "imported");
  } else {
    llamaLike(s);
    s.layers.resize(static_cast<size_t>(std::max<int64_t>(s.numLayers, 0)));
    m.scoring = "softmax";
    if (family == "mixtral") {
      m.numExperts = r.getInt("num_local_experts", std::nullopt, 1, 1 << 16);
      moePtr = r.at("num_local_experts");
      m.expertFfnDim = s.ffnDim;
      m.renormalize = true; // top-k then softmax over the k
      m.auxLossCoef = r.getNumber("router_aux_loss_coef", 0.02, 0.0, 1e3);
      if (r.getNumber("router_jitter_noise", 0.0, 0.0, 1e3) > 0)
        notModelled.push_back("router_jitter_noise (router input noise)");
    } else if (family == "qwen2_moe" || family == "qwen3_moe" || family == "olmoe") {
      m.numExperts = r.getInt("num_experts", std::nullopt, 1, 1 << 16);
      moePtr = r.at("num_experts");
      m.renormalize = r.getBool("norm_topk_prob", false);
      m.auxLossCoef = r.getNumber("router_aux_loss_coef", 0.001, 0.0, 1e3);
      if (family == "olmoe") {
        m.expertFfnDim = s.ffnDim;
        if (r.has("clip_qkv") && !r.isNull("clip_qkv")) // HF: q, k, v clamped after the norms
          s.clipQkv = r.getPositiveF32("clip_qkv", std::nullopt, 1e30);
        r.claim("clip_qkv");
        s.qkNorm = "full"; // HF's OlmoeAttention: q_norm, k_norm over the whole projections
      } else {
        m.expertFfnDim = r.getInt("moe_intermediate_size", std::nullopt, 1, kMaxDim);
        std::vector<int64_t> dense;
        if (r.has("mlp_only_layers")) {
          r.claim("mlp_only_layers");
          const auto &list = doc->root()["mlp_only_layers"];
          if (!list.is_array())
            r.error("mlp_only_layers", "expected an array of layer indices");
          else
            for (size_t i = 0; i < list.size(); ++i)
              if (std::optional<int64_t> index = r.layerIndex("mlp_only_layers", i, s.numLayers))
                dense.push_back(*index);
        } else {
          r.claim("mlp_only_layers");
        }
        // HF's Qwen-MoE takes (layer + 1) % decoder_sparse_step: 0 is no step.
        sparseEvery(s, r.getInt("decoder_sparse_step", 1, 1, 1 << 14), dense);
        if (family == "qwen2_moe") {
          // HF's Qwen2-MoE attention always has q/k/v biases (no config key),
          // and its shared expert a sigmoid gate (Qwen2MoeSparseMoeBlock).
          s.qkvBias = true;
          int64_t shared = r.getInt("shared_expert_intermediate_size", 0, 0, kMaxDim);
          if (shared) {
            m.numSharedExperts = 1;
            m.sharedFfnDim = shared;
            m.sharedExpertGate = true;
          }
        } else {
          s.qkNorm = "head"; // HF's Qwen3MoeAttention: q_norm, k_norm of head_dim
        }
      }
    } else { // deepseek_v2, deepseek_v3
      m.numExperts = r.getInt("n_routed_experts", std::nullopt, 1, 1 << 16);
      moePtr = r.at("n_routed_experts");
      m.expertFfnDim = r.getInt("moe_intermediate_size", std::nullopt, 1, kMaxDim);
      m.numSharedExperts = r.getInt("n_shared_experts", 0, 0, 1 << 10);
      // DeepSeek's gates renormalise the top-k only when top_k > 1 (and
      // norm_topk_prob); V2's then skips routed_scaling_factor, V3's does not.
      m.renormalize =
          r.getBool("norm_topk_prob", false) && r.getInt("num_experts_per_tok", 1, 1, 1 << 16) > 1;
      m.routedScaling = r.getPositiveF32("routed_scaling_factor", 1.0, 1e6);
      if (family == "deepseek_v2" && m.renormalize)
        m.routedScaling = 1.0;
      m.scoring = r.getString("scoring_func", std::string("softmax"), {"softmax", "sigmoid"});
      m.auxLossCoef = r.getNumber("aux_loss_alpha", 0.001, 0.0, 1e3);
      std::string method = r.getString("topk_method", std::string("greedy"),
                                       {"greedy", "group_limited_greedy", "noaux_tc"});
      m.routerBias = method == "noaux_tc";
      // Group-limited routing (greedy ignores the groups). MoEC's group
      // score follows the scoring: the best score for softmax (V2's
      // group_limited_greedy), the sum of the best two (score + bias) for
      // sigmoid (V3's noaux_tc); a config pairing them otherwise is
      // imported with the scoring's rule, and says so.
      int64_t groups = r.getInt("n_group", 1, 1, 1 << 16);
      int64_t topkGroups = r.getInt("topk_group", 1, 1, 1 << 16);
      if (method != "greedy" && groups > 1) {
        m.numGroups = groups;
        m.topkGroups = topkGroups;
        groupsPtr = r.at("n_group");
        topkGroupsPtr = r.has("topk_group") ? r.at("topk_group") : groupsPtr;
        if ((method == "noaux_tc") != (m.scoring == "sigmoid"))
          notModelled.push_back(
              "topk_method " + method + " with scoring_func " + m.scoring +
              " (groups are scored by " +
              (m.scoring == "sigmoid" ? "their best two scores" : "their best score") +
              ", the rule of " + m.scoring + " scoring)");
      }
      // The balancing loss per sequence (DeepSeek-V2's MoEGate seq_aux; V3's
      // complementary sequence-wise loss).
      m.auxPerSequence = r.getBool("seq_aux", false);
      int64_t firstDense = r.getInt("first_k_dense_replace", 0, 0, 1 << 14);
      int64_t freq = r.getInt("moe_layer_freq", 1, 1, 1 << 14);
      for (size_t i = 0; i < s.layers.size(); ++i)
        s.layers[i].dense = int64_t(i) < firstDense || int64_t(i) % freq != 0;
      // Multi-head latent attention (HF's DeepSeek attention is always
      // latent; its defaults are DeepseekV3Config's).
      ::moec::frontend::LatentAttentionSpec l;
      l.qLoraRank = r.isNull("q_lora_rank") ? 0 : r.getInt("q_lora_rank", 1536, 1, kMaxDim);
      r.claim("q_lora_rank");
      l.kvLoraRank = r.getInt("kv_lora_rank", 512, 1, kMaxDim);
      l.qkNopeDim = r.getInt("qk_nope_head_dim", 128, 1, kMaxDim);
      l.qkRopeDim = r.getInt("qk_rope_head_dim", 64, 2, kMaxDim);
      l.vHeadDim = r.getInt("v_head_dim", 128, 1, kMaxDim);
      if (l.qkRopeDim % 2 != 0)
        r.error("qk_rope_head_dim",
                "rotary embeddings need an even width, got " + std::to_string(l.qkRopeDim));
      s.latent = l;
      s.latentPtr = r.has("kv_lora_rank") ? r.at("kv_lora_rank") : s.attentionPtr;
      s.headDim = l.qkNopeDim + l.qkRopeDim;
      s.numKvHeads = s.numHeads;
      s.headDimPtr = r.has("qk_rope_head_dim") ? r.at("qk_rope_head_dim") : s.attentionPtr;
      // The latent norms (q_a_layernorm, kv_a_layernorm) are built with
      // HF's default eps, 1e-6, whatever rms_norm_eps says; MoEC has one eps.
      if (static_cast<float>(s.normEps) != 1e-6f)
        notModelled.push_back("rms_norm_eps " + std::to_string(s.normEps) +
                              " (DeepSeek's latent norms use 1e-6; MoEC one eps for every norm)");
      // Transformers' DeepSeek-V3 can rotate halves instead of interleaved
      // pairs; the weight names map the interleaved layout.
      if (!r.getBool("rope_interleave", true))
        notModelled.push_back("rope_interleave false (rotary halves; MoEC maps DeepSeek's "
                              "interleaved pairs)");
      unsupported("num_nextn_predict_layers", "multi-token prediction");
      unsupported("quantization_config", "FP8 weights; training uses " + options.dtype);
    }
  }
  if (family != "switch_transformers") {
    m.topK = r.getInt("num_experts_per_tok", std::nullopt, 1, 1 << 16);
    if (m.topK > m.numExperts && !moePtr.empty())
      r.error("num_experts_per_tok", std::to_string(m.topK) + " exceeds " + moePtr + " (" +
                                         std::to_string(m.numExperts) + ")");
    // The expert groups, at the keys that set them.
    else if (m.numGroups > 1) {
      auto error = [&](const std::string &ptr, const std::string &message) {
        diags.error(doc->file(), doc->valuePos(ptr), ptr + ": " + message);
      };
      int64_t per = m.numExperts / m.numGroups;
      if (m.numExperts % m.numGroups != 0)
        error(groupsPtr, std::to_string(m.numGroups) + " does not divide " + moePtr + " (" +
                             std::to_string(m.numExperts) + ")");
      else if (m.topkGroups > m.numGroups)
        error(topkGroupsPtr, std::to_string(m.topkGroups) + " exceeds " + groupsPtr + " (" +
                                 std::to_string(m.numGroups) + ")");
      else if (m.topK > m.topkGroups * per)
        r.error("num_experts_per_tok", std::to_string(m.topK) + " exceeds the " +
                                           std::to_string(m.topkGroups * per) + " experts of " +
                                           topkGroupsPtr + " (" + std::to_string(m.topkGroups) +
                                           ") groups of " + std::to_string(per));
    }
  }
  if (options.capacityFactor)
    m.capacityFactor = *options.capacityFactor;
  for (LayerSpec &layer : s.layers) {
    layer.moe = m;
    layer.ptr = moePtr;
  }
  // A config whose layer pattern leaves no MoE layer is valid for HF (a
  // dense model), but rarely what was meant: say which key did it.
  if (!s.layers.empty() &&
      std::all_of(s.layers.begin(), s.layers.end(), [](const LayerSpec &l) { return l.dense; })) {
    std::string key;
    for (const char *k :
         {"first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers"})
      if (key.empty() && r.has(k))
        key = k;
    warn(key.empty() ? "" : r.at(key),
         "every one of the " + std::to_string(s.layers.size()) + " layers is dense" +
             (key.empty() ? "" : " (by " + key + ")") + ": the imported model has no MoE layer");
  }

  if (diags.hasErrors())
    return std::nullopt;
  // Name every field the import did not use.
  std::vector<std::string> noEffect, unknown;
  for (const std::string &key : r.unread())
    (std::find(kNoEffect.begin(), kNoEffect.end(), key) != kNoEffect.end() ? noEffect : unknown)
        .push_back(key);
  auto join = [](const std::vector<std::string> &names) {
    std::string out;
    for (const std::string &n : names)
      out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (!noEffect.empty())
    warn("", "ignored fields without effect on a training step: " + join(noEffect));
  for (const std::string &key : unknown)
    notModelled.push_back(key + " (unknown to the importer)");
  if (!notModelled.empty())
    warn("", "not reproduced by the imported model: " + join(notModelled));
  if (options.notModelled)
    *options.notModelled = notModelled;
  if (diags.hasErrors())
    return std::nullopt;
  checkModelSpec(s, diags);
  if (diags.hasErrors())
    return std::nullopt;
  return s;
}
} // namespace

std::optional<ModelSpec> moec::frontend::importHFConfig(std::shared_ptr<const JsonDoc> doc,
                                                        const HFImportOptions &options,
                                                        DiagnosticList &diags) {
  if (!options.overrides.empty()) {
    if (!doc->root().is_object()) {
      diags.error(doc->file(), doc->valuePos(""), "expected a JSON object (a config.json)");
      return std::nullopt;
    }
    doc = doc->withMembers(options.overrides);
  }
  std::optional<ModelSpec> spec = Importer(std::move(doc), options, diags).run();
  if (spec && !options.optimizer.empty()) {
    std::unique_ptr<JsonDoc> given = JsonDoc::parse(
        "--optimizer", nlohmann::json{{"optimizer", options.optimizer}}.dump(), diags);
    std::optional<OptimizerSpec> o =
        given ? readOptimizerJson(*given, "/optimizer", diags) : std::nullopt;
    if (!o)
      return std::nullopt;
    spec->optimizer = *o;
  }
  return spec;
}

bool moec::frontend::parseHFOverrides(const std::string &text, const std::string &flag,
                                      nlohmann::json &out, DiagnosticList &diags, bool nested) {
  size_t pos = 0;
  while (!text.empty() && pos <= text.size()) {
    size_t comma = std::min(text.find(',', pos), text.size());
    std::string item = text.substr(pos, comma - pos);
    pos = comma + 1;
    size_t eq = item.find('=');
    std::string key = eq == std::string::npos ? "" : item.substr(0, eq);
    bool dotted = key.find('.') != std::string::npos;
    if (key.empty() || key.find_first_of("/ ") != std::string::npos || (dotted && !nested) ||
        key.front() == '.' || key.back() == '.' || key.find("..") != std::string::npos) {
      diags.error(flag, SourcePos(),
                  "'" + item +
                      (nested ? "' is not KEY=VALUE with KEY a field of the model JSON, or "
                                "OBJECT.FIELD (e.g. n_layers=4, moe.top_k=1)"
                              : "' is not KEY=VALUE with KEY a top-level config.json field "
                                "(e.g. num_hidden_layers=2)"));
      return false;
    }
    std::string value = item.substr(eq + 1);
    nlohmann::json parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    // "moe.top_k": out["moe"]["top_k"].
    nlohmann::json *at = &out;
    for (size_t dot; (dot = key.find('.')) != std::string::npos; key = key.substr(dot + 1)) {
      at = &(*at)[key.substr(0, dot)];
      if (!at->is_object())
        *at = nlohmann::json::object();
    }
    (*at)[key] = parsed.is_discarded() || parsed.is_object() || parsed.is_array()
                     ? nlohmann::json(value)
                     : parsed;
  }
  return true;
}

bool moec::frontend::parseHFCapacity(const std::string &text,
                                     std::optional<std::optional<double>> &out,
                                     DiagnosticList &diags) {
  if (text == "dropless" || text == "null") {
    out = std::optional<double>();
    return true;
  }
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  // The router computes in f32: a factor that rounds to 0 there is 0.
  if (text.empty() || *end || !(static_cast<float>(value) > 0 && value <= 1e6)) {
    diags.error("--capacity-factor", SourcePos(),
                "'" + text + "' is not a number in (0, 1e6] or 'dropless'");
    return false;
  }
  out = value;
  return true;
}
