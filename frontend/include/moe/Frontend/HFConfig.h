//===- HFConfig.h - HuggingFace config.json import --------------*- C++ -*-===//
//
// Maps the config.json of the MoE families people train now onto a
// ModelSpec: Mixtral, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, OLMoE and Switch
// Transformers (decoder stack). docs/HFImport.md gives the field-by-field
// mapping. Every field the import does not use is named in a warning: those
// without effect on a training step separately from those the imported model
// does not reproduce.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_FRONTEND_HFCONFIG_H
#define MOE_FRONTEND_HFCONFIG_H

#include "moe/Frontend/ModelSpec.h"

namespace moec::frontend {

/// What config.json does not say: the training shape.
struct HFImportOptions {
  int64_t seqLen = 0; ///< 0: min(max_position_embeddings, 4096)
  int64_t batchSize = 1;
  std::string dtype = "f32";
  /// Expert capacity (--capacity-factor): unset, each family's own routing
  /// (dropless, except Switch Transformers' `expert_capacity`); a null
  /// inner value asks for dropless routing, a number for that factor.
  std::optional<std::optional<double>> capacityFactor;
  /// Top-level config.json fields set before the import (--override), to
  /// shrink a model (layers, widths, experts) or change its vocabulary.
  nlohmann::json overrides = nlohmann::json::object();
  /// Optimiser settings (a model JSON's "optimizer" fields, --optimizer):
  /// config.json has none, so the import otherwise takes the defaults.
  nlohmann::json optimizer = nlohmann::json::object();
  /// When set, receives what the imported model does not reproduce (the
  /// items of the "not reproduced" warning): a model whose weights must
  /// compute the same function (--init-hf) needs none.
  std::vector<std::string> *notModelled = nullptr;
};

/// Parses --override "key=value,...": each value is JSON (a number, true,
/// false, null, a quoted string) or else a string. With `nested`, a key may
/// name a field of an object ("moe.top_k=4": {"moe": {"top_k": 4}}).
/// Reports a malformed item (`flag` names the option) and returns false.
bool parseHFOverrides(const std::string &text, const std::string &flag, nlohmann::json &out,
                      DiagnosticList &diags, bool nested = false);

/// Parses --capacity-factor: a number > 0, or `dropless` (also `null`).
/// Reports anything else and returns false.
bool parseHFCapacity(const std::string &text, std::optional<std::optional<double>> &out,
                     DiagnosticList &diags);

/// The model families the importer understands (`model_type` values).
const std::vector<std::string> &supportedHFFamilies();

std::optional<ModelSpec> importHFConfig(std::shared_ptr<const JsonDoc> doc,
                                        const HFImportOptions &options, DiagnosticList &diags);

} // namespace moec::frontend

#endif // MOE_FRONTEND_HFCONFIG_H
