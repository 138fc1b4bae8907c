#!/usr/bin/env bash
# The whole test suite: lint, types, layer contracts, then unit, integration and e2e tests against the
# real local stack (which the tests start and stop themselves in a private directory). Prints how long
# each phase took at the end, passed or not, so that a slow phase shows in every CI log.
#
# Unit tests run in parallel (pytest-xdist, one worker per CPU; KUBETAPE_TEST_WORKERS overrides);
# integration and e2e tests run on two workers (KUBETAPE_STACK_WORKERS overrides), each with a local
# stack of its own, a module whole on one worker (tests/conftest.py says why and in which order).
# Arguments select tests as with pytest (`scripts/test.sh tests/unit/test_x.py -k name`): then one
# pytest run takes them as they are.
set -euo pipefail
cd "$(dirname "$0")/.."

phases=()
suite_started=$SECONDS
# A private temporary directory per run: pytest's shared one keeps only the last three sessions, so a
# second test run started meanwhile (another checkout, a second terminal) would delete the directory
# that holds this run's local stack. Kept when the run fails, for its logs.
basetemp=$(mktemp -d "${TMPDIR:-/tmp}/kubetape-tests.XXXXXX")
# tests/phase_times.py writes here how long the integration and e2e tests took within their session
export KUBETAPE_PHASE_TIMES="$basetemp/phase-times"

print_times() {
  local code=$?
  {
    echo "[test] time per phase:"
    local line
    for line in "${phases[@]}"; do
      printf '  %-24s %s\n' "${line%%|*}" "${line#*|}"
    done
    printf '  %-24s %ds\n' "total" "$((SECONDS - suite_started))"
  } >&2
  if [ "$code" -eq 0 ]; then rm -rf "$basetemp"; else echo "kubetape: test files kept in $basetemp" >&2; fi
}
trap print_times EXIT

# timed NAME COMMAND...: runs one phase and records its wall time (marked FAILED when it fails).
timed() {
  local name=$1 started=$SECONDS code=0
  shift
  echo "[test] $name" >&2
  "$@" || code=$?
  phases+=("$name|$((SECONDS - started))s$([ "$code" -eq 0 ] || echo " FAILED (exit $code)")")
  # a pytest session's own split by test directory (tests/phase_times.py), under its phase
  if [ -f "$KUBETAPE_PHASE_TIMES" ]; then
    local part seconds
    while read -r part seconds; do phases+=("  $part|${seconds}s"); done <"$KUBETAPE_PHASE_TIMES"
    rm -f "$KUBETAPE_PHASE_TIMES"
  fi
  return "$code"
}

# pytest_run ARGS...: pytest in this run's directory; no test collected is a broken run, never a pass.
pytest_run() {
  local code=0
  .venv/bin/pytest "$@" || code=$?
  if [ "$code" -eq 5 ]; then
    echo "kubetape: pytest collected no tests; check the selection (-k/-m) or the test layout" >&2
    return 1
  fi
  return "$code"
}

lint() { .venv/bin/ruff check . && .venv/bin/ruff format --check .; }

timed bootstrap scripts/bootstrap.sh --for-tests
timed ruff lint
timed mypy .venv/bin/mypy
timed import-linter .venv/bin/lint-imports
if [ "$#" -gt 0 ]; then
  timed pytest pytest_run --basetemp "$basetemp/pytest" "$@"
else
  timed unit pytest_run --basetemp "$basetemp/unit" -n "${KUBETAPE_TEST_WORKERS:-auto}" tests/unit
  timed integration+e2e pytest_run --basetemp "$basetemp/stack" --durations=15 \
    -n "${KUBETAPE_STACK_WORKERS:-2}" --dist loadscope --no-loadscope-reorder tests/integration tests/e2e
fi
