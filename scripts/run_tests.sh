#!/usr/bin/env bash
# Runs the whole test suite once per Keras backend (tensorflow, jax, torch).
# Usage: scripts/run_tests.sh [extra pytest args]   e.g. -m "not slow"   or   tests/layers
# KERAS_VIT_BACKENDS="jax torch" limits the backends.
# KERAS_VIT_TEST_JOBS: how many backends' suites run at once, 1 or 2 (default 2 where the
# machine has at least 2 CPUs). With 2, JAX's suite (the longest) runs beside the others, which
# run one after another; its output is kept in a file and printed when both are done.
set -u
backends=${KERAS_VIT_BACKENDS:-"tensorflow jax torch"}
cpus=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
if [ "$cpus" -ge 2 ]; then default_jobs=2; else default_jobs=1; fi
jobs=${KERAS_VIT_TEST_JOBS:-$default_jobs}
case "$jobs" in
  1|2) ;;
  *) echo "KERAS_VIT_TEST_JOBS must be 1 or 2, got '$jobs'" >&2; exit 2 ;;
esac

run_backend() {  # run_backend BACKEND [pytest args]: one backend's suite; 0 when none collected
  local backend=$1; shift
  echo "=== KERAS_BACKEND=$backend ==="
  KERAS_BACKEND=$backend TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q -p no:cacheprovider "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "no tests collected for $backend (pytest exit code 5)"; rc=0
  fi
  return $rc
}

status=0
read -r -a names <<< "$backends"
beside=""
if [ "$jobs" -eq 2 ] && [ "${#names[@]}" -ge 2 ]; then
  # The backend run beside the others: JAX when asked for, else the first one.
  beside=${names[0]}
  for name in "${names[@]}"; do [ "$name" = "jax" ] && beside=jax; done
fi

if [ -n "$beside" ]; then
  log_dir=$(mktemp -d)
  trap 'rm -rf "$log_dir"' EXIT
  # Interrupted: stop every process of this run (the one beside too: it ignores SIGINT).
  trap 'trap - INT TERM; kill 0' INT TERM
  ( run_backend "$beside" "$@" > "$log_dir/$beside.log" 2>&1; echo $? > "$log_dir/$beside.rc" ) &
  beside_pid=$!
  echo "=== KERAS_BACKEND=$beside runs beside the others; its output follows theirs ==="
fi
for name in "${names[@]}"; do
  [ "$name" = "$beside" ] && continue
  run_backend "$name" "$@" || status=$?
done
if [ -n "$beside" ]; then
  wait "$beside_pid"
  cat "$log_dir/$beside.log"
  rc=$(cat "$log_dir/$beside.rc" 2>/dev/null || echo 1)
  [ "$rc" -ne 0 ] && status=$rc
fi
exit $status
