#!/bin/bash
# The GPU builder on the device machine (< 120 s), from the repository root, the project installed:
#   bash gpu_impl/scripts/check_gpubuild.sh
# 1. a 100M-keyword GPU build in a fresh process (after a small warm-up build): sub-stage seconds, GPU
#    memory pool at each stage, peak RSS;
# 2. the GPU-marked tests of tests/test_gpu_build.py (cupy == CPU builder, array for array);
# 3. CPU builder == GPU builder at 5M keywords (both id modes), array for array;
# 4. host<->GPU copies of 2 GB: cupy's own against the pinned staging of gpu_impl/host_transfer.py;
# 5. a 50M build with cupy's cached blocks freed at every stage start: each stage's own GPU memory peak.
# Everything also goes into one tarball, $OUT/gpubuild.tgz.
# Details (JSON lines, logs) go to $OUT/gpubuild/; a summary is printed at the end.
#   BUILD_N=100M COMPARE_N=5M TRANSFER_GB=2 POOL_N=50M   sizes
#   DRY=1   a dry run without a GPU: the builder's code with numpy, no transfer step (checks this script)
set -uo pipefail
OUT=${OUT:-$PWD/out}
D="$OUT/gpubuild"
mkdir -p "$D"
export PYTHONUNBUFFERED=1
BUILD_N=${BUILD_N:-100M}
COMPARE_N=${COMPARE_N:-5M}
TRANSFER_GB=${TRANSFER_GB:-2}
POOL_N=${POOL_N:-50M}
XP=()
[ -n "${DRY:-}" ] && XP=(--numpy)
B=gpu_impl/scripts/gpubuild_bench.py
J="$D/results.jsonl"
: > "$J"
S="$D/summary.log"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
python3 -c "import flashtrie.gpu_impl.build_gpu" 2>/dev/null \
  || python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$D/install.log" 2>&1
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>&1 | tee -a "$S"
git log --oneline -1 2>/dev/null | tee -a "$S"

step() {  # step NAME TIMEOUT CMD...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$D/$name.log" 2>&1
  local rc=$?
  say "[$name] rc=$rc $((SECONDS - t0)) s"
  return $rc
}

# the build first: its warm-up compiles cupy's kernels (cached on disk) for the steps after it too
step build 40 python3 "$B" build --n "$BUILD_N" "${XP[@]}" --json "$J"
grep '^\[build\]' "$D/build.log" | tail -3 | tee -a "$S"
step tests 40 python3 -m pytest -q -x -m gpu tests/test_gpu_build.py -p no:cacheprovider
tail -3 "$D/tests.log" | tee -a "$S"
step compare 12 python3 "$B" compare --n "$COMPARE_N" "${XP[@]}" --json "$J"
[ -z "${DRY:-}" ] && step transfer 12 python3 "$B" transfer --gb "$TRANSFER_GB" --json "$J"
[ -z "${DRY:-}" ] && step pool 15 python3 "$B" build --n "$POOL_N" --pool-peaks --json "$J"

python3 - "$J" <<'PY' 2>&1 | tee -a "$S"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["what"] == "transfer":
        print("transfer GB/s: " + ", ".join(f"{k} {v}" for k, v in r.items() if "gbps" in k or "equal" in k))
    elif r["what"] == "build":
        gb = 1e9
        print(f"build {r['n']:,} keywords ({r['xp']}, ids={r['ids']}): {r['build_s']:.2f} s "
              f"(generate {r['generate_s']:.1f} s, warm-up {r['warmup_s']:.1f} s); {r['num_unique']:,} unique, {r['num_nodes']:,} nodes")
        print("  stages: " + ", ".join(f"{s} {t:.2f}" for s, t in r["stages"]))
        print("  GPU pool GB at stage start: " + ", ".join(f"{s} {b / gb:.1f}" for s, b in r["gpu_pool_total_bytes_at_stage"]))
        print(f"  host: input {r['input_bytes'] / gb:.2f} GB, RSS before build {r['rss_before_build'] / gb:.2f} GB, "
              f"peak during build {r['peak_rss_during_build'] / gb:.2f} GB (reset {r['peak_reset']}), "
              f"above input {r['build_peak_above_input'] / gb:.2f} GB, index arrays {r['index_array_bytes'] / gb:.2f} GB")
        f = 800e6 / r["n"]
        host = r['rss_before_build'] + (f - 1) * r['input_bytes'] + f * r['build_peak_above_input']
        if r.get("pool_peaks"):
            print(f"  (stage peaks run: its seconds include the re-allocations)")
        print(f"  x{f:g} to 800M: build ~{r['build_s'] * f:.0f} s, host peak ~{host / gb:.0f} GB, GPU pool "
              f"~{f * max(b for _, b in r['gpu_pool_total_bytes_at_stage']) / gb:.0f} GB")
    elif r["what"] == "compare":
        print(f"compare CPU == GPU at {r['n']:,}: equal={r['equal']} " + "; ".join(
            f"{k}: cpu {m['cpu_s']} s, gpu {m['gpu_s']} s, diff {m['different_arrays'] + m['different_meta']}"
            for k, m in r["modes"].items()))
PY
tar -czf "$OUT/gpubuild.tgz" -C "$OUT" gpubuild 2>/dev/null && echo "details: $OUT/gpubuild.tgz"
