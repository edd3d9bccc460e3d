#!/bin/bash
# The GPU machine's checks, by name, from the repository root:
#   bash tools/device/check.sh NAME [NAME...]          (bash tools/device/check.sh list: the table)
# The checks are data: tools/device/checks.toml (each a few steps: a command line and its time limit; the
# measurements are `flashtrie bench SUITE`).  Each check writes its logs and records under $OUT/NAME/ (OUT:
# default ./out) and prints ONE summary line at the end ("[NAME] ok|FAILED ..."); the exit status is non-zero
# when any check failed.  `install` runs first whenever it is named; the other checks find the project
# installed (or install it).  FLASHTRIE_COMMIT names the commit in the records (a copied tree has no .git).
set -uo pipefail
OUT=${OUT:-$PWD/out}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
TABLE=(python3 "$HERE/tools/device/checks.py")
export HERE PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
[ -d /tmp/site ] && [[ ":${PYTHONPATH:-}:" != *":/tmp/site:"* ]] && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if [ -z "${FLASHTRIE_COMMIT:-}" ] && c=$(git -C "$HERE" rev-parse HEAD 2>/dev/null); then export FLASHTRIE_COMMIT=$c; fi

run_check() {  # run_check NAME: its steps in order, each under its timeout; then its one summary line
  local name=$1 step limit kind cmd rc=0 r text last="" t0=$SECONDS
  export D="$OUT/$name"
  mkdir -p "$D"
  while IFS=$'\t' read -r step limit kind cmd; do
    timeout -k 10 "$limit" bash -c "$cmd" < /dev/null > "$D/$step.log" 2>&1
    r=$?
    [[ $r == 0 || $kind == soft ]] || rc=$r
    last=$step
    echo "-- $name/$step: exit status $r ($((SECONDS - t0)) s)"
    tail -n "${TAIL:-12}" "$D/$step.log"
  done < <("${TABLE[@]}" steps "$name")
  text=$(bash -c "$("${TABLE[@]}" summary "$name")" 2>/dev/null | head -1)
  [ -n "$text" ] || text=$(tail -1 "$D/$last.log" 2>/dev/null)
  local state=ok; [[ $rc == 0 ]] || { state="FAILED rc=$rc"; FAILED=1; }
  echo "[$name] $state ($((SECONDS - t0)) s) ${text:0:200}" | tee -a "$D/summary.log"
}

if [ $# = 0 ] || [ "$1" = list ] || [ "$1" = -h ]; then exec "${TABLE[@]}" list; fi
"${TABLE[@]}" names "$@" || exit 2
names=("$@")
[[ " $* " == *" install "* ]] && names=(install "${@/install}")
FAILED=0
for name in "${names[@]}"; do
  [ -n "$name" ] || continue
  [ "$name" = install ] || python3 -c "import flashtrie.gpu_impl" 2>/dev/null || run_check install > /dev/null
  [[ ":${PYTHONPATH:-}:" == *":/tmp/site:"* ]] || [ ! -d /tmp/site ] || export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  mkdir -p "$OUT/$name"
  run_check "$name" > >(tee -a "$OUT/$name/console.log") 2>&1
done
cat "$OUT"/*/summary.log 2>/dev/null > "$OUT/summary.log"
exit $FAILED
