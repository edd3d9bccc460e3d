#!/bin/bash
# The CPU report: every sweep on this machine (marisa and numpy backends; marisa-lookup, the lookups-only
# baseline, in the dense beam sweep), then the Markdown report.
#   bash reports/make_cpu_report.sh [N_KEYWORDS] [OUT_DIR]        (defaults: 1M, reports/cpu)
# BUILD_N (default 10M) is the library of the build-time comparison; SIZES the library-size sweep.
# Records (JSON Lines) go to OUT_DIR/records/, the report to OUT_DIR/report.md; data to a temporary folder.
set -euo pipefail
N=${1:-1M}
OUT=${2:-reports/cpu}
REC="$OUT/records"
DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
mkdir -p "$REC"
rm -f "$REC"/*.jsonl
flashtrie gen-keywords -n "$N" -o "$DATA/kw.npz"
flashtrie gen-queries "$DATA/kw.npz" -n 16 -K 1000 --preset dense -o "$DATA/dense.npz"
flashtrie gen-queries "$DATA/kw.npz" -n 16 -K 1000 --preset sparse -o "$DATA/sparse.npz"
flashtrie build "$DATA/kw.npz" -o "$DATA/kw.ftrie"
common=(--keywords "$DATA/kw.npz" --index "$DATA/kw.ftrie" --backends numpy,marisa)
flashtrie bench beam "${common[@]}" --backends numpy,marisa,marisa-lookup --queries "$DATA/dense.npz" \
  --beams 1,10,100,200,500,1000 --max-seconds 30 -o "$REC/beam_dense.jsonl"
flashtrie bench beam "${common[@]}" --queries "$DATA/sparse.npz" --beams 1,10,100,1000 \
  --max-seconds 30 -o "$REC/beam_sparse.jsonl"
flashtrie bench batch "${common[@]}" --queries "$DATA/dense.npz" --beam 100 --batch-sizes 1,2,4,8,16 \
  --max-seconds 30 -o "$REC/batch.jsonl"
flashtrie bench quality "${common[@]}" --queries "$DATA/dense.npz" --beams 10,100,200,500,1000 --ks 10,100 \
  --backends numpy -o "$REC/quality.jsonl"
flashtrie bench size --backends numpy,marisa --sizes "${SIZES:-10000,100000,1000000,10000000}" --beam 100 --num-queries 16 \
  -o "$REC/size.jsonl"
flashtrie gen-keywords -n "${BUILD_N:-10M}" -o "$DATA/kw10m.npz"
flashtrie bench build --keywords "$DATA/kw10m.npz" --build-repeats 3 -o "$REC/build.jsonl"
flashtrie bench build --keywords "$DATA/kw.npz" --build-repeats 3 -o "$REC/build.jsonl"
flashtrie report "$REC"/*.jsonl -o "$OUT" --title "flashtrie on a 2-core CPU machine (no GPU)"
