#!/usr/bin/env bash
# The whole test suite: lint, types, layer contracts, then unit, integration and e2e tests against the
# real local stack (which the tests start and stop themselves in a private directory).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
echo "[test] ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "[test] mypy --strict" >&2
.venv/bin/mypy
echo "[test] import-linter (layers)" >&2
.venv/bin/lint-imports
echo "[test] pytest" >&2
# A private temporary directory per run: pytest's shared one keeps only the last three sessions, so a
# second test run started meanwhile (another checkout, a second terminal) would delete the directory
# that holds this run's local stack. Kept when the run fails, for its logs.
basetemp=$(mktemp -d "${TMPDIR:-/tmp}/kubetape-tests.XXXXXX")
set +e
.venv/bin/pytest --basetemp "$basetemp" "$@"
code=$?
set -e
if [ "$code" -eq 0 ]; then rm -rf "$basetemp"; else echo "kubetape: test files kept in $basetemp" >&2; fi
if [ "$code" -eq 5 ]; then
  # pytest exits 5 when it collected no test: for this suite that is a broken run, never a pass.
  echo "kubetape: pytest collected no tests; check the selection (-k/-m) or the test layout" >&2
  exit 1
fi
exit "$code"
