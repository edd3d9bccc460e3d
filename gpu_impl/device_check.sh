#!/bin/bash
# On the GPU machine, from the repository root:  bash gpu_impl/device_check.sh
# Installs the carried wheels (.whl/, from ../shared/device/fetch-wheels.sh) and the project, then runs
# the GPU tests, compute-sanitizer memcheck + racecheck on a small case, a parity check and the benchmark.
# Logs go to $OUT (default ./out); a short table is printed last.
#   STAGES="smoke tests sanitizer bench"   which stages to run (default: all; each has its own timeout)
#   BENCH_ARGS="..."                       extra arguments for bench_gpu.py
#   PYTEST_ARGS="..."                      extra arguments for pytest
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
STAGES=${STAGES:-"smoke tests sanitizer bench"}
export PYTHONUNBUFFERED=1
export FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
S="$OUT/summary.log"
: > "$S"
say() { echo "$*" | tee -a "$S"; }

if compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || say "wheel install FAILED"
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > "$OUT/install.log" 2>&1 \
  || { say "project install FAILED"; tail -20 "$OUT/install.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee -a "$S"

# first use (compile) and second use (cache) of the kernel
python3 - <<'PY' 2>&1 | tee -a "$S"
import time
from cuda.core import Device
from flashtrie.gpu_impl.compile import compile_kernel, spill_report
d = Device(0); d.set_current()
cc = d.compute_capability; cc = cc() if callable(cc) else cc
arch = f"sm_{cc.major}{cc.minor}"
k = compile_kernel("search.cu", arch, {"FT_THREADS": "512"}, use_cache=False, verbose=True)
print(f"compile {arch}: first use {k.seconds:.2f} s, resources {spill_report(k.log)}")
k = compile_kernel("search.cu", arch, {"FT_THREADS": "512"})
k = compile_kernel("search.cu", arch, {"FT_THREADS": "512"})
print(f"cached load {k.seconds*1e3:.1f} ms (from_cache={k.from_cache})")
PY

rc_tests=skipped; rc_mem=skipped; rc_race=skipped; rc_smoke=skipped; rc_bench=skipped
if [[ " $STAGES " == *" smoke "* ]]; then
  timeout 150 python3 -m flashtrie.gpu_impl.device_smoke --keywords 200000 --queries 8 2>&1 | tee -a "$S"
  rc_smoke=${PIPESTATUS[0]}
fi
# a hung test is stopped after 120 s where pytest-timeout is installed (the stage's timeout still applies)
TO=""; python3 -c "import pytest_timeout" 2>/dev/null && TO="--timeout 120 --timeout-method thread"
if [[ " $STAGES " == *" tests "* ]]; then
  timeout ${TESTS_TIMEOUT:-300} python3 -m pytest -q --maxfail=3 -m gpu $TO \
    tests/test_gpu_search.py tests/test_gpu_compile.py ${PYTEST_ARGS:-} \
    > "$OUT/pytest.log" 2>&1
  rc_tests=$?
  tail -15 "$OUT/pytest.log"
fi
if [[ " $STAGES " == *" bench "* ]]; then
  timeout ${BENCH_TIMEOUT:-480} python3 -m flashtrie.gpu_impl.bench_gpu --out "$OUT/bench.jsonl" ${BENCH_ARGS:-} \
    > "$OUT/bench.log" 2>&1
  rc_bench=$?
fi
if [[ " $STAGES " == *" sanitizer "* ]]; then
  timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 -m flashtrie.gpu_impl.device_smoke --keywords 3000 --queries 2 --steps 4 > "$OUT/memcheck.log" 2>&1
  rc_mem=$?
  tail -4 "$OUT/memcheck.log"
  timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python3 -m flashtrie.gpu_impl.device_smoke --keywords 3000 --queries 2 --steps 3 > "$OUT/racecheck.log" 2>&1
  rc_race=$?
  tail -4 "$OUT/racecheck.log"
fi
say "tests rc=$rc_tests memcheck rc=$rc_mem racecheck rc=$rc_race smoke rc=$rc_smoke bench rc=$rc_bench"
grep -E "passed|failed|error" "$OUT/pytest.log" 2>/dev/null | tail -3 | tee -a "$S"
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log" 2>/dev/null | tee -a "$S"
[ -f "$OUT/bench.log" ] && tail -16 "$OUT/bench.log" | tee -a "$S"
for rc in $rc_tests $rc_mem $rc_race $rc_smoke $rc_bench; do  # a failed stage fails the script
  [[ $rc == skipped || $rc == 0 ]] || exit 1
done
exit 0
