"""An independent forward pass over a HuggingFace checkpoint (numpy, float64).

Written from HuggingFace transformers' modeling_mixtral.py (MixtralForCausalLM),
and for the differences of modeling_qwen2_moe.py (Qwen2MoeForCausalLM: biases on
q_proj, k_proj, v_proj; the shared expert's output scaled by
sigmoid(shared_expert_gate(x)); layers in mlp_only_layers, or not a multiple of
decoder_sparse_step, are a dense MLP of intermediate_size), modeling_qwen3_moe.py (Qwen3MoeForCausalLM: q_norm
and k_norm, RMSNorms of head_dim applied to each head of the projected queries
and keys before the rotary embedding; the router's top-k renormalised only
with norm_topk_prob; `mlp.gate`, `mlp.experts.{e}.gate/up/down_proj`) and
modeling_olmoe.py (OlmoeForCausalLM: q_norm and k_norm over the whole
projections, of hidden_size and head_dim * num_key_value_heads, then q, k and
v clamped to [-clip_qkv, clip_qkv] when it is set), and DeepSeek-V2/V3 from
deepseek-ai's modeling_deepseek.py and transformers' modeling_deepseek_v2.py /
modeling_deepseek_v3.py (below, deepseek_attention and deepseek_moe):
RMSNorm computed as x * rsqrt(mean(x^2) + eps) * weight; rotary embeddings on
the two halves of each head (rotate_half, inv_freq = theta^(-2i/d)); grouped
query attention by repeat_kv (query head h reads key/value head h // (H/KV));
causal softmax(q k^T / sqrt(d)); the router's softmax over all experts, the
top-k of it renormalised to sum to 1; experts w2(silu(w1 x) * w3 x); the
next-token cross entropy averaged over every target. Reads the tensors by their
HuggingFace names and layouts ([out, in] projections), not MoEC's.

DeepSeek (deepseek_v2, deepseek_v3): multi-head latent attention --
q = q_b_proj(q_a_layernorm(q_a_proj(x))) (or q_proj(x) when q_lora_rank is
null), each head split into q_nope [qk_nope_head_dim] and q_pe
[qk_rope_head_dim]; kv_a_proj_with_mqa(x) split into the latent [kv_lora_rank]
and one k_pe [qk_rope_head_dim] per token shared by every head;
kv_b_proj(kv_a_layernorm(latent)) viewed [heads, nope + v_head_dim] split into
k_nope and the values; the rotary embedding on q_pe and k_pe only, in
DeepSeek's interleaved layout (apply_rotary_pos_emb first de-interleaves,
view(d/2, 2).transpose, then rotate_half with cos/sin of inv_freq =
theta^(-arange(0, d, 2)/d) concatenated twice); the scores
(q_nope.k_nope + q_pe.k_pe) * (nope + rope)^-0.5, causal; o_proj. The
q_a_layernorm and kv_a_layernorm are built without rms_norm_eps, so they take
the RMSNorm's default 1e-6. The MoE gate: logits x gate.weight^T; softmax or
sigmoid scores (scoring_func); topk_method noaux_tc (V3) chooses by scores +
e_score_correction_bias within the topk_group groups of best sum of their
two largest biased scores, group_limited_greedy (V2) by the scores within the
groups of best largest score, greedy over all experts; the weights are the
chosen experts' unbiased scores, divided by their sum + 1e-20 when
norm_topk_prob and top_k > 1, then times routed_scaling_factor (V2's
modeling_deepseek scales only when it does not normalise); plus the shared
experts, one MLP of n_shared_experts * moe_intermediate_size; layers below
first_k_dense_replace, or off moe_layer_freq, a dense MLP of
intermediate_size.

  hf_forward.py DIR DATA --seq-len L [--compare METRICS] [--tolerance T]
      the mean loss over DATA's consecutive windows of L targets from its start
      (bytes of a text file as tokens); with --compare, the eval_loss line of a
      metrics file must agree to relative T (default 1e-4). --mutate NAME
      reads one feature wrongly (MUTANTS below: rope-interleaved, gqa-modulo,
      no-renormalize, w1-w3-swapped, no-qk-norm, qk-norm-grouping-swapped,
      no-qkv-bias, no-shared-gate, no-clip; DeepSeek: rope-not-interleaved,
      mla-scale-dv, no-score-bias, bias-in-weights, no-group-limit),
      to show the comparison can fail. --check-mla yes also computes each
      DeepSeek attention layer of the first window a second way (per-head
      query and key matrices, the interleaved pairs (2i, 2i+1) rotated as
      complex numbers) and fails unless the two agree to 1e-12.
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoint  # noqa: E402

MUTANT = None
MUTANTS = {
    "rope-interleaved": "RoPE on pairs (2i, 2i+1) instead of the two halves",
    "gqa-modulo": "query head h reads kv head h % KV instead of h // (H/KV)",
    "no-renormalize": "the router's top-k renormalisation read as its negation",
    "w1-w3-swapped": "the experts' gate and up projections swapped",
    "no-qk-norm": "q_norm and k_norm ignored",
    "qk-norm-grouping-swapped": "q/k norms per head where over the projection, and vice versa",
    "no-qkv-bias": "the q, k, v projections' biases ignored",
    "no-shared-gate": "Qwen2-MoE's shared expert gate ignored",
    "no-clip": "clip_qkv ignored",
    "rope-not-interleaved": "DeepSeek: rotate_half on q_pe, k_pe as stored (no de-interleave)",
    "mla-scale-dv": "DeepSeek: the scores scaled by v_head_dim^-0.5 instead of (nope + rope)^-0.5",
    "no-score-bias": "DeepSeek-V3: e_score_correction_bias ignored in the selection",
    "bias-in-weights": "DeepSeek-V3: the gate weights from the biased scores",
    "no-group-limit": "DeepSeek: n_group / topk_group ignored (top-k over every expert)",
}
DEEPSEEK = ("deepseek_v2", "deepseek_v3")
# DeepseekV{2,3}RMSNorm's default epsilon, which q_a_layernorm and
# kv_a_layernorm keep (they are built without rms_norm_eps).
LATENT_NORM_EPS = 1e-6
# What --check-mla measured, and tokens whose V3 choice depends on how the
# groups left out are masked (see deepseek_moe).
CHECK = {"on": False, "worst": 0.0, "layers": 0, "mask_sensitive": 0}


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rms_eps(c):
    """rms_norm_eps, or the family's config class default."""
    return c.get("rms_norm_eps", 1e-6 if c["model_type"] in ("qwen3_moe",) + DEEPSEEK else 1e-5)


def qk_norm(x, w, eps, per_head, hd):
    """Qwen3-MoE's norm of each head (a weight of head_dim), OLMoE's of the
    whole projection (a weight of its width)."""
    n, width = x.shape
    if per_head:
        heads = x.reshape(n, width // hd, hd)
        w = w if w.shape[0] == hd else np.ones(hd)
        return rms_norm(heads, w, eps).reshape(n, width)
    return rms_norm(x, np.resize(w, width), eps)


def rotate_half(x):
    if MUTANT == "rope-interleaved":  # pairs (2i, 2i+1) instead of halves
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = -x[..., 1::2], x[..., 0::2]
        return out
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def attention(x, t, at, c):
    n, d = x.shape
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or d // heads
    q, k = x @ t[at + "q_proj.weight"].T, x @ t[at + "k_proj.weight"].T
    family, eps = c["model_type"], rms_eps(c)
    bias = family == "qwen2_moe" and MUTANT != "no-qkv-bias"
    if bias:
        q, k = q + t[at + "q_proj.bias"], k + t[at + "k_proj.bias"]
    per_head = family == "qwen3_moe"
    if MUTANT == "qk-norm-grouping-swapped":
        per_head = not per_head
    if family in ("qwen3_moe", "olmoe") and MUTANT != "no-qk-norm":
        q = qk_norm(q, t[at + "q_norm.weight"], eps, per_head, hd)
        k = qk_norm(k, t[at + "k_norm.weight"], eps, per_head, hd)
    q, k = q.reshape(n, heads, hd), k.reshape(n, kv, hd)
    v = x @ t[at + "v_proj.weight"].T + (t[at + "v_proj.bias"] if bias else 0.0)
    clip = c.get("clip_qkv") if family == "olmoe" else None
    if clip is not None and MUTANT != "no-clip":
        q, k, v = (np.clip(a, -clip, clip) for a in (q, k, v))
    v = v.reshape(n, kv, hd)
    theta = c.get("rope_theta", 1e6 if family == "mixtral" else 10000.0)
    inv_freq = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    freqs = np.outer(np.arange(n, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)[:, None, :]
    if MUTANT == "rope-interleaved":
        emb = np.repeat(freqs, 2, axis=-1)[:, None, :]
    q = q * np.cos(emb) + rotate_half(q) * np.sin(emb)
    k = k * np.cos(emb) + rotate_half(k) * np.sin(emb)
    rep = heads // kv
    if MUTANT == "gqa-modulo":  # head h reads kv head h % KV
        k, v = np.tile(k, (1, rep, 1)), np.tile(v, (1, rep, 1))
    else:
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
    scores = np.where(np.tril(np.ones((n, n), dtype=bool))[None], scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    out = np.einsum("hqk,khd->qhd", probs, v).reshape(n, heads * hd)
    return out @ t[at + "o_proj.weight"].T


def deepseek_rope(x, theta, interleaved=True):
    """HF DeepSeek's apply_rotary_pos_emb on x [n, heads, d] at positions
    0..n-1: the stored pairs (2i, 2i+1) de-interleaved into the two halves,
    then rotate_half with inv_freq = theta^(-arange(0, d, 2)/d) (the result
    stays in the half layout, for queries and keys alike). transformers'
    DeepseekV3Config can turn the de-interleave off (rope_interleave false)."""
    n, heads, d = x.shape
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    emb = np.concatenate([np.outer(np.arange(n, dtype=np.float64), inv_freq)] * 2, axis=-1)
    emb = emb[:, None, :]
    if interleaved and MUTANT != "rope-not-interleaved":
        x = x.reshape(n, heads, d // 2, 2).transpose(0, 1, 3, 2).reshape(n, heads, d)
    half = d // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * np.cos(emb) + rotated * np.sin(emb)


def deepseek_qkv(x, t, at, c):
    """Multi-head latent attention's per-head pieces of HF DeepSeek:
    q_nope [n, H, dn], q_pe [n, H, dr], k_nope [n, H, dn], k_pe [n, dr], v [n, H, dv]."""
    n = x.shape[0]
    heads = c["num_attention_heads"]
    dn, dr, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    if c.get("q_lora_rank") is None:
        q = x @ t[at + "q_proj.weight"].T
    else:
        q = rms_norm(x @ t[at + "q_a_proj.weight"].T, t[at + "q_a_layernorm.weight"],
                     LATENT_NORM_EPS) @ t[at + "q_b_proj.weight"].T
    q = q.reshape(n, heads, dn + dr)
    compressed = x @ t[at + "kv_a_proj_with_mqa.weight"].T
    latent, k_pe = compressed[:, :c["kv_lora_rank"]], compressed[:, c["kv_lora_rank"]:]
    kv = rms_norm(latent, t[at + "kv_a_layernorm.weight"], LATENT_NORM_EPS) @ \
        t[at + "kv_b_proj.weight"].T
    kv = kv.reshape(n, heads, dn + dv)
    return q[..., :dn], q[..., dn:], kv[..., :dn], k_pe, kv[..., dn:]


def deepseek_attention(x, t, at, c):
    """DeepseekV{2,3}Attention (eager) on one window x [n, d], before o_proj."""
    n = x.shape[0]
    heads = c["num_attention_heads"]
    dn, dr, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    q_nope, q_pe, k_nope, k_pe, v = deepseek_qkv(x, t, at, c)
    theta = c.get("rope_theta", 10000.0)
    interleaved = c.get("rope_interleave", True)
    q_pe = deepseek_rope(q_pe, theta, interleaved)
    k_pe = deepseek_rope(k_pe[:, None, :], theta, interleaved)
    query = np.concatenate([q_nope, q_pe], axis=-1)
    key = np.concatenate([k_nope, np.broadcast_to(k_pe, (n, heads, dr))], axis=-1)
    scale = (dv if MUTANT == "mla-scale-dv" else dn + dr) ** -0.5
    scores = np.einsum("qhd,khd->hqk", query, key) * scale
    scores = np.where(np.tril(np.ones((n, n), dtype=bool))[None], scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = scores / scores.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", probs, v).reshape(n, heads * dv)


def deepseek_attention_check(x, t, at, c):
    """The same attention a second way: each head's full query and key
    matrices [n, dn + dr] built column by column from the weights' rows,
    the rope part rotated in place as complex numbers x[2i] + i x[2i+1]
    times exp(i pos inv_freq[i]) (the interleaved pairs), then a softmax per
    query row over the keys up to it."""
    n = x.shape[0]
    heads = c["num_attention_heads"]
    dn, dr, dv = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]
    kv_rank, theta = c["kv_lora_rank"], c.get("rope_theta", 10000.0)
    if c.get("q_lora_rank") is None:
        wq, qin = t[at + "q_proj.weight"], x
    else:
        a = x @ t[at + "q_a_proj.weight"].T
        qin = a / np.sqrt((a * a).mean(axis=1, keepdims=True) + LATENT_NORM_EPS) * \
            t[at + "q_a_layernorm.weight"]
        wq = t[at + "q_b_proj.weight"]
    wa = t[at + "kv_a_proj_with_mqa.weight"]
    lat = x @ wa[:kv_rank].T
    lat = lat / np.sqrt((lat * lat).mean(axis=1, keepdims=True) + LATENT_NORM_EPS) * \
        t[at + "kv_a_layernorm.weight"]
    wb = t[at + "kv_b_proj.weight"]
    pos = np.arange(n, dtype=np.float64)
    inv_freq = theta ** (-np.arange(0, dr, 2, dtype=np.float64) / dr)
    turn = np.exp(1j * np.outer(pos, inv_freq))  # [n, dr/2]
    k_pe = x @ wa[kv_rank:].T
    k_pe = (k_pe[:, 0::2] + 1j * k_pe[:, 1::2]) * turn
    k_pe = np.stack([k_pe.real, k_pe.imag], axis=-1).reshape(n, dr)
    out = np.zeros((n, heads * dv))
    for h in range(heads):
        qh = qin @ wq[h * (dn + dr):(h + 1) * (dn + dr)].T  # [n, dn + dr]
        z = (qh[:, dn::2] + 1j * qh[:, dn + 1::2]) * turn
        qh = np.concatenate([qh[:, :dn], np.stack([z.real, z.imag], axis=-1).reshape(n, dr)], 1)
        rows = wb[h * (dn + dv):(h + 1) * (dn + dv)]
        kh = np.concatenate([lat @ rows[:dn].T, k_pe], axis=1)
        vh = lat @ rows[dn:].T
        for i in range(n):
            s = kh[:i + 1] @ qh[i] / math.sqrt(dn + dr)
            p = np.exp(s - s.max())
            out[i, h * dv:(h + 1) * dv] = (p / p.sum()) @ vh[:i + 1]
    return out


def silu(x):
    return x / (1.0 + np.exp(-x))


def moe(x, t, at, c):
    mixtral = c["model_type"] == "mixtral"
    block = at + ("block_sparse_moe." if mixtral else "mlp.")
    logits = x @ t[block + "gate.weight"].T
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    k = c["num_experts_per_tok"]
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    weights = np.take_along_axis(probs, top, axis=-1)
    renormalize = True if mixtral else c.get("norm_topk_prob", False)
    if renormalize != (MUTANT == "no-renormalize"):
        weights /= weights.sum(axis=-1, keepdims=True)
    out = np.zeros_like(x)
    up, gate, down = ("w3", "w1", "w2") if mixtral else ("up_proj", "gate_proj", "down_proj")
    for e in range(c["num_local_experts" if mixtral else "num_experts"]):
        ex = block + "experts.%d." % e
        rows, slot = np.nonzero(top == e)
        if len(rows) == 0:
            continue
        h = x[rows]
        w1, w3 = (up, gate) if MUTANT == "w1-w3-swapped" else (gate, up)
        y = (silu(h @ t[ex + w1 + ".weight"].T) * (h @ t[ex + w3 + ".weight"].T)) @ \
            t[ex + down + ".weight"].T
        out[rows] += weights[rows, slot][:, None] * y
    if c.get("shared_expert_intermediate_size"):  # Qwen2-MoE
        out += shared_expert(x, t, block, MUTANT != "no-shared-gate")
    return out


def deepseek_moe(x, t, at, c):
    """DeepseekV{2,3}MoE: the gate's choice and weights, the routed experts
    (gate_proj, up_proj, down_proj) and the shared experts."""
    block = at + "mlp."
    e_num, k = c["n_routed_experts"], c["num_experts_per_tok"]
    logits = x @ t[block + "gate.weight"].T
    if c.get("scoring_func", "softmax") == "sigmoid":
        scores = 1.0 / (1.0 + np.exp(-logits))
    else:
        scores = np.exp(logits - logits.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
    method = c.get("topk_method", "greedy")
    groups, keep = c.get("n_group", 1), c.get("topk_group", 1)
    choice = scores
    if method == "noaux_tc" and MUTANT != "no-score-bias":
        choice = scores + t[block + "gate.e_score_correction_bias"]
    if method != "greedy" and MUTANT != "no-group-limit":
        grouped = -np.sort(-choice.reshape(len(x), groups, e_num // groups), axis=-1)
        # noaux_tc: a group's two best (biased) scores summed; V2: its best.
        best = grouped[..., :2].sum(-1) if method == "noaux_tc" else grouped[..., 0]
        chosen = np.argsort(-best, axis=-1, kind="stable")[:, :keep]
        allowed = np.zeros((len(x), groups), dtype=bool)
        allowed[np.arange(len(x))[:, None], chosen] = True
        allowed = np.repeat(allowed, e_num // groups, axis=1)
        if method == "noaux_tc":
            # transformers' masks the groups left out with 0.0, deepseek-ai's
            # modeling_deepseek.py with -inf: they differ only where a kept
            # expert's biased score is below 0 and would lose to a left-out one.
            zero = np.argsort(-np.where(allowed, choice, 0.0), axis=-1, kind="stable")[:, :k]
            inf = np.argsort(-np.where(allowed, choice, -np.inf), axis=-1, kind="stable")[:, :k]
            differ = np.any(np.sort(zero, 1) != np.sort(inf, 1), axis=1)
            CHECK["mask_sensitive"] += int(differ.sum())
        choice = np.where(allowed, choice, -np.inf)
    top = np.argsort(-choice, axis=-1, kind="stable")[:, :k]
    weights = np.take_along_axis(choice if MUTANT == "bias-in-weights" else scores, top, axis=-1)
    normalise = c.get("norm_topk_prob", False) != (MUTANT == "no-renormalize")
    if k > 1 and normalise:
        weights = weights / (weights.sum(axis=-1, keepdims=True) + 1e-20)
    if c["model_type"] == "deepseek_v3" or not (k > 1 and normalise):
        weights = weights * c.get("routed_scaling_factor", 1.0)
    out = np.zeros_like(x)
    gate, up = ("up_proj", "gate_proj") if MUTANT == "w1-w3-swapped" else ("gate_proj", "up_proj")
    for e in range(e_num):
        rows, slot = np.nonzero(top == e)
        if len(rows) == 0:
            continue
        ex = block + "experts.%d." % e
        h = x[rows]
        y = (silu(h @ t[ex + gate + ".weight"].T) * (h @ t[ex + up + ".weight"].T)) @ \
            t[ex + "down_proj.weight"].T
        out[rows] += weights[rows, slot][:, None] * y
    if c.get("n_shared_experts"):
        out += dense_mlp(x, t, block + "shared_experts.")
    return out


def dense_mlp(x, t, prefix):
    return (silu(x @ t[prefix + "gate_proj.weight"].T) * (x @ t[prefix + "up_proj.weight"].T)) @ \
        t[prefix + "down_proj.weight"].T


def shared_expert(x, t, block, gated):
    y = dense_mlp(x, t, block + "shared_expert.")
    if gated:
        y = y / (1.0 + np.exp(-(x @ t[block + "shared_expert_gate.weight"].T)))
    return y


def is_dense(c, i):
    """Qwen-MoE's dense layers: listed in mlp_only_layers, or off the
    decoder_sparse_step; DeepSeek's below first_k_dense_replace or off the
    moe_layer_freq."""
    if c["model_type"] in DEEPSEEK:
        return hf_checkpoint.deepseek_dense(c, i)
    if c["model_type"] not in ("qwen2_moe", "qwen3_moe"):
        return False
    step = c.get("decoder_sparse_step", 1)
    return i in c.get("mlp_only_layers", []) or not (step > 0 and (i + 1) % step == 0)


def window_loss(tokens, t, c):
    """Mean next-token cross entropy of one window (len(tokens) - 1 targets)."""
    x = t["model.embed_tokens.weight"][tokens[:-1]]
    eps = rms_eps(c)
    deepseek = c["model_type"] in DEEPSEEK
    for i in range(c["num_hidden_layers"]):
        at = "model.layers.%d." % i
        h = rms_norm(x, t[at + "input_layernorm.weight"], eps)
        if deepseek:
            a = deepseek_attention(h, t, at + "self_attn.", c)
            if CHECK["on"]:
                other = deepseek_attention_check(h, t, at + "self_attn.", c)
                CHECK["worst"] = max(CHECK["worst"], float(np.max(np.abs(a - other))))
                CHECK["layers"] += 1
            x = x + a @ t[at + "self_attn.o_proj.weight"].T
        else:
            x = x + attention(h, t, at + "self_attn.", c)
        h = rms_norm(x, t[at + "post_attention_layernorm.weight"], eps)
        if is_dense(c, i):
            x = x + dense_mlp(h, t, at + "mlp.")
        else:
            x = x + (deepseek_moe(h, t, at, c) if deepseek else moe(h, t, at, c))
    x = rms_norm(x, t["model.norm.weight"], eps)
    head = t.get("lm_head.weight", t["model.embed_tokens.weight"])
    logits = x @ head.T
    top = logits.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(logits - top).sum(axis=-1)) + top[:, 0]
    return float(np.mean(logz - logits[np.arange(len(x)), tokens[1:]]))


def main(argv):
    global MUTANT
    path, data = argv[1], argv[2]
    options = dict(zip(argv[3::2], argv[4::2]))
    MUTANT = options.get("--mutate")
    if MUTANT is not None and MUTANT not in MUTANTS:
        print("hf_forward.py: unknown --mutate %s (one of %s)" % (MUTANT, ", ".join(MUTANTS)))
        return 2
    config = json.load(open(os.path.join(path, "config.json")))
    if config["model_type"] not in ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe") + DEEPSEEK:
        print("hf_forward.py: model_type %s is not written here" % config["model_type"])
        return 2
    if config["model_type"] in DEEPSEEK:
        # What this forward does not write: refused rather than misread.
        for key, off in (("rope_scaling", None), ("attention_bias", False),
                         ("num_nextn_predict_layers", 0)):
            if config.get(key, off) not in (off,):
                print("hf_forward.py: %s %s is not written here" % (key, config[key]))
                return 2
        if config.get("scoring_func", "softmax") not in ("softmax", "sigmoid") or \
                config.get("topk_method", "greedy") not in ("greedy", "group_limited_greedy",
                                                            "noaux_tc"):
            print("hf_forward.py: scoring_func / topk_method not written here")
            return 2
    CHECK["on"] = options.get("--check-mla") == "yes"
    tensors = hf_checkpoint.load(path)
    tokens = np.frombuffer(open(data, "rb").read(), dtype=np.uint8).astype(np.int64)
    length = int(options["--seq-len"])
    windows = (len(tokens) - 1) // length
    losses = []
    for w in range(windows):
        losses.append(window_loss(tokens[w * length:(w + 1) * length + 1], tensors, config))
        CHECK["on"] = False  # the second way on the first window only
    loss = sum(losses) / windows
    print("independent eval_loss %.6f over %d tokens (%d windows)" % (loss, windows * length,
                                                                      windows))
    if CHECK["mask_sensitive"]:
        print("note: %d token-layers choose differently with the groups left out masked by 0.0 "
              "(transformers) rather than -inf (modeling_deepseek.py)" % CHECK["mask_sensitive"])
    if options.get("--check-mla") == "yes":
        ok = CHECK["layers"] > 0 and CHECK["worst"] <= 1e-12
        print("%s: latent attention two ways, %d layers of the first window, max |difference| "
              "%.3g (limit 1e-12)" % ("PASS" if ok else "FAIL", CHECK["layers"], CHECK["worst"]))
        if not ok:
            return 1
    if "--compare" not in options:
        return 0
    lines = [json.loads(l) for l in open(options["--compare"]) if "eval_loss" in l]
    theirs, tolerance = lines[-1]["eval_loss"], float(options.get("--tolerance", "1e-4"))
    difference = abs(theirs - loss) / abs(loss)
    verdict = "PASS" if difference <= tolerance and lines[-1]["eval_tokens"] == windows * length \
        else "FAIL"
    print("%s: binary %.6f over %d tokens, relative difference %.2e (tolerance %g)" % (
        verdict, theirs, lines[-1]["eval_tokens"], difference, tolerance))
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
