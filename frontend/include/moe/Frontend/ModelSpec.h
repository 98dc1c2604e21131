//===- ModelSpec.h - what a model description says --------------*- C++ -*-===//
//
// The validated content of a model description, from MoEC's JSON
// (docs/ModelJSON.md) or a HuggingFace config.json. Plain C++: the runtime
// and the fuzz harness use it without MLIR. `*Ptr` members are the JSON
// pointers the settings came from, so the IR's locations point at them.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FRONTEND_MODELSPEC_H
#define MOE_FRONTEND_MODELSPEC_H

#include "moe/Frontend/JsonDoc.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moec::frontend {

/// The routed-expert settings of one layer.
struct MoESettings {
  int64_t numExperts = 8;
  int64_t topK = 2;
  int64_t expertFfnDim = 0;          ///< 0: from the model (ffn_dim)
  std::string activation = "swiglu"; ///< swiglu | gelu | relu
  int64_t numSharedExperts = 0;
  int64_t sharedFfnDim = 0; ///< width of one shared expert; 0: expertFfnDim
  /// The shared experts' output scaled by sigmoid(h w), w [d_model, 1]
  /// (Qwen2-MoE's shared_expert_gate).
  bool sharedExpertGate = false;
  std::optional<double> capacityFactor = 1.25; ///< nullopt: dropless
  std::string scoring = "softmax";             ///< softmax | sigmoid
  bool renormalize = true;
  double auxLossCoef = 0.01;
  /// The balancing loss computed per sequence and averaged (DeepSeek's
  /// seq_aux) instead of over the batch.
  bool auxPerSequence = false;
  double zLossCoef = 0.0;
  double routedScaling = 1.0;
  bool routerBias = false;      ///< DeepSeek-V3 auxiliary-loss-free bias
  double biasUpdateRate = 1e-3; ///< its load rule's step (0: the bias stays fixed)
  /// Group-limited routing (DeepSeek-V2/V3): the experts split into
  /// numGroups equal contiguous groups and a token picks its top_k among the
  /// experts of its topkGroups best groups only. 1/1: over all experts.
  int64_t numGroups = 1;
  int64_t topkGroups = 1;
};

/// DeepSeek-V2/V3's multi-head latent attention: queries through a rank-
/// qLoraRank bottleneck (0: a plain projection), keys and values from one
/// rank-kvLoraRank latent per token, each head's query and key a content part
/// (qkNopeDim) and a rotary part (qkRopeDim, the key's shared by the heads),
/// values of vHeadDim.
struct LatentAttentionSpec {
  int64_t qLoraRank = 0, kvLoraRank = 0, qkNopeDim = 0, qkRopeDim = 0, vHeadDim = 0;
  bool operator==(const LatentAttentionSpec &o) const {
    return qLoraRank == o.qLoraRank && kvLoraRank == o.kvLoraRank && qkNopeDim == o.qkNopeDim &&
           qkRopeDim == o.qkRopeDim && vHeadDim == o.vHeadDim;
  }
};

struct LayerSpec {
  bool dense = false; ///< a dense FFN instead of experts
  MoESettings moe;    ///< meaningful when !dense
  std::string ptr;    ///< where the layer's MoE settings were written
};

struct OptimizerSpec {
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weightDecay = 0.1;
  double gradClip = 1.0; ///< global-norm clipping; 0 disables
  int64_t warmupSteps = 100;
  std::string schedule = "cosine"; ///< cosine | linear | constant
  double minLr = 3e-5;
  int64_t totalSteps = 1000;
};

struct ModelSpec {
  std::string name = "model";
  int64_t vocabSize = 0, dModel = 0, numLayers = 0;
  int64_t numHeads = 0, numKvHeads = 0, headDim = 0;
  int64_t ffnDim = 0; ///< dense FFN width (dense layers)
  int64_t seqLen = 0, batchSize = 0;
  std::string dtype = "f32";                 ///< f32 | bf16 | f16
  std::optional<double> ropeTheta = 10000.0; ///< nullopt: no rotary embedding
  double normEps = 1e-5;
  /// RMSNorm of the queries and keys after their projections (before the
  /// rotary embedding): "none", "head" (each head on its own, one gain of the
  /// head width: Qwen3-MoE) or "full" (the whole projection: OLMoE).
  std::string qkNorm = "none";
  /// Biases on the q, k and v projections (Qwen2-MoE's).
  bool qkvBias = false;
  /// Clips q, k and v to [-c, c] after the projections and q/k norms
  /// (OLMoE's clip_qkv); nullopt: no clipping.
  std::optional<double> clipQkv;
  /// Latent attention instead of q/k/v projections; nullopt: standard.
  std::optional<LatentAttentionSpec> latent;
  double initStd = 0.02;
  std::vector<LayerSpec> layers;
  OptimizerSpec optimizer;
  uint64_t seed = 0;

  /// The document the spec was read from (for locations), and pointers of
  /// the elements ops come from.
  std::shared_ptr<const JsonDoc> doc;
  std::string embeddingPtr, attentionPtr, kvHeadsPtr, headDimPtr, headPtr, lossPtr, ffnPtr,
      latentPtr;

  int64_t numTokens() const { return seqLen * batchSize; }
};

/// Reads a MoEC model description. Returns nullopt after reporting errors.
std::optional<ModelSpec> readModelJson(std::shared_ptr<const JsonDoc> doc, DiagnosticList &diags);

/// `doc` with `fields` set (a field, or an object's fields: {"moe":
/// {"top_k": 1}} keeps the other members of "moe"), as moec's --override
/// and --optimizer give them; a non-object document is returned as it is
/// (readModelJson reports it).
std::shared_ptr<const JsonDoc> withModelFields(std::shared_ptr<const JsonDoc> doc,
                                               const nlohmann::json &fields);

/// Checks constraints across fields that both readers share (heads against
/// kv heads, rotary embeddings against the head width).
void checkModelSpec(const ModelSpec &spec, DiagnosticList &diags);

/// How `given` computes another function than `compiled` with the same
/// weights: one line per differing architecture field ("d_model: 64, not
/// 32"), layer fields once per differing layer; empty when they agree. The
/// training shape, capacity, loss coefficients and optimiser are not
/// compared.
std::vector<std::string> architectureDifferences(const ModelSpec &compiled, const ModelSpec &given);

/// The optimiser object at `pointer` of `doc` (the fields of a model JSON's
/// "optimizer"), or nullopt after reporting its errors.
std::optional<OptimizerSpec> readOptimizerJson(const JsonDoc &doc, const std::string &pointer,
                                               DiagnosticList &diags);

/// The spec as a MoEC model description (every field written), which
/// readModelJson reads back into the same spec.
nlohmann::json modelSpecToJson(const ModelSpec &spec);

} // namespace moec::frontend

#endif // MOE_FRONTEND_MODELSPEC_H
