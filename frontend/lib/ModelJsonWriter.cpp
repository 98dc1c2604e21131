//===- ModelJsonWriter.cpp - a ModelSpec as a MoEC model JSON -------------===//
//
// The inverse of readModelJson: every field written out, so an import (a
// HuggingFace config) becomes a model description a user can edit, and
// reading it back gives the same spec (tested by importing both).
//
//===----------------------------------------------------------------------===//

#include "moe/Frontend/ModelSpec.h"

using namespace moec::frontend;
using json = nlohmann::json;

namespace {

json moeJson(const MoESettings &m) {
  json j = {{"num_experts", m.numExperts},
            {"top_k", m.topK},
            {"expert_ffn_dim", m.expertFfnDim},
            {"activation", m.activation},
            {"num_shared_experts", m.numSharedExperts},
            {"shared_expert_ffn_dim", m.sharedFfnDim},
            {"shared_expert_gate", m.sharedExpertGate},
            {"router_scoring", m.scoring},
            {"renormalize", m.renormalize},
            {"aux_loss_coef", m.auxLossCoef},
            {"aux_loss_per_sequence", m.auxPerSequence},
            {"router_z_loss_coef", m.zLossCoef},
            {"routed_scaling", m.routedScaling},
            {"router_bias", m.routerBias},
            {"router_bias_update_rate", m.biasUpdateRate},
            {"n_groups", m.numGroups},
            {"topk_groups", m.topkGroups}};
  j["capacity_factor"] = m.capacityFactor ? json(*m.capacityFactor) : json(nullptr);
  return j;
}

} // namespace

json moec::frontend::modelSpecToJson(const ModelSpec &s) {
  json j = {{"name", s.name},          {"vocab_size", s.vocabSize}, {"d_model", s.dModel},
            {"n_layers", s.numLayers}, {"n_heads", s.numHeads},     {"n_kv_heads", s.numKvHeads},
            {"ffn_dim", s.ffnDim},     {"seq_len", s.seqLen},       {"batch_size", s.batchSize},
            {"dtype", s.dtype},        {"norm_eps", s.normEps},     {"qk_norm", s.qkNorm},
            {"qkv_bias", s.qkvBias},   {"init_std", s.initStd},     {"seed", s.seed}};
  if (s.headDim)
    j["head_dim"] = s.headDim;
  j["rope_theta"] = s.ropeTheta ? json(*s.ropeTheta) : json(nullptr);
  if (s.clipQkv)
    j["clip_qkv"] = *s.clipQkv;
  if (s.latent)
    j["latent_attention"] = {{"q_lora_rank", s.latent->qLoraRank},
                             {"kv_lora_rank", s.latent->kvLoraRank},
                             {"qk_nope_head_dim", s.latent->qkNopeDim},
                             {"qk_rope_head_dim", s.latent->qkRopeDim},
                             {"v_head_dim", s.latent->vHeadDim}};
  // The first MoE layer's settings are the model's; other MoE layers that
  // differ, and the dense layers, are listed by index.
  const LayerSpec *first = nullptr;
  json dense = json::array(), layers = json::object();
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const LayerSpec &l = s.layers[i];
    if (l.dense) {
      dense.push_back(i);
      continue;
    }
    if (!first) {
      first = &l;
      continue;
    }
    json mine = moeJson(l.moe), global = moeJson(first->moe), diff = json::object();
    for (auto it = mine.begin(); it != mine.end(); ++it)
      if (global[it.key()] != it.value())
        diff[it.key()] = it.value();
    if (!diff.empty())
      layers[std::to_string(i)] = diff;
  }
  if (first) {
    j["moe"] = moeJson(first->moe);
    if (!dense.empty())
      j["moe"]["dense_layers"] = dense;
    if (!layers.empty())
      j["layers"] = layers;
  }
  const OptimizerSpec &o = s.optimizer;
  j["optimizer"] = {{"type", "adamw"},
                    {"lr", o.lr},
                    {"betas", {o.beta1, o.beta2}},
                    {"eps", o.eps},
                    {"weight_decay", o.weightDecay},
                    {"grad_clip", o.gradClip},
                    {"warmup_steps", o.warmupSteps},
                    {"schedule", o.schedule},
                    {"min_lr", o.minLr},
                    {"total_steps", o.totalSteps}};
  return j;
}
