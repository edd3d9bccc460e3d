#!/bin/bash
# On the device machine, from the repository root:  bash gpu_impl/scripts/check_verify2.sh   (< 90 s)
# Issue 13's verify bar (load(verify=True) at >= 2 GB/s): builds a 100M index in both id orders and times
# the verified load at 1/4/16 cores through check_loadq.sh (no query stage; verify_device 'auto': the
# LOUDS pass on the GPU), then at 16 cores the CPU path and other piece sizes (`load_speed.py --device
# --set`).  Details go to $OUT/verify2/; a table goes to stdout.
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
  [[ $((SECONDS - T0)) -gt 80 ]] && { echo "sweep $name skipped (time)"; return; }
  timeout 20 python3 benchmarks/load_speed.py "$F" --workers 16 --repeats 2 --json "$V/sweep_$name.json" "$@" \
    > "$V/sweep_$name.log" 2>&1 || echo "sweep $name FAILED (rc $?)"
}
if [[ -f $F ]]; then
  sweep gpu_one_load --repeats 1  # one load in a fresh process: cupy's import and start-up included
  sweep cpu --device cpu
  sweep cpu_louds_2e21 --device cpu --set louds_pass.PIECE_BITS=2097152 --set louds_pass.CHUNK_NODES=1048576
  sweep cpu_louds_2e22 --device cpu --set louds_pass.PIECE_BITS=4194304 --set louds_pass.CHUNK_NODES=2097152
  sweep part_2e23 --set packed.PART_VALUES=8388608
  sweep rank_2e18 --set checks.RANK_CHUNK_WORDS=262144
fi
python3 - "$V" <<'PY' 2>&1 | tee "$V/table.txt"
import glob, json, os, sys
v = sys.argv[1]
print(f"{'run':<14} {'file':<12} {'cores':>5} {'s':>6} {'GB/s':>6} {'CPU s':>6} | split")
for path in [os.path.join(v, "loadq", "load.json")] + sorted(glob.glob(os.path.join(v, "sweep_*.json"))):
    if not os.path.exists(path):
        continue
    name = "default" if "loadq" in path else os.path.basename(path)[6:-5]
    for r in json.load(open(path))["results"]:
        split = " ".join(f"{k.split(' (')[0].replace(' ', '_')}={x:.3f}" for k, x in r["split"].items() if x >= 0.005)
        print(f"{name:<14} {os.path.basename(r['path']):<12} {r['workers']:>5} {r['seconds']:>6.3f} "
              f"{r['gb_per_s']:>6.3f} {r['cpu_seconds']:>6.2f} | {split}")
PY
echo "verify2 total $((SECONDS - T0)) s"
rm -rf "$D"
