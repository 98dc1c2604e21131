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
v clamped to [-clip_qkv, clip_qkv] when it is set):
RMSNorm computed as x * rsqrt(mean(x^2) + eps) * weight; rotary embeddings on
the two halves of each head (rotate_half, inv_freq = theta^(-2i/d)); grouped
query attention by repeat_kv (query head h reads key/value head h // (H/KV));
causal softmax(q k^T / sqrt(d)); the router's softmax over all experts, the
top-k of it renormalised to sum to 1; experts w2(silu(w1 x) * w3 x); the
next-token cross entropy averaged over every target. Reads the tensors by their
HuggingFace names and layouts ([out, in] projections), not MoEC's.

  hf_forward.py DIR DATA --seq-len L [--compare METRICS] [--tolerance T]
      the mean loss over DATA's consecutive windows of L targets from its start
      (bytes of a text file as tokens); with --compare, the eval_loss line of a
      metrics file must agree to relative T (default 1e-4). --mutate NAME
      reads one feature wrongly (rope-interleaved, gqa-modulo,
      no-renormalize, w1-w3-swapped, no-qk-norm, qk-norm-grouping-swapped,
      no-qkv-bias, no-shared-gate, no-clip),
      to show the comparison can fail.
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_checkpoint  # noqa: E402

MUTANT = None


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rms_eps(c):
    """rms_norm_eps, or the family's config class default."""
    return c.get("rms_norm_eps", 1e-6 if c["model_type"] == "qwen3_moe" else 1e-5)


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
    decoder_sparse_step."""
    if c["model_type"] not in ("qwen2_moe", "qwen3_moe"):
        return False
    step = c.get("decoder_sparse_step", 1)
    return i in c.get("mlp_only_layers", []) or not (step > 0 and (i + 1) % step == 0)


def window_loss(tokens, t, c):
    """Mean next-token cross entropy of one window (len(tokens) - 1 targets)."""
    x = t["model.embed_tokens.weight"][tokens[:-1]]
    eps = rms_eps(c)
    for i in range(c["num_hidden_layers"]):
        at = "model.layers.%d." % i
        x = x + attention(rms_norm(x, t[at + "input_layernorm.weight"], eps), t,
                          at + "self_attn.", c)
        h = rms_norm(x, t[at + "post_attention_layernorm.weight"], eps)
        x = x + (dense_mlp(h, t, at + "mlp.") if is_dense(c, i) else moe(h, t, at, c))
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
    config = json.load(open(os.path.join(path, "config.json")))
    if config["model_type"] not in ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe"):
        print("hf_forward.py: model_type %s is not written here" % config["model_type"])
        return 2
    tensors = hf_checkpoint.load(path)
    tokens = np.frombuffer(open(data, "rb").read(), dtype=np.uint8).astype(np.int64)
    length = int(options["--seq-len"])
    windows = (len(tokens) - 1) // length
    losses = [window_loss(tokens[w * length:(w + 1) * length + 1], tensors, config)
              for w in range(windows)]
    loss = sum(losses) / windows
    print("independent eval_loss %.6f over %d tokens (%d windows)" % (loss, windows * length,
                                                                      windows))
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
