#!/bin/bash
# On the device machine, from the repository root:  bash gpu_impl/scripts/check_loadq.sh   (< 120 s)
# Issue 13's load and query bars at 100M keywords on all cores: generates the library
# (`scale_stages gen`), builds it with the GPU builder where cupy is there (`flashtrie build --gpu`), once
# with the keyword-id map and once without, times `NarrowLoudsIndex.load(verify=True)` at 1..all cores
# (`benchmarks/load_speed.py`: GB/s and the split into checks) and 16 dense queries with K = 1000
# (`scale_stages queries`: the record holds the split of the stage).  Details go to $OUT/loadq/ and, as one
# file, $OUT/loadq.tgz; the summary goes to stdout.
#   LOADQ_N=100M   library size        LOADQ_WORKERS=1,2,4,8,16   core counts of the load benchmark
#   LOADQ_SKIP_INSTALL=1   use the flashtrie already installed
#   LOADQ_SKIP_QUERIES=1   no query stage     LOADQ_KEEP=1   keep the library and index files in $LOADQ_DIR
set -uo pipefail
OUT=${OUT:-$PWD/out}
L="$OUT/loadq"
mkdir -p "$L"
export PYTHONUNBUFFERED=1
N=${LOADQ_N:-100M}
D=${LOADQ_DIR:-/tmp/loadq}
mkdir -p "$D"
S="$L/summary.log"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
T0=$SECONDS

source gpu_impl/scripts/device_install.sh
device_install "$L" "${LOADQ_SKIP_INSTALL:-}"
say "loadq: N=$N, $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

REC="$L/scale.jsonl"
timeout 60 python3 -m flashtrie.gpu_impl.scale_stages gen --n "$N" --dir "$D" --out "$REC" 2>&1 | tee -a "$S"

GPU=""
python3 -c "from flashtrie.gpu_impl.build_gpu import cupy_module; cupy_module()" 2>/dev/null && GPU="--gpu"
for ids in index input; do
  [[ $ids == input && $((SECONDS - T0)) -gt 70 ]] && { say "build --ids input skipped (time)"; continue; }
  t=$SECONDS
  timeout 60 flashtrie build $GPU --ids $ids "$D/kw.npz" -o "$D/$ids.ftrie" > "$L/build_$ids.log" 2>&1 \
    || say "build --ids $ids FAILED (rc $?)"
  say "build $GPU --ids $ids: $((SECONDS - t)) s; $(tail -1 "$L/build_$ids.log")"
done

FILES=$(ls "$D"/index.ftrie "$D"/input.ftrie 2>/dev/null)
timeout 60 python3 benchmarks/load_speed.py $FILES --workers "${LOADQ_WORKERS:-1,2,4,8,16}" --repeats 2 \
  --json "$L/load.json" 2>&1 | tee -a "$S"

[[ -n "${LOADQ_SKIP_QUERIES:-}" ]] || timeout 60 python3 -m flashtrie.gpu_impl.scale_stages queries --n "$N" --dir "$D" --out "$REC" 2>&1 | tee -a "$S"
python3 - "$REC" <<'PY' 2>&1 | tee -a "$S"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    split = r["metrics"].get("split")
    if split:
        print(f"queries {r['metrics']['seconds']:.2f} s: " + ", ".join(f"{k} {v:.2f}" for k, v in split.items()))
PY
say "loadq total $((SECONDS - T0)) s"
tar czf "$OUT/loadq.tgz" -C "$OUT" loadq  # one file with every detail (few files come back from a call)
[[ -n "${LOADQ_KEEP:-}" ]] || rm -rf "$D"
