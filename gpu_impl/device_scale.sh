#!/bin/bash
# On the GPU machine, from the repository root: the paper-scale pipeline in one command (issue 13).
#   FLASHTRIE_COMMIT=<commit> N=800M bash gpu_impl/device_scale.sh   (N: 10M, 100M, 300M, 800M ...; default 800M)
# FLASHTRIE_COMMIT must be given when this runs on a copied tree (a staged copy, or a tree without its own
# .git): git would otherwise name the commit of whatever checkout holds the copy, and the records would
# carry that commit (the 2026-12-01 run's records name main's 59cae3b for a staged copy of a11aecc).
# 1. installs the carried wheels (.whl/) and the project (as gpu_impl/scripts/device_check.sh does);
# 2. generates N keywords, 16 dense queries (K = 1000), builds the index (the GPU builder where cupy and a
#    GPU are present, else the CPU builder; BUILDER=gpu|cpu forces one), saves, loads with verification,
#    uploads (GpuSearcher), checks GPU == numpy on a few queries (gpu_impl/scale_stages.py, one process
#    per stage, each under its own timeout, each appending records to $OUT/scale.jsonl);
# 3. `flashtrie bench beam` on the GPU for beams 1,10,100,500,1000 (K = beam) at batch 1 and 8
#    ($OUT/beam.jsonl);  4. prints the stage table.
# STAGES (default "gen queries build check bench") picks stages; DIR (default /tmp/ftscale) holds the files;
# GEN_TIMEOUT, QUERIES_TIMEOUT, BUILD_TIMEOUT, CHECK_TIMEOUT, BENCH_TIMEOUT (seconds) bound each stage;
# INSTALL=0 skips step 1 (the caller installed everything).
# Render the records here: python -m flashtrie.gpu_impl.scale_stages render $OUT/scale.jsonl $OUT/beam.jsonl --out DIR
set -uo pipefail
OUT=${OUT:-$PWD/out}
N=${N:-800M}
DIR=${DIR:-/tmp/ftscale}
STAGES=" ${STAGES:-gen queries build check bench} "
export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
mkdir -p "$OUT" "$DIR"
LOG="$OUT/scale.log"
: > "$LOG"
say() { echo "$*" | tee -a "$LOG"; }
if [[ -n ${FLASHTRIE_COMMIT:-} ]]; then
  export FLASHTRIE_COMMIT  # harness.env records it as the commit (source FLASHTRIE_COMMIT)
  say "FLASHTRIE_COMMIT=$FLASHTRIE_COMMIT"
else
  say "FLASHTRIE_COMMIT not set: the records name the commit git finds here (wrong on a copied tree)"
fi

if [[ ${INSTALL:-1} == 0 ]]; then :  # INSTALL=0: the caller has installed the wheels and the project
elif compgen -G ".whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || say "wheel install FAILED"
fi
[[ ${INSTALL:-1} == 0 ]] || python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . \
  > "$OUT/install.log" 2>&1 || { say "project install FAILED"; tail -20 "$OUT/install.log"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$LOG"
say "N=$N cores=$(nproc) mem=$(free -g | awk '/Mem:/{print $2}')G disk=$(df -h "$DIR" | awk 'NR==2{print $4}') free"

R="$OUT/scale.jsonl"
export SCALE_RUN_ID=$(python3 -c "import uuid; print(uuid.uuid4().hex[:12])")
py() { python3 -m flashtrie.gpu_impl.scale_stages "$@" --n "$N" --dir "$DIR" --out "$R"; }
failed=0
stage() {  # stage NAME TIMEOUT [args]: one process under timeout; a stopped stage leaves an error record
  local name=$1 to=$2; shift 2
  [[ $STAGES == *" $name "* ]] || return 0
  timeout "$to" python3 -m flashtrie.gpu_impl.scale_stages "$name" --n "$N" --dir "$DIR" --out "$R" "$@" 2>&1 \
    | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  if [[ $rc != 0 ]]; then
    failed=1
    local why="exit status $rc"; [[ $rc == 124 ]] && why="timed out after $to s"
    say "stage $name: $why"
    py fail --failed "$name" --message "$why" > /dev/null
  fi
}
stage gen "${GEN_TIMEOUT:-180}"
stage queries "${QUERIES_TIMEOUT:-120}"
stage build "${BUILD_TIMEOUT:-240}" --builder "${BUILDER:-auto}"
stage check "${CHECK_TIMEOUT:-150}"
if [[ $STAGES == *" bench "* ]]; then
  for batch in 1 8; do
    timeout "${BENCH_TIMEOUT:-120}" flashtrie bench beam --index "$DIR/kw.ftrie" --queries "$DIR/q.npz" \
      --backends gpu --beams 1,10,100,500,1000 --batch-size "$batch" --repeats 10 --max-seconds 10 \
      -o "$OUT/beam.jsonl" --quiet 2>&1 | tail -8 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    [[ $rc == 0 ]] || { failed=1; say "bench beam batch $batch: exit status $rc"; py fail --failed "bench batch $batch" --message "exit status $rc" > /dev/null; }
  done
fi
py table | tee -a "$LOG"
exit $failed
