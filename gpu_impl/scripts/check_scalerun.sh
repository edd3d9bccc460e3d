#!/bin/bash
# On the device machine, from the repository root: a small run of gpu_impl/device_scale.sh (< 120 s) to check
# the one-command pipeline before the 800M run:  bash gpu_impl/scripts/check_scalerun.sh
# 1M (GPU, numpy and marisa-trie latency, the marisa size ratio) then 30M (the full pipeline, batch 1 and 8),
# under TOTAL=115 s. Records, log and the rendered report (report/report.md, figures) go to ONE tarball,
# $OUT/scalerun.tgz; prints the stage lines, then the report's bars, curve, latency at 30M, upload and marisa
# sections. INSTALL=0 when the caller has installed the wheels and the project; FLASHTRIE_COMMIT names the
# commit of a copied tree.
set -uo pipefail
OUT=${OUT:-$PWD/out}
export OUT="$OUT/scalerun"
export N=${N:-30M} SIZES=${SIZES-1M} MARISA_SIZES=${MARISA_SIZES-1M} MARISA_SIZE_N=${MARISA_SIZE_N-1M}
export TOTAL=${TOTAL:-115} RESERVE=${RESERVE:-60} DIR=${DIR:-/tmp/ftscale-check}
bash gpu_impl/device_scale.sh > /dev/null 2>&1
rc=$?
tar xzf "$OUT/scale.tgz" -C "$OUT" ./report 2>/dev/null  # the report, for the summary below
echo "device_scale.sh exit status $rc (log: $OUT/scale.log)"
grep -E "^\[scale|^== |total " "$OUT/scale.log" | tail -60
R="$OUT/report/report.md"
if [[ -f $R ]]; then
  awk '/^## Stages at/{exit} /^## Bars/{on=1} on' "$R" | grep -v "^!\[\|^Bytes of the files\|^\`GpuSearcher"
else
  echo "no report rendered"
fi
mv "$OUT/scale.tgz" "$OUT.tgz" && rm -rf "$OUT" && echo "details (records, log, report): $OUT.tgz"
exit $rc
