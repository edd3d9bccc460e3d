#!/bin/bash
# On the device machine, from the repository root:  bash gpu_impl/scripts/check_verify2.sh   (< 120 s)
# Issue 13's verify bar (load(verify=True) at >= 2 GB/s): builds a 100M index in both id orders and times
# the verified load at 1/4/16 cores through check_loadq.sh (no query stage), then compares piece sizes at
# 16 cores (`load_speed.py --set`).  Details go to $OUT/verify2/; a table goes to stdout.
#   VERIFY2_N=100M   library size
set -uo pipefail
OUT=${OUT:-$PWD/out}
V="$OUT/verify2"
mkdir -p "$V"
export PYTHONUNBUFFERED=1
D=/tmp/verify2
T0=$SECONDS
OUT="$V" LOADQ_N=${VERIFY2_N:-100M} LOADQ_DIR=$D LOADQ_WORKERS=1,4,16 LOADQ_SKIP_QUERIES=1 LOADQ_KEEP=1 \
  bash gpu_impl/scripts/check_loadq.sh > "$V/loadq_console.log" 2>&1
grep -E "loadq:|build|FAILED" "$V/loadq_console.log" | cut -c1-200
[[ -d /tmp/site ]] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
F=$D/input.ftrie
sweep() {  # name, then --set arguments
  local name=$1; shift
  [[ $((SECONDS - T0)) -gt 100 ]] && { echo "sweep $name skipped (time)"; return; }
  timeout 20 python3 benchmarks/load_speed.py "$F" --workers 16 --repeats 2 --json "$V/sweep_$name.json" "$@" \
    > "$V/sweep_$name.log" 2>&1 || echo "sweep $name FAILED (rc $?)"
}
if [[ -f $F ]]; then
  B=$(git rev-parse -q --verify 9e7ac22^{commit} 2>/dev/null)  # the checks before this branch, for comparison
  if [[ -n $B ]] && mkdir -p $D/base && git archive "$B" flashtrie | tar -x -C $D/base 2>/dev/null; then
    PYTHONPATH=$D/base${PYTHONPATH:+:$PYTHONPATH} timeout 20 python3 benchmarks/load_speed.py "$F" --workers 16 \
      --repeats 2 --json "$V/sweep_base.json" > "$V/sweep_base.log" 2>&1 || echo "sweep base FAILED (rc $?)"
  fi
  sweep louds_2e16 --set louds_pass.PIECE_BITS=65536 --set louds_pass.CHUNK_NODES=32768
  sweep louds_2e17 --set louds_pass.PIECE_BITS=131072 --set louds_pass.CHUNK_NODES=65536
  sweep louds_2e19 --set louds_pass.PIECE_BITS=524288 --set louds_pass.CHUNK_NODES=262144
  sweep louds_2e20 --set louds_pass.PIECE_BITS=1048576 --set louds_pass.CHUNK_NODES=524288
  sweep part_2e18 --set packed.PART_VALUES=262144
  sweep part_2e22 --set packed.PART_VALUES=4194304
  sweep rank_2e16 --set checks.RANK_CHUNK_WORDS=65536
  sweep rank_2e20 --set checks.RANK_CHUNK_WORDS=1048576
fi
[[ -f $F ]] && timeout 30 python3 - "$F" <<'PY' > "$V/levels.log" 2>&1  # the LOUDS pass level by level
import os, sys, time
from flashtrie import NarrowLoudsIndex
from flashtrie.index import checks, louds_pass
ix = NarrowLoudsIndex.load(sys.argv[1], verify=False)
_, layout = checks.layout_problem(ix)
inner = louds_pass.in_parallel
for w in (1, 4, 16):
    calls = []
    def timed(tasks, workers, calls=calls):
        t = time.perf_counter(); out = inner(tasks, workers); calls.append((len(tasks), time.perf_counter() - t))
        return out
    louds_pass.in_parallel = timed
    t, c = time.perf_counter(), time.process_time()
    louds_pass.louds_facts(ix.louds, ix.linked, ix.terminal, layout.tails, layout.levels, ix.max_keyword_length, w)
    t, c = time.perf_counter() - t, time.process_time() - c
    print(f"LOUDS pass {w:>2} cores: {t:.3f} s (CPU {c:.3f} s); calls (tasks, s): "
          + " ".join(f"({k},{s:.3f})" for k, s in calls))
PY
python3 - "$V" <<'PY' 2>&1 | tee "$V/table.txt"
import glob, json, os, sys
v = sys.argv[1]
print(f"{'run':<12} {'file':<12} {'cores':>5} {'s':>6} {'GB/s':>6} {'CPU s':>6} | split")
for path in [os.path.join(v, "loadq", "load.json")] + sorted(glob.glob(os.path.join(v, "sweep_*.json"))):
    if not os.path.exists(path):
        continue
    name = "default" if "loadq" in path else os.path.basename(path)[6:-5]
    for r in json.load(open(path))["results"]:
        split = " ".join(f"{k.split(' (')[0].replace(' ', '_')}={x:.3f}" for k, x in r["split"].items() if x >= 0.005)
        print(f"{name:<12} {os.path.basename(r['path']):<12} {r['workers']:>5} {r['seconds']:>6.3f} "
              f"{r['gb_per_s']:>6.3f} {r['cpu_seconds']:>6.2f} | {split}")
PY
cut -c1-300 "$V/levels.log"
echo "verify2 total $((SECONDS - T0)) s"
rm -rf "$D"
