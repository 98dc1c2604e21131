"""An independent numpy reference of a MoEC model's forward pass and loss.

Written from the model's definition -- docs/ModelJSON.md (fields, defaults,
parameter names and shapes), docs/Autodiff.md (drop policy, loss terms),
docs/RationaleMoE.md and docs/Partitioning.md (capacity, routing groups),
the op descriptions in dialect/include/moe/Dialect/MoE/*.td and the block
structure of examples/mlir/tiny-moe.mlir -- and deliberately not from the
reference interpreter (test/reference/Interpreter.cpp), so that the two can
check each other. Everything is float64.

    spec = load_model("model.json")
    params = load_safetensors("dump/params.safetensors")
    out = forward_loss(spec, params, tokens, targets)   # tokens: [B, S] ints
    out["loss"]                                         # CE + router losses

With `router_bias` the selection bias is the reference's own state across
steps (DeepSeek-V3's auxiliary-loss-free balancing, docs/ModelJSON.md and
docs/Autodiff.md): zero at the start, it steers which experts are chosen
(top-k of score + bias) but not the gate weights (the scores of the chosen
experts), and after every step moves by the load rule:

    bias = initial_biases(spec)                         # {"l1.": zeros(E)}
    out = forward_loss(spec, params, tokens, targets, bias=bias)
    bias = update_biases(spec, bias, out["load"])       # for the next step

With `latent_attention` (DeepSeek-V2/V3's multi-head latent attention) the
attention block projects the keys and values through a compressed latent
(latent_attention below); with `aux_loss_per_sequence` the load-balancing
loss is DeepSeek's sequence-wise one (moe_layer).

`forward_loss(..., mutate={"rope-interleaved", ...})` computes a plausible
*wrong* reading of one feature instead (see MUTANTS): compare.py uses it to
show that every feature it reports actually moves the loss of the instance,
i.e. that agreement on that feature is evidence and not an accident.
"""

import json
import math
from fractions import Fraction
import struct

import numpy as np

# ---------------------------------------------------------------------------
# The model description (docs/ModelJSON.md), with its defaults.
# ---------------------------------------------------------------------------

_MOE_DEFAULTS = {
    "num_experts": 8,
    "top_k": 2,
    "expert_ffn_dim": None,  # required in a MoE layer
    "activation": "swiglu",
    "num_shared_experts": 0,
    "shared_expert_ffn_dim": None,  # default: expert_ffn_dim
    "shared_expert_gate": False,
    "capacity_factor": 1.25,  # None (JSON null): dropless
    "router_scoring": "softmax",
    "renormalize": True,
    "aux_loss_coef": 0.01,
    "router_z_loss_coef": 0.0,
    "routed_scaling": 1.0,
    "router_bias": False,
    "router_bias_update_rate": 0.001,
    "n_groups": 1,  # group-limited routing: equal contiguous expert groups
    "topk_groups": 1,  # ... of which a token keeps its best
    "aux_loss_per_sequence": False,  # DeepSeek's seq_aux: the balance loss per sequence
}

# The fields of `latent_attention` (multi-head latent attention), all required.
_LATENT_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                  "v_head_dim")


def f32(x, mutate=()):
    """Rounds a hyper-parameter to float32.

    The IR carries these settings as F32Attr (`epsilon` of moe.rms_norm,
    `rope_theta` of moe.attention, `aux_loss_coef`, `z_loss_coef`,
    `routed_scaling` of moe.router / moe.fused_gate: see MoEModelOps.td,
    MoERoutingOps.td, MoEFusedOps.td), so the value a step computes with is
    the JSON number rounded to the nearest float32. (`capacity_factor` is
    also an f32 attribute, but the capacity -- an integer attribute -- is
    sized by the frontend from the JSON number: see moe_layer.)
    """
    if x is None or "hyper-f64" in mutate:
        return None if x is None else float(x)
    return float(np.float32(x))


def load_model(path):
    """Reads a model JSON and resolves every default and per-layer override."""
    with open(path) as f:
        m = json.load(f)
    spec = {}
    spec["name"] = m.get("name", "model")
    spec["vocab_size"] = m["vocab_size"]
    d = spec["d_model"] = m["d_model"]
    spec["n_layers"] = m["n_layers"]
    spec["n_heads"] = m["n_heads"]
    spec["n_kv_heads"] = m.get("n_kv_heads", m["n_heads"])
    spec["latent"] = _latent_attention(m)
    if spec["latent"] is not None:
        # The query/key head width is dn + dr (the values' is v_head_dim).
        la = spec["latent"]
        spec["head_dim"] = la["qk_nope_head_dim"] + la["qk_rope_head_dim"]
        assert m.get("head_dim", spec["head_dim"]) == spec["head_dim"], \
            "latent_attention: head_dim must equal qk_nope_head_dim + qk_rope_head_dim"
        assert spec["n_kv_heads"] == spec["n_heads"], \
            "latent_attention: n_kv_heads must equal n_heads (every head has its own keys)"
    elif "head_dim" in m:
        spec["head_dim"] = m["head_dim"]
    else:
        assert d % m["n_heads"] == 0, "n_heads must divide d_model"
        spec["head_dim"] = d // m["n_heads"]
    assert spec["n_heads"] % spec["n_kv_heads"] == 0
    spec["ffn_dim"] = m.get("ffn_dim", 4 * d)
    spec["seq_len"] = m["seq_len"]
    spec["batch_size"] = m["batch_size"]
    # JSON null means "no position encoding"; absent means 10000.
    spec["rope_theta"] = m["rope_theta"] if "rope_theta" in m else 10000.0
    spec["norm_eps"] = m.get("norm_eps", 1e-5)
    spec["qk_norm"] = m.get("qk_norm", "none")
    spec["qkv_bias"] = m.get("qkv_bias", False)
    spec["clip_qkv"] = m.get("clip_qkv")  # None: no clipping
    assert spec["qk_norm"] in ("none", "head", "full")
    if spec["latent"] is not None:
        assert spec["qk_norm"] == "none", "latent_attention: qk_norm must be \"none\""
        assert spec["qkv_bias"] is False, "latent_attention: qkv_bias must be false"
        assert spec["clip_qkv"] is None, "latent_attention: clip_qkv must be null"

    moe = m.get("moe")
    base = dict(_MOE_DEFAULTS)
    if moe is not None:
        for k, v in moe.items():
            if k != "dense_layers":
                base[k] = v
    dense_layers = set(moe.get("dense_layers", [])) if moe is not None else set()
    overrides = {int(k): v for k, v in m.get("layers", {}).items()}

    layers = []
    for i in range(spec["n_layers"]):
        o = overrides.get(i, {})
        if "dense" in o:
            dense = bool(o["dense"])
        else:
            dense = moe is None or i in dense_layers
        if dense:
            layers.append({"dense": True})
            continue
        cfg = dict(base)
        for k, v in o.items():
            if k != "dense":
                cfg[k] = v
        assert cfg["expert_ffn_dim"] is not None, "layer %d: expert_ffn_dim is required" % i
        if cfg["shared_expert_ffn_dim"] is None:
            cfg["shared_expert_ffn_dim"] = cfg["expert_ffn_dim"]
        cfg["dense"] = False
        layers.append(cfg)
    spec["layers"] = layers
    return spec


def _latent_attention(m):
    """The model's `latent_attention` object checked, or None when absent."""
    la = m.get("latent_attention")
    if la is None:
        return None
    assert isinstance(la, dict), "latent_attention must be an object"
    extra = sorted(set(la) - set(_LATENT_FIELDS))
    assert not extra, "latent_attention: unknown field(s) %s" % ", ".join(extra)
    out = {}
    for k in _LATENT_FIELDS:
        assert k in la, "latent_attention: %s is required" % k
        v = la[k]
        assert isinstance(v, int) and not isinstance(v, bool), \
            "latent_attention: %s must be an integer" % k
        out[k] = v
    assert out["q_lora_rank"] >= 0, "latent_attention: q_lora_rank must be >= 0 (0: no compression)"
    for k in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"):
        assert out[k] >= 1, "latent_attention: %s must be >= 1" % k
    dr = out["qk_rope_head_dim"]
    assert dr >= 2 and dr % 2 == 0, "latent_attention: qk_rope_head_dim must be even and >= 2"
    return out


def load_safetensors(path):
    """Reads a safetensors file (F32 or F64 tensors) into float64 arrays."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in ("F32", "F64"):
            raise ValueError("%s: dtype %s, expected F32 or F64" % (name, info["dtype"]))
        a, b = info["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype="<f4" if info["dtype"] == "F32" else "<f8")
        arr = arr.astype(np.float64)
        out[name] = arr.reshape(info["shape"])
    return out


def expected_params(spec):
    """Parameter names and shapes the definition gives (ModelJSON.md,
    "What the importer builds"; linear weights are stored [in, out])."""
    d, v = spec["d_model"], spec["vocab_size"]
    hq = spec["n_heads"] * spec["head_dim"]
    hkv = spec["n_kv_heads"] * spec["head_dim"]
    p = {"tok_emb": (v, d), "norm_f": (d,), "lm_head": (d, v)}
    la = spec["latent"]
    for i, L in enumerate(spec["layers"]):
        pre = "l%d." % i
        p[pre + "attn_norm"] = (d,)
        if la is not None:
            # Multi-head latent attention (latent_attention): the queries
            # through a rank-Q bottleneck with its RMSNorm (or directly),
            # the keys' and values' per-head parts from one normalised
            # rank-C latent, and one rotary key part of dr shared by all
            # heads.
            h, qr, c = spec["n_heads"], la["q_lora_rank"], la["kv_lora_rank"]
            if qr > 0:
                p[pre + "wq_a"] = (d, qr)
                p[pre + "q_a_norm"] = (qr,)
                p[pre + "wq_b"] = (qr, hq)
            else:
                p[pre + "wq"] = (d, hq)
            p[pre + "wkv_a"] = (d, c)
            p[pre + "kv_a_norm"] = (c,)
            p[pre + "wk_rope"] = (d, la["qk_rope_head_dim"])
            p[pre + "wk_b"] = (c, h * la["qk_nope_head_dim"])
            p[pre + "wv_b"] = (c, h * la["v_head_dim"])
            p[pre + "wo"] = (h * la["v_head_dim"], d)
        else:
            p[pre + "wq"] = (d, hq)
            p[pre + "wk"] = (d, hkv)
            p[pre + "wv"] = (d, hkv)
            p[pre + "wo"] = (hq, d)
        if spec["qkv_bias"]:
            p[pre + "bq"], p[pre + "bk"], p[pre + "bv"] = (hq,), (hkv,), (hkv,)
        # qk_norm: a gain per head width ("head") or per projection ("full").
        if spec["qk_norm"] != "none":
            full = spec["qk_norm"] == "full"
            p[pre + "q_norm"] = (hq if full else spec["head_dim"],)
            p[pre + "k_norm"] = (hkv if full else spec["head_dim"],)
        p[pre + "ffn_norm"] = (d,)
        if L["dense"]:
            f = spec["ffn_dim"]
            # Dense FFNs are SwiGLU (ModelJSON.md, `ffn_dim`).
            p[pre + "ffn.gate"] = (d, f)
            p[pre + "ffn.up"] = (d, f)
            p[pre + "ffn.down"] = (f, d)
            continue
        e, f = L["num_experts"], L["expert_ffn_dim"]
        gated = L["activation"] == "swiglu"
        p[pre + "router"] = (d, e)
        if L["router_bias"]:
            p[pre + "router_bias"] = (e,)
        if gated:
            p[pre + "experts.gate"] = (e, d, f)
        p[pre + "experts.up"] = (e, d, f)
        p[pre + "experts.down"] = (e, f, d)
        if L["num_shared_experts"] > 0:
            fs = L["num_shared_experts"] * L["shared_expert_ffn_dim"]
            if gated:
                p[pre + "shared.gate"] = (d, fs)
            p[pre + "shared.up"] = (d, fs)
            p[pre + "shared.down"] = (fs, d)
            if L["shared_expert_gate"]:
                p[pre + "shared_gate"] = (d, 1)
    return p


def check_params(spec, params):
    """Every parameter the definition names, with its shape, and no other."""
    want = expected_params(spec)
    problems = []
    for name, shape in want.items():
        if name not in params:
            problems.append("missing parameter %s %s" % (name, list(shape)))
        elif tuple(params[name].shape) != tuple(shape):
            problems.append("parameter %s has shape %s, the definition gives %s"
                            % (name, list(params[name].shape), list(shape)))
    for name in params:
        if name not in want:
            problems.append("unexpected parameter %s %s" % (name, list(params[name].shape)))
    return problems


# ---------------------------------------------------------------------------
# Ops (the .td descriptions).
# ---------------------------------------------------------------------------

# Plausible wrong readings of the definition, by name; compare.py checks that
# the mutant of each feature it reports moves the loss of the instance.
MUTANTS = {
    "rope-interleaved": "RoPE on pairs (2i, 2i+1) (GPT-J) instead of rotate-half (i, i + hd/2)",
    "gqa-modulo": "query head h reads kv head h % KV instead of h / (H / KV)",
    "no-causal-mask": "attention without the causal mask",
    "eps-off": "RMSNorm without epsilon",
    "qk-norm-grouping-swapped": "q/k norm over the whole projection where it is per head, and vice versa",
    "dense-ffn-off": "dense FFN layers contribute nothing",
    "routed-off": "routed experts contribute nothing",
    "shared-off": "shared experts contribute nothing",
    "shared-gate-off": "the shared experts' sigmoid gate ignored",
    "qkv-bias-off": "the q, k, v projections' biases ignored",
    "clip-before-norm": "clip_qkv applied to q and k before their qk_norm instead of after",
    "clip-off": "clip_qkv ignored",
    "scoring-swapped": "sigmoid scoring where softmax is set and vice versa",
    "renormalize-flipped": "renormalize read as its negation",
    "routed-scaling-off": "routed_scaling ignored",
    "drop-choice-major": "drops visit all first choices before second choices (GShard's top-2)",
    "drop-reverse-token-order": "drops visit the tokens last to first",
    "dropless-capped": "capacity_factor null read as 1.0",
    "aux-loss-after-drops": "f_e counts only the token-slots kept after drops",
    "aux-off": "aux_loss_coef ignored",
    "sigmoid-aux-raw": "with sigmoid scoring, P_e from raw (unnormalised) scores",
    "z-off": "router_z_loss_coef ignored",
    "groups-one": "routing groups ignored (one group)",
    "gelu-erf": "exact (erf) GELU instead of the tanh approximation",
    "relu-as-gelu": "GELU where ReLU is set",
    "capacity-f32": "capacity from the float32-rounded capacity_factor",
    "hyper-f64": "hyper-parameters in float64 instead of rounded to float32 as the IR stores them",
    "bias-in-gates": "the selection bias also added to the gate weights (score + bias)",
    "bias-fixed": "the selection bias never updated (stays at its initial zero)",
    "bias-sign-flipped": "the load rule moving each bias away from balance",
    "expert-groups-off": "n_groups / topk_groups ignored (top-k over all experts)",
    "group-score-swapped": "groups scored by the other scoring's rule (max <-> sum of top two)",
    "seq-aux-batch": "aux_loss_per_sequence ignored (the balance loss over the routing group)",
    "mla-rope-whole-head": "latent attention: RoPE over each whole query/key head (dn + dr) "
                           "instead of its last dr dims",
    "mla-scale-v-dim": "latent attention: scores scaled by 1/sqrt(v_head_dim) instead of "
                       "1/sqrt(dn + dr)",
    "mla-k-rope-first": "latent attention: the rotary part of each query head read as its "
                        "first dr columns (and the key laid out [rope, nope]) instead of the last",
    "mla-no-kv-norm": "latent attention: the kv latent not normalised (kv_a_norm skipped)",
    "mla-no-q-norm": "latent attention: the query latent not normalised (q_a_norm skipped)",
}


def rms_norm(x, gamma, eps):
    # result = x / sqrt(mean(x^2, last) + epsilon) * gamma
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gamma


def qk_norm(x, gamma, eps, per_head, hd):
    """qk_norm of a projection x [B, S, N*hd]: each head on its own with the
    gain gamma [hd] (per_head), or the whole projection with gamma [N*hd]."""
    if not per_head:
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * np.resize(gamma, x.shape[-1])
    b, s, w = x.shape
    heads = x.reshape(b, s, w // hd, hd)
    g = gamma if gamma.shape[0] == hd else np.ones(hd)  # a swapped reading has no per-head gain
    out = heads / np.sqrt(np.mean(heads * heads, axis=-1, keepdims=True) + eps) * g
    return out.reshape(b, s, w)


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gelu_erf(x):
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def ffn(x, act, up, down, gate, mutate):
    """moe.ffn: swiglu (silu(x W_gate) * x W_up) W_down, gelu (tanh form), relu."""
    if act == "swiglu":
        h = silu(x @ gate) * (x @ up)
    elif act == "gelu":
        h = gelu_erf(x @ up) if "gelu-erf" in mutate else gelu_tanh(x @ up)
    elif act == "relu":
        h = gelu_tanh(x @ up) if "relu-as-gelu" in mutate else np.maximum(x @ up, 0.0)
    else:
        raise ValueError("unknown activation %r" % act)
    return h @ down


def rope(x, theta, interleaved=False):
    """Rotary embedding of x [B, S, heads, hd] at positions 0..S-1, rotate-half
    convention (Llama, Mixtral): dimension i < hd/2 is paired with i + hd/2
    and rotated by the angle pos * theta^(-2i/hd)."""
    _, s, _, hd = x.shape
    half = hd // 2
    inv = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / hd)
    ang = np.arange(s, dtype=np.float64)[:, None] * inv[None, :]  # [S, hd/2]
    cos = np.cos(ang)[None, :, None, :]
    sin = np.sin(ang)[None, :, None, :]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
    a, b = x[..., :half], x[..., half:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def attention(q, k, v, n_heads, n_kv, hd, theta, mutate):
    """moe.attention: causal scaled dot-product attention, q [B, S, H*hd],
    k, v [B, S, KV*hd]; query head h reads kv head h / (H / KV)."""
    b, s, _ = q.shape
    q = q.reshape(b, s, n_heads, hd)
    k = k.reshape(b, s, n_kv, hd)
    v = v.reshape(b, s, n_kv, hd)
    if theta is not None:
        inter = "rope-interleaved" in mutate
        q = rope(q, theta, inter)
        k = rope(k, theta, inter)
    group = n_heads // n_kv
    out = np.empty((b, s, n_heads, hd))
    causal = np.tril(np.ones((s, s), dtype=bool))
    for h in range(n_heads):
        kvh = h % n_kv if "gqa-modulo" in mutate else h // group
        sc = np.einsum("bid,bjd->bij", q[:, :, h, :], k[:, :, kvh, :]) / math.sqrt(hd)
        if "no-causal-mask" not in mutate:
            sc = np.where(causal[None], sc, -np.inf)
        sc = sc - sc.max(axis=-1, keepdims=True)
        p = np.exp(sc)
        p /= p.sum(axis=-1, keepdims=True)
        out[:, :, h, :] = np.einsum("bij,bjd->bid", p, v[:, :, kvh, :])
    return out.reshape(b, s, n_heads * hd)


def standard_attention(h, P, pre, spec, theta, eps, mutate):
    """The attention block's output (after wo) on the normalised hidden
    states h: q/k/v projections, their biases, q/k norms and clipping, then
    moe.attention."""
    n_h, n_kv, hd = spec["n_heads"], spec["n_kv_heads"], spec["head_dim"]
    q, k, v = h @ P[pre + "wq"], h @ P[pre + "wk"], h @ P[pre + "wv"]
    if spec["qkv_bias"] and "qkv-bias-off" not in mutate:
        q, k, v = q + P[pre + "bq"], k + P[pre + "bk"], v + P[pre + "bv"]
    if spec["qk_norm"] != "none":
        # After the projections, before the rotary embedding.
        per_head = (spec["qk_norm"] == "head") != ("qk-norm-grouping-swapped" in mutate)
        clip_first = spec["clip_qkv"] is not None and "clip-before-norm" in mutate
        if clip_first:
            c = f32(spec["clip_qkv"], mutate)
            q, k = np.clip(q, -c, c), np.clip(k, -c, c)
        q = qk_norm(q, P[pre + "q_norm"], eps, per_head, hd)
        k = qk_norm(k, P[pre + "k_norm"], eps, per_head, hd)
    if spec["clip_qkv"] is not None and "clip-off" not in mutate:
        # After the q/k norms (OLMoE's order), on q, k and v.
        c = f32(spec["clip_qkv"], mutate)
        if "clip-before-norm" not in mutate or spec["qk_norm"] == "none":
            q, k = np.clip(q, -c, c), np.clip(k, -c, c)
        v = np.clip(v, -c, c)
    a = attention(q, k, v, n_h, n_kv, hd, theta, mutate)
    return a @ P[pre + "wo"]


def latent_attention(h, P, pre, spec, theta, eps, mutate):
    """Multi-head latent attention (DeepSeek-V2/V3) on the normalised hidden
    states h [B, S, D]; returns the heads' outputs [B, S, H*dv] (head-major),
    before wo. Query head i is [q_nope (dn), q_rope (dr)]; its key is
    [k_nope_i (dn), k_rope (dr)] with k_rope one per token, shared by every
    head; only the dr rope dims are rotated (rotate-half, pairs (i, i + dr/2),
    angle pos * theta^(-2i/dr)); scores are scaled by 1/sqrt(dn + dr)."""
    la = spec["latent"]
    b, s, _ = h.shape
    n_h = spec["n_heads"]
    dn, dr, dv = la["qk_nope_head_dim"], la["qk_rope_head_dim"], la["v_head_dim"]
    if la["q_lora_rank"] > 0:
        qa = h @ P[pre + "wq_a"]
        if "mla-no-q-norm" not in mutate:
            qa = rms_norm(qa, P[pre + "q_a_norm"], eps)
        q = qa @ P[pre + "wq_b"]
    else:
        q = h @ P[pre + "wq"]
    q = q.reshape(b, s, n_h, dn + dr)
    c = h @ P[pre + "wkv_a"]
    if "mla-no-kv-norm" not in mutate:
        c = rms_norm(c, P[pre + "kv_a_norm"], eps)
    k_nope = (c @ P[pre + "wk_b"]).reshape(b, s, n_h, dn)
    v = (c @ P[pre + "wv_b"]).reshape(b, s, n_h, dv)
    k_rope = (h @ P[pre + "wk_rope"])[:, :, None, :]  # [B, S, 1, dr]
    if "mla-k-rope-first" in mutate:
        q_rope, q_nope = q[..., :dr], q[..., dr:]
    else:
        q_nope, q_rope = q[..., :dn], q[..., dn:]
    inter = "rope-interleaved" in mutate
    if "mla-rope-whole-head" in mutate:
        # The whole head rotated, as standard attention would.
        qf = np.concatenate([q_nope, q_rope], axis=-1)
        kf = np.concatenate([k_nope, np.broadcast_to(k_rope, (b, s, n_h, dr))], axis=-1)
        if theta is not None:
            qf, kf = rope(qf, theta, inter), rope(kf, theta, inter)
    else:
        if theta is not None:
            q_rope, k_rope = rope(q_rope, theta, inter), rope(k_rope, theta, inter)
        qf = np.concatenate([q_nope, q_rope], axis=-1)
        kf = np.concatenate([k_nope, np.broadcast_to(k_rope, (b, s, n_h, dr))], axis=-1)
    scale = math.sqrt(dv if "mla-scale-v-dim" in mutate else dn + dr)
    out = np.empty((b, s, n_h, dv))
    causal = np.tril(np.ones((s, s), dtype=bool))
    for i in range(n_h):
        sc = np.einsum("bid,bjd->bij", qf[:, :, i, :], kf[:, :, i, :]) / scale
        if "no-causal-mask" not in mutate:
            sc = np.where(causal[None], sc, -np.inf)
        sc = sc - sc.max(axis=-1, keepdims=True)
        p = np.exp(sc)
        p /= p.sum(axis=-1, keepdims=True)
        out[:, :, i, :] = np.einsum("bij,bjd->bid", p, v[:, :, i, :])
    return out.reshape(b, s, n_h * dv)


def logsumexp(x):
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def moe_layer(h, L, P, pre, groups, mutate, stats, bias=None):
    """A MoE FFN on the normalised hidden states h [B, S, D]: router (scores,
    top-k, gates, losses), capacity and drops per routing group, the routed
    experts, and the shared experts. `bias` is the selection bias [E] (None:
    the parameter's value). Returns (output [B, S, D], router loss)."""
    b, s, d = h.shape
    x = h.reshape(b * s, d)
    t_all = b * s
    e_num, k = L["num_experts"], L["top_k"]
    act = L["activation"]
    scoring = L["router_scoring"]
    if "scoring-swapped" in mutate:
        scoring = "sigmoid" if scoring == "softmax" else "softmax"
    renorm = L["renormalize"] != ("renormalize-flipped" in mutate)
    scaling = 1.0 if "routed-scaling-off" in mutate else f32(L["routed_scaling"], mutate)
    aux_coef = 0.0 if "aux-off" in mutate else f32(L["aux_loss_coef"], mutate)
    z_coef = 0.0 if "z-off" in mutate else f32(L["router_z_loss_coef"], mutate)
    cf = L["capacity_factor"]
    if "dropless-capped" in mutate and cf is None:
        cf = 1.0
    if "groups-one" in mutate:
        groups = 1
    assert b % groups == 0, "routing groups must divide the batch"
    tg = t_all // groups  # tokens per group: whole consecutive sequences

    logits = x @ P[pre + "router"]  # [T, E]
    if scoring == "softmax":
        z = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores = z / z.sum(axis=-1, keepdims=True)
    else:
        scores = 1.0 / (1.0 + np.exp(-logits))
    if L["router_bias"]:
        b_sel = P[pre + "router_bias"] if bias is None else bias
        sel = scores + b_sel[None, :]
    else:
        sel = scores

    # Group-limited routing (docs/ModelJSON.md `n_groups`, `topk_groups`):
    # the experts split into n_groups equal contiguous groups, each scored
    # from the selection keys (score + bias) -- softmax: the largest key,
    # sigmoid: the sum of the two largest -- and a token picks its top-k
    # among the experts of its topk_groups best groups only.
    n_groups, topk_groups = L["n_groups"], L["topk_groups"]
    if n_groups > 1 and "expert-groups-off" not in mutate:
        per = e_num // n_groups
        grouped = -np.sort(-sel.reshape(t_all, n_groups, per), axis=-1)  # descending
        by_max = (scoring == "softmax") != ("group-score-swapped" in mutate)
        gscore = grouped[..., 0] if by_max or per == 1 else grouped[..., 0] + grouped[..., 1]
        gorder = np.argsort(-gscore, axis=-1, kind="stable")  # ties to the lower group
        allowed = np.zeros((t_all, e_num), dtype=bool)
        for j in range(topk_groups):
            for c in range(per):
                allowed[np.arange(t_all), gorder[:, j] * per + c] = True
        if topk_groups < n_groups:
            gsrt = np.take_along_axis(gscore, gorder, axis=-1)
            stats["min_margin"] = min(stats.get("min_margin", np.inf),
                                      float(np.min(gsrt[:, topk_groups - 1] - gsrt[:, topk_groups])))
        key = np.where(allowed, sel, -np.inf)
        # Tokens whose selection the groups change (reported by compare.py).
        changed = np.any(np.sort(np.argsort(-key, axis=-1, kind="stable")[:, :k], axis=-1)
                         != np.sort(np.argsort(-sel, axis=-1, kind="stable")[:, :k], axis=-1),
                         axis=-1)
        stats["group_limited"] = stats.get("group_limited", 0) + int(np.sum(changed))
    else:
        allowed = np.ones((t_all, e_num), dtype=bool)
        key = sel

    # Top-k by (score + bias), largest first, ties to the lower expert index.
    order = np.argsort(-key, axis=-1, kind="stable")
    experts = order[:, :k]  # [T, k], best first
    # Selection margin: how far the k-th choice is from the (k+1)-th (among
    # the allowed experts); a tiny margin would make the comparison
    # ill-conditioned (reported, not hidden).
    reachable = int(allowed[0].sum())
    if k < reachable:
        srt = np.take_along_axis(key, order, axis=-1)
        stats["min_margin"] = min(stats.get("min_margin", np.inf),
                                  float(np.min(srt[:, k - 1] - srt[:, k])))
    # The gate weights are the chosen experts' scores: the bias only
    # chooses (DeepSeek-V3's auxiliary-loss-free balancing).
    gates = np.take_along_axis(sel if "bias-in-gates" in mutate else scores, experts, axis=-1)
    if renorm:
        gates = gates / gates.sum(axis=-1, keepdims=True)
    gates = gates * scaling

    # Capacity per expert and group: ceil(cf * T_g * k / E), at most T_g;
    # dropless (null) never drops since a token's k experts are distinct.
    # ModelJSON.md defines the slots from the JSON number, so the product is
    # taken exactly, on the decimal the JSON wrote: 0.3 * 40 * 2 / 8 is 3
    # slots (with the f32 rounding of 0.3 it would be 4).
    if cf is None:
        cap = tg
    else:
        exact = Fraction(repr(float(cf)))
        if "capacity-f32" in mutate:
            exact = Fraction(float(np.float32(cf)))
        cap = min(math.ceil(exact * tg * k / e_num), tg)
    kept = np.zeros((t_all, k), dtype=bool)

    def balance_loss(lo, hi):
        """Switch load-balancing loss of tokens lo..hi-1: coef * E * sum_e
        f_e P_e, f_e the fraction of their token-slots routed to e (before
        drops), P_e the mean score of e (sigmoid: scores normalised over
        experts first)."""
        routed = experts[lo:hi] if "aux-loss-after-drops" not in mutate else \
            np.where(kept[lo:hi], experts[lo:hi], -1)
        counts = np.array([(routed == e).sum() for e in range(e_num)], dtype=np.float64)
        f = counts / ((hi - lo) * k)
        sc = scores[lo:hi]
        if scoring == "sigmoid" and "sigmoid-aux-raw" not in mutate:
            sc = sc / sc.sum(axis=-1, keepdims=True)
        pm = sc.mean(axis=0)
        return aux_coef * e_num * float(np.sum(f * pm))

    aux_total, z_total = 0.0, 0.0
    for g in range(groups):
        lo, hi = g * tg, (g + 1) * tg
        fill = np.zeros(e_num, dtype=np.int64)
        if "drop-choice-major" in mutate:
            visit = [(t, j) for j in range(k) for t in range(lo, hi)]
        elif "drop-reverse-token-order" in mutate:
            visit = [(t, j) for t in reversed(range(lo, hi)) for j in range(k)]
        else:  # the documented policy: token order, then choice order
            visit = [(t, j) for t in range(lo, hi) for j in range(k)]
        for t, j in visit:
            e = experts[t, j]
            if fill[e] < cap:
                fill[e] += 1
                kept[t, j] = True
        # The load-balancing loss over the group's token-slots.
        aux_total += balance_loss(lo, hi)
        # ST-MoE z-loss: zcoef * mean(logsumexp(logits)^2).
        z_total += z_coef * float(np.mean(logsumexp(logits[lo:hi]) ** 2))
    aux = aux_total / groups
    if L["aux_loss_per_sequence"] and "seq-aux-batch" not in mutate:
        # DeepSeek's sequence-wise balance loss (seq_aux): the same loss
        # over each sequence's S tokens on its own, averaged over the B
        # sequences, whatever the routing groups (it counts before drops).
        aux = sum(balance_loss(i * s, (i + 1) * s) for i in range(b)) / b
    router_loss = aux + z_total / groups
    stats.setdefault("dropped", []).append(int((~kept).sum()))
    # The load rule's input: token-slots routed to each expert over the whole
    # batch (every group), counted before capacity drops.
    stats.setdefault("load", {})[pre] = np.bincount(experts.reshape(-1), minlength=e_num)
    stats.setdefault("capacity", []).append(cap)

    out = np.zeros((t_all, d))
    if "routed-off" not in mutate:
        gate_w = P.get(pre + "experts.gate")
        for e in range(e_num):
            rows, cols = np.nonzero((experts == e) & kept)
            if rows.size == 0:
                continue
            y = ffn(x[rows], act, P[pre + "experts.up"][e], P[pre + "experts.down"][e],
                    None if gate_w is None else gate_w[e], mutate)
            np.add.at(out, rows, gates[rows, cols][:, None] * y)
    if L["num_shared_experts"] > 0 and "shared-off" not in mutate:
        shared = ffn(x, act, P[pre + "shared.up"], P[pre + "shared.down"],
                     P.get(pre + "shared.gate"), mutate)
        if L["shared_expert_gate"] and "shared-gate-off" not in mutate:
            # moe.sigmoid_gate: each token's output times sigmoid(x w), w [D, 1].
            shared = shared / (1.0 + np.exp(-(x @ P[pre + "shared_gate"])))
        out = out + shared
    return out.reshape(b, s, d), router_loss


def forward_loss(spec, params, tokens, targets, groups=1, mutate=(), bias=None):
    """The training step's loss before any update: mean cross-entropy plus the
    sum of the MoE layers' router losses. `bias` maps a MoE layer's prefix
    ("l1.") to its selection bias (initial_biases, update_biases); without
    it the parameters' router_bias is used. Returns a dict with the loss, its
    parts and routing statistics (`load`: each MoE layer's token-slots per
    expert)."""
    mutate = set(mutate)
    P = params
    tokens = np.asarray(tokens, dtype=np.int64)
    targets = np.asarray(targets, dtype=np.int64)
    eps = 0.0 if "eps-off" in mutate else f32(spec["norm_eps"], mutate)
    theta = f32(spec["rope_theta"], mutate)
    stats = {}

    x = P["tok_emb"][tokens]  # [B, S, D]
    router_loss = 0.0
    for i, L in enumerate(spec["layers"]):
        pre = "l%d." % i
        # Pre-norm attention block with a residual connection.
        h = rms_norm(x, P[pre + "attn_norm"], eps)
        if spec["latent"] is not None:
            x = x + latent_attention(h, P, pre, spec, theta, eps, mutate) @ P[pre + "wo"]
        else:
            x = x + standard_attention(h, P, pre, spec, theta, eps, mutate)
        # Pre-norm FFN block (dense SwiGLU, or routed + shared experts).
        h2 = rms_norm(x, P[pre + "ffn_norm"], eps)
        if L["dense"]:
            if "dense-ffn-off" not in mutate:
                x = x + ffn(h2, "swiglu", P[pre + "ffn.up"], P[pre + "ffn.down"],
                            P[pre + "ffn.gate"], mutate)
        else:
            y, rl = moe_layer(h2, L, P, pre, groups, mutate, stats,
                              None if bias is None else bias.get(pre))
            x = x + y
            router_loss += rl
    hf = rms_norm(x, P["norm_f"], eps)
    logits = hf @ P["lm_head"]
    lse = logsumexp(logits)
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    ce = float(np.mean(lse - picked))
    return {"loss": ce + router_loss, "cross_entropy": ce, "router_loss": router_loss,
            "dropped": stats.get("dropped", []), "capacity": stats.get("capacity", []),
            "min_margin": stats.get("min_margin"), "load": stats.get("load", {}),
            "group_limited": stats.get("group_limited")}


def initial_biases(spec):
    """{prefix: zeros(E)} for every MoE layer with a selection bias: the bias
    starts at zero (ModelJSON.md, `router_bias`)."""
    return {"l%d." % i: np.zeros(L["num_experts"]) for i, L in enumerate(spec["layers"])
            if not L["dense"] and L["router_bias"]}


def update_biases(spec, bias, load, mutate=()):
    """The load rule after a training step (ModelJSON.md,
    `router_bias_update_rate` u): bias[e] += u * sign(mean load - load[e]),
    load[e] the token-slots routed to expert e in the whole batch before
    drops; a bias at the mean does not move. u is the JSON number (the IR
    keeps it as an f64 attribute). Returns the new {prefix: bias}."""
    mutate = set(mutate)
    out = {}
    for pre, b in bias.items():
        L = spec["layers"][int(pre[1:-1])]
        if "bias-fixed" in mutate:
            out[pre] = b.copy()
            continue
        counts = np.asarray(load[pre], dtype=np.int64)
        # sign(mean - load[e]) in integers: sign(total - E * load[e]).
        gap = np.sign(counts.sum() - len(counts) * counts)
        if "bias-sign-flipped" in mutate:
            gap = -gap
        new = b.copy()
        rate = float(L["router_bias_update_rate"])
        for e in range(len(new)):  # one addition per expert, as the definition
            if gap[e] != 0:
                new[e] += rate if gap[e] > 0 else -rate
        out[pre] = new
    return out
