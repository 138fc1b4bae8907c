"""One KWOK cluster of a stack: where its files are, and its ``kwokctl`` and ``kubectl``."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.kwok.profiles import PROFILES, ClusterProfile

RESOURCES = Path(__file__).parent.parent / "resources"
DEFAULT_NODE_SKELETON = RESOURCES / "node-skeleton.yaml"
# Replayed and test pods carrying this annotation (a Go duration or RFC3339 time) complete when it elapses.
LIFETIME_ANNOTATION = "kubetape.dev/lifetime"


@dataclass(frozen=True, slots=True)
class KwokCluster:
    """One named KWOK cluster of a stack."""

    name: str
    workdir: Path  # the stack's KWOK_WORKDIR
    bin_dir: Path
    profile: ClusterProfile = PROFILES["default"]
    metrics_server: Path | None = None
    """The metrics-server binary, for a cluster that serves the Metrics API over KWOK's emulated
    kubelet metrics (created with it; a restart keeps it)."""

    @property
    def cluster_dir(self) -> Path:
        return self.workdir / "clusters" / self.name

    @property
    def kubeconfig(self) -> Path:
        return self.cluster_dir / "kubeconfig.yaml"

    @property
    def profile_path(self) -> Path:
        """The name of the profile the cluster was created with (beside kwokctl's files, which a
        restart of the cluster keeps)."""
        return self.workdir / f"profile-{self.name}.txt"

    @property
    def metrics_marker(self) -> Path:
        """Present when the cluster was created with metrics-server."""
        return self.workdir / f"metrics-{self.name}.txt"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # kwokctl finds kubectl with LookPath and would otherwise download it: keep ours first on PATH.
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["KWOK_WORKDIR"] = str(self.workdir)
        return env

    def kwokctl(self, *args: str, timeout_s: float = 300.0) -> str:
        argv = [str(self.bin_dir / "kwokctl"), "--name", self.name, *args]
        try:
            result = subprocess.run(
                argv, env=self.env(), capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(
                f"`kwokctl {' '.join(args)}` for cluster {self.name!r} timed out after {timeout_s:.0f}s"
            ) from exc
        if result.returncode != 0:
            raise StackError(
                f"`kwokctl {' '.join(args)}` for cluster {self.name!r} failed "
                f"(exit {result.returncode}): {(result.stderr or result.stdout).strip()[-1500:]}"
            )
        return result.stdout

    def kubectl(self, *args: str, stdin: str | None = None, timeout_s: float = 120.0) -> str:
        argv = [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        try:
            result = subprocess.run(
                argv, input=stdin, capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise StackError(
                f"`kubectl {' '.join(args)}` on cluster {self.name!r} timed out after {timeout_s:.0f}s: "
                "its apiserver is overloaded or down (its log: "
                f"{self.cluster_dir / 'logs' / 'kube-apiserver.log'})"
            ) from exc
        if result.returncode != 0:
            raise StackError(
                f"`kubectl {' '.join(args)}` on cluster {self.name!r} failed: {result.stderr.strip()[-1500:]}"
            )
        return result.stdout
