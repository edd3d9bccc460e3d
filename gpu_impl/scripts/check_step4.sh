#!/bin/bash
# On the GPU machine, from the repository root (about 8 minutes; BUDGET seconds at most):
#   FLASHTRIE_COMMIT=<sha> bash gpu_impl/scripts/check_step4.sh
# 1. the per-step benchmark of issue #12 (harness/stepwise_bench.py): fixed length 8 at 20M identifiers,
#    V = 32,768 (the <= 10 us bar) and 1M, V = 2,048 at 2x70, 8x64, 1x1000, with transformers' processor at 8x64
#    over depths 0-3 and generate() (the >= 500x and <= 10% bars; at most 150 s);
# 2. the GPU test suite (pytest -m gpu) and the CUDA cases of the transformers processor tests;
# 3. the paper's setting at 1x1000: var:100M (lengths 1-8, V = 2.2M), while the budget lasts.
# Files land directly in $OUT/step4/ (so a run stopped at its limit keeps what it finished): stepwise.jsonl,
# bench.log, pytest.log, pytest_hf.log, table.md, brief.txt.  stdout ends with one line per record.
#   BUDGET=560  REPEATS=30  TEST_S=220
set -uo pipefail
source gpu_impl/scripts/device_install.sh
device_check_begin step4 560
REPEATS=${REPEATS:-30}

R="$D/stepwise.jsonl"
B=(python3 -m flashtrie.harness.stepwise_bench --out "$R" --repeats "$REPEATS")
timeout 150 "${B[@]}" --shapes 2x70,8x64,1x1000 --cases fixed:20M:32768,fixed:1M:2048 \
  --hf --hf-cases fixed:1M:2048 --hf-shapes 8x64 --hf-depths 0,1,2,3 --generate \
  --max-seconds 130 > "$D/bench.log" 2>&1
echo "bench rc=$? ($SECONDS s)"
timeout "$(( $(left) - 200 < ${TEST_S:-220} ? $(left) - 200 : ${TEST_S:-220} ))" python3 -m pytest -q -p no:cacheprovider -m gpu tests/ > "$D/pytest.log" 2>&1
echo "gpu tests rc=$? ($SECONDS s): $(tail -1 "$D/pytest.log")"
timeout 90 python3 -m pytest -q -p no:cacheprovider -k cuda tests/test_hf.py > "$D/pytest_hf.log" 2>&1
echo "hf cuda tests rc=$? ($SECONDS s): $(tail -1 "$D/pytest_hf.log")"

if [ "$(left)" -gt 120 ]; then
  timeout $(( $(left) - 12 )) "${B[@]}" --shapes 1x1000 --cases var:100M >> "$D/bench.log" 2>&1
  echo "var:100M 1x1000 rc=$? ($SECONDS s)"
else
  echo "var:100M skipped: $(left) s left"
fi
grep -E "^#|rror" "$D/bench.log" | head -12
python3 -m flashtrie.harness.stepwise_bench render "$R" --out-dir /tmp/step4-report > "$D/table.md" 2>&1
python3 -m flashtrie.harness.stepwise_bench render "$R" --brief | tee "$D/brief.txt"
