#!/bin/bash
# On the GPU machine, from the repository root, after the project is installed (< 150 s):
#   bash gpu_impl/scripts/check_stepperf.sh
# 1. the GPU stepwise tests and the CUDA cases of the transformers processor tests (numpy == GPU exactly);
# 2. the per-step benchmark of issue #12 (harness/stepwise_bench.py): 2x70, 8x64, 1x1000 on fixed length 8
#    (V 32,768 and 2,048 at 20M and 1M) and variable length (V 2.2M at 10M), a chunk / blocks-per-row sweep at
#    20M V=32,768 2x70, transformers' processor at 8x64 and 2x70 over depths 0-3, generate() overhead;
# 3. variable length at 100M keywords (V 2.2M) if the time left allows it.
# Records and logs go to $OUT/stepperf/ (and all of it in $OUT/stepperf.tgz); one short line per record last.
#   BUDGET=140 (seconds for the whole script)  REPEATS=30
set -uo pipefail
OUT=${OUT:-$PWD/out}
D="$OUT/stepperf"
mkdir -p "$D"
export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
BUDGET=${BUDGET:-140}
REPEATS=${REPEATS:-30}
left() { echo $((BUDGET - SECONDS)); }

git rev-parse --short HEAD 2>/dev/null | sed 's/^/commit /'
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1
timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_stepwise.py "tests/test_hf.py" -k "not cpu" \
  > "$D/pytest.log" 2>&1
rc_tests=$?
echo "tests rc=$rc_tests: $(tail -1 "$D/pytest.log")"

R="$D/stepwise.jsonl"
B=(python3 -m flashtrie.harness.stepwise_bench --out "$R" --repeats "$REPEATS" --shapes 2x70,8x64,1x1000)
timeout $(( $(left) - 8 )) "${B[@]}" --cases fixed:20M:32768,fixed:1M:2048,fixed:1M:32768,var:10M,fixed:20M:2048 \
  --sweep-cases fixed:20M:32768 --hf --generate --hf-cases fixed:1M:2048 --hf-shapes 2x70,8x64 \
  --max-seconds $(( $(left) - 30 )) > "$D/bench.log" 2>&1
rc_bench=$?
echo "bench rc=$rc_bench ($SECONDS s)"
if [ "$(left)" -gt 85 ]; then
  timeout $(( $(left) - 8 )) "${B[@]}" --cases var:100M --shapes 2x70,8x64 >> "$D/bench.log" 2>&1
  echo "100M rc=$? ($SECONDS s)"
else
  echo "var:100M skipped: $(left) s left"
fi
grep -E "^#|rror" "$D/bench.log" | head -12
python3 -m flashtrie.harness.stepwise_bench render "$R" --out-dir "$D/report" > "$D/table.md" 2>&1
tar -czf "$OUT/stepperf.tgz" -C "$OUT" stepperf 2>/dev/null
python3 -m flashtrie.harness.stepwise_bench render "$R" --brief
