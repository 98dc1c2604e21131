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
}


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
    if "head_dim" in m:
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
    for i, L in enumerate(spec["layers"]):
        pre = "l%d." % i
        p[pre + "attn_norm"] = (d,)
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
        # Switch load-balancing loss: coef * E * sum_e f_e P_e, f_e the
        # fraction of the group's token-slots routed to e, P_e the mean
        # score of e (sigmoid: scores normalised over experts first).
        routed = experts[lo:hi] if "aux-loss-after-drops" not in mutate else \
            np.where(kept[lo:hi], experts[lo:hi], -1)
        counts = np.array([(routed == e).sum() for e in range(e_num)], dtype=np.float64)
        f = counts / (tg * k)
        sc = scores[lo:hi]
        if scoring == "sigmoid" and "sigmoid-aux-raw" not in mutate:
            sc = sc / sc.sum(axis=-1, keepdims=True)
        pm = sc.mean(axis=0)
        aux_total += aux_coef * e_num * float(np.sum(f * pm))
        # ST-MoE z-loss: zcoef * mean(logsumexp(logits)^2).
        z_total += z_coef * float(np.mean(logsumexp(logits[lo:hi]) ** 2))
    router_loss = aux_total / groups + z_total / groups
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
    n_h, n_kv, hd = spec["n_heads"], spec["n_kv_heads"], spec["head_dim"]
    stats = {}

    x = P["tok_emb"][tokens]  # [B, S, D]
    router_loss = 0.0
    for i, L in enumerate(spec["layers"]):
        pre = "l%d." % i
        # Pre-norm attention block with a residual connection.
        h = rms_norm(x, P[pre + "attn_norm"], eps)
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
        x = x + a @ P[pre + "wo"]
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
