#!/bin/bash
# On the project's device machine, from the repository root:  bash gpu_impl/scripts/device_check.sh
# Installs the carried wheels (.whl/) and the project, then runs the GPU tests, compute-sanitizer memcheck
# + racecheck on a small case, a parity check and a short benchmark (`flashtrie bench beam`, gpu and numpy,
# records with the GPU's device time and host breakdown). Logs and records go to $OUT (default ./out).
# (Any other CUDA machine: `nox -s gpu`, see the README.)
#   STAGES="smoke tests sanitizer bench"   which stages to run (default: all; each has its own timeout)
#   BENCH_N=1M BENCH_BEAMS=1,10,100,1000   library size and beams of the bench stage
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
  timeout 150 python3 gpu_impl/scripts/device_smoke.py --keywords 200000 --queries 8 2>&1 | tee -a "$S"
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
  D=$(mktemp -d)
  timeout ${BENCH_TIMEOUT:-480} bash -c "set -e
    flashtrie gen-keywords -n ${BENCH_N:-1M} -o $D/kw.npz --quiet
    flashtrie gen-queries $D/kw.npz -n 16 -K 1000 --preset dense -o $D/q.npz --quiet
    flashtrie build $D/kw.npz -o $D/kw.ftrie --quiet
    flashtrie bench beam --index $D/kw.ftrie --queries $D/q.npz --backends gpu,numpy \
      --beams ${BENCH_BEAMS:-1,10,100,1000} --repeats 10 --max-seconds 10 -o $OUT/bench.jsonl" \
    > "$OUT/bench.log" 2>&1
  rc_bench=$?
  rm -rf "$D"
fi
if [[ " $STAGES " == *" sanitizer "* ]]; then
  timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 gpu_impl/scripts/device_smoke.py --keywords 3000 --queries 2 --steps 4 > "$OUT/memcheck.log" 2>&1
  rc_mem=$?
  tail -4 "$OUT/memcheck.log"
  timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool racecheck --error-exitcode 9 \
    python3 gpu_impl/scripts/device_smoke.py --keywords 3000 --queries 2 --steps 3 > "$OUT/racecheck.log" 2>&1
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
