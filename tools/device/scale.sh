#!/bin/bash
# On the GPU machine, from the repository root: the paper-scale pipeline in one command (TOTAL seconds).
#   FLASHTRIE_COMMIT=<commit> bash tools/device/scale.sh                    (800M, curve 1M 10M 100M first)
#   bash tools/device/check.sh scale-quick      (a quick check: 1M then 30M in < 120 s)
# FLASHTRIE_COMMIT must be given when this runs on a copied tree: git would otherwise name the commit of whatever
# checkout holds the copy, and the records would carry that commit.
#
# 1. installs the carried wheels (.whl/) and the project (INSTALL=0: the caller did);
# 2. for each curve size of SIZES (default "1M 10M 100M"), then for N (default 800M), two processes of
#    harness/scale/stages.py, each appending records to $OUT/scale.jsonl as every stage ends:
#      prepare: generate the keywords, 16 dense queries (K = 1000), the GPU builder's warm-up (its own stage:
#               cupy compiles its kernels on a fresh machine, ~20 s, not charged to the build), build (GPU
#               builder where cupy and a GPU are present, else the CPU builder; BUILDER=gpu|cpu forces one),
#               save the index; at MARISA_SIZE_N (default 10M) also our file with and without the keyword-id
#               map against marisa-trie's; the keywords stay in memory (no 17.9 GB keyword file at 800M)
#               unless marisa needs them later;
#      serve:   load the index with verification, upload (GpuSearcher), the beam sweep (beams 1,10,100,500,1000,
#               K = beam) at batch 1 on the GPU and numpy (NUMPY_SIZES, default "1M 10M"; "all": every size), at
#               BATCHES (default 1,8) for N; then GPU == numpy on a few queries (at CHECK_SIZES, default "all":
#               every size; numpy's reference decodes only the nodes a search reaches on large indexes, so the
#               check costs seconds at 800M); marisa's searcher and sweep at MARISA_SIZES (default "1M");
#    and then removes that size's files (KEEP=1 keeps them under DIR, default /tmp/ftscale);
#    marisa at MARISA_LAST (default "10M", curve sizes not in MARISA_SIZES) runs after N, in the time left
#    (its searcher took 72.9 s at 10M: inside the curve it would take the 100M point's time); those sizes keep
#    their files until then;
# 3. prints the stage table and renders $OUT/report/report.md from the records (harness/scale/report.py); then bundles
#    $OUT into $OUT/scale.tgz and (BUNDLE_ONLY=1, default) leaves only it, scale.jsonl and scale.log in $OUT.
# Time: TOTAL (default 570 s) bounds the whole command; the curve sizes must end RESERVE seconds (default 330)
# before that, so N keeps its time (800M: ~200 s measured, 145 s of it prepare). Each step also has a limit
# (BUDGET_<STEP>, seconds); a step past its limit is recorded as timed out and its process ends (status 124);
# the shell's `timeout` is the backstop and `fail` records what it stopped. A killed command still leaves every record written so far.
# Render elsewhere: python -m flashtrie.harness.scale render $OUT/scale.jsonl --out reports/h200-800m
set -uo pipefail
T0=$(date +%s)
OUT=${OUT:-$PWD/out}
N=${N:-800M}
SIZES=${SIZES-1M 10M 100M}
DIR=${DIR:-/tmp/ftscale}
TOTAL=${TOTAL:-570}
RESERVE=${RESERVE:-330}
NUMPY_SIZES=${NUMPY_SIZES-1M 10M}
MARISA_SIZES=${MARISA_SIZES-1M}
MARISA_LAST=${MARISA_LAST-10M}
CHECK_SIZES=${CHECK_SIZES-all}
MARISA_SIZE_N=${MARISA_SIZE_N-10M}
BATCHES=${BATCHES:-1,8}
export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
export SCALE_COMMAND="N=$N SIZES='$SIZES' MARISA_SIZES='$MARISA_SIZES' MARISA_LAST='$MARISA_LAST' TOTAL=$TOTAL RESERVE=$RESERVE bash tools/device/scale.sh"
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
say "N=$N SIZES='$SIZES' cores=$(nproc) mem=$(free -g | awk '/Mem:/{print $2}')G disk=$(df -h "$DIR" | awk 'NR==2{print $4}') free"

R="$OUT/scale.jsonl"
export SCALE_RUN_ID=${SCALE_RUN_ID:-$(python3 -c "import uuid; print(uuid.uuid4().hex[:12])")}
BUDGET="gen=${BUDGET_GEN:-150},queries=${BUDGET_QUERIES:-120},warmup=${BUDGET_WARMUP:-60},build=${BUDGET_BUILD:-120}"
BUDGET+=",sizes=${BUDGET_SIZES:-60},load=${BUDGET_LOAD:-60},upload=${BUDGET_UPLOAD:-60},check=${BUDGET_CHECK:-60}"
BUDGET+=",bench=${BUDGET_BENCH:-120},marisa=${BUDGET_MARISA:-150}"
failed=0
has() { [[ " $1 " == *" $2 "* ]]; }  # has LIST WORD

proc() {  # proc NAME SIZE SIZE_DIR DEADLINE [args]: one process of harness/scale/stages.py under the deadline
  local name=$1 size=$2 d=$3 deadline=$4; shift 4
  local left=$((deadline - $(date +%s)))
  if (( left < 5 )); then
    say "[$size] $name: no time left"; failed=1
    python3 -m flashtrie.harness.scale fail --n "$size" --dir "$d" --out "$R" --failed "$name" \
      --message "not started: no time left before the deadline" | tee -a "$LOG"
    return 1
  fi
  timeout -k 5 $((left + 5)) python3 -m flashtrie.harness.scale "$name" --n "$size" --dir "$d" --out "$R" \
    --deadline "$deadline" --budget "$BUDGET" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  case $rc in
    0) return 0;;
    3|4|5) failed=1; say "[$size] $name: exit status $rc (recorded: 3 mismatch, 4 a step failed, 5 no time left)";;
    *) failed=1
       local why="exit status $rc"
       [[ $rc == 124 ]] && why="timed out (exit status 124)"; [[ $rc == 137 ]] && why="killed (exit status 137: out of memory, or the timeout)"
       python3 -m flashtrie.harness.scale fail --n "$size" --dir "$d" --out "$R" --failed "$name" \
         --message "$why" | tee -a "$LOG";;
  esac
  return "$rc"
}

run_size() {  # run_size SIZE DEADLINE BATCHES: prepare + serve of one library size, then its files go
  local size=$1 deadline=$2 batches=$3 d="$DIR/n$1"
  rm -rf "$d"; mkdir -p "$d"
  local prep=(--builder "${BUILDER:-auto}") serve=(--batches "$batches") cpu="" late=0
  has "$MARISA_SIZES" "$size" && { prep+=(--save-keywords); cpu="marisa"; }
  if [[ $size != "$N" ]] && has "$MARISA_LAST" "$size" && ! has "$MARISA_SIZES" "$size"; then
    prep+=(--save-keywords); late=1
  fi
  [[ $size == "$MARISA_SIZE_N" ]] && prep+=(--marisa-size)
  local check=1  # GPU == numpy at CHECK_SIZES ("all": every size; empty: where numpy runs anyway, and at N)
  if [[ $NUMPY_SIZES == all ]] || has "$NUMPY_SIZES" "$size"; then cpu="numpy${cpu:+,$cpu}"; fi
  if [[ -z $CHECK_SIZES ]]; then [[ $cpu == numpy* || $size == "$N" ]] || check=0
  elif [[ $CHECK_SIZES != all ]]; then has "$CHECK_SIZES" "$size" || check=0; fi
  (( check )) || serve+=(--no-check)
  [[ -n $cpu ]] && serve+=(--cpu "$cpu")
  say "== $size: prepare ${prep[*]}; serve ${serve[*]} (deadline in $((deadline - $(date +%s))) s)"
  proc prepare "$size" "$d" "$deadline" "${prep[@]}"
  if [[ -f $d/kw.ftrie && -f $d/q.npz ]]; then proc serve "$size" "$d" "$deadline" "${serve[@]}"
  else say "[$size] serve not run: prepare left no index or no queries"; fi
  (( late )) && LATE+=("$size")
  [[ ${KEEP:-0} == 1 ]] || (( late )) || rm -rf "$d"
  say "== $size done at $(( $(date +%s) - T0 )) s; disk $(df -h "$DIR" | awk 'NR==2{print $4}') free"
}
LATE=()

for s in $SIZES; do
  [[ $s == "$N" ]] && continue
  run_size "$s" $((T0 + TOTAL - RESERVE)) 1
done
run_size "$N" $((T0 + TOTAL - 8)) "$BATCHES"
for s in "${LATE[@]}"; do  # marisa at the sizes it was left out of, in the time N left
  d="$DIR/n$s"
  say "== $s: marisa (after $N; deadline in $((T0 + TOTAL - 15 - $(date +%s))) s)"
  if [[ -f $d/kw.npz && -f $d/kw.ftrie && -f $d/q.npz ]]; then
    proc marisa "$s" "$d" $((T0 + TOTAL - 15)) --cpu marisa --batches 1
  else say "[$s] marisa not run: its keywords, index or queries are missing"; fi
  [[ ${KEEP:-0} == 1 ]] || rm -rf "$d"
done
python3 -m flashtrie.harness.scale table --out "$R" | tee -a "$LOG"
python3 -m flashtrie.harness.scale render "$R" --out "$OUT/report" 2>&1 | tail -3 | tee -a "$LOG" \
  || say "render FAILED"
say "total $(( $(date +%s) - T0 )) s"
# few files come back from the device machine: everything in one tarball, the records and the log beside it
bundle=$(mktemp "${TMPDIR:-/tmp}/scale.XXXXXX.tgz")
tar czf "$bundle" -C "$OUT" --exclude ./scale.tgz . && mv "$bundle" "$OUT/scale.tgz" && [[ ${BUNDLE_ONLY:-1} == 1 ]] && find "$OUT" -mindepth 1 -maxdepth 1 ! -name scale.tgz ! -name scale.jsonl ! -name scale.log \
     -exec rm -rf {} +
exit $failed
