"""Container images for the real node (:mod:`pipeline.stack.real_node`), made here with buildah, since no
container registry is reachable from the machines the stack runs on.

* The sandbox ("pause") image: ``resources/real-node/pause.c`` compiled static, alone in an image.
* The stand-in for ``python:3.11-slim``, the Dockerfile's base: Debian 12's own Python 3.11, installed
  by ``mmdebstrap`` from Debian's packages, with a virtual environment at ``/usr/local`` so that
  ``pip install --prefix`` and ``COPY /install /usr/local`` put kubetape where the official image's
  Python finds it (docs/stack.md, "A real node", says what else differs).
* kubetape's image: the repository's Dockerfile, unchanged, built by ``buildah bud``.

Images live in buildah's own store under the build cache (vfs driver: no overlay mounts left behind),
and reach the node's containerd as docker archives (``ctr images import``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.machine_locks import build_once, machine_lock
from pipeline.stack.processes import require_tool, run_logged
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import cache_root

RESOURCES = Path(__file__).parent / "resources" / "real-node"
CHECKOUT = Path(__file__).resolve().parents[2]
SANDBOX_IMAGE = "kubetape.local/pause:3.10"
"""The node's sandbox image (containerd's ``sandbox_image``): made locally, never pulled."""
PYTHON_BASE_IMAGE = "docker.io/library/python:3.11-slim"
"""The name the Dockerfile's ``FROM python:3.11-slim`` resolves to; the stand-in is stored under it."""
KUBETAPE_IMAGE = "docker.io/library/kubetape:dev"
"""kubetape's image as the Dockerfile's header builds it (``docker build -t kubetape:dev .``)."""
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# python3-venv for the environment at /usr/local (pip comes with it, from Debian's wheel); the headers
# because the Dockerfile's build stage compiles the sink's C extension against them.
BASE_PACKAGES = ("python3", "python3-venv", "libpython3.11-dev", "ca-certificates")
BASE_LAYOUT = "kt1"
"""Bumped when the stand-in base is made differently, so that an older one is not taken for it."""
# What a Python slim image leaves out as well: documentation, manuals and locales.
_SLIM_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
_CONTEXT = ("Dockerfile", "pyproject.toml", "setup.py", "README.md", "pipeline", "services")
"""What the Dockerfile reads from the checkout (its COPY lines), hashed into the image's cache key."""


@dataclass(frozen=True, slots=True)
class Buildah:
    """buildah with the stack's own image store (``<cache>/images/buildah``)."""

    binary: str
    store: Path

    @classmethod
    def for_stack(cls) -> Buildah:
        binary = require_tool("buildah", "build the real node's images (`apt-get install buildah`)")
        return cls(binary, cache_root() / "images" / "buildah")

    def argv(self, *args: str) -> list[str]:
        return [
            self.binary,
            "--root",
            str(self.store / "root"),
            "--runroot",
            str(self.store / "run"),
            "--storage-driver",
            "vfs",
            *args,
        ]

    def run(self, *args: str) -> str:
        done = subprocess.run(self.argv(*args), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise StackError(f"`buildah {' '.join(args[:3])}` failed: {done.stderr.strip()[-1500:]}")
        return done.stdout.strip()

    def has_image(self, name: str) -> bool:
        listed = subprocess.run(
            self.argv("images", "--quiet", name), capture_output=True, text=True, check=False
        )
        return listed.returncode == 0 and bool(listed.stdout.strip())

    def archive(self, image: str, path: Path) -> Path:
        """Write ``image`` as a docker archive (the form ``ctr images import`` names as it was tagged)."""
        partial = path.with_name(path.name + ".partial")
        partial.unlink(missing_ok=True)
        self.run("push", "--quiet", image, f"docker-archive:{partial}:{image}")
        partial.replace(path)
        return path

    def commit_rootfs(self, image: str, add: list[tuple[Path, str]], config: list[str]) -> None:
        """An image ``image`` from scratch holding ``add`` (host path, path in the image; a tar is
        unpacked) with ``buildah config`` arguments ``config``."""
        container = self.run("from", "scratch")
        try:
            for source, target in add:
                self.run("add", container, str(source), target)
            if config:
                self.run("config", *config, container)
            self.run("commit", "--quiet", container, image)
        finally:
            subprocess.run(self.argv("rm", container), capture_output=True, check=False)


def images_dir() -> Path:
    return cache_root() / "images"


def ensure_sandbox_archive(report: Reporter) -> Path:
    """The sandbox image as a docker archive, made on first use (a static binary of a few hundred KB)."""
    source = (RESOURCES / "pause.c").read_bytes()
    key = f"pause-{hashlib.sha256(source).hexdigest()[:12]}"
    archive = images_dir() / f"{key}.tar"
    return build_once(key, archive, functools.partial(_make_sandbox, archive, report), report)


def _make_sandbox(archive: Path, report: Reporter) -> Path:
    gcc = require_tool("gcc", "compile the real node's sandbox (pause) process")
    work = archive.with_suffix(".work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    binary = work / "pause"
    built = subprocess.run(
        [gcc, "-static", "-Os", "-s", "-o", str(binary), str(RESOURCES / "pause.c")],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise StackError(
            f"compiling the sandbox process failed (static linking needs libc6-dev): {built.stderr[-800:]}"
        )
    buildah = Buildah.for_stack()
    # 65535: the unprivileged user upstream's pause image runs as
    buildah.commit_rootfs(
        SANDBOX_IMAGE, [(binary, "/pause")], ["--entrypoint", '["/pause"]', "--user", "65535:65535"]
    )
    buildah.archive(SANDBOX_IMAGE, archive)
    shutil.rmtree(work, ignore_errors=True)
    report(f"sandbox image {SANDBOX_IMAGE} made ({archive.stat().st_size // 1024} KiB)")
    return archive


def ensure_python_base(report: Reporter) -> str:
    """Make the stand-in for ``python:3.11-slim`` in buildah's store on first use; returns its name."""
    buildah = Buildah.for_stack()
    marker = images_dir() / f"python-base-{DEBIAN_SUITE}-{BASE_LAYOUT}.complete"
    if marker.exists() and buildah.has_image(PYTHON_BASE_IMAGE):
        return PYTHON_BASE_IMAGE
    with machine_lock(marker.stem):
        if not (marker.exists() and buildah.has_image(PYTHON_BASE_IMAGE)):
            _make_python_base(buildah, marker, report)
    return PYTHON_BASE_IMAGE


def _make_python_base(buildah: Buildah, marker: Path, report: Reporter) -> None:
    mmdebstrap = require_tool("mmdebstrap", "make the Python base image from Debian's packages")
    rootfs = marker.with_suffix(".tar")
    started = time.monotonic()
    run_logged(
        [
            mmdebstrap,
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            *(f"--dpkgopt=path-exclude={pattern}" for pattern in _SLIM_EXCLUDES),
            '--customize-hook=chroot "$1" python3 -m venv /usr/local',
            # static copies of libpython, for embedding Python in a program: no build here uses them
            '--customize-hook=rm -f "$1"/usr/lib/python3.11/config-3.11-*/libpython3.11*.a',
            "--format=tar",
            DEBIAN_SUITE,
            str(rootfs),
            DEBIAN_MIRROR,
        ],
        step=f"Python base image: Debian {DEBIAN_SUITE} with python3 (mmdebstrap; first use only)",
        report=report,
        log_file=cache_root() / "logs" / "python-base.log",
    )
    buildah.commit_rootfs(
        PYTHON_BASE_IMAGE,
        [(rootfs, "/")],
        [
            "--env",
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--env",
            "LANG=C.UTF-8",
            "--cmd",
            '["python3"]',
        ],
    )
    rootfs.unlink(missing_ok=True)
    marker.write_text(json.dumps({"built": time.time(), "seconds": round(time.monotonic() - started)}))


def checkout_digest() -> str:
    """A hash of what the Dockerfile copies from the checkout: a change to any of it builds anew."""
    digest = hashlib.sha256()
    for name in _CONTEXT:
        path = CHECKOUT / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if "__pycache__" in file.parts or file.suffix in (".so", ".pyc"):
                continue
            digest.update(str(file.relative_to(CHECKOUT)).encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def ensure_kubetape_archive(report: Reporter) -> Path:
    """kubetape's image, built from the repository's Dockerfile on first use after a change to what it
    copies, as a docker archive for the node's containerd."""
    key = f"kubetape-image-{checkout_digest()}"
    archive = images_dir() / f"{key}.tar"
    return build_once(key, archive, functools.partial(_build_kubetape, archive, report), report)


def _build_kubetape(archive: Path, report: Reporter) -> Path:
    ensure_python_base(report)
    buildah = Buildah.for_stack()
    started = time.monotonic()
    run_logged(
        buildah.argv(
            "bud",
            # the base is the local stand-in: never look for it in a registry
            "--pull-never",
            # the build stage's apt-get and pip reach Debian's archive and PyPI as the host does;
            # the image's containers on the node get no such network (docs/stack.md)
            "--network",
            "host",
            *_host_trust_mounts(),
            "--file",
            str(CHECKOUT / "Dockerfile"),
            "--tag",
            KUBETAPE_IMAGE,
            str(CHECKOUT),
        ),
        step="kubetape image: buildah bud of the repository's Dockerfile (first use after a change)",
        report=report,
        log_file=cache_root() / "logs" / "kubetape-image.log",
        heartbeat_s=60.0,
    )
    buildah.archive(KUBETAPE_IMAGE, archive)
    _drop_older_builds(buildah, archive)
    # an uncompressed docker archive: its layers as the node unpacks them, plus a few KB of manifests
    report(
        f"kubetape image {KUBETAPE_IMAGE} built in {time.monotonic() - started:.0f}s "
        f"({archive.stat().st_size / 1e6:.0f} MB uncompressed)"
    )
    return archive


def _drop_older_builds(buildah: Buildah, kept: Path) -> None:
    """Delete earlier builds of kubetape's image: the vfs store keeps every image as full copies of its
    layers (half a GB each), and a build is made for every change to the checkout. Images no name
    points at any more (the previous ``kubetape:dev``) are pruned; the Python base stays."""
    subprocess.run(buildah.argv("rmi", "--prune"), capture_output=True, check=False)
    for older in images_dir().glob("kubetape-image-*.tar"):
        if older != kept:
            older.unlink(missing_ok=True)


def _host_trust_mounts() -> list[str]:
    """``--volume`` options lending the build's RUN steps the host's CA bundle and pip configuration:
    where the machine reaches PyPI through a TLS-inspecting proxy, pip inside the build trusts what the
    host's pip trusts. They are mounted for the build only; the image keeps Debian's own bundle."""
    mounts: list[str] = []
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if bundle.is_file():
        mounts += ["--volume", f"{bundle}:{bundle}:ro"]
    pip_conf = Path("/etc/pip.conf")
    if pip_conf.is_file():
        mounts += ["--volume", f"{pip_conf}:{pip_conf}:ro"]
    return mounts
