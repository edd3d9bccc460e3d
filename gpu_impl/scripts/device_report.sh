#!/bin/bash
# On the GPU machine, from the repository root: the H200 report's runs, in one call.
#   FLASHTRIE_COMMIT=<commit> bash gpu_impl/scripts/device_report.sh   (N=10M keywords, Q=16 dense queries, K = beam width)
# (the device gets a copy of the working tree without .git: FLASHTRIE_COMMIT names the commit in the records)
# 1. installs the carried wheels (.whl/) and the project;  2. GPU tests + compute-sanitizer (device_check.sh);
# 3. generates the library and the workload;  4. `flashtrie bench beam` (gpu, numpy, marisa: parity checked
# before timing, speed-ups against marisa measured in the same run), `flashtrie bench batch` (gpu, numpy) and
# `flashtrie bench size` (gpu, numpy, marisa at beam 100; each size generates its own library and workload).
# SWEEPS (default "beam batch size"), BACKENDS (of the beam sweep; default gpu,numpy,marisa) and BEAMS choose
# what runs, e.g. N=100M SWEEPS=beam BACKENDS=gpu,numpy BEAMS=100,1000 CHECK_STAGES=none for a large library.
# Records land in $OUT/*.jsonl; render them here with:
#   flashtrie report <records> -o reports/h200
set -uo pipefail
OUT=${OUT:-$PWD/out}
N=${N:-10M}
Q=${Q:-16}
export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
mkdir -p "$OUT" /tmp/ftdata
export FLASHTRIE_COMMIT=${FLASHTRIE_COMMIT:-}
STAGES=${CHECK_STAGES:-"tests sanitizer"} TESTS_TIMEOUT=150 SAN_TIMEOUT=60 OUT="$OUT/check" bash gpu_impl/scripts/device_check.sh \
  > "$OUT/check.log" 2>&1
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
tail -6 "$OUT/check.log"
cmd="flashtrie bench"
kw=/tmp/ftdata/kw.npz; q=/tmp/ftdata/q.npz; idx=/tmp/ftdata/kw.ftrie
( time flashtrie gen-keywords -n "$N" -o $kw --quiet ) 2>&1 | tail -4
( time flashtrie gen-queries $kw -n "$Q" -K 1000 --preset dense -o $q --quiet ) 2>&1 | tail -4
( time flashtrie build $kw -o $idx --quiet ) 2>&1 | tail -4
SWEEPS=" ${SWEEPS:-beam batch size} "
[[ $SWEEPS == *" beam "* ]] && timeout ${BEAM_TIMEOUT:-270} $cmd beam --keywords $kw --index $idx --queries $q \
  --backends ${BACKENDS:-gpu,numpy,marisa} --beams ${BEAMS:-1,10,100,200,500,1000} --repeats 10 --max-seconds 20 \
  -o "$OUT/beam.jsonl" --quiet 2>&1 | tail -8
[[ $SWEEPS == *" batch "* ]] && timeout ${BATCH_TIMEOUT:-110} $cmd batch --keywords $kw --index $idx --queries $q --backends gpu,numpy --beam 1000 \
  --batch-sizes 1,2,4,8,16 --repeats 10 --max-seconds 15 -o "$OUT/batch.jsonl" --quiet 2>&1 | tail -8
[[ $SWEEPS == *" size "* ]] && timeout ${SIZE_TIMEOUT:-300} $cmd size --backends gpu,numpy,marisa --sizes ${SIZES:-10000,100000,1000000,10000000} \
  --beam 100 --num-queries 16 --repeats 10 --max-seconds 10 -o "$OUT/size.jsonl" --quiet 2>&1 | tail -8
ls -la "$OUT"
