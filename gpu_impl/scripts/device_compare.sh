#!/bin/bash
# On the GPU machine: this tree's GPU tests and sanitizer pass, then its latency against another tree's
# (a landed commit), in one run on the same inputs.
#   BASE=.stage/base bash gpu_impl/scripts/device_compare.sh      (BASE: a copy of the other tree)
# 1. installs the carried wheels (.whl/) and both trees into their own folders;
# 2. this tree: every GPU-marked test and a parity smoke run (compute-sanitizer memcheck and racecheck
#    run last, after the timings, so a short call still brings the timings back);
# 3. N keywords (default 10M) and Q dense queries (K = 1000) made once with the base tree's generators,
#    each tree builds its own index, then `flashtrie bench beam` (gpu and numpy: parity checked before
#    timing) at BEAMS (default 100,1000), batch 1, in ROUNDS alternating rounds (default 2).
# Records and logs land in $OUT; a table of both trees' latencies is printed last.
set -uo pipefail
OUT=${OUT:-$PWD/out}
BASE=${BASE:?set BASE to a copy of the tree to compare against}
N=${N:-10M}; Q=${Q:-16}; BEAMS=${BEAMS:-100,1000}; ROUNDS=${ROUNDS:-2}
export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
mkdir -p "$OUT" /tmp/ftcmp
HERE=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || echo "wheel install FAILED"
for v in base new; do
  src=$HERE; [ $v = base ] && src=$HERE/$BASE
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site_$v "$src" \
    >> "$OUT/install.log" 2>&1 || { echo "install $v FAILED"; tail -5 "$OUT/install.log"; }
done
tree() { local v=$1; shift; env PYTHONPATH=/tmp/site_$v:/tmp/site "$@"; }  # run a command with tree $v
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
cd /tmp  # import the installed copies, not the source folder
rc_tests=skipped; rc_smoke=skipped; rc_mem=skipped; rc_race=skipped
if [ -z "${BENCH_ONLY:-}" ]; then
  timeout ${TESTS_TIMEOUT:-200} env PYTHONPATH=/tmp/site_new:/tmp/site python3 -m pytest -q -p no:cacheprovider -m gpu \
    --rootdir "$HERE" -c "$HERE/pyproject.toml" "$HERE/tests" > "$OUT/pytest.log" 2>&1
  rc_tests=$?; grep -a -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest.log" | tail -12
  timeout 60 env PYTHONPATH=/tmp/site_new:/tmp/site python3 "$HERE/gpu_impl/scripts/device_smoke.py" --keywords 200000 --queries 8 > "$OUT/smoke.log" 2>&1
  rc_smoke=$?; tail -3 "$OUT/smoke.log"
fi
kw=/tmp/ftcmp/kw.npz; q=/tmp/ftcmp/q.npz
( time tree base python3 -m flashtrie gen-keywords -n "$N" -o $kw --quiet ) 2>&1 | grep -E "real|rror"
( time tree base python3 -m flashtrie gen-queries $kw -n "$Q" -K 1000 --preset dense -o $q --quiet ) 2>&1 | grep -E "real|rror"
for v in base new; do
  ( time tree $v python3 -m flashtrie build $kw -o /tmp/ftcmp/$v.ftrie --quiet ) 2>&1 | grep -E "real|rror"
done
for round in $(seq 1 "$ROUNDS"); do for v in base new; do
  timeout ${BENCH_TIMEOUT:-90} env PYTHONPATH=/tmp/site_$v:/tmp/site FLASHTRIE_COMMIT="$v-round$round" python3 -m flashtrie \
    bench beam --keywords $kw --index /tmp/ftcmp/$v.ftrie --queries $q --backends gpu,numpy --beams "$BEAMS" \
    --repeats 20 --max-seconds 20 -o "$OUT/bench_$v.jsonl" --quiet >> "$OUT/bench.log" 2>&1
  echo "bench $v round $round rc=$?"
done; done
[ -z "${BENCH_ONLY:-}" ] && {
  timeout 60 env PYTHONPATH=/tmp/site_new:/tmp/site compute-sanitizer --tool memcheck --error-exitcode 9 python3 "$HERE/gpu_impl/scripts/device_smoke.py" \
    --keywords 3000 --queries 2 --steps 4 > "$OUT/memcheck.log" 2>&1; rc_mem=$?
  timeout 60 env PYTHONPATH=/tmp/site_new:/tmp/site compute-sanitizer --tool racecheck --error-exitcode 9 python3 "$HERE/gpu_impl/scripts/device_smoke.py" \
    --keywords 3000 --queries 2 --steps 3 > "$OUT/racecheck.log" 2>&1; rc_race=$?
  grep -a -E "ERROR SUMMARY|RACECHECK SUMMARY" "$OUT/memcheck.log" "$OUT/racecheck.log"
}
echo "tests rc=$rc_tests smoke rc=$rc_smoke memcheck rc=$rc_mem racecheck rc=$rc_race"
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print(f"{'tree':5} {'round':>5} {'beam':>5} {'status':9} {'mean ms':>8} {'p99 ms':>8} {'device ms':>9} "
      f"{'prep/enq/wait/post ms':>24}")
for v in ("base", "new"):
    f = out / f"bench_{v}.jsonl"
    if not f.exists():
        continue
    n = {}
    for line in f.open():
        r = json.loads(line)
        if r.get("backend") != "gpu" or r.get("kind") not in (None, "search", "beam", "latency"):
            continue
        m, c = r.get("metrics", {}), r.get("config", {})
        key = c.get("beam_width"); n[key] = n.get(key, 0) + 1
        dev = m.get("device_mean_ms")
        print(f"{v:5} {n[key]:>5} {key:>5} {r.get('status', '?'):9} {m.get('mean_ms', float('nan')):8.3f} "
              f"{m.get('p99_ms', float('nan')):8.3f} {dev if dev is None else round(dev, 3)!s:>9} "
              f"{'/'.join(f'{m[k]:.3f}' for k in ('host_prep_ms', 'host_enqueue_ms', 'host_wait_ms', 'host_post_ms') if k in m):>24}")
PY
