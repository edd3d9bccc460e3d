#!/bin/bash
# On the GPU machine, from the repository root (BUDGET seconds at most, default 560):
#   FLASHTRIE_COMMIT=<sha> bash gpu_impl/scripts/check_step_paper.sh
# The paper's setting of issue #12 (lengths 1-8, V = 2.2M) with rows at the root and inside keywords:
# 1. var:100M at 2x70 and 8x64 (1x1000 is check_step4.sh's last step);
# 2. var:10M at 2x70, 8x64 and 1x1000, while the budget lasts.
# Files land directly in $OUT/paper/ (a run stopped at its limit keeps the records it finished):
# stepwise.jsonl, bench.log, brief.txt.
set -uo pipefail
source gpu_impl/scripts/device_install.sh
device_check_begin paper 560

R="$D/stepwise.jsonl"
B=(python3 -m flashtrie.harness.stepwise_bench --out "$R" --repeats "${REPEATS:-30}" --states root,mid)
timeout $(( $(left) - 150 )) "${B[@]}" --shapes 2x70,8x64 --cases var:100M > "$D/bench.log" 2>&1
echo "var:100M rc=$? ($SECONDS s)"
if [ "$(left)" -gt 60 ]; then
  timeout $(( $(left) - 10 )) "${B[@]}" --shapes 2x70,8x64,1x1000 --cases var:10M >> "$D/bench.log" 2>&1
  echo "var:10M rc=$? ($SECONDS s)"
else
  echo "var:10M skipped: $(left) s left"
fi
grep -E "^#|rror" "$D/bench.log" | head -12
python3 -m flashtrie.harness.stepwise_bench render "$R" --brief | tee "$D/brief.txt"
