#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh and scripts/test.sh: a project venv with kubetape and its dev
# dependencies, then the local stack's components built once into ~/.cache/kubetape (jars from Maven
# Central, Kubernetes/etcd/KWOK from the Go module proxy). Safe to run again: it only redoes what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null; then
  echo "kubetape: python3 (3.11+) is required but not on PATH" >&2; exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "[bootstrap] creating .venv" >&2
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.kubetape-installed
# Reinstall when the dependencies or the C extension's source change (the extension is built by pip).
want=$(cat pyproject.toml setup.py pipeline/model/_wirescan.c | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[bootstrap] installing kubetape and its Python dependencies into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  echo "$want" > "$stamp"
fi
# The analytics tests render the HTML report in headless Chromium; install it where apt can.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && command -v apt-get >/dev/null; then
  echo "[bootstrap] installing chromium (headless, for the HTML report test)" >&2
  SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo "sudo")
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null \
    || echo "[bootstrap] could not install chromium; the report rendering test will fail under CI=true" >&2
fi
echo "[bootstrap] checking the local stack's build cache (the first build takes ~12 minutes)" >&2
.venv/bin/kubetape stack build >/dev/null
