#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh and scripts/test.sh: a project venv with kubetape and its dev
# dependencies, then the local stack's components built once into ~/.cache/kubetape (jars from Maven
# Central, Kubernetes/etcd/KWOK from the Go module proxy). Safe to run again: it only redoes what changed.
# `--for-tests` adds what only the test suite needs (Karpenter for the autoscaler tests, metrics-server
# for the Metrics API test, the kubelet, containerd and buildah for the real node test, headless Chromium for the HTML report test, promtool and the dashboard checker
# for the monitoring test, openssl where it is missing); the demo needs none of them, so
# its first run does not wait for them.
set -euo pipefail
cd "$(dirname "$0")/.."
# Two set-ups at once (a demo and a test run, say) would build into the same venv and cache: the second waits.
if command -v flock >/dev/null && [ -z "${KUBETAPE_BOOTSTRAP_LOCKED:-}" ]; then
  mkdir -p "${KUBETAPE_CACHE:-$HOME/.cache/kubetape}"
  export KUBETAPE_BOOTSTRAP_LOCKED=1
  exec flock "${KUBETAPE_CACHE:-$HOME/.cache/kubetape}/.bootstrap.lock" "$0" "$@"
fi
PYTHON=${PYTHON:-python3}
if ! command -v "$PYTHON" >/dev/null; then
  echo "kubetape: python3 (3.11+) is required but not on PATH" >&2; exit 1
fi
if [ ! -x .venv/bin/python ]; then
  echo "[bootstrap] creating .venv" >&2
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.kubetape-installed
# Reinstall when the dependencies or the C extensions' sources change (the extension is built by pip).
want=$(cat pyproject.toml setup.py pipeline/formats/wire/_wirescan.c pipeline/formats/segment/_deltarows.c | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[bootstrap] installing kubetape and its Python dependencies into .venv (log: .venv/install.log)" >&2
  # pip and setuptools print pages of deprecation notices on success; they go to the log, and the log
  # is shown only when the install fails.
  if ! { .venv/bin/python -m pip install -q --upgrade pip && .venv/bin/python -m pip install -q -e '.[dev]'; } \
      >.venv/install.log 2>&1; then
    cat .venv/install.log >&2
    echo "kubetape: installing the Python dependencies failed (output above, also in .venv/install.log)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
for_tests=false
if [ "${1:-}" = "--for-tests" ]; then for_tests=true; fi
# The analytics tests render the HTML report in headless Chromium; install it where apt can.
if $for_tests && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && command -v apt-get >/dev/null; then
  echo "[bootstrap] installing chromium (headless, for the HTML report test)" >&2
  SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo "sudo")
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; } \
      >.venv/apt.log 2>&1; then
    cat .venv/apt.log >&2
    echo "[bootstrap] could not install chromium; the report rendering test will fail under CI=true" >&2
  fi
fi
# The monitoring test checks the alert rules and the dashboard's queries with Prometheus's own promtool.
if $for_tests && ! command -v promtool >/dev/null && command -v apt-get >/dev/null; then
  echo "[bootstrap] installing promtool (Debian's prometheus package, for the monitoring test)" >&2
  SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo "sudo")
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus; } \
      >.venv/apt-prometheus.log 2>&1; then
    cat .venv/apt-prometheus.log >&2
    echo "[bootstrap] could not install promtool; the monitoring test will fail under CI=true" >&2
  fi
fi
# The secured broker's certificates and the certificate tests are made with openssl (never skipped).
if $for_tests && ! command -v openssl >/dev/null && command -v apt-get >/dev/null; then
  echo "[bootstrap] installing openssl (the secured broker's certificates and their tests)" >&2
  SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo "sudo")
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends openssl; } \
      >.venv/apt-openssl.log 2>&1; then
    cat .venv/apt-openssl.log >&2
    echo "[bootstrap] could not install openssl; the certificate and secured-broker tests will fail" >&2
  fi
fi
# The real node test runs kubetape's image on a kubelet over containerd and runc, images made with buildah
# from a Debian base (mmdebstrap): all Debian packages (docs/stack.md, "A real node").
if $for_tests && command -v apt-get >/dev/null && { ! command -v containerd >/dev/null || ! command -v runc >/dev/null \
    || ! command -v buildah >/dev/null || ! command -v mmdebstrap >/dev/null || [ ! -x /usr/lib/cni/loopback ]; }; then
  echo "[bootstrap] installing containerd, runc, CNI plugins, buildah and mmdebstrap (for the real node test)" >&2
  SUDO=$([ "$(id -u)" -eq 0 ] && echo "" || echo "sudo")
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      containerd runc containernetworking-plugins buildah mmdebstrap; } >.venv/apt-real-node.log 2>&1; then
    cat .venv/apt-real-node.log >&2
    echo "[bootstrap] could not install the real node's packages; the real node test will fail under CI=true" >&2
  fi
fi
# The monitoring test checks the Grafana dashboard with Grafana's Foundation SDK types (tools/dashboard-check).
if $for_tests; then
  echo "[bootstrap] checking the dashboard checker's build (Grafana's Foundation SDK; ~2 min of CPU the first time)" >&2
  .venv/bin/python -m pipeline.stack.build dashboard-check >/dev/null
fi
echo "[bootstrap] checking the local stack's build cache (the first build takes ~4 minutes on 2 idle cores; the tests add ~1 for Karpenter and metrics-server)" >&2
if $for_tests; then
  .venv/bin/kubetape stack build --autoscaler karpenter --metrics --real-node >/dev/null
else
  .venv/bin/kubetape stack build >/dev/null
fi
