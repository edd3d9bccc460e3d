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
