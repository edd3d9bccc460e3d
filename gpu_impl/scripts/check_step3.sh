#!/bin/bash
# On the GPU machine, from the repository root, after the project is installed (< 120 s by default):
#   bash gpu_impl/scripts/check_step3.sh
# (it replaces check_stepperf.sh, which ran the same steps with the first session's cases)
# 1. the per-step benchmark of issue #12 (harness/stepwise_bench.py) at 2x70, 8x64, 1x1000 on fixed length 8,
#    20M identifiers, V = 32,768 (the <= 10 us bar), then fixed:1M:2048 with transformers' processor at 8x64
#    over depths 0-3 (the >= 500x bar), and a small chunk / blocks-per-row sweep of the fused step at 2x70;
# 2. with the time left (at least ~45 s), the GPU stepwise tests and the CUDA cases of the transformers
#    processor tests (numpy == GPU exactly, the in-place processor against prefix_allowed_tokens_fn);
# 3. while the budget lasts, the cases not measured yet: fixed:1M:32768, fixed:20M:2048, then var:100M
#    (V 2.2M) at 8x64 and 1x1000 (each case is skipped, not started, once --max-seconds is spent).
# Records, logs and the rendered report are written to a scratch folder and come back as ONE file,
# $OUT/step3.tgz (folder step3/ inside); stdout ends with one short line per record.
#   BUDGET=115 (seconds for the whole script)  REPEATS=30  GENERATE=0 (1: also generate() overhead)
set -uo pipefail
OUT=${OUT:-$PWD/out}
S=$(mktemp -d)
D="$S/step3"
mkdir -p "$D" "$OUT"
export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${FLASHTRIE_COMMIT:-}" ] && c=$(git rev-parse HEAD 2>/dev/null); then export FLASHTRIE_COMMIT=$c; fi
BUDGET=${BUDGET:-115}
REPEATS=${REPEATS:-30}
left() { echo $((BUDGET - SECONDS)); }

echo "commit ${FLASHTRIE_COMMIT:-unknown}"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -1
R="$D/stepwise.jsonl"
B=(python3 -m flashtrie.harness.stepwise_bench --out "$R" --repeats "$REPEATS")
GEN=()
[ "${GENERATE:-0}" = 1 ] && GEN=(--generate)
timeout $(( $(left) - 45 )) "${B[@]}" --shapes 2x70,8x64,1x1000 --cases fixed:20M:32768,fixed:1M:2048 \
  --sweep-cases fixed:20M:32768 --sweep-shapes 2x70 --sweep-chunks 4096 --sweep-bpr auto,2 \
  --hf --hf-cases fixed:1M:2048 --hf-shapes 8x64 --hf-depths 0,1,2,3 "${GEN[@]}" \
  --max-seconds $(( $(left) - 60 )) > "$D/bench.log" 2>&1
echo "bench rc=$? ($SECONDS s)"
# the GPU tests with the time left (the merged tree's device call also runs the whole GPU suite)
timeout $(( $(left) - 8 )) python3 -m pytest -q -x -p no:cacheprovider tests/test_gpu_stepwise.py tests/test_hf.py \
  -k "not cpu" > "$D/pytest.log" 2>&1
echo "tests rc=$? ($SECONDS s): $(tail -1 "$D/pytest.log")"
if [ "$(left)" -gt 30 ]; then
  timeout $(( $(left) - 5 )) "${B[@]}" --shapes 2x70,8x64,1x1000 --cases fixed:1M:32768,fixed:20M:2048 \
    --max-seconds $(( $(left) - 25 )) >> "$D/bench.log" 2>&1
  echo "unmeasured fixed cases rc=$? ($SECONDS s)"
fi
if [ "$(left)" -gt 75 ]; then
  timeout $(( $(left) - 5 )) "${B[@]}" --shapes 8x64,1x1000 --cases var:100M >> "$D/bench.log" 2>&1
  echo "var:100M rc=$? ($SECONDS s)"
else
  echo "var:100M skipped: $(left) s left"
fi
grep -E "^#|rror" "$D/bench.log" | head -12
python3 -m flashtrie.harness.stepwise_bench render "$R" --out-dir "$D/report" > "$D/table.md" 2>&1
python3 -m flashtrie.harness.stepwise_bench render "$R" --brief | tee "$D/brief.txt"
tar -czf "$OUT/step3.tgz" -C "$S" step3 && echo "details: \$OUT/step3.tgz"
rm -rf "$S"
