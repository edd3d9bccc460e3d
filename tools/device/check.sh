#!/bin/bash
# The GPU machine's checks, by name, from the repository root:
#   bash tools/device/check.sh NAME [NAME...]          (bash tools/device/check.sh list: the table)
# Each check writes its logs and records under $OUT/NAME/ (OUT: default ./out) and prints ONE summary line
# at the end ("[NAME] ok|FAILED ..."); the script's exit status is non-zero when any check failed.
# `install` runs first whenever it is named; the other checks find the project installed (or install it).
# FLASHTRIE_COMMIT names the commit in the records (a copied tree has no .git); git's HEAD otherwise.
# Sizes and limits are environment variables, listed with each check below (defaults in brackets).
set -uo pipefail
OUT=${OUT:-$PWD/out}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
PROBES=$HERE/tools/probes
export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
[ -d /tmp/site ] && [[ ":${PYTHONPATH:-}:" != *":/tmp/site:"* ]] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${FLASHTRIE_COMMIT:-}" ] && c=$(git -C "$HERE" rev-parse HEAD 2>/dev/null); then export FLASHTRIE_COMMIT=$c; fi

# name | what it does (and its variables)
CHECKS=(
  "install|the carried wheels (.whl/) to /tmp/site (once per machine), then the project (editable, no deps)"
  "compile|search.cu compiled on first use, then loaded from the kernel cache"
  "smoke|GPU == numpy on a 200k library, 8 queries, eight configurations (tools/probes/device_smoke.py)"
  "gpu-tests|pytest -m gpu over tests/, then the CUDA cases of the processor tests (tests/test_hf*.py) [TESTS_TIMEOUT=300 PYTEST_ARGS HF_ONLY]"
  "sanitizer|compute-sanitizer memcheck and racecheck on a small smoke run [SAN_TIMEOUT=150]"
  "parity|GPU == numpy == marisa on the standard workload (N keywords, 16 dense queries, K = 1000) at beams 100 and 1000 [N=200k]"
  "beam|flashtrie bench beam, batch 1 [N=1M BACKENDS=gpu,numpy BEAMS=1,10,100,1000 REPEATS=10]"
  "batch|flashtrie bench batch at beam 1000 [N=1M BATCHES=1,2,4,8,16]"
  "size|flashtrie bench size at beam 100, each size its own library [SIZES=10000,100000,1000000,10000000]"
  "upload|an N library built, loaded (verified, trusted) and uploaded: seconds, GB/s, bytes per keyword [N=10M]"
  "stepwise|the stepwise bench at 2x70, 8x64, 1x1000 with the processor and generate() [STEP_CASES STEP_SHAPES STEP_STATES STEP_HF=1]"
  "grid|the fused step's blocks per row swept [GRID_CASES=var:100M,var:10M SWEEP_BPR=auto,2,4,8,16,32,64]"
  "probe|where a fused step's time goes: floors, kernels, Nsight Compute [CASE=fixed:20M:32768 SHAPE=2x70 VARIANTS NCU=1]"
  "scale|the scale pipeline (tools/device/scale.sh) [its variables: N=800M SIZES TOTAL ...]"
  "scale-quick|the scale pipeline at 1M, then 30M, in under two minutes"
  "gpubuild|the GPU builder: a 100M build's stages and memory, CPU == GPU, copy bandwidths [BUILD_N COMPARE_N TRANSFER_GB POOL_N]"
  "loadq|load(verify=True) at 1..16 cores and the query stage's split at 100M [LOADQ_N=100M LOADQ_WORKERS]"
  "verify|verified loads at 100M, both id orders, CPU and GPU passes, other piece sizes [VERIFY_N=100M]"
  "numpylazy|the lazy numpy reference at 100M: set-up, memory, GPU == numpy [NUMPYLAZY_N=100M NUMPYLAZY_EAGER_BELOW=0]"
  "queries|the query generator's library pass on CPU and GPU, facts equal bit for bit [Q_N=100M Q_THREADS=1,4,16]"
  "launch|where the host's microseconds of a fused 2x70 step go (tools/probes/launch_probe.py)"
  "real|the real libraries (flashtrie real bench) from a carried cache, gpu, numpy and marisa [REAL_CACHE=.cache/real REAL_BACKENDS=gpu,numpy,marisa REAL_SECONDS=4]"
  "quality|quality against beam width: both models trained and swept on the carried task files (flashtrie quality run) [QUALITY_TASKS=.cache/quality/full QUALITY_CONFIG=full QUALITY_TIMEOUT=570 QUALITY_SMOKE]"
  "compare|this tree against another (BASE: a copy of it): both trees' beam latency (gpu, numpy; parity checked) and fused 2x70 step, in alternating rounds on the same inputs [BASE N=10M BEAMS=100,1000 ROUNDS=2 STEP_CASE=fixed:20M:32768]"
)

FAILED=0
D=""
say() { echo "$*" | tee -a "$D/summary.log"; }
summary() {  # summary NAME RC TEXT: the check's one line
  local name=$1 rc=$2; shift 2
  local state=ok; [[ $rc == 0 ]] || { state="FAILED rc=$rc"; FAILED=1; }
  say "[$name] $state ($((SECONDS - T_CHECK)) s) $*"
}
step() {  # step NAME TIMEOUT CMD...: CMD (a program or a function of this script) with its output to $D/NAME.log
  local name=$1 limit=$2; shift 2
  if declare -F "$1" > /dev/null; then  # timeout runs programs: a function runs in a bash that has it
    timeout "$limit" bash -c "$(declare -f "$1"); \"\$@\"" _ "$@" > "$D/$name.log" 2>&1
  else
    timeout "$limit" "$@" > "$D/$name.log" 2>&1
  fi
}
last_line() { tail -1 "$1" 2>/dev/null | cut -c1-160; }
worst() { local r=0 x; for x in "$@"; do [[ $x == 0 ]] || r=$x; done; echo "$r"; }
installed() { python3 -c "import flashtrie.gpu_impl" 2>/dev/null || check_install > /dev/null; }
data() {  # data DIR N: N keywords, 16 dense queries (K = 1000) and the index, in DIR
  mkdir -p "$1"
  flashtrie gen-keywords -n "$2" -o "$1/kw.npz" --quiet \
    && flashtrie gen-queries "$1/kw.npz" -n 16 -K 1000 --preset dense -o "$1/q.npz" --quiet \
    && flashtrie build "$1/kw.npz" -o "$1/kw.ftrie" --quiet
}

check_install() {
  local rc=0
  if compgen -G "$HERE/.whl/*.whl" > /dev/null && [ ! -f /tmp/site/.flashtrie-wheels ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      "$HERE"/.whl/*.whl > "$D/wheels.log" 2>&1 && touch /tmp/site/.flashtrie-wheels || rc=1
  fi
  [[ ":${PYTHONPATH:-}:" == *":/tmp/site:"* ]] || export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  python3 -m pip install -q --no-index --no-deps --no-build-isolation -e "$HERE" > "$D/install.log" 2>&1 || rc=2
  summary install $rc "commit ${FLASHTRIE_COMMIT:-unknown}; $(nvidia-smi --query-gpu=name,driver_version \
    --format=csv,noheader 2>&1 | head -1)"
}

check_compile() {
  python3 - > "$D/compile.log" 2>&1 <<'PY'
from cuda.core import Device
from flashtrie.gpu_impl.compile import compile_kernel, spill_report
d = Device(0); d.set_current()
cc = d.compute_capability; cc = cc() if callable(cc) else cc
arch = f"sm_{cc.major}{cc.minor}"
k = compile_kernel("search.cu", arch, {"FT_THREADS": "512"}, use_cache=False, verbose=True)
print(f"compile {arch}: first use {k.seconds:.2f} s, resources {spill_report(k.log)}")
k = compile_kernel("search.cu", arch, {"FT_THREADS": "512"})
print(f"cached load {k.seconds * 1e3:.1f} ms (from_cache={k.from_cache})")
PY
  local rc=$?
  summary compile $rc "$(grep -E '^(compile|cached)' "$D/compile.log" | tr '\n' ';' | cut -c1-200)"
}

check_smoke() {
  step smoke 150 python3 "$PROBES/device_smoke.py" --keywords 200000 --queries 8
  summary smoke $? "$(last_line "$D/smoke.log")"
}

check_gpu-tests() {
  local to="" rc=0 rc_hf
  python3 -c "import pytest_timeout" 2>/dev/null && to="--timeout 120 --timeout-method thread"
  if [ -z "${HF_ONLY:-}" ]; then  # HF_ONLY=1: the processor's CUDA cases alone
    # shellcheck disable=SC2086
    step pytest "${TESTS_TIMEOUT:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu $to "$HERE/tests" ${PYTEST_ARGS:-}
    rc=$?
  fi
  step pytest_hf "${HF_TIMEOUT:-240}" python3 -m pytest -q -ra -p no:cacheprovider -k cuda "$HERE/tests/test_hf.py" \
    "$HERE/tests/test_hf_processors.py"
  rc_hf=$?
  grep -a -E "^(FAILED|ERROR)" "$D/pytest.log" "$D/pytest_hf.log" | head -10
  summary gpu-tests "$(worst $rc $rc_hf)" "gpu: $(last_line "$D/pytest.log"); hf cuda: $(last_line "$D/pytest_hf.log")"
}

check_sanitizer() {
  local rc_mem rc_race
  step memcheck "${SAN_TIMEOUT:-150}" compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 "$PROBES/device_smoke.py" --keywords 3000 --queries 2 --steps 4
  rc_mem=$?
  # racecheck over our kernels: cupy's own scan kernels (the verified load's GPU pass) report hazards of their own
  step racecheck "${SAN_TIMEOUT:-150}" compute-sanitizer --tool racecheck --kernel-name-exclude kns=cupy_ \
    --error-exitcode 9 \
    python3 "$PROBES/device_smoke.py" --keywords 3000 --queries 2 --steps 3
  rc_race=$?
  summary sanitizer "$(worst $rc_mem $rc_race)" \
    "$(grep -a -h -E "ERROR SUMMARY|RACECHECK SUMMARY" "$D/memcheck.log" "$D/racecheck.log" | tr '\n' ';')"
}

check_parity() {
  local w=/tmp/ftcheck/parity rc=0 beam
  step data 300 data "$w" "${N:-200k}" || { summary parity 1 "inputs: $(last_line "$D/data.log")"; return; }
  for beam in 100 1000; do  # exit status 1 on any difference in ids, order or float32 bits
    flashtrie parity --keywords "$w/kw.npz" --index "$w/kw.ftrie" --queries "$w/q.npz" --beam $beam \
      --backends numpy,gpu,marisa --records "$D/parity.jsonl" --quiet 2>&1 | tee -a "$D/parity.log" || rc=1
  done
  summary parity $rc "${N:-200k} keywords, beams 100 and 1000: $([[ $rc == 0 ]] && echo equal || echo DIFFERENT)"
}

check_beam() {
  local w=/tmp/ftcheck/bench
  step data 300 data "$w" "${N:-1M}" || { summary beam 1 "inputs: $(last_line "$D/data.log")"; return; }
  step bench "${BENCH_TIMEOUT:-480}" flashtrie bench beam --keywords "$w/kw.npz" --index "$w/kw.ftrie" \
    --queries "$w/q.npz" --backends "${BACKENDS:-gpu,numpy}" --beams "${BEAMS:-1,10,100,1000}" \
    --repeats "${REPEATS:-10}" --max-seconds "${MAX_SECONDS:-20}" -o "$D/beam.jsonl" --quiet
  local rc=$?
  grep -E "^kind|^---|^latency" "$D/bench.log" | tail -16
  summary beam $rc "records $D/beam.jsonl"
}

check_batch() {
  local w=/tmp/ftcheck/bench
  [ -f "$w/kw.ftrie" ] || step data 300 data "$w" "${N:-1M}" || { summary batch 1 "inputs"; return; }
  step bench "${BATCH_TIMEOUT:-110}" flashtrie bench batch --keywords "$w/kw.npz" --index "$w/kw.ftrie" \
    --queries "$w/q.npz" --backends gpu,numpy --beam 1000 --batch-sizes "${BATCHES:-1,2,4,8,16}" --repeats 10 \
    --max-seconds 15 -o "$D/batch.jsonl" --quiet
  summary batch $? "records $D/batch.jsonl"
}

check_size() {
  step bench "${SIZE_TIMEOUT:-300}" flashtrie bench size --backends gpu,numpy,marisa \
    --sizes "${SIZES:-10000,100000,1000000,10000000}" --beam 100 --num-queries 16 --repeats 10 --max-seconds 10 \
    -o "$D/size.jsonl" --quiet
  summary size $? "records $D/size.jsonl"
}

check_upload() {
  local w=/tmp/ftcheck/upload rc
  step data 120 data "$w" "${N:-10M}" || { summary upload 1 "inputs: $(last_line "$D/data.log")"; return; }
  step upload 90 python3 "$PROBES/upload_stats.py" "$w/kw.ftrie" "$D/upload.json"
  rc=$?
  rm -rf "$w"
  summary upload $rc "$(last_line "$D/upload.log")"
}

step_bench() { python3 -m flashtrie.harness.stepwise --out "$D/stepwise.jsonl" --repeats "${REPEATS:-30}" "$@"; }

check_stepwise() {
  local hf=() rc
  [ "${STEP_HF:-1}" = 1 ] && hf=(--hf --hf-cases fixed:1M:2048 --hf-shapes 8x64 --hf-depths 0,1,2,3 --generate)
  step bench "${STEP_TIMEOUT:-300}" step_bench --shapes "${STEP_SHAPES:-2x70,8x64,1x1000}" \
    --cases "${STEP_CASES:-fixed:20M:32768,fixed:1M:2048}" --states "${STEP_STATES:-root,mid}" "${hf[@]}" \
    --max-seconds $(( ${STEP_TIMEOUT:-300} - 20 ))
  rc=$?
  python3 -m flashtrie.harness.stepwise render "$D/stepwise.jsonl" --brief > "$D/brief.txt" 2>&1
  tail -12 "$D/brief.txt"
  summary stepwise $rc "records $D/stepwise.jsonl"
}

check_grid() {
  local case rc=0 GRID_CASES=${GRID_CASES:-var:100M,var:10M}
  for case in ${GRID_CASES//,/ }; do
    timeout "${GRID_TIMEOUT:-270}" python3 -m flashtrie.harness.stepwise --out "$D/stepwise.jsonl" \
      --repeats "${REPEATS:-20}" --cases "$case" --shapes 2x70 --states root --sweep-cases "$case" \
      --sweep-shapes 2x70,1x1000 --sweep-chunks 4096 --sweep-bpr "${SWEEP_BPR:-auto,2,4,8,16,32,64}" \
      >> "$D/bench.log" 2>&1 || rc=$?
  done
  python3 -m flashtrie.harness.stepwise render "$D/stepwise.jsonl" --brief > "$D/brief.txt" 2>&1
  tail -12 "$D/brief.txt"
  summary grid $rc "records $D/stepwise.jsonl"
}

check_probe() {
  local case=${CASE:-fixed:20M:32768} shape=${SHAPE:-2x70} ncu rc
  local idx=/tmp/probe-${case//:/-}.fti
  step probe 120 python3 "$PROBES/step_probe.py" --case "$case" --shape "$shape" --index "$idx" \
    --variants "${VARIANTS:-}" --out "$D"
  rc=$?
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ "${NCU:-1}" = 1 ] && [ -n "$ncu" ]; then
    step ncu 120 "$ncu" --clock-control none --set full -k regex:ft_step_advance_mask --launch-count 4 -f \
      -o "$D/fused" python3 "$PROBES/step_probe.py" --ncu --case "$case" --shape "$shape" --index "$idx"
    "$ncu" --import "$D/fused.ncu-rep" --page details > "$D/ncu_details.txt" 2>&1
    "$ncu" --import "$D/fused.ncu-rep" --page source --csv --print-source sass > "$D/ncu_source.csv" 2>&1
  fi
  tail -30 "$D/probe.log"
  summary probe $rc "table in $D/probe.log"
}

check_scale() {
  OUT="$D" bash "$HERE/tools/device/scale.sh" > "$D/console.log" 2>&1
  local rc=$?
  grep -E "^\[scale|^== |total " "$D/scale.log" | tail -20
  summary scale $rc "records $D/scale.jsonl; details $D/scale.tgz"
}

check_scale-quick() {
  N=${N:-30M} SIZES=${SIZES-1M} MARISA_SIZES=${MARISA_SIZES-1M} MARISA_SIZE_N=${MARISA_SIZE_N-1M} \
    TOTAL=${TOTAL:-115} RESERVE=${RESERVE:-60} DIR=${DIR:-/tmp/ftscale-check} INSTALL=0 \
    OUT="$D" bash "$HERE/tools/device/scale.sh" > "$D/console.log" 2>&1
  local rc=$?
  grep -E "^\[scale|^== |total " "$D/scale.log" | tail -20
  summary scale-quick $rc "records $D/scale.jsonl; details $D/scale.tgz"
}

check_gpubuild() {
  local b="$PROBES/gpubuild_bench.py" j="$D/results.jsonl" rcs=()
  : > "$j"
  # the build first: its warm-up compiles cupy's kernels (cached on disk) for the steps after it too
  step build 40 python3 "$b" build --n "${BUILD_N:-100M}" --json "$j"; rcs+=($?)
  step tests 40 python3 -m pytest -q -x -m gpu "$HERE/tests/test_gpu_build.py" -p no:cacheprovider; rcs+=($?)
  step compare 12 python3 "$b" compare --n "${COMPARE_N:-5M}" --json "$j"; rcs+=($?)
  step transfer 12 python3 "$b" transfer --gb "${TRANSFER_GB:-2}" --json "$j"; rcs+=($?)
  step pool 15 python3 "$b" build --n "${POOL_N:-50M}" --pool-peaks --json "$j"; rcs+=($?)
  python3 "$HERE/tools/device/summarize.py" gpubuild "$j" 2>&1 | tee "$D/table.txt"
  summary gpubuild "$(worst "${rcs[@]}")" "build/tests/compare/transfer/pool rc ${rcs[*]}; tests: $(last_line "$D/tests.log")"
}

loadq() {  # loadq N WORKERS QUERIES(0|1): library and both id orders' index in /tmp/loadq; timed loads
  local n=$1 w=/tmp/loadq gpu="" ids rc=0
  mkdir -p "$w"
  step gen 60 python3 -m flashtrie.harness.scale gen --n "$n" --dir "$w" --out "$D/scale.jsonl" || rc=1
  python3 -c "from flashtrie.arrays import cupy_module; cupy_module()" 2>/dev/null && gpu="--gpu"
  for ids in index input; do
    step "build_$ids" 60 flashtrie build $gpu --ids $ids "$w/kw.npz" -o "$w/$ids.ftrie" || rc=1
  done
  # shellcheck disable=SC2046
  step load 60 python3 "$HERE/benchmarks/load_speed.py" $(ls "$w"/index.ftrie "$w"/input.ftrie 2>/dev/null) \
    --workers "$2" --repeats 2 --json "$D/load.json" || rc=1
  if [ "$3" = 1 ]; then
    step queries 60 python3 -m flashtrie.harness.scale queries --n "$n" --dir "$w" --out "$D/scale.jsonl" || rc=1
    python3 "$HERE/tools/device/summarize.py" queries "$D/scale.jsonl"
  fi
  return $rc
}

check_loadq() {
  loadq "${LOADQ_N:-100M}" "${LOADQ_WORKERS:-1,2,4,8,16}" 1
  local rc=$?
  python3 "$HERE/tools/device/summarize.py" verify "$D" | tee "$D/table.txt"
  rm -rf /tmp/loadq
  summary loadq $rc "table in $D/table.txt"
}

check_verify() {
  local f=/tmp/loadq/input.ftrie rc
  loadq "${VERIFY_N:-100M}" 1,4,16 0
  rc=$?
  sweep() {  # sweep NAME [load_speed.py arguments]
    local name=$1; shift
    step "sweep_$name" 20 python3 "$HERE/benchmarks/load_speed.py" "$f" --workers 16 --repeats 2 \
      --json "$D/sweep_$name.json" "$@" || rc=1
  }
  if [ -f "$f" ]; then
    sweep gpu_one_load --repeats 1  # one load in a fresh process: cupy's import and start-up included
    sweep cpu --device cpu
    sweep cpu_louds_2e21 --device cpu --set louds_pass.PIECE_BITS=2097152 --set louds_pass.CHUNK_NODES=1048576
    sweep cpu_louds_2e22 --device cpu --set louds_pass.PIECE_BITS=4194304 --set louds_pass.CHUNK_NODES=2097152
    sweep part_2e23 --set packed.PART_VALUES=8388608
    sweep rank_2e18 --set checks.RANK_CHUNK_WORDS=262144
  fi
  python3 "$HERE/tools/device/summarize.py" verify "$D" | tee "$D/table.txt"
  rm -rf /tmp/loadq
  summary verify $rc "table in $D/table.txt"
}

check_numpylazy() {
  step numpylazy 85 python3 "$PROBES/numpylazy_check.py" --n "${NUMPYLAZY_N:-100M}" --out "$D" \
    --eager-below "${NUMPYLAZY_EAGER_BELOW:-0}"
  local rc=$?
  [ -f "$D/numpylazy.json" ] && python3 "$HERE/tools/device/summarize.py" json "$D/numpylazy.json" | tail -20
  summary numpylazy $rc "table in $D/numpylazy.json"
}

check_queries() {
  step bench 75 python3 "$HERE/benchmarks/query_pass_speed.py" --n "${Q_N:-100M}" --threads "${Q_THREADS:-1,4,16}" \
    --json "$D/queries.json"
  local rc=$?
  sed -n '/^| step/,$p' "$D/bench.log"
  summary queries $rc "details $D/queries.json"
}

check_launch() {
  step launch 120 python3 "$PROBES/launch_probe.py" --keywords 200000 --rows 140 --vocab 32768 --calls 3000
  local rc=$?
  tail -14 "$D/launch.log"
  summary launch $rc "$(grep -m1 'whole call' "$D/launch.log")"
}

check_real() {
  step real "${REAL_TIMEOUT:-360}" flashtrie real bench --cache "$HERE/${REAL_CACHE:-.cache/real}" --no-sizes \
    --backends "${REAL_BACKENDS:-gpu,numpy,marisa}" --max-seconds "${REAL_SECONDS:-4}" -o "$D/real.jsonl" --quiet
  local rc=$?
  flashtrie real report "$D/real.jsonl" -o "$D/real-report" > /dev/null 2>&1
  grep -E "^\| (geonames|wordnet)" "$D/real-report/report.md" | head -24
  summary real $rc "records $D/real.jsonl"
}

check_quality() {
  local smoke=(); [[ -n "${QUALITY_SMOKE:-}" ]] && smoke=(--smoke)
  step quality "${QUALITY_TIMEOUT:-570}" flashtrie quality run --tasks "$HERE/${QUALITY_TASKS:-.cache/quality/full}" \
    --config "${QUALITY_CONFIG:-full}" -o "$D/quality.jsonl" --checkpoints /tmp/quality-ckpt --report "$D/report" \
    "${smoke[@]}"
  local rc=$?
  tail -24 "$D/quality.log"
  summary quality $rc "records $D/quality.jsonl"
}

check_compare() {
  local base=${BASE:?set BASE to a copy of the tree to compare against} v src w=/tmp/ftcmp rc=0 round
  mkdir -p "$w"
  for v in base new; do
    src=$HERE; [ $v = base ] && src=$(cd "$base" && pwd)
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site_$v "$src" \
      >> "$D/install.log" 2>&1 || { echo "install $v FAILED"; rc=1; }
  done
  tree() { local v=$1; shift; (cd /tmp && env PYTHONPATH=/tmp/site_$v:/tmp/site "$@"); }  # the installed copy
  tree base python3 -m flashtrie gen-keywords -n "${N:-10M}" -o $w/kw.npz --quiet \
    && tree base python3 -m flashtrie gen-queries $w/kw.npz -n 16 -K 1000 --preset dense -o $w/q.npz --quiet || rc=1
  for v in base new; do tree $v python3 -m flashtrie build $w/kw.npz -o $w/$v.ftrie --quiet || rc=1; done
  for round in $(seq 1 "${ROUNDS:-2}"); do for v in base new; do
    FLASHTRIE_COMMIT="$v-round$round" tree $v timeout "${BENCH_TIMEOUT:-90}" python3 -m flashtrie bench beam \
      --keywords $w/kw.npz --index $w/$v.ftrie --queries $w/q.npz --backends gpu,numpy --beams "${BEAMS:-100,1000}" \
      --repeats 20 --max-seconds 20 -o "$D/bench_$v.jsonl" --quiet >> "$D/bench.log" 2>&1 || rc=1
  done; done
  rm -rf "$w"
  local mod  # the fused 2 x 70 step, rows at the root and inside keywords (the older tree's bench module name)
  for round in $(seq 1 "${ROUNDS:-2}"); do for v in base new; do
    mod=flashtrie.harness.stepwise; [ $v = base ] && [ ! -d "$base/harness/stepwise" ] && mod=flashtrie.harness.stepwise_bench
    FLASHTRIE_COMMIT="$v-round$round" tree $v timeout "${STEP_TIMEOUT:-150}" python3 -m $mod \
      --out "$D/step_$v.jsonl" --cases "${STEP_CASE:-fixed:20M:32768}" --shapes 2x70 --states root,mid \
      --repeats 30 --max-seconds 120 >> "$D/step.log" 2>&1 || rc=1
  done; done
  python3 "$HERE/tools/device/summarize.py" compare "$D" | tee "$D/table.txt"
  summary compare $rc "table in $D/table.txt"
}

if [ $# = 0 ] || [ "$1" = list ] || [ "$1" = -h ]; then
  for row in "${CHECKS[@]}"; do printf '  %-12s %s\n' "${row%%|*}" "${row#*|}"; done
  exit 0
fi
for name in "$@"; do
  [[ " $(printf '%s ' "${CHECKS[@]%%|*}") " == *" $name "* ]] || { echo "unknown check '$name' (list: $0 list)"; exit 2; }
done
names=("$@")
[[ " $* " == *" install "* ]] && names=(install "${@/install}")
for name in "${names[@]}"; do
  [ -n "$name" ] || continue
  export D="$OUT/$name"  # exported: a step that runs a function of this script runs it in a child bash
  mkdir -p "$D"
  T_CHECK=$SECONDS
  [ "$name" = install ] || installed
  "check_$name" > >(tee -a "$D/console.log") 2>&1
done
[ -n "$D" ] && cat "$OUT"/*/summary.log 2>/dev/null > "$OUT/summary.log"
exit $FAILED
