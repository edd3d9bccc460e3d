#!/bin/bash
# On the device machine, from the repository root:  bash gpu_impl/scripts/check_numpylazy.sh   (< 90 s)
# The lazy numpy reference at 100M keywords (issue 13, GPU == numpy at 800M): GPU build as scale_stages does,
# NumpySearcher(decode="lazy") set-up time and peak RSS, 16 dense queries (K = 1000) at beam 1000 numpy vs GPU
# bit for bit, numpy's batch-1 search time (gpu_impl/scripts/numpylazy_check.py).  Details: $OUT/numpylazy/.
#   NUMPYLAZY_N=100M   library size     NUMPYLAZY_EAGER_BELOW=S   also the eager set-up (~36 s, ~15 GB at 100M) and
#   eager == lazy if the run so far took under S seconds (default 0: never)
#   NUMPYLAZY_SKIP_INSTALL=1   use the flashtrie already installed
set -uo pipefail
OUT=${OUT:-$PWD/out}
L="$OUT/numpylazy"
mkdir -p "$L"
export PYTHONUNBUFFERED=1
source gpu_impl/scripts/device_install.sh
device_install "$L" "${NUMPYLAZY_SKIP_INSTALL:-}"
echo "numpylazy: N=${NUMPYLAZY_N:-100M}, $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
timeout 85 python3 gpu_impl/scripts/numpylazy_check.py --n "${NUMPYLAZY_N:-100M}" --out "$L" \
  --eager-below "${NUMPYLAZY_EAGER_BELOW:-0}" 2>&1 | tee "$L/log.txt"
rc=${PIPESTATUS[0]}
if [[ $rc == 124 && -f $L/numpylazy.json ]]; then  # stopped by the timeout: the table of what it had measured
  python3 -c "import json, sys; [print(f'| {k} | {v} |') for k, v in json.load(open(sys.argv[1])).items()]" \
    "$L/numpylazy.json"
fi
echo "numpylazy rc $rc"
