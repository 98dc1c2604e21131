//===- ModelToMLIR.cpp - model spec to moe dialect ------------------------===//

#include "moe/Frontend/ModelToMLIR.h"

#include "moe/Dialect/MoE/MoEOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;
using ::moec::frontend::ModelSpec;
using ::moec::frontend::MoESettings;

int64_t moec::frontend::expertCapacity(const MoESettings &moe, int64_t tokens) {
  if (!moe.capacityFactor)
    return tokens;
  double slots = *moe.capacityFactor * static_cast<double>(tokens) * static_cast<double>(moe.topK) /
                 static_cast<double>(moe.numExperts);
  auto capacity = static_cast<int64_t>(std::ceil(slots));
  return std::max<int64_t>(1, std::min(capacity, tokens));
}

namespace {
class Emitter {
public:
  Emitter(const ModelSpec &spec, MLIRContext &context) : spec(spec), ctx(context), b(&context) {
    if (spec.dtype == "bf16")
      elementType = b.getBF16Type();
    else if (spec.dtype == "f16")
      elementType = b.getF16Type();
    else
      elementType = b.getF32Type();
  }

  OwningOpRef<ModuleOp> run();

private:
  Location loc(const std::string &ptr) {
    ::moec::frontend::SourcePos pos = spec.doc->valuePos(ptr);
    return FileLineColLoc::get(&ctx, spec.doc->file(), pos.line, pos.col);
  }

  RankedTensorType tensor(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, elementType);
  }

  /// Declares parameter `name` (f32: the master weights) and reads it in the
  /// step, as a copy in the model's element type unless `keepF32`.
  Value param(const std::string &name, ArrayRef<int64_t> shape, InitKind init, Location where,
              bool keepF32 = false) {
    auto type = RankedTensorType::get(shape, b.getF32Type());
    double scale = init == InitKind::normal ? spec.initStd : 0.0;
    ParamOp::create(top, where, name, type, InitAttr::get(&ctx, init, scale));
    Value value = GetParamOp::create(body, where, type, FlatSymbolRefAttr::get(&ctx, name));
    if (keepF32 || elementType.isF32())
      return value;
    return CastOp::create(body, where, tensor(shape), value);
  }
  Value weight(const std::string &name, ArrayRef<int64_t> shape, Location where) {
    return param(name, shape, InitKind::normal, where);
  }

  Value rmsNorm(Value x, Value gamma, Location where) {
    return RMSNormOp::create(body, where, x.getType(), x, gamma,
                             b.getF32FloatAttr(static_cast<float>(spec.normEps)));
  }

  Value attentionBlock(Value x, const std::string &prefix);
  Value latentAttentionBlock(Value x, const std::string &prefix);
  Value ffnBlock(Value h, const ::moec::frontend::LayerSpec &layer, const std::string &prefix,
                 Value &auxLoss);

  const ModelSpec &spec;
  MLIRContext &ctx;
  OpBuilder b;
  OpBuilder top{static_cast<MLIRContext *>(nullptr)};
  OpBuilder body{static_cast<MLIRContext *>(nullptr)};
  Type elementType;
};
} // namespace

Value Emitter::attentionBlock(Value x, const std::string &prefix) {
  if (spec.latent)
    return latentAttentionBlock(x, prefix);
  Location where = loc(spec.attentionPtr);
  int64_t d = spec.dModel, hd = spec.headDim;
  Value gamma = param(prefix + "attn_norm", {d}, InitKind::ones, where);
  Value norm = rmsNorm(x, gamma, where);
  // The q, k, v projections, with biases when qkv_bias (zero at the start).
  auto project = [&](const char *name, int64_t width) -> Value {
    Value w = weight(prefix + "w" + name, {d, width}, where);
    Value bias =
        spec.qkvBias ? param(prefix + "b" + name, {width}, InitKind::zeros, where) : Value();
    return LinearOp::create(body, where, norm, w, bias);
  };
  Value q = project("q", spec.numHeads * hd);
  Value k = project("k", spec.numKvHeads * hd);
  if (spec.qkNorm != "none") { // per head: one gain of the head width; full: the projection's
    bool full = spec.qkNorm == "full";
    q = rmsNorm(q,
                param(prefix + "q_norm", {full ? spec.numHeads * hd : hd}, InitKind::ones, where),
                where);
    k = rmsNorm(k,
                param(prefix + "k_norm", {full ? spec.numKvHeads * hd : hd}, InitKind::ones, where),
                where);
  }
  Value v = project("v", spec.numKvHeads * hd);
  if (spec.clipQkv) { // after the q/k norms, as OLMoE's clip_qkv
    FloatAttr limit = b.getF32FloatAttr(static_cast<float>(*spec.clipQkv));
    q = ClampOp::create(body, where, q.getType(), q, limit);
    k = ClampOp::create(body, where, k.getType(), k, limit);
    v = ClampOp::create(body, where, v.getType(), v, limit);
  }
  auto attention = AttentionOp::create(
      body, where, q.getType(), q, k, v, spec.numHeads, spec.numKvHeads,
      spec.ropeTheta ? b.getF32FloatAttr(static_cast<float>(*spec.ropeTheta)) : FloatAttr());
  Value out = LinearOp::create(body, where, attention,
                               weight(prefix + "wo", {spec.numHeads * hd, d}, where));
  return AddOp::create(body, where, x, out);
}

/// DeepSeek's multi-head latent attention: queries through their low-rank
/// bottleneck (when q_lora_rank > 0), content keys and values from the
/// normalised kv latent, the shared rotary key straight from the input.
Value Emitter::latentAttentionBlock(Value x, const std::string &prefix) {
  Location where = loc(spec.latentPtr);
  const ::moec::frontend::LatentAttentionSpec &l = *spec.latent;
  int64_t d = spec.dModel, h = spec.numHeads;
  Value gamma = param(prefix + "attn_norm", {d}, InitKind::ones, where);
  Value norm = rmsNorm(x, gamma, where);
  auto linear = [&](Value in, const std::string &name, int64_t width) -> Value {
    int64_t from = cast<RankedTensorType>(in.getType()).getShape().back();
    return LinearOp::create(body, where, in, weight(prefix + name, {from, width}, where));
  };
  auto normed = [&](Value in, const std::string &name) {
    int64_t width = cast<RankedTensorType>(in.getType()).getShape().back();
    return rmsNorm(in, param(prefix + name, {width}, InitKind::ones, where), where);
  };
  int64_t qWidth = h * (l.qkNopeDim + l.qkRopeDim);
  Value q = l.qLoraRank
                ? linear(normed(linear(norm, "wq_a", l.qLoraRank), "q_a_norm"), "wq_b", qWidth)
                : linear(norm, "wq", qWidth);
  Value latent = normed(linear(norm, "wkv_a", l.kvLoraRank), "kv_a_norm");
  Value kRope = linear(norm, "wk_rope", l.qkRopeDim);
  Value k = linear(latent, "wk_b", h * l.qkNopeDim);
  Value v = linear(latent, "wv_b", h * l.vHeadDim);
  auto attention = LatentAttentionOp::create(
      body, where, v.getType(), q, k, kRope, v, h,
      spec.ropeTheta ? b.getF32FloatAttr(static_cast<float>(*spec.ropeTheta)) : FloatAttr());
  Value out =
      LinearOp::create(body, where, attention, weight(prefix + "wo", {h * l.vHeadDim, d}, where));
  return AddOp::create(body, where, x, out);
}

static Activation activationOf(const std::string &name) {
  return name == "gelu" ? Activation::gelu : name == "relu" ? Activation::relu : Activation::swiglu;
}

Value Emitter::ffnBlock(Value x, const ::moec::frontend::LayerSpec &layer,
                        const std::string &prefix, Value &auxLoss) {
  int64_t d = spec.dModel;
  Location where = loc(layer.dense ? spec.ffnPtr : layer.ptr);
  Value gamma = param(prefix + "ffn_norm", {d}, InitKind::ones, where);
  Value h = rmsNorm(x, gamma, where);

  // A dense FFN of width `f` (dense layers and shared experts).
  auto dense = [&](const std::string &name, Activation act, int64_t f) {
    Value up = weight(name + ".up", {d, f}, where);
    Value down = weight(name + ".down", {f, d}, where);
    Value gate = act == Activation::swiglu ? weight(name + ".gate", {d, f}, where) : Value();
    return FFNOp::create(body, where, h.getType(), act, h, up, down, gate).getResult();
  };

  Value out;
  if (layer.dense) {
    out = dense(prefix + "ffn", Activation::swiglu, spec.ffnDim);
  } else {
    const MoESettings &m = layer.moe;
    int64_t e = m.numExperts, f = m.expertFfnDim;
    Activation act = activationOf(m.activation);
    Value router = weight(prefix + "router", {d, e}, where);
    Value bias = m.routerBias
                     ? param(prefix + "router_bias", {e}, InitKind::zeros, where, /*keepF32=*/true)
                     : Value();
    auto route =
        RouterOp::create(body, where, m.scoring == "sigmoid" ? Scoring::sigmoid : Scoring::softmax,
                         h, router, bias, m.topK);
    route.setRenormalize(m.renormalize);
    if (m.capacityFactor)
      route.setCapacityFactorAttr(b.getF32FloatAttr(static_cast<float>(*m.capacityFactor)));
    route.setAuxLossCoef(APFloat(static_cast<float>(m.auxLossCoef)));
    if (m.auxPerSequence)
      route.setAuxPerSequence(true);
    route.setZLossCoef(APFloat(static_cast<float>(m.zLossCoef)));
    route.setRoutedScaling(APFloat(static_cast<float>(m.routedScaling)));
    if (bias)
      route.setBiasUpdateRateAttr(b.getF64FloatAttr(m.biasUpdateRate));
    if (m.numGroups > 1) { // group-limited routing; the default routes over all experts
      route.setExpertGroupsAttr(b.getI64IntegerAttr(m.numGroups));
      route.setTopkGroupsAttr(b.getI64IntegerAttr(m.topkGroups));
    }
    int64_t capacity = ::moec::frontend::expertCapacity(m, spec.numTokens());
    Value buffer = DispatchOp::create(body, where, h, route.getExperts(), e, capacity);
    Value up = weight(prefix + "experts.up", {e, d, f}, where);
    Value down = weight(prefix + "experts.down", {e, f, d}, where);
    Value gate =
        act == Activation::swiglu ? weight(prefix + "experts.gate", {e, d, f}, where) : Value();
    Value expertsOut = ExpertFFNOp::create(body, where, buffer.getType(), act, buffer, up, down,
                                           gate, /*rows=*/Value(), PlacementAttr());
    out = CombineOp::create(body, where, expertsOut, route.getGates(), route.getExperts());
    if (m.numSharedExperts > 0) {
      int64_t width = m.numSharedExperts * (m.sharedFfnDim ? m.sharedFfnDim : f);
      Value shared = dense(prefix + "shared", act, width);
      if (m.sharedExpertGate) { // sigmoid(h w) scales each token's shared output
        Value logit =
            LinearOp::create(body, where, h, weight(prefix + "shared_gate", {d, 1}, where));
        shared = SigmoidGateOp::create(body, where, shared.getType(), shared, logit);
      }
      out = AddOp::create(body, where, out, shared);
    }
    auxLoss = auxLoss ? AddOp::create(body, where, auxLoss, route.getAuxLoss()).getResult()
                      : route.getAuxLoss();
  }
  return AddOp::create(body, where, x, out);
}

OwningOpRef<ModuleOp> Emitter::run() {
  Location rootLoc = loc("");
  OwningOpRef<ModuleOp> module = ModuleOp::create(rootLoc, spec.name);
  top = OpBuilder::atBlockEnd(module->getBody());
  const auto &o = spec.optimizer;
  (*module)->setAttr("moe.optimizer",
                     b.getDictionaryAttr({
                         b.getNamedAttr("type", b.getStringAttr("adamw")),
                         b.getNamedAttr("lr", b.getF64FloatAttr(o.lr)),
                         b.getNamedAttr("beta1", b.getF64FloatAttr(o.beta1)),
                         b.getNamedAttr("beta2", b.getF64FloatAttr(o.beta2)),
                         b.getNamedAttr("eps", b.getF64FloatAttr(o.eps)),
                         b.getNamedAttr("weight_decay", b.getF64FloatAttr(o.weightDecay)),
                         b.getNamedAttr("grad_clip", b.getF64FloatAttr(o.gradClip)),
                         b.getNamedAttr("warmup_steps", b.getI64IntegerAttr(o.warmupSteps)),
                         b.getNamedAttr("total_steps", b.getI64IntegerAttr(o.totalSteps)),
                         b.getNamedAttr("schedule", b.getStringAttr(o.schedule)),
                         b.getNamedAttr("min_lr", b.getF64FloatAttr(o.minLr)),
                     }));
  (*module)->setAttr("moe.seed", b.getI64IntegerAttr(static_cast<int64_t>(spec.seed)));
  // What the model is, for HuggingFace weights in and out at run time.
  nlohmann::json model = {{"spec", ::moec::frontend::modelSpecToJson(spec)}};
  if (spec.doc && spec.doc->root().is_object() && spec.doc->root().contains("model_type"))
    model["hf_config"] = spec.doc->root();
  (*module)->setAttr(MoEDialect::kModelAttrName, b.getStringAttr(model.dump()));
  // f16's range (6e-5 .. 65504) loses small gradients: dynamic loss scaling,
  // starting where PyTorch's GradScaler does.
  if (elementType.isF16())
    (*module)->setAttr(MoEDialect::kLossScaleAttrName, b.getF64FloatAttr(65536.0));

  auto ids = RankedTensorType::get({spec.batchSize, spec.seqLen}, b.getI32Type());
  auto fn = func::FuncOp::create(
      top, rootLoc, "train_step",
      b.getFunctionType({ids, ids}, {RankedTensorType::get({}, b.getF32Type())}));
  fn.setArgAttr(0, MoEDialect::kInputAttrName, b.getStringAttr("tokens"));
  fn.setArgAttr(1, MoEDialect::kInputAttrName, b.getStringAttr("targets"));
  body = OpBuilder::atBlockEnd(fn.addEntryBlock());
  top.setInsertionPoint(fn); // parameters first, then the step

  Location embLoc = loc(spec.embeddingPtr);
  Value table = weight("tok_emb", {spec.vocabSize, spec.dModel}, embLoc);
  Value x = EmbeddingOp::create(body, embLoc, fn.getArgument(0), table);
  Value auxLoss;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    std::string prefix = "l" + std::to_string(i) + ".";
    x = attentionBlock(x, prefix);
    x = ffnBlock(x, spec.layers[i], prefix, auxLoss);
  }
  Location headLoc = loc(spec.headPtr);
  Value gamma = param("norm_f", {spec.dModel}, InitKind::ones, headLoc);
  Value h = rmsNorm(x, gamma, headLoc);
  Value logits =
      LinearOp::create(body, headLoc, h, weight("lm_head", {spec.dModel, spec.vocabSize}, headLoc));
  Value loss = CrossEntropyOp::create(body, headLoc, logits, fn.getArgument(1));
  if (auxLoss)
    loss = AddOp::create(body, headLoc, loss, auxLoss);
  func::ReturnOp::create(body, headLoc, loss);
  return module;
}

namespace moec::frontend {
OwningOpRef<ModuleOp> buildModule(const ModelSpec &spec, MLIRContext &context) {
  context.getOrLoadDialect<MoEDialect>();
  context.getOrLoadDialect<func::FuncDialect>();
  return Emitter(spec, context).run();
}
} // namespace moec::frontend
