"""A real node in a stack cluster: a kubelet (built from the stack's Go module at the control plane's
version) over containerd and runc from Debian's packages, registered beside the cluster's KWOK nodes.

Everything it makes is the stack's own and is removed by :func:`stop`:

* processes: containerd, the kubelet, containerd's shims and the pods' processes (found by the cgroup
  root this node alone uses, ``/kubetape-<id>`` in every cgroup hierarchy, and by the socket path
  in the shims' command lines);
* mounts: the kubelet's volume mounts, containerd's root filesystems, shm and network namespace mounts
  are all under the node's directory (``<stack dir>/real-node``; containerd's
  ``netns_mounts_under_state_dir``);
* no iptables rules (``makeIPTablesUtilChains: false``) and no network interface.

Networking: pods with ``hostNetwork: true`` share the machine's network, bound to loopback like the
rest of the stack. Other pods would get a network namespace with a loopback interface only and no
route (the one CNI network is the ``loopback`` plugin): containerd refuses them for want of a pod IP,
so a misrouted packet can never leave. The ``kubernetes`` Service's ClusterIP routes nowhere (no
kube-proxy): a pod reaches the apiserver by setting ``KUBERNETES_SERVICE_HOST=127.0.0.1`` and
``KUBERNETES_SERVICE_PORT`` to the apiserver's port (:func:`in_cluster_env`), which the kubelet lets
a container's own env override; the service account token and CA are mounted as in any cluster.

Settings this machine needs (docs/stack.md, "A real node"): the cgroup v1 hierarchy is accepted
(``failCgroupV1: false``, ``cgroupDriver: cgroupfs``), and containerd's CRI never lowers a
container's ``oom_score_adj`` (``restrict_oom_score_adj``), since root here lacks CAP_SYS_RESOURCE.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipeline.model.errors import StackError
from pipeline.stack.build import ensure_kubelet
from pipeline.stack.kwok.cluster import KwokCluster
from pipeline.stack.kwok.components import component_command, flag_values, restart_component
from pipeline.stack.node_images import SANDBOX_IMAGE, ensure_sandbox_archive
from pipeline.stack.ports import free_port
from pipeline.stack.processes import (
    http_probe,
    log_tail,
    pid_alive,
    require_tool,
    spawn_detached,
    terminate_process_group,
    wait_until_ready,
)
from pipeline.stack.progress import Reporter
from pipeline.stack.versions import StackVersions

NODE_LABEL = "kubetape.dev/real-node"
"""Set to ``true`` on the real node: a pod selects it with ``nodeSelector`` (KWOK's nodes lack it)."""
KWOK_MANAGED_ONLY = {
    "manage-all-nodes": "false",
    "manage-nodes-with-annotation-selector": "kwok.x-k8s.io/node=fake",
}
"""kwokctl's binary runtime runs KWOK with ``--manage-all-nodes=true``, and KWOK would then fake the
status of the real node's pods over the kubelet's. With these flags it manages only the nodes annotated
``kwok.x-k8s.io/node: fake``, which every node the stack and the replayer make is."""
CGROUP_ROOT = Path("/sys/fs/cgroup")
CNI_PLUGINS = Path("/usr/lib/cni")
CONTAINERD_NAMESPACE = "k8s.io"
_SOCKET_LIMIT = 100
"""A unix socket's path must fit in 108 bytes; containerd appends ``.ttrpc``."""


@dataclass(slots=True)
class RealNodeState:
    """The real node of a stack, as ``state.json`` keeps it."""

    cluster: str
    node: str
    directory: str
    cgroup_parent: str
    """The kubelet's ``cgroupRoot``: a cgroup of this node alone, in every hierarchy."""
    kubelet_port: int
    healthz_port: int
    containerd_pid: int | None = None
    kubelet_pid: int | None = None

    @property
    def layout(self) -> NodeLayout:
        return NodeLayout(Path(self.directory))


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """Where the real node keeps its files, all under one directory."""

    directory: Path

    @property
    def containerd_config(self) -> Path:
        return self.directory / "containerd.toml"

    @property
    def socket(self) -> Path:
        return self.directory / "run" / "containerd.sock"

    @property
    def containerd_root(self) -> Path:
        return self.directory / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.directory / "run" / "state"

    @property
    def runc_root(self) -> Path:
        return self.directory / "run" / "runc"

    @property
    def cni_config_dir(self) -> Path:
        return self.directory / "cni"

    @property
    def kubelet_root(self) -> Path:
        return self.directory / "kubelet"

    @property
    def pod_logs(self) -> Path:
        return self.directory / "pod-logs"

    @property
    def kubelet_config(self) -> Path:
        return self.directory / "kubelet-config.json"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubelet.kubeconfig"

    @property
    def pki(self) -> Path:
        return self.directory / "pki"

    @property
    def containerd_log(self) -> Path:
        return self.directory / "logs" / "containerd.log"

    @property
    def kubelet_log(self) -> Path:
        return self.directory / "logs" / "kubelet.log"


def node_name(cluster: KwokCluster) -> str:
    return f"{cluster.name}-real-node"


def cgroup_parent_for(directory: Path) -> str:
    """The cgroup this node's pods live under: named for its directory, so that stacks side by side
    each get their own and ``stop`` finds every process of this one."""
    return "/kubetape-" + hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:12]


def require_node_tools() -> dict[str, str]:
    """The host programs a real node runs, or a clear error naming the Debian packages."""
    hint = "(Debian: `apt-get install containerd runc containernetworking-plugins buildah`)"
    tools = {
        name: require_tool(name, f"run the real node {hint}")
        for name in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "openssl")
    }
    if not (CNI_PLUGINS / "loopback").exists():
        raise StackError(f"{CNI_PLUGINS / 'loopback'} is missing: the real node needs it {hint}")
    if not (CGROUP_ROOT / "memory").is_dir() and not (CGROUP_ROOT / "cgroup.controllers").exists():
        raise StackError(f"no cgroup hierarchy under {CGROUP_ROOT}: the kubelet cannot run here")
    return tools


def start(
    cluster: KwokCluster,
    directory: Path,
    versions: StackVersions,
    report: Reporter,
    existing: RealNodeState | None = None,
    *,
    record: Callable[[RealNodeState], None],
) -> RealNodeState:
    """Start containerd and a kubelet registered with ``cluster`` (again, on the same ports, when
    ``existing`` describes a node that stopped); returns once the node is Ready. ``record`` saves the
    node's state as each process starts, so that a start failing later leaves them to :func:`stop`."""
    tools = require_node_tools()
    kubelet = ensure_kubelet(versions, report)
    layout = NodeLayout(directory)
    if len(str(layout.socket)) > _SOCKET_LIMIT:
        raise StackError(
            f"the real node's socket path {layout.socket} is too long for a unix socket; "
            "use a shorter KUBETAPE_STACK_DIR"
        )
    if existing is None:
        kubelet_port, healthz_port = free_port(), free_port()
        state = RealNodeState(
            cluster=cluster.name,
            node=node_name(cluster),
            directory=str(directory),
            cgroup_parent=cgroup_parent_for(directory),
            kubelet_port=kubelet_port,
            healthz_port=healthz_port,
        )
    else:
        state = existing
    for path in (layout.pki, layout.cni_config_dir, layout.pod_logs, layout.kubelet_root):
        path.mkdir(parents=True, exist_ok=True)
    _write_containerd_config(layout)
    if not (state.containerd_pid and pid_alive(state.containerd_pid)):
        state.containerd_pid = _start_containerd(tools["containerd"], layout, state, record)
    sandbox = ensure_sandbox_archive(report)
    _ctr(tools["ctr"], layout, "images", "import", str(sandbox))
    _make_cgroup_parent(state.cgroup_parent)
    _write_credentials(tools["openssl"], cluster, layout, state.node)
    _write_kubelet_config(layout, state, cluster.cluster_dir / "pki" / "ca.crt")
    _leave_node_to_kubelet(cluster, report)
    if not (state.kubelet_pid and pid_alive(state.kubelet_pid)):
        state.kubelet_pid = _start_kubelet(kubelet, layout, state, record)
    wait_ready(cluster, state)
    _advertise_loopback(cluster, state.node)
    return state


def _advertise_loopback(cluster: KwokCluster, node: str) -> None:
    """Give the node the address 127.0.0.1. The kubelet refuses a loopback ``--node-ip`` and then sets
    no address at all (it never overwrites one either): without one, hostNetwork pods get no pod IP, so
    probes and ``$(POD_IP)`` have nothing to point at. Only InternalIP: a Hostname address would have
    the apiserver look the node's name up in DNS."""
    addresses = {"status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}}
    cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge", "-p", json.dumps(addresses)
    )


def _leave_node_to_kubelet(cluster: KwokCluster, report: Reporter) -> None:
    """Restart the cluster's KWOK controller with :data:`KWOK_MANAGED_ONLY`, unless it has them (a
    ``kwokctl start`` of a stopped cluster starts it as created: ``stack up --real-node`` sets them
    again)."""
    argv = component_command(cluster, "kwok-controller")
    if argv is not None and all(flag_values(argv).get(k) == v for k, v in KWOK_MANAGED_ONLY.items()):
        return
    report(f"cluster {cluster.name!r}: KWOK restarted to manage only its annotated nodes")
    restart_component(cluster, "kwok-controller", KWOK_MANAGED_ONLY)


def _write_containerd_config(layout: NodeLayout) -> None:
    d = layout
    # containerd's TOML is written by hand: every value is a path or a constant, quoted by json.dumps.
    q = json.dumps
    text = f"""version = 2
root = {q(str(d.containerd_root))}
state = {q(str(d.containerd_state))}
# the /opt plugin installs into /opt/containerd; the others need kernel features the node does not use
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = {q(str(d.socket))}

[ttrpc]
  address = {q(str(d.socket) + ".ttrpc")}

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {q(SANDBOX_IMAGE)}
  # root here lacks CAP_SYS_RESOURCE: lowering the sandbox's oom_score_adj fails every pod
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  # network namespaces are mounted under the state directory, which stop() sweeps
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = {q(str(d.runc_root))}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {q(str(CNI_PLUGINS))}
    conf_dir = {q(str(d.cni_config_dir))}
"""
    layout.containerd_config.parent.mkdir(parents=True, exist_ok=True)
    layout.containerd_config.write_text(text)
    # The node's one network: a loopback interface and nothing else, so no packet can be routed out.
    network = {"cniVersion": "1.0.0", "name": "kubetape-no-route", "plugins": [{"type": "loopback"}]}
    (layout.cni_config_dir / "10-no-route.conflist").write_text(json.dumps(network, indent=2) + "\n")


def _start_containerd(
    binary: str, layout: NodeLayout, state: RealNodeState, record: Callable[[RealNodeState], None]
) -> int:
    layout.socket.parent.mkdir(parents=True, exist_ok=True)
    pid = spawn_detached([binary, "--config", str(layout.containerd_config)], log_file=layout.containerd_log)
    state.containerd_pid = pid
    record(state)

    def serving() -> str | None:
        return None if layout.socket.exists() else f"no socket at {layout.socket} yet"

    wait_until_ready("containerd", pid, serving, log_file=layout.containerd_log, timeout_s=60.0)
    return pid


def _ctr(ctr: str, layout: NodeLayout, *args: str) -> str:
    argv = [ctr, "--address", str(layout.socket), "--namespace", CONTAINERD_NAMESPACE, *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise StackError(f"`ctr {' '.join(args[:2])}` on the real node failed: {done.stderr.strip()[-800:]}")
    return done.stdout


def import_image(archive: Path, layout: NodeLayout) -> None:
    """Load a docker or OCI archive into the node's containerd, where the kubelet finds it by name."""
    ctr = require_tool("ctr", "load images into the real node (Debian: `apt-get install containerd`)")
    _ctr(ctr, layout, "images", "import", str(archive))


def _cgroup_hierarchies() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, the named systemd one, the v2 ``unified``)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]  # cgroup v2 alone
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink())


def _make_cgroup_parent(parent: str) -> None:
    # the kubelet refuses a cgroupRoot that does not exist in every hierarchy it uses
    for hierarchy in _cgroup_hierarchies():
        (hierarchy / parent.lstrip("/")).mkdir(exist_ok=True)


def _write_credentials(openssl: str, cluster: KwokCluster, layout: NodeLayout, node: str) -> None:
    """The kubelet's client certificate, as the Node authorizer expects it (``system:node:NAME`` in
    ``system:nodes``), signed by the cluster's CA, and its kubeconfig."""
    ca = cluster.cluster_dir / "pki"
    # not kubelet.crt/.key: those are the names of the serving certificate the kubelet makes in --cert-dir
    key, cert = layout.pki / "client.key", layout.pki / "client.crt"
    if not cert.exists():
        csr = layout.pki / "client.csr"
        commands = [
            [openssl, "genrsa", "-out", str(key), "2048"],
            [
                openssl,
                "req",
                "-new",
                "-key",
                str(key),
                "-subj",
                f"/O=system:nodes/CN=system:node:{node}",
                "-out",
                str(csr),
            ],
            [
                openssl,
                "x509",
                "-req",
                "-in",
                str(csr),
                "-CA",
                str(ca / "ca.crt"),
                "-CAkey",
                str(ca / "ca.key"),
                "-CAcreateserial",
                "-CAserial",
                str(layout.pki / "ca.srl"),
                "-days",
                "365",
                "-out",
                str(cert),
            ],
        ]
        for argv in commands:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise StackError(f"making the kubelet's certificate failed: {done.stderr.strip()[-500:]}")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster.name,
                "cluster": {"server": apiserver_url(cluster), "certificate-authority": str(ca / "ca.crt")},
            }
        ],
        "users": [{"name": node, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": node, "context": {"cluster": cluster.name, "user": node}}],
        "current-context": node,
    }
    layout.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")


def apiserver_url(cluster: KwokCluster) -> str:
    """The cluster's apiserver (``https://127.0.0.1:PORT``), as its kubeconfig names it."""
    for line in cluster.kubeconfig.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("server:"):
            return stripped.split(":", 1)[1].strip()
    raise StackError(f"{cluster.kubeconfig} names no server")


def in_cluster_env(cluster: KwokCluster) -> dict[str, str]:
    """What a hostNetwork pod on the real node sets so that ``load_incluster_config`` reaches the
    apiserver: the ``kubernetes`` Service's ClusterIP the kubelet injects routes nowhere here."""
    host_port = apiserver_url(cluster).removeprefix("https://")
    host, port = host_port.rsplit(":", 1)
    return {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}


def _write_kubelet_config(layout: NodeLayout, state: RealNodeState, cluster_ca: Path) -> None:
    config = {
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        # this machine's cgroup v1 hierarchy: refused by default since 1.35
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": state.cgroup_parent,
        "address": "127.0.0.1",
        "port": state.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": state.healthz_port,
        "containerRuntimeEndpoint": f"unix://{layout.socket}",
        "podLogsDir": str(layout.pod_logs),
        "volumePluginDir": str(layout.directory / "volume-plugins"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            # the apiserver's client certificate (logs, exec) is signed by the cluster's CA
            "x509": {"clientCAFile": str(cluster_ca)},
        },
        "authorization": {"mode": "Webhook"},
        # no iptables chains or rules: nothing on the machine outlives the node
        "makeIPTablesUtilChains": False,
        "failSwapOn": False,
        "resolvConf": "",
        "clusterDomain": "cluster.local",
        # the shared machine's disk and memory are not this node's to guard
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "rotateCertificates": False,
        "nodeStatusUpdateFrequency": "10s",
    }
    layout.kubelet_config.write_text(json.dumps(config, indent=2) + "\n")


def _start_kubelet(
    binary: Path, layout: NodeLayout, state: RealNodeState, record: Callable[[RealNodeState], None]
) -> int:
    argv = [
        str(binary),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={layout.kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--cert-dir={layout.pki / 'serving'}",
        f"--hostname-override={state.node}",
        "--node-ip=127.0.0.1",
        f"--node-labels={NODE_LABEL}=true",
    ]
    pid = spawn_detached(argv, log_file=layout.kubelet_log)
    state.kubelet_pid = pid
    record(state)
    url = f"http://127.0.0.1:{state.healthz_port}/healthz"
    wait_until_ready(
        "the real node's kubelet",
        pid,
        http_probe(url),
        log_file=layout.kubelet_log,
        timeout_s=120.0,
        progress=lambda: layout.kubelet_log.stat().st_size,
    )
    return pid


def node_ready(cluster: KwokCluster, node: str) -> str | None:
    """None when ``node`` is Ready in ``cluster``; else what its Ready condition says."""
    try:
        raw = cluster.kubectl("get", "node", node, "-o", "json", timeout_s=20.0)
    except StackError as exc:
        return str(exc)[-300:]
    conditions = json.loads(raw).get("status", {}).get("conditions", [])
    for condition in conditions:
        if condition.get("type") == "Ready":
            if condition.get("status") == "True":
                return None
            return f"Ready={condition.get('status')}: {condition.get('message')}"
    return "no Ready condition yet"


def wait_ready(cluster: KwokCluster, state: RealNodeState, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    last = "not registered yet"
    while time.monotonic() < deadline:
        if state.kubelet_pid and not pid_alive(state.kubelet_pid):
            raise StackError(
                f"the real node's kubelet exited; see {state.layout.kubelet_log}:\n"
                + log_tail(state.layout.kubelet_log)
            )
        seen = node_ready(cluster, state.node)
        if seen is None:
            return
        last = seen
        time.sleep(1.0)
    raise StackError(
        f"node {state.node} did not become Ready within {timeout_s:.0f}s (last: {last}); see "
        f"{state.layout.kubelet_log}:\n{log_tail(state.layout.kubelet_log)}"
    )


def status(state: RealNodeState, cluster: KwokCluster | None) -> dict[str, object]:
    """What ``stack status`` shows of the node."""
    running = bool(state.kubelet_pid and pid_alive(state.kubelet_pid)) and bool(
        state.containerd_pid and pid_alive(state.containerd_pid)
    )
    ready = running and cluster is not None and node_ready(cluster, state.node) is None
    return {
        "cluster": state.cluster,
        "node": state.node,
        "running": running,
        "ready": ready,
        "kubelet_pid": state.kubelet_pid,
        "containerd_pid": state.containerd_pid,
        "containerd_socket": str(state.layout.socket),
        "logs": [str(state.layout.kubelet_log), str(state.layout.containerd_log)],
    }


# ---- teardown ---------------------------------------------------------------------------------


def stop(state: RealNodeState) -> None:
    """Stop the node and remove every process, mount and cgroup it made; a StackError listing what is
    left when something could not be removed."""
    layout = state.layout
    for pid in (state.kubelet_pid,):
        if pid:
            terminate_process_group(pid, grace_s=10.0)
    state.kubelet_pid = None
    # The pods' processes: everything in this node's cgroups, killed outright (the kubelet that would
    # stop them gracefully is gone; a recording pod's loss on SIGKILL is what kubetape guards anyway).
    for _ in range(3):
        pids = _pids_in_cgroup(state.cgroup_parent)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)
    if state.containerd_pid:
        terminate_process_group(state.containerd_pid, grace_s=10.0)
    state.containerd_pid = None
    # containerd's shims outlive it (each in its own session): found by the socket they were given
    for pid in _shim_pids(layout):
        terminate_process_group(pid, grace_s=5.0)
    _unmount_under(layout.directory)
    _remove_cgroups(state.cgroup_parent)
    _remove_container_log_links(layout)
    # containerd's shims put their sockets in this fixed directory, whatever the state directory; once
    # they are gone it is empty, and removed unless another containerd of the machine uses it
    for empty in (_SHIM_SOCKETS, _SHIM_SOCKETS.parent):
        with contextlib.suppress(OSError):
            empty.rmdir()
    left = leftovers(state)
    if left:
        raise StackError("the real node left behind:\n" + "\n".join(left))


def _pids_in_cgroup(parent: str) -> list[int]:
    pids: set[int] = set()
    for hierarchy in _cgroup_hierarchies():
        root = hierarchy / parent.lstrip("/")
        if not root.is_dir():
            continue
        for procs in root.rglob("cgroup.procs"):
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in procs.read_text().split())
    return sorted(pids)


def _shim_pids(layout: NodeLayout) -> list[int]:
    """Processes whose command line names this node's directory (containerd's shims)."""
    marker = str(layout.directory).encode()
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if marker in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory.resolve())
    mounts: list[str] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == prefix or point.startswith(prefix + "/"):
            mounts.append(point)
    return mounts


def _unmount_under(directory: Path) -> None:
    # deepest first: a volume mounted inside a pod's directory before the directory's own tmpfs
    for point in sorted(_mounts_under(directory), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


def _remove_cgroups(parent: str) -> None:
    for hierarchy in _cgroup_hierarchies():
        root = hierarchy / parent.lstrip("/")
        if not root.is_dir():
            continue
        # cgroup directories are removed with rmdir, children before parents
        for directory in sorted(
            (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True
        ):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            root.rmdir()


_CONTAINER_LOG_LINKS = Path("/var/log/containers")
_SHIM_SOCKETS = Path("/run/containerd/s")


def _remove_container_log_links(layout: NodeLayout) -> None:
    """The kubelet links each container's log into /var/log/containers (a fixed path): remove the
    links into this node's pod logs."""
    for link in _container_log_links(layout):
        link.unlink(missing_ok=True)


def _container_log_links(layout: NodeLayout) -> list[Path]:
    if not _CONTAINER_LOG_LINKS.is_dir():
        return []
    target = str(layout.pod_logs)
    return [
        link
        for link in _CONTAINER_LOG_LINKS.iterdir()
        if link.is_symlink() and os.readlink(link).startswith(target)
    ]


def leftovers(state: RealNodeState) -> list[str]:
    """Whatever of the node still exists on the machine: processes, mounts, cgroups, log links."""
    layout = state.layout
    left: list[str] = []
    for pid in (state.kubelet_pid, state.containerd_pid):
        if pid and pid_alive(pid):
            left.append(f"process {pid}")
    left += [
        f"process {pid} (in cgroup {state.cgroup_parent})" for pid in _pids_in_cgroup(state.cgroup_parent)
    ]
    left += [f"process {pid} (names {layout.directory})" for pid in _shim_pids(layout)]
    left += [f"mount {point}" for point in _mounts_under(layout.directory)]
    left += [
        f"cgroup {hierarchy / state.cgroup_parent.lstrip('/')}"
        for hierarchy in _cgroup_hierarchies()
        if (hierarchy / state.cgroup_parent.lstrip("/")).exists()
    ]
    left += [f"log link {link}" for link in _container_log_links(layout)]
    return left
