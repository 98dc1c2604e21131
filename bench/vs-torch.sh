#!/usr/bin/env bash
# The whole training step against a well-configured PyTorch (bench/README.md
# says why each setting matters), side by side, alternating rounds, medians:
# - PyTorch 1.13 (Debian) on OpenBLAS's OpenMP build (libopenblas0-openmp,
#   through LD_LIBRARY_PATH), torch.set_num_threads(THREADS), sort-based
#   dispatch computing only the kept token rows, each expert its own
#   parameters, scaled_dot_product_attention where the PyTorch has it (2.0+;
#   1.13 runs the manual attention) (bench/torch_moe.py);
# - both processes on OpenBLAS's best kernels for this CPU: OPENBLAS_CORETYPE
#   unset (not a forced older one), or set to the core a training binary
#   selects where the OpenBLAS release does not recognise the CPU
#   (bench/blas_core.py), and glibc keeping freed memory
#   (MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_ large: no page faults on each
#   step's temporaries);
# - the same model, batch and corpus (the King James Bible's bytes).
# Two routing regimes: the first steps after initialisation (routing
# collapsed: most token-slots dropped) and after WARM steps of training
# (routing spread by the auxiliary loss; ours resumes a checkpoint written
# after WARM steps, PyTorch trains WARM untimed steps first). Reported per
# model and regime: tokens/s (median of the per-step medians over ROUNDS
# rounds), the kept fraction of token-slots, peak resident memory, ratios;
# memory is compared net: each process's peak resident size less its
# resident size once its code and libraries are loaded, before any model
# memory (ours: start_rss_bytes, at main's start; PyTorch: after `import
# torch`), so both count parameters, gradients, AdamW state, activations,
# the corpus and their allocators' and BLAS's buffers, and neither counts
# libtorch's or our binary's code (the gross peaks are printed beside);
# then where the time goes on each side, from one more profiled run of each.
#   bench/vs-torch.sh [BUILD_DIR]
#   env: THREADS (all cores), ROUNDS (3), STEPS (12), WARM (300),
#        MODELS ("examples/models/tiny.json examples/models/small.json bench/models/moe16.json")
set -euo pipefail
build=${1:-build}
threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-3}
steps=${STEPS:-12}
warm=${WARM:-300}
models=${MODELS:-"examples/models/tiny.json examples/models/small.json bench/models/moe16.json"}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
omp=/usr/lib/x86_64-linux-gnu/openblas-openmp
[ -e "$omp/libblas.so.3" ] || { echo "vs-torch.sh: $omp missing (install libopenblas0-openmp: tools/scripts/install-deps.sh --bench)" >&2; exit 1; }
core=$(env -u OPENBLAS_CORETYPE "$py" bench/blas_core.py)
if [ -n "$core" ]; then
  echo "OpenBLAS does not recognise this CPU: both sides run its $core kernels"
  tuned=(env OPENBLAS_CORETYPE="$core")
else
  tuned=(env -u OPENBLAS_CORETYPE)
fi
tuned+=(MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000)
results="$out/vs-torch.jsonl"
profiles="$out/vs-torch-profile.jsonl"
: > "$results"
: > "$profiles"
echo "== whole training step vs a well-configured PyTorch, $threads threads, $rounds rounds of $steps steps"
for model in $models; do
  name=$(basename "$model" .json)
  "$build/bin/moec" "$model" -o "$out/vt-$name" >/dev/null
  # The trained regime: a checkpoint after $warm steps, resumed each round.
  rm -rf "$out/vt-$name-ckpt"
  "${tuned[@]}" "$out/vt-$name" --threads "$threads" --data "$corpus" --steps "$warm" \
    --val-fraction 0 --no-progress --checkpoint "$out/vt-$name-ckpt" >/dev/null
  for regime in first trained; do
    for r in $(seq "$rounds"); do
      rm -f "$out/vt-metrics.jsonl"
      if [ "$regime" = first ]; then
        "${tuned[@]}" "$out/vt-$name" --threads "$threads" --data "$corpus" --steps "$((steps + 2))" \
          --val-fraction 0 --no-progress --metrics "$out/vt-metrics.jsonl" >/dev/null
      else
        rm -rf "$out/vt-resume" && cp -r "$out/vt-$name-ckpt" "$out/vt-resume"
        "${tuned[@]}" "$out/vt-$name" --threads "$threads" --data "$corpus" \
          --steps "$((warm + steps + 2))" --val-fraction 0 --no-progress --checkpoint "$out/vt-resume" \
          --resume --metrics "$out/vt-metrics.jsonl" >/dev/null
      fi
      "$py" - "$out/vt-metrics.jsonl" "$name" "$regime" >> "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in rows if "tokens_per_s" in r][2:]  # two warm-up steps
slots = [sum(map(sum, r["expert_tokens"])) for r in steps]
drops = [r["dropped_tokens"] for r in steps]
mem = [r for r in rows if "peak_rss_bytes" in r]
peak = mem[-1]["peak_rss_bytes"] if mem else 0
base = mem[-1]["start_rss_bytes"] if mem else 0
print(json.dumps({"impl": "moec", "model": sys.argv[2], "regime": sys.argv[3],
                  "tokens_per_s": statistics.median(r["tokens_per_s"] for r in steps),
                  "kept_fraction": statistics.median(1 - d / s for d, s in zip(drops, slots)),
                  "peak_rss_bytes": peak, "base_rss_bytes": base,
                  "net_peak_bytes": peak - base}))
PY
      w=0; [ "$regime" = trained ] && w=$warm
      LD_LIBRARY_PATH="$omp" "${tuned[@]}" "$py" bench/torch_moe.py "$model" "$steps" "$threads" \
        --data "$corpus" --warm "$w" | "$py" -c "import json,sys; r=json.loads(sys.stdin.read()); r['regime']=sys.argv[1]; print(json.dumps(r))" "$regime" >> "$results"
    done
    # Where the time goes: one more run of each, profiled (ours: each
    # kernel family's time, --profile-kernels; PyTorch: its phases, then
    # torch.profiler's GEMM time), not part of the medians above.
    rm -f "$out/vt-prof.jsonl"
    if [ "$regime" = first ]; then
      "${tuned[@]}" "$out/vt-$name" --threads "$threads" --data "$corpus" --steps "$((steps + 2))" \
        --val-fraction 0 --no-progress --profile-kernels --metrics "$out/vt-prof.jsonl" >/dev/null
    else
      rm -rf "$out/vt-resume" && cp -r "$out/vt-$name-ckpt" "$out/vt-resume"
      "${tuned[@]}" "$out/vt-$name" --threads "$threads" --data "$corpus" \
        --steps "$((warm + steps + 2))" --val-fraction 0 --no-progress --checkpoint "$out/vt-resume" \
        --resume --profile-kernels --metrics "$out/vt-prof.jsonl" >/dev/null
    fi
    "$py" -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if 'kernel_profile' in l][0]; print(json.dumps({'impl': 'moec', 'model': sys.argv[2], 'regime': sys.argv[3], 'step_seconds': r['step_seconds'] / r['steps'], 'families': {f['family']: f['seconds'] / r['steps'] for f in r['kernel_profile']}}))" \
      "$out/vt-prof.jsonl" "$name" "$regime" >> "$profiles"
    w=0; [ "$regime" = trained ] && w=$warm
    LD_LIBRARY_PATH="$omp" "${tuned[@]}" "$py" bench/torch_moe.py "$model" "$steps" "$threads" \
      --data "$corpus" --warm "$w" --profile | "$py" -c "import json,sys; r=json.loads(sys.stdin.read()); r['regime']=sys.argv[1]; print(json.dumps(r))" "$regime" >> "$profiles"
  done
done
"$py" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
pt = next(r for r in rows if r["impl"] != "moec")
print("PyTorch: %s, %s attention; memory: peak resident MB net of each process's "
      "resident size before the model (code, libraries), gross peak in brackets"
      % (pt["impl"], pt.get("attention", "manual")))
print("%-7s %-8s %11s %11s %6s %7s %7s %15s %15s %6s" % ("model", "regime", "moec tok/s",
      "torch tok/s", "ratio", "kept us", "kept pt", "moec MB net", "torch MB net", "memory"))
for model in dict.fromkeys(r["model"] for r in rows):
    for regime in ("first", "trained"):
        sel = lambda moec: [r for r in rows if r["model"] == model and r["regime"] == regime
                            and (r["impl"] == "moec") == moec]
        ours, torch = sel(True), sel(False)
        if not ours or not torch:
            continue
        med = lambda rs, k: statistics.median(r[k] for r in rs)
        a, b = med(ours, "tokens_per_s"), med(torch, "tokens_per_s")
        ma, mb = med(ours, "net_peak_bytes") / 1e6, med(torch, "net_peak_bytes") / 1e6
        ga, gb = med(ours, "peak_rss_bytes") / 1e6, med(torch, "peak_rss_bytes") / 1e6
        print("%-7s %-8s %11.0f %11.0f %5.2fx %7.2f %7.2f %6.0f (%6.0f) %6.0f (%6.0f) %5.2fx" % (
            model, regime, a, b, a / b, med(ours, "kept_fraction"), med(torch, "kept_fraction"),
            ma, ga, mb, gb, ma / mb))
PY
# Where the time goes, from the profiled runs. Ours: the contractions
# (linear, FFN, expert FFN and attention kernel families, forward and
# backward) and the rest. PyTorch: its phases (unprofiled) and its GEMMs'
# time (mm, bmm and kin). Both run their GEMMs on the same OpenBLAS, so
# PyTorch's step over our contractions' time bounds the ratio that faster
# code around the contractions alone could reach.
"$py" - "$profiles" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
contraction = ("linear", "linear_grad", "ffn", "ffn_grad", "expert_ffn", "expert_ffn_grad",
               "attention", "attention_grad")
print("where the time goes (ms a step, one profiled run each):")
print("%-7s %-8s %9s %13s %8s %10s %9s %9s %9s %8s" % (
    "model", "regime", "moec step", "contractions", "rest", "torch step", "forward",
    "backward", "GEMMs", "bound"))
for r in rows:
    if r["impl"] != "moec":
        continue
    t = next((x for x in rows if x["impl"] != "moec" and x["model"] == r["model"]
              and x["regime"] == r["regime"]), None)
    if not t:
        continue
    c = sum(v for k, v in r["families"].items() if k in contraction)
    ph = t["phase_seconds"]
    step = sum(ph.values())
    print("%-7s %-8s %9.1f %13.1f %8.1f %10.1f %9.1f %9.1f %9.1f %7.2fx" % (
        r["model"], r["regime"], 1e3 * r["step_seconds"], 1e3 * c, 1e3 * (r["step_seconds"] - c),
        1e3 * step, 1e3 * ph["forward"], 1e3 * ph["backward"], 1e3 * t["profile"]["gemm_seconds"],
        step / c))
    top = sorted(r["families"].items(), key=lambda kv: -kv[1])[:6]
    print("        moec:  " + ", ".join("%s %.1f" % (k, 1e3 * v) for k, v in top))
    print("        torch: " + ", ".join("%s %.1f" % (k.replace("aten::", ""), 1e3 * v)
                                      for k, v in t["profile"]["top"][:6]))
PY
