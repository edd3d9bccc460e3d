#!/bin/bash
# On the GPU machine, from the repository root (BUDGET seconds at most, default 550):
#   FLASHTRIE_COMMIT=<sha> bash gpu_impl/scripts/check_step_grid.sh
# Blocks per mask row in the paper's setting (lengths 1-8, V = 2.2M): the bench's sweep of the fused step over
# SWEEP_BPR (default auto,2,4,8,16,32,64) at var:100M, then var:10M while the budget lasts, 2x70 and 1x1000,
# rows at the root and inside keywords.  Files land in $OUT/grid/: stepwise.jsonl, bench.log, brief.txt.
set -uo pipefail
source gpu_impl/scripts/device_install.sh
device_check_begin grid 550

R="$D/stepwise.jsonl"
for case in var:100M var:10M; do
  if [ "$(left)" -lt 60 ]; then echo "$case skipped: $(left) s left"; continue; fi
  timeout $(( $(left) - 10 )) python3 -m flashtrie.harness.stepwise_bench --out "$R" --repeats "${REPEATS:-20}" \
    --cases "$case" --shapes 2x70 --states root --sweep-cases "$case" --sweep-shapes 2x70,1x1000 \
    --sweep-chunks 4096 --sweep-bpr "${SWEEP_BPR:-auto,2,4,8,16,32,64}" >> "$D/bench.log" 2>&1
  echo "$case rc=$? ($SECONDS s)"
done
grep -E "^#|rror" "$D/bench.log" | head -12
python3 -m flashtrie.harness.stepwise_bench render "$R" --brief | tee "$D/brief.txt"
