"""HuggingFace checkpoints in numpy, for the tests of --init-hf/--export-hf.

Written from the safetensors format description (an 8-byte little-endian
header length, a JSON header of dtype/shape/data_offsets per tensor, the
data) and HuggingFace's sharding convention (model-0000i-of-0000n.safetensors
with model.safetensors.index.json), not from MoEC's reader.

  hf_checkpoint.py make DIR --family mixtral [--dtype bf16] [--shards N]
      [--seed S] [--set key=value,...] [--tie]
      a small config.json of the family (mixtral, qwen2_moe, qwen3_moe, olmoe,
      deepseek_v2, deepseek_v3) and random weights under its names
  hf_checkpoint.py same DIR1 DIR2   exit 0 iff both hold the same tensors
      (names, dtypes, shapes, bits), whatever their sharding
  hf_checkpoint.py edit DIR --drop NAME | --add NAME | --reshape NAME
      a damaged copy for the error tests (in place)
"""

import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F32": 4, "BF16": 2, "F16": 2}


def to_bits(values, dtype):
    """float64 values as the dtype's little-endian bytes (round to nearest even)."""
    values = np.asarray(values, dtype=np.float32)
    if dtype == "F32":
        return values.astype("<f4").tobytes()
    if dtype == "F16":
        return values.astype("<f2").tobytes()
    bits = values.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype("<u2").tobytes()


def from_bits(raw, dtype, shape):
    if dtype == "F32":
        return np.frombuffer(raw, "<f4").reshape(shape).astype(np.float64)
    if dtype == "F16":
        return np.frombuffer(raw, "<f2").reshape(shape).astype(np.float64)
    bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
    return bits.view(np.float32).reshape(shape).astype(np.float64)


def read_file(path):
    """{name: (dtype, shape, raw bytes)} of one safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = (entry["dtype"], tuple(entry["shape"]), body[begin:end])
    return out


def read_dir(path):
    """Every tensor of a model directory, single file or shards."""
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        return read_file(single)
    index = json.load(open(os.path.join(path, "model.safetensors.index.json")))
    out = {}
    for file in sorted(set(index["weight_map"].values())):
        out.update(read_file(os.path.join(path, file)))
    return out


def load(path):
    """{name: float64 array} of a model directory."""
    return {k: from_bits(raw, dt, shape) for k, (dt, shape, raw) in read_dir(path).items()}


def write_file(path, tensors, dtype):
    header, body, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, array in tensors:
        raw = to_bits(array, dtype)
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        body.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(body))


def write_dir(path, tensors, dtype, shards):
    os.makedirs(path, exist_ok=True)
    if shards <= 1:
        write_file(os.path.join(path, "model.safetensors"), tensors, dtype)
        return
    per = -(-len(tensors) // shards)
    weight_map = {}
    for s in range(shards):
        name = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = tensors[s * per:(s + 1) * per]
        write_file(os.path.join(path, name), part, dtype)
        weight_map.update({t: name for t, _ in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map},
              open(os.path.join(path, "model.safetensors.index.json"), "w"), indent=2)


SMALL = {
    "mixtral": {"model_type": "mixtral", "vocab_size": 256, "hidden_size": 32,
                "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                "rms_norm_eps": 1e-5, "rope_theta": 1000000.0, "max_position_embeddings": 64,
                "hidden_act": "silu", "tie_word_embeddings": False},
    "qwen3_moe": {"model_type": "qwen3_moe", "vocab_size": 256, "hidden_size": 32,
                  "intermediate_size": 64, "moe_intermediate_size": 24,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "head_dim": 8, "num_experts": 4, "num_experts_per_tok": 2,
                  "norm_topk_prob": True, "max_position_embeddings": 64},
    "qwen2_moe": {"model_type": "qwen2_moe", "vocab_size": 256, "hidden_size": 32,
                  "intermediate_size": 40, "moe_intermediate_size": 24,
                  "shared_expert_intermediate_size": 20, "num_hidden_layers": 2,
                  "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4,
                  "num_experts_per_tok": 2, "norm_topk_prob": False, "mlp_only_layers": [0],
                  "max_position_embeddings": 64},
    "olmoe": {"model_type": "olmoe", "vocab_size": 256, "hidden_size": 32,
              "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_experts": 4, "num_experts_per_tok": 2,
              "norm_topk_prob": False, "clip_qkv": None, "max_position_embeddings": 64},
    # DeepSeek-V3 (deepseek-ai's config.json keys): multi-head latent
    # attention with query compression, sigmoid scores with the selection
    # bias (noaux_tc) and group-limited routing, a dense first layer.
    "deepseek_v3": {"model_type": "deepseek_v3", "vocab_size": 256, "hidden_size": 32,
                    "num_hidden_layers": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                    "intermediate_size": 64, "moe_intermediate_size": 24,
                    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2,
                    "n_group": 4, "topk_group": 2, "topk_method": "noaux_tc",
                    "scoring_func": "sigmoid", "norm_topk_prob": True,
                    "routed_scaling_factor": 2.5, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "q_lora_rank": 16, "kv_lora_rank": 12,
                    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6,
                    "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                    "max_position_embeddings": 64, "tie_word_embeddings": False,
                    "attention_bias": False, "aux_loss_alpha": 0.001, "seq_aux": True},
    # DeepSeek-V2-Lite's shape of it: no query compression (q_proj), softmax
    # scores with group_limited_greedy (top 3 of the experts of 2 groups: with
    # top_k <= topk_group the best-score groups always hold the top k, and
    # the limit would change nothing), two shared experts.
    "deepseek_v2": {"model_type": "deepseek_v2", "vocab_size": 256, "hidden_size": 32,
                    "num_hidden_layers": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                    "intermediate_size": 64, "moe_intermediate_size": 24,
                    "n_routed_experts": 8, "n_shared_experts": 2, "num_experts_per_tok": 3,
                    "n_group": 4, "topk_group": 2, "topk_method": "group_limited_greedy",
                    "scoring_func": "softmax", "norm_topk_prob": False,
                    "routed_scaling_factor": 1.5, "num_attention_heads": 4,
                    "num_key_value_heads": 4, "q_lora_rank": None, "kv_lora_rank": 12,
                    "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 6,
                    "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "hidden_act": "silu",
                    "max_position_embeddings": 64, "tie_word_embeddings": False,
                    "attention_bias": False, "aux_loss_alpha": 0.001, "seq_aux": True},
}


def deepseek_dense(config, i):
    """DeepSeek's dense layers: below first_k_dense_replace, or off the
    moe_layer_freq (modeling_deepseek's DeepseekV{2,3}DecoderLayer)."""
    return i < config.get("first_k_dense_replace", 0) or i % config.get("moe_layer_freq", 1) != 0


def deepseek_attention(config, at, normal, gain):
    """Multi-head latent attention's tensors (modeling_deepseek's
    DeepseekV{2,3}Attention), [out, in] as nn.Linear stores them."""
    d, heads = config["hidden_size"], config["num_attention_heads"]
    dn, dr, dv = config["qk_nope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"]
    rank, kv = config.get("q_lora_rank"), config["kv_lora_rank"]
    if rank is None:
        out = [(at + "self_attn.q_proj.weight", normal(heads * (dn + dr), d))]
    else:
        out = [(at + "self_attn.q_a_proj.weight", normal(rank, d)),
               (at + "self_attn.q_a_layernorm.weight", gain(rank)),
               (at + "self_attn.q_b_proj.weight", normal(heads * (dn + dr), rank))]
    return out + [(at + "self_attn.kv_a_proj_with_mqa.weight", normal(kv + dr, d)),
                  (at + "self_attn.kv_a_layernorm.weight", gain(kv)),
                  (at + "self_attn.kv_b_proj.weight", normal(heads * (dn + dv), kv)),
                  (at + "self_attn.o_proj.weight", normal(d, heads * dv))]


def weights(config, rng):
    """Random tensors of a small config under HF names (layers in order)."""
    d, v = config["hidden_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    hd = config.get("head_dim", d // heads)
    family = config["model_type"]
    deepseek = family in ("deepseek_v2", "deepseek_v3")
    normal = lambda *shape: rng.normal(0.0, 0.15, shape)
    gain = lambda n: 1.0 + rng.normal(0.0, 0.2, (n,))
    out = [("model.embed_tokens.weight", rng.normal(0.0, 1.0, (v, d)))]
    for i in range(config["num_hidden_layers"]):
        at = "model.layers.%d." % i
        out.append((at + "input_layernorm.weight", gain(d)))
        if deepseek:
            out += deepseek_attention(config, at, normal, gain)
        else:
            out += [(at + "self_attn.q_proj.weight", normal(heads * hd, d)),
                    (at + "self_attn.k_proj.weight", normal(kv * hd, d)),
                    (at + "self_attn.v_proj.weight", normal(kv * hd, d)),
                    (at + "self_attn.o_proj.weight", normal(d, heads * hd))]
        if family == "qwen2_moe":  # biases on q, k, v
            out += [(at + "self_attn.q_proj.bias", normal(heads * hd)),
                    (at + "self_attn.k_proj.bias", normal(kv * hd)),
                    (at + "self_attn.v_proj.bias", normal(kv * hd))]
        if family == "qwen3_moe":  # per head
            out += [(at + "self_attn.q_norm.weight", gain(hd)),
                    (at + "self_attn.k_norm.weight", gain(hd))]
        if family == "olmoe":  # over the whole projections
            out += [(at + "self_attn.q_norm.weight", gain(heads * hd)),
                    (at + "self_attn.k_norm.weight", gain(kv * hd))]
        out.append((at + "post_attention_layernorm.weight", gain(d)))
        if i in config.get("mlp_only_layers", []) or (deepseek and deepseek_dense(config, i)):
            # a dense layer (Qwen-MoE's mlp_only_layers, DeepSeek's first_k_dense_replace)
            f = config["intermediate_size"]
            out += [(at + "mlp.gate_proj.weight", normal(f, d)),
                    (at + "mlp.up_proj.weight", normal(f, d)),
                    (at + "mlp.down_proj.weight", normal(d, f))]
            continue
        if config.get("shared_expert_intermediate_size"):  # Qwen2-MoE's gated shared expert
            f = config["shared_expert_intermediate_size"]
            out += [(at + "mlp.shared_expert.gate_proj.weight", normal(f, d)),
                    (at + "mlp.shared_expert.up_proj.weight", normal(f, d)),
                    (at + "mlp.shared_expert.down_proj.weight", normal(d, f)),
                    (at + "mlp.shared_expert_gate.weight", rng.normal(0.0, 0.5, (1, d)))]
        if deepseek and config.get("n_shared_experts"):  # one MLP of n_shared_experts widths
            f = config["moe_intermediate_size"] * config["n_shared_experts"]
            out += [(at + "mlp.shared_experts.gate_proj.weight", normal(f, d)),
                    (at + "mlp.shared_experts.up_proj.weight", normal(f, d)),
                    (at + "mlp.shared_experts.down_proj.weight", normal(d, f))]
        if family == "mixtral":
            e, f, block = config["num_local_experts"], config["intermediate_size"], "block_sparse_moe"
            names = ("w1", "w3", "w2")
        elif deepseek:
            e, f, block = config["n_routed_experts"], config["moe_intermediate_size"], "mlp"
            names = ("gate_proj", "up_proj", "down_proj")
        else:
            e, block = config["num_experts"], "mlp"
            f = config.get("moe_intermediate_size", config["intermediate_size"])
            names = ("gate_proj", "up_proj", "down_proj")
        out.append((at + block + ".gate.weight", rng.normal(0.0, 0.5, (e, d))))
        if deepseek and config.get("topk_method") == "noaux_tc":
            # The selection bias (a buffer HF loads from the checkpoint):
            # nonzero, so that it changes choices.
            out.append((at + "mlp.gate.e_score_correction_bias", rng.normal(0.0, 0.1, (e,))))
        for x in range(e):
            ex = at + block + ".experts.%d." % x
            wide = lambda *shape: rng.normal(0.0, 0.4, shape)  # experts that matter
            out += [(ex + names[0] + ".weight", wide(f, d)),
                    (ex + names[1] + ".weight", wide(f, d)),
                    (ex + names[2] + ".weight", wide(d, f))]
    out.append(("model.norm.weight", gain(d)))
    if not config.get("tie_word_embeddings", False):
        out.append(("lm_head.weight", normal(v, d)))
    return out


def parse_sets(text):
    out = {}
    for item in filter(None, (text or "").split(",")):
        key, value = item.split("=", 1)
        out[key] = json.loads(value)
    return out


def main(argv):
    command, path = argv[1], argv[2]
    options = dict(zip(argv[3::2], argv[4::2]))
    if command == "make":
        config = dict(SMALL[options["--family"]])
        config.update(parse_sets(options.get("--set")))
        config["torch_dtype"] = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[
            options.get("--dtype", "bf16").upper()]
        rng = np.random.default_rng(int(options.get("--seed", "1")))
        write_dir(path, weights(config, rng), options.get("--dtype", "bf16").upper(),
                  int(options.get("--shards", "1")))
        json.dump(config, open(os.path.join(path, "config.json"), "w"), indent=2)
        return 0
    if command == "same":
        a, b = read_dir(path), read_dir(argv[3])
        for name in sorted(set(a) | set(b)):
            if a.get(name) != b.get(name):
                print("differs: %s (%s vs %s)" % (name, a.get(name, ("absent",))[:2],
                                                   b.get(name, ("absent",))[:2]))
                return 1
        print("same %d tensors" % len(a))
        return 0
    if command == "edit":
        tensors = read_dir(path)
        dtype = next(iter(tensors.values()))[0]
        arrays = [(k, from_bits(raw, dt, shape)) for k, (dt, shape, raw) in tensors.items()]
        if "--drop" in options:
            arrays = [t for t in arrays if t[0] != options["--drop"]]
        if "--add" in options:
            arrays.append((options["--add"], np.zeros((3,))))
        if "--reshape" in options:
            arrays = [(k, a.reshape(a.shape[::-1]) if k == options["--reshape"] else a)
                      for k, a in arrays]
        for f in os.listdir(path):
            if f.endswith(".safetensors") or f.endswith(".index.json"):
                os.remove(os.path.join(path, f))
        write_dir(path, arrays, dtype, 1)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
