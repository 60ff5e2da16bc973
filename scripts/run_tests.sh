#!/usr/bin/env bash
# Runs the whole test suite once per Keras backend (tensorflow, jax, torch).
# Usage: scripts/run_tests.sh [extra pytest args]   e.g. -m "not slow"   or   tests/layers
# KERAS_VIT_BACKENDS="jax torch" limits the backends.
set -u
backends=${KERAS_VIT_BACKENDS:-"tensorflow jax torch"}
status=0
for backend in $backends; do
  echo "=== KERAS_BACKEND=$backend ==="
  KERAS_BACKEND=$backend TF_CPP_MIN_LOG_LEVEL=3 python -m pytest -q -p no:cacheprovider "$@"
  rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "no tests collected for $backend (pytest exit code 5)"; rc=0
  fi
  [ "$rc" -ne 0 ] && status=$rc
done
exit $status
