#!/usr/bin/env bash
# Runs the whole test suite once per Keras backend (tensorflow, jax, torch).
# Usage: scripts/run_tests.sh [extra pytest args]   e.g. -m "not slow"   or   tests/layers
# KERAS_VIT_BACKENDS="jax torch" limits the backends.
# KERAS_VIT_TEST_JOBS: how many pytest worker processes each backend's suite uses (default: the
# CPUs this process may run on, at most 2). With more than one, the backends run one after
# another, each spread over that many workers by pytest-xdist (`--dist loadfile`: a test file's
# tests stay in one worker, so its module fixtures are built once), and each worker gets an equal
# share of the CPUs for its math libraries' threads (OMP_NUM_THREADS, unless already set), so the
# workers do not oversubscribe the cores. Without pytest-xdist, one process per backend.
set -u
backends=${KERAS_VIT_BACKENDS:-"tensorflow jax torch"}
cpus=$(python -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)" 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
if [ "$cpus" -ge 2 ]; then default_jobs=2; else default_jobs=1; fi
jobs=${KERAS_VIT_TEST_JOBS:-$default_jobs}
case "$jobs" in
  ''|*[!0-9]*|0) echo "KERAS_VIT_TEST_JOBS must be a whole number >= 1, got '$jobs'" >&2; exit 2 ;;
esac
parallel=()
if [ "$jobs" -gt 1 ]; then
  if python -c "import xdist" 2>/dev/null; then
    parallel=(-n "$jobs" --dist loadfile)
    threads=$(( cpus / jobs )); [ "$threads" -ge 1 ] || threads=1
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
  else
    echo "pytest-xdist is not installed (the dev extra): each backend runs in one process" >&2
  fi
fi

run_backend() {  # run_backend BACKEND [pytest args]: one backend's suite; 0 when none collected
  local backend=$1; shift
  echo "=== KERAS_BACKEND=$backend ==="
  KERAS_BACKEND=$backend TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q -p no:cacheprovider "${parallel[@]}" "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "no tests collected for $backend (pytest exit code 5)"; rc=0
  fi
  return $rc
}

status=0
read -r -a names <<< "$backends"
for name in "${names[@]}"; do
  run_backend "$name" "$@" || status=$?
done
exit $status
