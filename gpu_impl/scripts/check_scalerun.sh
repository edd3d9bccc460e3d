#!/bin/bash
# On the device machine, from the repository root: a small run of gpu_impl/device_scale.sh (< 120 s) to check
# the one-command pipeline before the 800M run:  bash gpu_impl/scripts/check_scalerun.sh
# 1M (GPU, numpy and marisa-trie latency, the marisa size ratio) then 30M (the full pipeline, batch 1 and 8),
# under TOTAL=115 s. Records, log and the rendered report go to $OUT/scalerun/ (report/report.md, figures);
# prints the stage table, then the report's bars, curve and upload sections. INSTALL=0 when the caller has
# installed the wheels and the project; FLASHTRIE_COMMIT names the commit of a copied tree.
set -uo pipefail
OUT=${OUT:-$PWD/out}
export OUT="$OUT/scalerun"
export N=${N:-30M} SIZES=${SIZES-1M} MARISA_SIZES=${MARISA_SIZES-1M} MARISA_SIZE_N=${MARISA_SIZE_N-1M}
export TOTAL=${TOTAL:-115} RESERVE=${RESERVE:-60} DIR=${DIR:-/tmp/ftscale-check}
bash gpu_impl/device_scale.sh > /dev/null 2>&1
rc=$?
echo "device_scale.sh exit status $rc (log: $OUT/scale.log)"
grep -E "^\[scale|^== |total " "$OUT/scale.log" | tail -60
R="$OUT/report/report.md"
if [[ -f $R ]]; then
  awk '/^## Bars/,/^## Search at/' "$R" | grep -v "^## Search at"
  awk '/^## Upload/,/^## Index size/' "$R" | grep -v "^## Index size"
  awk '/^## Index size/,/^## Stages at/' "$R" | grep -v "^## Stages at" | head -8
else
  echo "no report rendered"
fi
exit $rc
