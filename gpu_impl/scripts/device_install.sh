# Sourced by the gpu_impl/scripts/check_*.sh device scripts, from the repository root:
#   source gpu_impl/scripts/device_install.sh; device_install LOG_DIR SKIP
# installs the carried wheels (.whl/, once per machine: /tmp/site goes on PYTHONPATH) and, unless SKIP is
# non-empty, the project itself (its pip output in LOG_DIR/install.log); failures are printed (through the
# caller's `say` where it has one), not fatal.
_device_install_say() { if declare -F say > /dev/null; then say "$@"; else echo "$@"; fi; }

device_install() {
  local log_dir=$1 skip=${2:-}
  if compgen -G ".whl/*.whl" > /dev/null && [[ ":${PYTHONPATH:-}:" != *":/tmp/site:"* ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} || _device_install_say "wheel install FAILED"
  fi
  [[ -n "$skip" ]] || python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . \
    > "$log_dir/install.log" 2>&1 || { _device_install_say "project install FAILED"; tail -20 "$log_dir/install.log"; }
}

# The start the stepwise check scripts share: device_check_begin NAME DEFAULT_BUDGET makes D=$OUT/NAME, exports
# unbuffered output and the kernel cache, installs (SKIP_INSTALL: not the project), takes FLASHTRIE_COMMIT from git
# where unset, sets BUDGET (seconds; left() says how many remain) and prints the commit and the GPU.
device_check_begin() {
  OUT=${OUT:-$PWD/out}
  D="$OUT/$1"
  mkdir -p "$D"
  export PYTHONUNBUFFERED=1 FLASHTRIE_CACHE=${FLASHTRIE_CACHE:-/tmp/flashtrie-cache}
  device_install /tmp "${SKIP_INSTALL:-}"
  if [ -z "${FLASHTRIE_COMMIT:-}" ] && c=$(git rev-parse HEAD 2>/dev/null); then export FLASHTRIE_COMMIT=$c; fi
  BUDGET=${BUDGET:-$2}
  echo "commit ${FLASHTRIE_COMMIT:-unknown}; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
}
left() { echo $((BUDGET - SECONDS)); }
