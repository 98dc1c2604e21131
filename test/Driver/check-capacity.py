#!/usr/bin/env python3
"""Checks the dropped and kept token-slots of a run that routes in one group
against the capacity the model description gives:
check-capacity.py MODEL.json METRICS.jsonl

The run routes the whole batch in one group (one rank, moec's default of one
routing group), so each expert of a MoE layer keeps at most
C = min(tokens, max(1, ceil(capacity_factor * tokens * top_k / num_experts)))
token-slots, tokens = batch_size * seq_len (docs/ModelJSON.md). For every
step and MoE layer, from the routed slots `expert_tokens`:
  expert_kept_tokens[e] == min(expert_tokens[e], C)
  dropped_tokens == sum over layers and experts of max(0, expert_tokens[e] - C)
exactly. Fails, too, when no step routed past the capacity (the check would
not bite)."""
import json
import math
import sys

model = json.load(open(sys.argv[1]))
moe = model["moe"]
assert "layers" not in model, "per-layer MoE settings: give a model with one moe object"
tokens = model["batch_size"] * model["seq_len"]
factor = moe.get("capacity_factor", 1.25)
assert factor is not None, "a dropless model drops nothing"
top_k, experts = moe.get("top_k", 2), moe.get("num_experts", 8)
capacity = min(tokens, max(1, math.ceil(factor * tokens * top_k / experts)))

rows = [json.loads(l) for l in open(sys.argv[2]) if '"expert_tokens"' in l]
assert rows, "no steps with expert_tokens"
over = 0
for r in rows:
    dropped = 0
    for layer, (routed, kept) in enumerate(zip(r["expert_tokens"], r["expert_kept_tokens"])):
        assert len(routed) == experts == len(kept), (r["step"], layer, routed, kept)
        want = [min(n, capacity) for n in routed]
        if kept != want:
            sys.exit(f"step {r['step']}, MoE layer {layer}: kept {kept}, routed {routed}: "
                     f"capacity {capacity} keeps {want}")
        dropped += sum(max(0, n - capacity) for n in routed)
        over += sum(n > capacity for n in routed)
    if r["dropped_tokens"] != dropped:
        sys.exit(f"step {r['step']}: dropped_tokens {r['dropped_tokens']}, routed "
                 f"{r['expert_tokens']}: capacity {capacity} drops {dropped}")
assert over, f"no expert reached the capacity {capacity}: the check would not bite"
print(f"{len(rows)} steps: capacity {capacity}, kept and dropped exact "
      f"({over} experts over it)")
