#!/usr/bin/env bash
# Runs the whole test suite once per Keras backend (tensorflow, jax, torch).
# Usage: scripts/run_tests.sh [extra pytest args]   e.g. -m "not slow"   or   tests/layers
# KERAS_VIT_BACKENDS="jax torch" limits the backends.
# KERAS_VIT_TEST_JOBS: how many pytest worker processes each backend's suite uses (default: the
# CPUs this process may run on, at most 2). With more than one, the backends run one after
# another, each spread over that many workers by pytest-xdist (`--dist loadfile`: each test
# file's tests run in one worker, so its module fixtures are built once; tests/conftest.py hands
# the files out heaviest first), and
# each worker gets an equal share of the CPUs for its math libraries' threads (OMP_NUM_THREADS,
# unless already set), so the workers do not oversubscribe the cores. Without pytest-xdist, one
# process per backend.
# Backend-independent tests (marked `backend_independent`, checked to run no Keras backend
# code) run in one backend's run only: KERAS_VIT_ONCE_BACKEND, by default the first backend.
# On JAX, the workers of a run share one persistent compilation cache (a temporary folder,
# removed at the end; JAX_COMPILATION_CACHE_DIR chooses another, kept), so a step that compiles
# to the same program in several tests compiles once.
# At the end: each backend's wall time and test counts, and the total. The exit status is the
# last failing backend's pytest status (0 when all passed).
set -u
backends=${KERAS_VIT_BACKENDS:-"tensorflow jax torch"}
cpus=$(python -c "import os; print(len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)" 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
if [ "$cpus" -ge 2 ]; then default_jobs=2; else default_jobs=1; fi
jobs=${KERAS_VIT_TEST_JOBS:-$default_jobs}
case "$jobs" in
  ''|*[!0-9]*|0) echo "KERAS_VIT_TEST_JOBS must be a whole number >= 1, got '$jobs'" >&2; exit 2 ;;
esac
read -r -a names <<< "$backends"
if [ "${#names[@]}" -eq 0 ]; then
  echo "KERAS_VIT_BACKENDS names no backend (tensorflow, jax, torch), got '$backends'" >&2; exit 2
fi
once=${KERAS_VIT_ONCE_BACKEND:-${names[0]}}
case " ${names[*]} " in
  *" $once "*) export KERAS_VIT_ONCE_BACKEND=$once ;;
  *) echo "KERAS_VIT_ONCE_BACKEND must be one of the backends run (${names[*]}), got '$once'" >&2
     exit 2 ;;
esac
parallel=()
if [ "$jobs" -gt 1 ]; then
  if python -c "import xdist" 2>/dev/null; then
    parallel=(-n "$jobs" --dist loadfile --no-loadscope-reorder)
    threads=$(( cpus / jobs )); [ "$threads" -ge 1 ] || threads=1
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
  else
    echo "pytest-xdist is not installed (the dev extra): each backend runs in one process" >&2
  fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/keras_vit_tests.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
if [ -z "${JAX_COMPILATION_CACHE_DIR:-}" ]; then
  export JAX_COMPILATION_CACHE_DIR=$work/jax_cache
fi

summaries=()
run_backend() {  # run_backend BACKEND [pytest args]: one backend's suite; 0 when none collected
  local backend=$1; shift
  local log=$work/log.$backend start=$SECONDS
  echo "=== KERAS_BACKEND=$backend ==="
  KERAS_BACKEND=$backend TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q -p no:cacheprovider \
    "${parallel[@]}" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} elapsed=$(( SECONDS - start ))
  # pytest's last line: "2111 passed, 30 skipped, 3 warnings in 1601.23s (0:26:41)"
  local counts
  counts=$(grep -E "^=* ?[0-9]+ (passed|failed|skipped|error|errors|deselected|xfailed|xpassed|warnings?)\b" "$log" \
    | tail -n 1 | sed -E 's/^=+ //; s/ in [0-9.]+s.*$//; s/ =+$//')
  if [ "$rc" -eq 5 ]; then
    echo "no tests collected for $backend (pytest exit code 5)"; rc=0; counts="no tests collected"
  fi
  summaries+=("$(printf '%-10s %3d:%02d  %s  (exit %d)' "$backend" $((elapsed / 60)) \
    $((elapsed % 60)) "${counts:-no summary line}" "$rc")")
  return $rc
}

status=0
total_start=$SECONDS
for name in "${names[@]}"; do
  run_backend "$name" "$@" || status=$?
done
total=$(( SECONDS - total_start ))
echo "=== test time per backend (wall, m:ss); backend-independent tests ran in the $once run ==="
for line in "${summaries[@]}"; do echo "$line"; done
printf '%-10s %3d:%02d\n' "total" $((total / 60)) $((total % 60))
exit $status
