#!/bin/bash
# On the device machine, from the repository root:  bash gpu_impl/scripts/check_queries2.sh   (< 90 s)
# Issue 13's query bar: the query generator's library pass over 100M keywords of `flashtrie gen-keywords`'
# default library on the CPU (1/4/16 threads; with and without the token counts; counting by sort and by
# bincount; other piece and buffer sizes) and on the GPU, the GPU's facts checked equal to the CPU's bit for
# bit, then 16 dense queries (K = 1000) with device=cpu and device=gpu (same workload digest).
# Details: $OUT/queries2/ (summary.log, bench.log, queries2.json).
#   Q2_N=100M   library size        Q2_THREADS=1,4,16   CPU thread counts
#   Q2_SKIP_INSTALL=1   use the flashtrie already installed
set -uo pipefail
OUT=${OUT:-$PWD/out}
L="$OUT/queries2"
mkdir -p "$L"
export PYTHONUNBUFFERED=1
S="$L/summary.log"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
T0=$SECONDS

source gpu_impl/scripts/device_install.sh
device_install "$L" "${Q2_SKIP_INSTALL:-}"
say "queries2: N=${Q2_N:-100M}, $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

timeout 75 python3 benchmarks/query_pass_speed.py --n "${Q2_N:-100M}" \
  --threads "${Q2_THREADS:-1,4,16}" --json "$L/queries2.json" > "$L/bench.log" 2>&1
rc=$?
cat "$L/bench.log" >> "$S"
# the GPU tests (python3 -m pytest -q -m gpu tests/test_query_passes_gpu.py) run with the project's GPU suite
say "benchmark rc $rc; total $((SECONDS - T0)) s"
# the short table last
sed -n '/^| step/,$p' "$L/bench.log"
[[ $rc == 0 ]] || tail -20 "$L/bench.log"
