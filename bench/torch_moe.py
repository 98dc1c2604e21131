#!/usr/bin/env python3
"""The same MoE model as `moec` compiles, in PyTorch (CPU), for bench/.

Reads a MoEC model JSON (docs/ModelJSON.md): token embedding; per layer
RMSNorm, causal attention (grouped KV heads, RoPE), residual, RMSNorm, then a
dense SwiGLU FFN (`dense_layers`) or an MoE layer (softmax/sigmoid router,
top-k, renormalised gates, capacity per expert with drops, SwiGLU experts,
shared experts, load-balancing and z losses); final RMSNorm, LM head,
cross-entropy; AdamW with clipping. Only its speed is measured.

Configured as the strongest honest baseline this PyTorch allows:
- each expert's weights are their own parameters (as HF's Mixtral/OLMoE
  modules hold them), so the backward pass writes each expert's gradient
  directly, not through select-backward zero-fills of one stacked
  [E, D, F] tensor per expert;
- attention is torch.nn.functional.scaled_dot_product_attention where the
  installed PyTorch has it (2.0 and later; `attention` in the output says
  which ran), else the manual form (scores, causal mask, softmax, product),
  with the mask and RoPE's rotations computed once a step;
- AdamW's per-tensor form (PyTorch 1.13's CPU default: its multi-tensor
  `foreach=True` form measured 1.5-1.7x slower on small's and moe16's
  parameters here);
- the corpus held as bytes (one a token, as the moec binary holds it) and
  each batch widened to int64 indices.
Two dispatches, the same routing and drops (token-slots in token order, then
choice order, each expert keeping its first `capacity`):
- `sorted` (default, the strong one): a stable sort of the token-slots by
  expert, the kept rows gathered with index_select, one SwiGLU per expert on
  its slice, index_add back (what Megablocks-style and HF implementations
  do on CPU): only routed rows are computed;
- `capacity`: GShard/Tutel-style [E, capacity, D] buffers and batched
  matmuls, every slot computed (padding included; the experts' weights are
  stacked for it each step).

usage: torch_moe.py MODEL.json STEPS THREADS [--data FILE] [--warm N]
                    [--dispatch sorted|capacity] [--device cpu|cuda]
                    [--profile]
  --data: train on this file's bytes (windows at random offsets, as the
  moec binary's text reader; vocab_size must be 256), else random tokens;
  --warm: train N untimed steps first (the routing regime after training).
  --device cuda: on the first GPU (f32, PyTorch's default matmul precision);
  peak bytes are then the GPU's peak allocation.
  --profile: then STEPS more steps under torch.profiler: seconds a step in
  the GEMMs (mm, bmm and kin, their own time) and the top operators.
Prints one JSON line: median tokens/s over STEPS timed steps (after two
warm-up steps), the median seconds of each phase (forward, backward,
clipping, optimizer), the kept fraction of token-slots, and memory:
peak_rss_bytes, the process's peak resident size; base_rss_bytes, its
resident size after `import torch` (code and libraries, before the model);
net_peak_bytes, the peak net of that base (parameters, gradients, AdamW
state, activations, the corpus, allocator and BLAS buffers: what the model
and its training steps add, the basis the moec binary's peak net of its
start_rss_bytes compares with); model_rss_bytes, what creating the model
and optimizer added to the base.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def resident_bytes():
    """The process's resident size now (not its peak)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


BASE_RSS = resident_bytes()  # code and libraries: after `import torch`
SDPA = getattr(F, "scaled_dot_product_attention", None)  # PyTorch 2.0+


def rms_norm(x, g, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g


def rope_tables(s, dh, theta):
    inv = 1.0 / (theta ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh))
    ang = torch.arange(s, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def rope(x, cos, sin):
    # x: [B, H, S, Dh]; rotates the pairs (x[2i], x[2i+1])
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


class Model(torch.nn.Module):
    def __init__(self, m, dispatch="sorted"):
        super().__init__()
        self.m = m
        self.dispatch = dispatch
        self.kept = []  # per MoE layer of the last step: kept / routed token-slots
        d, v = m["d_model"], m["vocab_size"]
        moe = m.get("moe", {})
        dense = set(moe.get("dense_layers", [])) if moe else set(range(m["n_layers"]))
        # In place: no temporaries for the allocator to keep.
        p = lambda *shape: torch.nn.Parameter(torch.empty(*shape).normal_(0.0, 0.02))
        ones = lambda n: torch.nn.Parameter(torch.ones(n))
        self.emb = p(v, d)
        self.layers = []
        kvd = d // m["n_heads"] * m.get("n_kv_heads", m["n_heads"])
        for i in range(m["n_layers"]):
            L = {"attn_norm": ones(d), "wq": p(d, d), "wk": p(d, kvd), "wv": p(d, kvd),
                 "wo": p(d, d), "ffn_norm": ones(d)}
            over = m.get("layers", {}).get(str(i), {})
            if i in dense or not moe:
                f = m["ffn_dim"]
                L.update(up=p(d, f), gate=p(d, f), down=p(f, d), moe=None)
            else:
                cfg = dict(moe)
                cfg.update(over)
                e, f = cfg["num_experts"], cfg["expert_ffn_dim"]
                # One parameter per expert and matrix, not [E, ...] stacks.
                L.update(router=p(d, e), moe=cfg,
                         eup=[p(d, f) for _ in range(e)], egate=[p(d, f) for _ in range(e)],
                         edown=[p(f, d) for _ in range(e)])
                ns = cfg.get("num_shared_experts", 0)
                if ns:
                    sf = cfg.get("shared_expert_ffn_dim", f) * ns
                    L.update(sup=p(d, sf), sgate=p(d, sf), sdown=p(sf, d))
            for k, t in L.items():
                if isinstance(t, torch.nn.Parameter):
                    self.register_parameter(f"l{i}_{k}", t)
                elif isinstance(t, list):
                    for j, tj in enumerate(t):
                        self.register_parameter(f"l{i}_{k}{j}", tj)
            self.layers.append(L)
        self.norm_f = ones(d)
        self.lm_head = p(d, v)

    def moe(self, x, L):
        cfg = L["moe"]
        t, d = x.shape
        e, k = cfg["num_experts"], cfg["top_k"]
        logits = x @ L["router"]
        probs = logits.softmax(-1) if cfg.get("router_scoring", "softmax") == "softmax" else logits.sigmoid()
        gates, idx = probs.topk(k, -1)
        if cfg.get("renormalize", True):
            gates = gates / gates.sum(-1, keepdim=True)
        cf = cfg.get("capacity_factor", 1.25)
        cap = int(math.ceil(cf * t * k / e)) if cf is not None else t * k
        flat = idx.reshape(-1)
        onehot = F.one_hot(flat, e)                       # [t*k, E]
        if self.dispatch == "sorted":
            order = torch.sort(flat, stable=True).indices  # by expert, token order within
            counts = torch.bincount(flat, minlength=e)
            starts = counts.cumsum(0) - counts
            pos = torch.arange(t * k) - starts[flat[order]]
            order = order[pos < cap]
            kept = counts.clamp(max=cap).tolist()
            tok = order // k
            xs = x.index_select(0, tok)
            ys = []
            # Experts with no kept row too: their gradient is then zero, not
            # None, so AdamW still decays them and their moments, as it does
            # every parameter of a stacked tensor (and the moec binary's).
            for i, rows in enumerate(xs.split(kept)):
                h = F.silu(rows @ L["egate"][i]) * (rows @ L["eup"][i])
                ys.append(h @ L["edown"][i])
            y = torch.cat(ys)
            w = gates.reshape(-1).index_select(0, order)[:, None]
            out = x.new_zeros(t, d).index_add(0, tok, y * w)
            self.kept.append(len(order) / (t * k))
        else:
            pos = (onehot.cumsum(0) - 1)[torch.arange(t * k), flat]
            keep = pos < cap
            slot = flat * cap + pos.clamp(max=cap - 1)
            tok = torch.arange(t).repeat_interleave(k)
            buf = x.new_zeros(e * cap, d)
            buf = buf.index_add(0, slot[keep], x[tok[keep]])
            h = buf.view(e, cap, d)
            wg, wu, wd = (torch.stack(L[n]) for n in ("egate", "eup", "edown"))
            h = F.silu(torch.bmm(h, wg)) * torch.bmm(h, wu)
            y = torch.bmm(h, wd).reshape(e * cap, d)
            w = (gates.reshape(-1) * keep)[:, None]
            out = x.new_zeros(t, d).index_add(0, tok, y[slot] * w)
            self.kept.append(float(keep.float().mean()))
        if "sup" in L:
            out = out + (F.silu(x @ L["sgate"]) * (x @ L["sup"])) @ L["sdown"]
        frac = onehot.float().mean(0) * e / k
        aux = cfg.get("aux_loss_coef", 0.0) * (frac * probs.mean(0)).sum() * e / e
        z = cfg.get("router_z_loss_coef", 0.0) * torch.logsumexp(logits, -1).pow(2).mean()
        return out, aux + z

    def forward(self, tokens, targets):
        m = self.m
        b, s = tokens.shape
        hq, hk = m["n_heads"], m.get("n_kv_heads", m["n_heads"])
        dh = m["d_model"] // hq
        x = self.emb[tokens]
        extra = 0.0
        if m.get("rope_theta"):
            cos, sin = rope_tables(s, dh, m["rope_theta"])
        if SDPA is None:  # once a step, not once a layer
            mask = torch.full((s, s), float("-inf")).triu(1)
        for L in self.layers:
            a = rms_norm(x, L["attn_norm"])
            q = (a @ L["wq"]).view(b, s, hq, dh).transpose(1, 2)
            kk = (a @ L["wk"]).view(b, s, hk, dh).transpose(1, 2)
            v = (a @ L["wv"]).view(b, s, hk, dh).transpose(1, 2)
            if m.get("rope_theta"):
                q, kk = rope(q, cos, sin), rope(kk, cos, sin)
            if hq != hk:
                kk = kk.repeat_interleave(hq // hk, 1)
                v = v.repeat_interleave(hq // hk, 1)
            if SDPA is not None:
                o = SDPA(q, kk, v, is_causal=True)
            else:
                att = torch.baddbmm(mask, q.reshape(b * hq, s, dh),
                                    kk.reshape(b * hq, s, dh).transpose(1, 2),
                                    alpha=1.0 / math.sqrt(dh))
                o = torch.bmm(att.softmax(-1), v.reshape(b * hq, s, dh)).view(b, hq, s, dh)
            x = x + o.transpose(1, 2).reshape(b, s, -1) @ L["wo"]
            f = rms_norm(x, L["ffn_norm"])
            if L["moe"] is None:
                x = x + (F.silu(f @ L["gate"]) * (f @ L["up"])) @ L["down"]
            else:
                y, aux = self.moe(f.reshape(b * s, -1), L)
                x = x + y.view(b, s, -1)
                extra = extra + aux
        logits = rms_norm(x, self.norm_f) @ self.lm_head
        return F.cross_entropy(logits.view(b * s, -1), targets.reshape(-1)) + extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("steps", type=int)
    ap.add_argument("threads", type=int)
    ap.add_argument("--data")
    ap.add_argument("--warm", type=int, default=0)
    ap.add_argument("--dispatch", choices=["sorted", "capacity"], default="sorted")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    if cuda:
        torch.set_default_device("cuda")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    m = json.load(open(args.model))
    model = Model(m, args.dispatch)
    o = m.get("optimizer", {})
    betas = tuple(o.get("betas", [0.9, 0.95]))
    opt = torch.optim.AdamW(model.parameters(), lr=o.get("lr", 3e-4), betas=betas,
                            weight_decay=o.get("weight_decay", 0.1))
    model_rss = resident_bytes() - BASE_RSS
    b, s, v = m["batch_size"], m["seq_len"], m["vocab_size"]
    corpus = None
    if args.data:
        # One byte a token, read straight into its buffer (as the moec
        # binary holds a byte corpus); each batch's windows are widened.
        raw = bytearray(os.path.getsize(args.data))
        with open(args.data, "rb") as f:
            f.readinto(raw)
        if cuda:
            with torch.device("cpu"):
                corpus = torch.frombuffer(raw, dtype=torch.uint8)
        else:
            corpus = torch.frombuffer(raw, dtype=torch.uint8)
        if v != 256 or len(corpus) <= s + 1:
            sys.exit("torch_moe.py: --data needs vocab_size 256 and a file longer than seq_len")

    def batch():
        if corpus is None:
            return torch.randint(0, v, (b, s)), torch.randint(0, v, (b, s))
        starts = torch.randint(0, len(corpus) - s - 1, (b,))
        windows = torch.stack([corpus[i:i + s + 1] for i in starts.tolist()])
        windows = windows.to(args.device).long()
        return windows[:, :-1], windows[:, 1:]

    times, kept = [], []
    phases = {"forward": [], "backward": [], "clip": [], "optimizer": []}

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def step(timed):
        tokens, targets = batch()
        model.kept = []
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        sync()
        t1 = time.perf_counter()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), o.get("grad_clip", 1.0))
        sync()
        t3 = time.perf_counter()
        opt.step()
        sync()
        t4 = time.perf_counter()
        if timed:
            times.append(t4 - t0)
            for name, (a, z) in zip(phases, ((t0, t1), (t1, t2), (t2, t3), (t3, t4))):
                phases[name].append(z - a)
            if model.kept:
                kept.append(statistics.mean(model.kept))
        return loss

    for i in range(args.warm + args.steps + 2):
        loss = step(i >= args.warm + 2)  # two warm-up steps
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # before profiling
    extra = {"phase_seconds": {k: statistics.median(v) for k, v in phases.items()}}
    if args.profile:
        # Where the time goes by operator class, over STEPS more steps: each
        # operator's own time (children excluded), so nothing counts twice.
        from torch.profiler import ProfilerActivity, profile
        start = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.steps):
                step(False)
        wall = (time.perf_counter() - start) / args.steps
        gemm = ("aten::mm", "aten::bmm", "aten::addmm", "aten::addmv", "aten::baddbmm",
                "aten::dot", "aten::mv")
        ops = sorted(((e.key, e.self_cpu_time_total / 1e6 / args.steps)
                      for e in prof.key_averages()), key=lambda kv: -kv[1])
        # The profiler's own cost inflates the many short operators, hardly
        # the GEMMs: their seconds compare with the unprofiled step.
        extra["profile"] = {"profiled_step_seconds": wall,
                            "gemm_seconds": sum(t for k, t in ops if k in gemm),
                            "top": [[k, t] for k, t in ops[:12]]}
    print(json.dumps({"impl": "pytorch " + torch.__version__, "dispatch": args.dispatch,
                      "model": m["name"], "threads": args.threads, "steps": args.steps,
                      "warm": args.warm, "tokens_per_s": b * s / statistics.median(times),
                      "kept_fraction": statistics.median(kept) if kept else 1.0,
                      "device": args.device,
                      "attention": "scaled_dot_product_attention" if SDPA else "manual",
                      "peak_rss_bytes": peak_rss, "base_rss_bytes": BASE_RSS,
                      "net_peak_bytes": peak_rss - BASE_RSS, "model_rss_bytes": model_rss,
                      "peak_gpu_bytes": torch.cuda.max_memory_allocated() if cuda else 0,
                      "loss": float(loss), **extra}))


if __name__ == "__main__":
    main()
