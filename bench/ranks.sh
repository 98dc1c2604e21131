#!/usr/bin/env bash
# Step time of ranks as threads on this machine: the tiny model on 1 rank
# and partitioned over 2 and 4 ranks (dp x ep), medians over interleaved
# rounds, with the bytes each rank sends per step against the compiler's
# analytical volume. Part of `make bench`.
#   bench/ranks.sh [BUILD_DIR]    env: ROUNDS (3), STEPS (12: x4 per round)
set -euo pipefail
build=${1:-build}
rounds=${ROUNDS:-3}
steps=${STEPS:-12}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo "== ranks as threads on this machine: tiny, 1 rank vs 2 and 4 (dp x ep), $rounds rounds interleaved"
# The one-rank binary routes in 2 groups like the 2-rank ones (groups change
# which token-slots drop, not the work).
: > "$out/ranks.jsonl"
for grid in 1:1 2:1 2:2 4:2 4:4; do
  n=${grid%%:*}; ep=${grid##*:}
  if [ "$n" = 1 ]; then
    "$build/bin/moec" examples/models/tiny.json --routing-groups 2 -o "$out/tiny-r1" >/dev/null
  else
    "$build/bin/moec" examples/models/tiny.json --ranks "$n" --ep "$ep" -o "$out/tiny-r$n-ep$ep" >/dev/null
  fi
done
for r in $(seq "$rounds"); do
  for bin in tiny-r1 tiny-r2-ep1 tiny-r2-ep2 tiny-r4-ep2 tiny-r4-ep4; do
    rm -f "$out/$bin.jsonl"
    "$out/$bin" --data "$corpus" --steps $((steps * 4)) --val-fraction 0 --no-progress \
      --metrics "$out/$bin.jsonl" >/dev/null
    "$py" - "$out/$bin.jsonl" "$bin" >> "$out/ranks.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l][2:]
print(json.dumps({"binary": sys.argv[2], "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
                  "bytes": rows[-1]["comm_bytes"], "analytical": rows[-1]["comm_bytes_analytical"],
                  "ragged_bound": rows[-1]["comm_bytes_ragged_bound"]}))
PY
  done
done
"$py" - "$out/ranks.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = None
print("%-12s %9s %6s  %-30s %-28s" % ("binary", "tok/s", "vs 1", "all_to_all B/step/rank", "all_reduce B/step/rank"))
for b in dict.fromkeys(r["binary"] for r in rows):
    mine = [r for r in rows if r["binary"] == b]
    tps = statistics.median(r["tokens_per_s"] for r in mine)
    base = base or tps
    m, a, bound = mine[-1]["bytes"], mine[-1]["analytical"], mine[-1]["ragged_bound"]
    ar = "%d (%s analytical)" % (m["all_reduce"], "=" if m["all_reduce"] == a["all_reduce"] else "!=")
    if bound:  # ragged: routed token-slots only, against full capacity
        a2a = "%d (%.0f%% of full capacity)" % (m["all_to_all"], 100.0 * m["all_to_all"] / (bound + a["all_to_all"]))
    else:
        a2a = "%d (%s analytical)" % (m["all_to_all"], "=" if m["all_to_all"] == a["all_to_all"] else "!=")
    print("%-12s %9.0f %5.2fx  %-30s %-28s" % (b, tps, tps / base, a2a, ar))
PY

echo
echo "== the small model: 1 rank vs 2 ranks (ep 2), $rounds rounds interleaved, 6 steps each"
"$build/bin/moec" examples/models/small.json --routing-groups 2 -o "$out/small-r1" >/dev/null
"$build/bin/moec" examples/models/small.json --ranks 2 -o "$out/small-r2" >/dev/null
: > "$out/ranks-small.jsonl"
for r in $(seq "$rounds"); do
  for bin in small-r1 small-r2; do
    rm -f "$out/$bin.jsonl"
    "$out/$bin" --data "$corpus" --steps 6 --val-fraction 0 --no-progress \
      --metrics "$out/$bin.jsonl" >/dev/null
    "$py" - "$out/$bin.jsonl" "$bin" >> "$out/ranks-small.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"tokens_per_s"' in l][2:]
print(json.dumps({"binary": sys.argv[2], "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows)}))
PY
  done
done
"$py" - "$out/ranks-small.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tps = {b: statistics.median(r["tokens_per_s"] for r in rows if r["binary"] == b)
       for b in dict.fromkeys(r["binary"] for r in rows)}
for b, t in tps.items():
    print("%-10s %8.0f tok/s  %.2fx" % (b, t, t / tps["small-r1"]))
PY
