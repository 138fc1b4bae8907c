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
set +e
.venv/bin/pytest "$@"
code=$?
set -e
if [ "$code" -eq 5 ]; then
  # pytest exits 5 when it collected no test: for this suite that is a broken run, never a pass.
  echo "kubetape: pytest collected no tests; check the selection (-k/-m) or the test layout" >&2
  exit 1
fi
exit "$code"
