//===- ModelSpec.cpp - checks shared by the model readers -----------------===//

#include "moe/Frontend/ModelSpec.h"

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
  if (s.ropeTheta && s.headDim % 2 != 0)
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
