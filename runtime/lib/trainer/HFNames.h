//===- HFNames.h - MoEC parameters under HuggingFace names ------*- C++ -*-===//
//
// Where each MoEC parameter (l3.wq, l3.experts.up, tok_emb, ...) lives in a
// HuggingFace checkpoint of a family (model.layers.3.self_attn.q_proj.weight,
// ...experts.{e}.w3.weight, model.embed_tokens.weight): the HF tensors it is
// made of and how. MoEC's projections are [in, out] (x W), HuggingFace's
// nn.Linear weights [out, in]: every matrix but the embedding is
// transposed. Stacked expert tensors [E, ...] are one HF tensor per expert.
// Internal to libmoert_main.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_TRAINER_HFNAMES_H
#define MOERT_LIB_TRAINER_HFNAMES_H

#include "moe/Frontend/ModelSpec.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace moert::trainer {

/// A MoEC parameter's HuggingFace tensors: `names` holds one name, or one
/// per row of dimension 0 when `stacked` (the experts); each is the
/// transpose of the MoEC block when `transposed` (2-D blocks only).
struct HFSource {
  std::vector<std::string> names;
  bool stacked = false;
  bool transposed = false;
  /// Of a transposed matrix that is some rows of its HF tensor (DeepSeek's
  /// fused or interleaved projections): MoEC column o is HF row rows[o] of a
  /// tensor of hfRows rows. Empty: every row, in order.
  std::vector<int64_t> rows;
  int64_t hfRows = 0;
};

/// Whether HuggingFace checkpoints of `family` (a config.json model_type)
/// have names here.
bool hasHFNames(const std::string &family);

/// The HF tensors of MoEC parameter `param` of shape `shape` (the full
/// tensor) in `family`, for a model `spec` (latent attention's widths);
/// nullopt for a parameter the family has no tensor for.
std::optional<HFSource> hfSourceOf(const std::string &family, const std::string &param,
                                   const std::vector<int64_t> &shape,
                                   const moec::frontend::ModelSpec &spec);

/// Tensors of HF checkpoints that hold no weights (buffers older exports
/// saved): skipped when loading.
bool isHFBuffer(const std::string &name);

} // namespace moert::trainer

#endif // MOERT_LIB_TRAINER_HFNAMES_H
