#!/bin/bash
# On the device machine, from the repository root (< 150 s):  bash gpu_impl/scripts/check_probe.sh
# Where the fused stepwise step's time goes (gpu_impl/scripts/step_probe.py): floors and the stepper's kernels
# by CUDA-graph replay, then Nsight Compute on a few eager fused launches (root and mid-keyword rows; details
# page and per-SASS-line source counters), then (TESTS=...) some GPU test files.
#   CASE=fixed:20M:32768  SHAPE=2x70  VARIANTS=NAME=MACRO=VALUE[+...],...  NCU=1  TESTS="tests/x.py ..."
#   PYTEST_ARGS="-m gpu" (the default)  HF=1: also the CUDA cases of tests/test_hf.py
# Everything comes back as ONE file, $OUT/probe.tgz; stdout ends with the probe's table.
set -uo pipefail
OUT=${OUT:-$PWD/out}
S=$(mktemp -d)
D="$S/probe"
mkdir -p "$D" "$OUT"
export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
source gpu_impl/scripts/device_install.sh
device_install "$D" "${SKIP_INSTALL:-}"
CASE=${CASE:-fixed:20M:32768}
SHAPE=${SHAPE:-2x70}
IDX=/tmp/probe-${CASE//:/-}.fti
echo "commit ${FLASHTRIE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')}; $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | head -1)"
timeout 120 python3 gpu_impl/scripts/step_probe.py --case "$CASE" --shape "$SHAPE" --index "$IDX" \
  --variants "${VARIANTS:-}" --out "$D" > "$D/probe.txt" 2>&1
echo "probe rc=$? ($SECONDS s)"
if [ "${NCU:-1}" = 1 ]; then
  N=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$N" ]; then
    timeout 120 "$N" --clock-control none --set full -k regex:ft_step_advance_mask --launch-count 4 -f -o "$D/fused" \
      python3 gpu_impl/scripts/step_probe.py --ncu --case "$CASE" --shape "$SHAPE" --index "$IDX" \
      > "$D/ncu.log" 2>&1
    echo "ncu rc=$? ($SECONDS s)"
    "$N" --import "$D/fused.ncu-rep" --page details > "$D/ncu_details.txt" 2>&1
    "$N" --import "$D/fused.ncu-rep" --page source --csv --print-source sass > "$D/ncu_source.csv" 2>&1
    grep -E "^  [a-z_]+|Duration|DRAM Throughput|Memory Throughput|L2 Hit|Registers|Achieved Occupancy|Warp Cycles Per Issued" \
      "$D/ncu_details.txt" | head -60
  else
    echo "ncu not found"
  fi
fi
if [ -n "${TESTS:-}" ]; then
  timeout "${TEST_S:-90}" python3 -m pytest -q -x -p no:cacheprovider ${PYTEST_ARGS:--m gpu} $TESTS > "$D/pytest.log" 2>&1
  echo "tests rc=$? ($SECONDS s): $(tail -1 "$D/pytest.log")"
fi
if [ "${HF:-0}" = 1 ]; then  # the CUDA cases of the transformers processor tests
  timeout "${TEST_S:-90}" python3 -m pytest -q -x -p no:cacheprovider -k cuda tests/test_hf.py > "$D/pytest_hf.log" 2>&1
  echo "hf tests rc=$? ($SECONDS s): $(tail -1 "$D/pytest_hf.log")"
fi
tar -czf "$OUT/probe.tgz" -C "$S" probe && echo "details: \$OUT/probe.tgz"
cat "$D/probe.txt" | tail -40
