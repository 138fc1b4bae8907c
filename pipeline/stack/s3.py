"""A local S3 server for the stack: s3proxy (``org.gaul:s3proxy``) with its filesystem backend.

The runnable jar (``jar-with-dependencies`` classifier) is fetched from Maven Central with ``mvn
dependency:copy``, like the broker's jars, and runs on the JVM the broker already needs. It listens on
127.0.0.1 only, keeps its objects under ``<stack dir>/s3/data`` (a bucket is a directory there, so the
stack creates the default bucket by making that directory before the start) and checks AWS v2/v4
signatures against one fixed local key pair.

Measured against s3proxy 4.1.0 (``tests/integration/test_store_contract.py`` checks the first two):
``If-None-Match: *`` on a PUT is refused with 412 when the key exists, and ``If-Match`` with a stale ETag
is refused with 412. Creation is atomic (8 concurrent creates of one key: exactly one succeeded in 25 of
25 trials), ``If-Match`` is not (8 concurrent PUTs with the same ETag: up to 2 succeeded), so the S3
segment store raises epochs by creating markers (:mod:`pipeline.store.s3_store`).
"""

from __future__ import annotations

import functools
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.machine_locks import build_once
from pipeline.stack.ports import free_port
from pipeline.stack.processes import (
    http_probe,
    pid_alive,
    port_open,
    require_tool,
    run_logged,
    spawn_detached,
    terminate_process_group,
    wait_until_ready,
)
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import StackVersions, cache_root

BUCKET = "kubetape"
# A local, loopback-only server: fixed credentials, printed by `kubetape stack env`, are not a secret.
ACCESS_KEY = "kubetape-local"
SECRET_KEY = "kubetape-local-secret"
REGION = "us-east-1"
_JVM = ["-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


@dataclass(frozen=True, slots=True)
class S3Layout:
    """Where the local S3 server keeps its config, objects and log, and its port."""

    home: Path
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def properties(self) -> Path:
        return self.home / "s3proxy.properties"

    @property
    def log_file(self) -> Path:
        return self.home / "s3proxy.log"


def s3proxy_jar_path(versions: StackVersions, root: Path | None = None) -> Path:
    name = f"s3proxy-{versions.s3proxy}-jar-with-dependencies.jar"
    return (root or cache_root()) / "s3proxy" / versions.s3proxy / name


def ensure_s3proxy(versions: StackVersions, report: Reporter) -> Path:
    """Return the runnable s3proxy jar, fetching it from Maven Central on first use."""
    build = functools.partial(_fetch_s3proxy, versions, report)
    return build_once(f"s3proxy-{versions.s3proxy}", s3proxy_jar_path(versions), build, report)


def _fetch_s3proxy(versions: StackVersions, report: Reporter) -> Path:
    jar = s3proxy_jar_path(versions)
    require_tool("java", "run the local S3 server (s3proxy)")
    mvn = require_tool("mvn", "fetch s3proxy from Maven Central")
    partial = jar.parent.with_name(jar.parent.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    run_logged(
        [
            mvn,
            "-B",
            "-q",
            "dependency:copy",
            f"-Dartifact=org.gaul:s3proxy:{versions.s3proxy}:jar:jar-with-dependencies",
            f"-DoutputDirectory={partial}",
        ],
        step=f"s3proxy {versions.s3proxy}: fetching the server jar from Maven Central",
        report=report,
        log_file=cache_root() / "logs" / f"s3proxy-{versions.s3proxy}-maven.log",
        cwd=partial,
    )
    if not (partial / jar.name).is_file():
        raise StackError(f"Maven finished but {partial} holds no {jar.name}; see the Maven log.")
    shutil.rmtree(jar.parent, ignore_errors=True)
    partial.rename(jar.parent)
    report(f"s3proxy {versions.s3proxy}: cached in {jar}")
    return jar


def write_config(layout: S3Layout) -> None:
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    (layout.data_dir / BUCKET).mkdir(exist_ok=True)  # the filesystem backend's bucket is a directory
    layout.properties.write_text(
        "\n".join(
            [
                f"s3proxy.endpoint={layout.endpoint}",
                "s3proxy.authorization=aws-v2-or-v4",
                f"s3proxy.identity={ACCESS_KEY}",
                f"s3proxy.credential={SECRET_KEY}",
                "jclouds.provider=filesystem",
                f"jclouds.filesystem.basedir={layout.data_dir}",
                "",
            ]
        )
    )


def start_server(jar: Path, layout: S3Layout) -> int:
    """Start s3proxy detached and return its pid (call :func:`wait_ready` next)."""
    java = require_tool("java", "run the local S3 server (s3proxy)")
    argv = [java, *_JVM, "-jar", str(jar), "--properties", str(layout.properties)]
    return spawn_detached(argv, log_file=layout.log_file, cwd=layout.home)


def wait_ready(layout: S3Layout, pid: int, timeout_s: float = 60.0) -> None:
    """Wait until the server answers HTTP (any S3 reply below 500, an anonymous 403 included: a
    signed-request error is an S3 server answering). ``timeout_s`` counts from the log's last growth:
    on a machine at load 15-50 the JVM took longer than 60 s to start, while still going on."""
    answers = http_probe(f"{layout.endpoint}/", ready_below=500)

    def probe() -> str | None:
        return answers() if port_open(layout.port) else f"port {layout.port} not open yet"

    def log_size() -> int:
        try:
            return layout.log_file.stat().st_size
        except OSError:
            return 0

    wait_until_ready("s3proxy", pid, probe, log_file=layout.log_file, timeout_s=timeout_s, progress=log_size)


def stop_server(pid: int) -> None:
    terminate_process_group(pid, grace_s=10.0)


def env_lines(endpoint: str) -> list[str]:
    """The variables S3 clients (kubetape's included) read to reach the local server."""
    return [
        f"export AWS_ENDPOINT_URL={endpoint}",
        f"export AWS_ACCESS_KEY_ID={ACCESS_KEY}",
        f"export AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
        f"export AWS_REGION={REGION}",
        f"export KUBETAPE_S3_STORE=s3://{BUCKET}/segments",
    ]


def describe(endpoint: str) -> dict[str, object]:
    """What ``stack status`` shows of the server."""
    return {"endpoint": endpoint, "bucket": BUCKET, "access_key_id": ACCESS_KEY, "region": REGION}


@dataclass(slots=True)
class S3State:
    """The server's port (kept across restarts, so URLs stay valid) and pid while it runs."""

    port: int
    pid: int | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def ensure_running(home: Path, state: S3State | None, versions: StackVersions, report: Reporter) -> S3State:
    """Start the server under ``home`` unless ``state`` says it runs; returns the state to save."""
    if state is not None and state.pid and pid_alive(state.pid):
        return state
    jar = ensure_s3proxy(versions, report)
    state = state or S3State(port=free_port())
    layout = S3Layout(home, state.port)
    write_config(layout)
    report(f"s3proxy {versions.s3proxy}: starting on {layout.endpoint} (bucket {BUCKET!r})")
    started = time.monotonic()
    state.pid = start_server(jar, layout)
    try:
        wait_ready(layout, state.pid)
    except StackError:
        # The stack saves this state only once the server is ready, so nothing else would stop it.
        stop_server(state.pid)
        raise
    report(f"s3proxy {versions.s3proxy}: ready in {time.monotonic() - started:.1f}s")
    return state
