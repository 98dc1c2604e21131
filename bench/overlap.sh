#!/usr/bin/env bash
# Overlapped against blocking gradient all-reduces (moec --schedule), over
# an emulated link of LINK GB/s (1; --emulate-link): moe16's shapes with a
# global batch of BATCH (4) sequences of 256, on 2 thread ranks (dp 2) and
# 4 (dp 2 x ep 2), ROUNDS (3) alternating rounds of STEPS (8) steps each,
# the first 2 steps of each run left out. Reported per grid: the median
# step time of both schedules and their ratio, and the overlapped step
# against max(compute, communication) of the blocking run (its step time
# without, and its time in, collectives); "exposed" is the overlapped run's
# time in collectives, all-to-alls included, and "waits" the part spent
# waiting for background all-reduces. Grids with ep > 1 also run a third
# binary, "pipelined": the overlapped schedule with its expert phases in
# CHUNKS (4) chunks (moec --expert-chunks), whose dispatch and combine
# all-to-alls run in the background while other chunks compute. Not part
# of CI.
#   bench/overlap.sh [BUILD_DIR]
#   env: LINK (1), BATCH (4), ROUNDS (3), STEPS (8), GRIDS ("2:1 4:2"), CHUNKS (4)
set -euo pipefail
build=${1:-build}
link=${LINK:-1}
batch=${BATCH:-4}
rounds=${ROUNDS:-3}
steps=${STEPS:-8}
grids=${GRIDS:-2:1 4:2}
chunks=${CHUNKS:-4}
py=/usr/bin/python3
out="$build/bench"
mkdir -p "$out"
corpus="$build/kjv.txt"
[ -s "$corpus" ] || bible -l80 'Gen1:1-Rev22:21' > "$corpus"
echo "== overlapped vs blocking gradient all-reduces: moe16 shapes, batch $batch x 256, link $link GB/s, $rounds rounds"
"$py" - bench/models/moe16.json "$out/ov-moe16.json" "$batch" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["name"] = "ov-moe16"
m["batch_size"] = int(sys.argv[3])
json.dump(m, open(sys.argv[2], "w"), indent=1)
PY
for grid in $grids; do
  n=${grid%%:*}; ep=${grid##*:}
  for schedule in overlap blocking; do
    "$build/bin/moec" "$out/ov-moe16.json" --ranks "$n" --ep "$ep" --schedule="$schedule" \
      -o "$out/ov-r$n-ep$ep-$schedule" >/dev/null
  done
  [ "$ep" -gt 1 ] && "$build/bin/moec" "$out/ov-moe16.json" --ranks "$n" --ep "$ep" \
    --expert-chunks "$chunks" -o "$out/ov-r$n-ep$ep-pipelined" >/dev/null
done
: > "$out/overlap.jsonl"
for r in $(seq "$rounds"); do
  for grid in $grids; do
    n=${grid%%:*}; ep=${grid##*:}
    schedules="blocking overlap"
    [ "$ep" -gt 1 ] && schedules="$schedules pipelined"
    for schedule in $schedules; do
      bin="ov-r$n-ep$ep-$schedule"
      rm -f "$out/$bin.jsonl"
      "$out/$bin" --data "$corpus" --steps "$steps" --no-progress --threads 1 \
        --emulate-link "$link" --metrics "$out/$bin.jsonl" >/dev/null
      "$py" - "$out/$bin.jsonl" "$n:$ep" "$schedule" >> "$out/overlap.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows = [r for r in rows if "step_seconds" in r][2:]
for r in rows:
    print(json.dumps({"grid": sys.argv[2], "schedule": sys.argv[3], "step": r["step_seconds"],
                      "comm": r["comm_seconds"], "background": r["background_comm_seconds"],
                      "wait": r["background_wait_seconds"], "loss": r["loss"]}))
PY
    done
  done
done
"$py" - "$out/overlap.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'grid (ranks:ep)':>16} {'blocking ms':>12} {'compute':>8} {'comm':>8} {'overlap ms':>11} "
      f"{'exposed':>8} {'waits':>6} {'ratio':>6} {'vs max':>7}")
for grid in dict.fromkeys(r["grid"] for r in rows):
    def med(schedule, key):
        return statistics.median(r[key] for r in rows if r["grid"] == grid and r["schedule"] == schedule)
    blocking, comm = med("blocking", "step"), med("blocking", "comm")
    compute = blocking - comm
    overlap, exposed, waits = med("overlap", "step"), med("overlap", "comm"), med("overlap", "wait")
    print(f"{grid:>16} {1e3 * blocking:12.1f} {1e3 * compute:8.1f} {1e3 * comm:8.1f} "
          f"{1e3 * overlap:11.1f} {1e3 * exposed:8.1f} {1e3 * waits:6.1f} {overlap / blocking:6.2f} "
          f"{overlap / max(compute, comm):7.2f}")
    if any(r["grid"] == grid and r["schedule"] == "pipelined" for r in rows):
        piped, exposed = med("pipelined", "step"), med("pipelined", "comm")
        diff = max(abs(a - b) / abs(b) for a, b in zip(
            [r["loss"] for r in rows if r["grid"] == grid and r["schedule"] == "pipelined"],
            [r["loss"] for r in rows if r["grid"] == grid and r["schedule"] == "overlap"]))
        print(f"{grid + ' pipelined':>16} {'':12} {'':8} {'':8} {1e3 * piped:11.1f} "
              f"{1e3 * exposed:8.1f} {'':6} {piped / blocking:6.2f} "
              f"{piped / max(compute, comm):7.2f}   ({piped / overlap:.2f}x the overlapped step; "
              f"losses within {diff:.2g})")
PY
