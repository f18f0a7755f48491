"""A real node beside kwok's: kubelet, containerd and runc, the CNI plugins, kube-proxy and CoreDNS, all built
from Go modules (localcluster.build), so a lab's pods execute in containers instead of being marked Running.

The node lives in namespaces of its own: one holder process (PID 1 of a new PID namespace, in new mount
and network namespaces) and every component entered into them. Its mounts (a tmpfs on /run, the node's own
/var/lib and /var/log, every container's overlay and volume), its network devices (the pod bridge, each
pod's veth), its iptables rules (kube-proxy's, the CNI plugins') and its ports exist only there. When the
holder dies (stopped, or killed with the supervisor through PR_SET_PDEATHSIG), the kernel kills every
process in its PID namespace, and the namespaces, their mounts, devices and rules go with the last of them.
On the host the node leaves one veth pair (its host end, deleted with the node's) and the kubelet's
cgroups, which `stop` removes.

Addresses, in the lab's own ranges: the host end of the veth takes the first address of the lab's node
subnet, the node the second (its InternalIP); the node's pods take the last /24 of the lab's pod range
(kwok's pods take the first addresses). The host routes that /24 and the Service range through the node,
so the API server reaches pods (a Service's proxy, a pod's port-forward) and the kubelet as on GKE. The API
server listens on host loopback only: a forwarder of ours listens on the node's own loopback at the same
port and carries each connection across, so the kubelet, kube-proxy and CoreDNS use the same URL.

The node is shaped like the lab's GPU pool: its labels and taint, and `nvidia.com/gpu` on its status as an
extended resource (no device behind it). Its CPU and memory are this machine's, as the kubelet reads them.

Like a GKE node it has a system bus (a real dbus-daemon) with logind on it (localcluster.logind), and its
kubelet a graceful node shutdown as GKE configures it for Spot VMs. Powering the node off (logind's PowerOff,
what `systemctl poweroff` calls) is then a preemption: the kubelet fails and stops its pods, the node goes,
and it comes back under the same name with a fresh disk (`_power_cycles`), as a managed instance group recreates
a preempted VM.
"""

from __future__ import annotations

import ctypes
import ipaddress
import json
import os
import queue
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

from components.gpu_pool import GPU_RESOURCE, GPU_TAINT
from localcluster import certs, images, logind, nodes
from facts.simulation import REAL, SIMULATED
from localcluster.build import MODULES, Built

BUILD_MODULES = ("containerd", "runc", "cni", "coredns")  # its build modules, beside kube's kubelet and kube-proxy
HOST_LINK = "gml-node0"  # the veth's host end (one real node per machine at a time)
NODE_LINK = "eth0"
CGROUP_ROOT = "/gke-ml-labs-node"  # the kubelet's cgroupRoot: every pod's cgroup under it, removed at stop
CLUSTER_DOMAIN = "cluster.local"
KUBELET_PORT = 10250  # the kubelet's defaults: free inside the node's own network namespace
COREDNS_READY_PORT = 8181
KUBE_PROXY_HEALTHZ_PORT = 10256
START_TIMEOUT_S = 180.0
# GKE's graceful shutdown of a Spot node: 30 s from the preemption notice, the last 15 of them for system-critical
# pods, so other pods get at most 15 s (GKE's Spot VMs documentation); logind grants the kubelet the 30 s.
SHUTDOWN_GRACE_S = 30
SHUTDOWN_GRACE_CRITICAL_S = 15
BUS = "/run/dbus/system_bus_socket"  # where a node's processes find the system bus, the kubelet included
STOP_TIMEOUT_S = 30.0
CLONE_NEWNET = 0x40000000
BUFFER = 65536

Say = Callable[[str], None]

# PID 1 of the node: mounts the node's private /run, /var/lib and /var/log, says so, then reaps orphans
# (the containers' shims are reparented to it) until it is killed.
_HOLDER = """
import os, subprocess, sys, time
state = sys.argv[1]
for target in ("/var/lib", "/var/log"):
    source = os.path.join(state, "root" + target.replace("/", "-"))
    os.makedirs(source, exist_ok=True)
    subprocess.run(["mount", "--bind", source, target], check=True)
subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "node-run", "/run"], check=True)
open(os.path.join(state, "holder.ready"), "w").close()
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)
"""


class NodeError(Exception):
    """The real node did not come up (or could not be cleaned up): which part, why, its log's last lines."""


def _run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise NodeError(f"{' '.join(command)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


@dataclass(frozen=True)
class Addresses:
    """The node's addresses in the lab's ranges (see the module's docstring)."""

    host: str
    node: str
    prefix: int
    pods: str  # the node's pod /24
    services: str

    @classmethod
    def of(cls, subnet_cidr: str, pods_cidr: str, services_cidr: str) -> Addresses:
        subnet = ipaddress.ip_network(subnet_cidr)
        pods = ipaddress.ip_network(pods_cidr)
        last = list(pods.subnets(new_prefix=24))[-1] if pods.prefixlen <= 24 else pods
        return cls(str(subnet[1]), str(subnet[2]), subnet.prefixlen, str(last), services_cidr)


class _Forwarder:
    """Listens on the node's loopback at `port` and carries each connection to the host's loopback, same port."""

    def __init__(self, holder_pid: int, port: int) -> None:
        self.port = port
        self.listener = self._listen_in(holder_pid, port)
        self.thread = threading.Thread(target=self._serve, name="apiserver-forwarder", daemon=True)
        self.thread.start()

    @staticmethod
    def _listen_in(holder_pid: int, port: int) -> socket.socket:
        """A socket bound in the node's network namespace: setns on a thread of its own (setns changes only
        the calling thread's namespace), the socket keeps the namespace it was made in."""
        made: dict[str, Any] = {}

        def bind() -> None:
            libc = ctypes.CDLL(None, use_errno=True)
            try:
                with open(f"/proc/{holder_pid}/ns/net") as ns:
                    if libc.setns(ns.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns into the node's network namespace")
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(64)
                made["socket"] = sock
            except OSError as e:
                made["error"] = e

        # This thread's namespace changes and it ends: the process's other threads never leave the host's.
        thread = threading.Thread(target=bind)
        thread.start()
        thread.join()
        if "error" in made:
            raise NodeError(f"the API server's forwarder into the node: {made['error']}")
        return made["socket"]

    def _serve(self) -> None:
        while True:
            try:
                inside, _ = self.listener.accept()
            except OSError:
                return  # closed: the node is stopping
            try:
                outside = socket.create_connection(("127.0.0.1", self.port))
            except OSError:
                inside.close()
                continue
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(BUFFER):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        # shutdown wakes the thread blocked in accept(); a bare close would leave the socket (and with it the
        # node's network namespace) alive until that call returned.
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        self.thread.join(timeout=5)


def _toml(tables: dict[str, dict[str, Any]], top: dict[str, Any]) -> str:
    """containerd's configuration: flat tables of strings, numbers, booleans and lists (JSON's spelling of
    each is TOML's)."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in top.items()]
    for name, values in tables.items():
        lines += ["", f"[{name}]", *(f"{k} = {json.dumps(v)}" for k, v in values.items())]
    return "\n".join(lines) + "\n"


@dataclass
class RealNode:
    """One real node of the local cluster (see the module's docstring), started by `start`, gone after `stop`."""

    state: Path
    built: Built
    server: str  # the API server's URL on host loopback
    pki: certs.Pki
    labels: dict[str, str]
    addresses: Addresses
    kubeconfigs: dict[str, Path]
    say: Say = print
    # The control plane's: starts a process (name, command, environment) it tracks and stops.
    launch: Callable[[str, list[str], dict[str, str]], Any] | None = None
    gpus_per_node: int = 1  # nvidia.com/gpu one node of the pool advertises (its time-sharing replicas)
    pool_nodes: int = 1  # how many of the pool's nodes it stands for: its first, or all of them at once
    images: tuple[str, ...] = images.ALWAYS  # the stand-ins it imports (images.for_lab)
    holder: subprocess.Popen | None = None
    forwarder: _Forwarder | None = None
    logind: logind.Logind | None = None
    boot: int = 0  # how many times it started: a recreated node's processes log beside the first boot's
    booted_at: float = 0.0  # when this boot began (epoch seconds)
    # Held while the node stops or is recreated: a stop from elsewhere (the cluster's end) waits for a recreation.
    recreating: threading.Lock = field(default_factory=threading.Lock)
    power_offs: queue.Queue = field(default_factory=queue.Queue)  # logind's power-offs, for the power thread
    power_thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        return nodes.REAL_NODE_NAME

    @property
    def bus_socket(self) -> Path:
        """The node's system bus as this host reaches it (the same bus as /run/dbus/system_bus_socket inside)."""
        return self.state.parent / f"{self.state.name}.bus"

    def power_off_command(self, cwd: Path) -> list[str]:
        """What `systemctl poweroff` on the node asks of its logind: run on this host in `cwd` (the bus's path is
        relative to it), it preempts the node."""
        bus = os.path.relpath(self.bus_socket, cwd)
        return ["dbus-send", f"--bus=unix:path={bus}", "--print-reply", f"--dest={logind.SERVICE}", logind.PATH,
                f"{logind.MANAGER}.PowerOff", "boolean:false"]  # fmt: skip

    @property
    def gpus(self) -> int:
        """nvidia.com/gpu it advertises."""
        return self.gpus_per_node * self.pool_nodes

    # ------------------------------------------------------------------------------------------- start

    def start(self) -> None:
        # The kubelet binds a Unix socket under its root (pod-resources/<10 digits>); a socket path has at most
        # 107 bytes, and past that the kubelet dies with "bind: invalid argument".
        socket_path = self.state / "kubelet" / "pod-resources" / ("0" * 10)
        if len(str(socket_path).encode()) > 107:
            raise NodeError(f"the real node's folder {self.state} is too deep for the kubelet's Unix sockets "
                            f"({len(str(socket_path).encode())} bytes of at most 107): give the cluster a shorter folder")  # fmt: skip
        if Path(f"/sys/class/net/{HOST_LINK}").exists():
            raise NodeError(f"a network device {HOST_LINK} exists: another local cluster's real node is running "
                            "(`make cluster-down`), or one was left (ip link delete " + HOST_LINK + ")")  # fmt: skip
        missing = [tool for tool in ("dbus-daemon", "dbus-send") if shutil.which(tool) is None]
        if missing:
            raise NodeError(f"{' and '.join(missing)} not installed: apt-get install dbus-daemon dbus-bin (the node's system bus)")
        shutil.rmtree(self.state, ignore_errors=True)
        self.state.mkdir(parents=True)
        self.boot += 1
        self.booted_at = time.time()
        _remove_cgroups(CGROUP_ROOT)  # a killed supervisor's, which had no chance to
        _make_cgroups(CGROUP_ROOT)
        self._start_holder()
        self._network()
        port = int(self.server.rsplit(":", 1)[1])
        self.forwarder = _Forwarder(self.holder.pid if self.holder else 0, port)
        self._start_containerd()
        self._import_stand_ins()
        self._start_logind()
        self._start_kubelet()
        self._start_kube_proxy()
        self._start_coredns()

    def _enter(self) -> list[str]:
        """Run a command inside the node's namespaces, dying with the process that entered it."""
        assert self.holder is not None
        return ["nsenter", f"--target={self._pid1()}", "--mount", "--net", "--pid", "--",
                "setpriv", "--pdeathsig", "KILL"]  # fmt: skip

    def in_node_network(self, name: str, command: list[str], hosts: dict[str, str] | None = None) -> list[str]:
        """`command` in the node's network namespace, as a pod with hostNetwork on this node runs, seeing the
        host's files; with `hosts` (name -> address), those names resolve for it as cluster DNS resolves them for
        a pod (an /etc/hosts of its own, bound over the host's in a mount namespace of its own)."""
        enter = ["nsenter", f"--net=/proc/{self._pid1()}/ns/net", "--"]
        if hosts:
            path = self.state / f"hosts-{name}"
            path.write_text(Path("/etc/hosts").read_text() + "".join(f"{ip} {host}\n" for host, ip in hosts.items()))
            enter += ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                      'mount --bind "$0" /etc/hosts && exec "$@"', str(path)]  # fmt: skip
        return [*enter, "setpriv", "--pdeathsig", "KILL", *command]

    def _pid1(self) -> int:
        """The holder's PID 1 (unshare's forked child), as the host sees it."""
        assert self.holder is not None
        children = Path(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children").read_text().split()
        if not children:
            raise NodeError("the node's holder has no child: its namespaces are gone")
        # setpriv execs unshare in place; unshare forks PID 1 of the new PID namespace.
        return int(children[0])

    def _start_holder(self) -> None:
        log = (self.state / "holder.log").open("w")
        self.holder = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL", "unshare", "--fork", "--pid", "--mount-proc", "--net",
             "--propagation", "private", "--kill-child=KILL", "python3", "-c", _HOLDER, str(self.state)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._until(lambda: None if (self.state / "holder.ready").exists() else "mounting /run, /var/lib, /var/log",
                    "the node's namespaces", self.state / "holder.log", self.holder)  # fmt: skip

    def _network(self) -> None:
        a, pid = self.addresses, self._pid1()
        _run("ip", "link", "add", HOST_LINK, "type", "veth", "peer", "name", NODE_LINK, "netns", f"/proc/{pid}/ns/net")
        _run("ip", "addr", "add", f"{a.host}/{a.prefix}", "dev", HOST_LINK)
        _run("ip", "link", "set", HOST_LINK, "up")
        inside = ["nsenter", f"--target={pid}", "--net", "--"]
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{a.node}/{a.prefix}", "dev", NODE_LINK)
        _run(*inside, "ip", "link", "set", NODE_LINK, "up")
        _run(*inside, "ip", "route", "add", "default", "via", a.host)
        # A node forwards its pods' packets, and a bridge's packets pass iptables (kube-proxy's Services
        # between pods on one bridge need it): both per network namespace.
        _run(*inside, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.bridge.bridge-nf-call-iptables=1")
        # The host reaches the node's pods and Services through it; these routes go with the veth.
        for destination in (a.pods, a.services):
            _run("ip", "route", "add", destination, "via", a.node, "dev", HOST_LINK)

    def _until(self, check: Callable[[], str | None], what: str, log: Path, process: Any = None) -> None:
        deadline, reason = time.monotonic() + START_TIMEOUT_S, "no answer yet"
        while time.monotonic() < deadline:
            code = process.poll() if isinstance(process, subprocess.Popen) else (process.exited() if process else None)
            if code is not None:
                raise NodeError(f"{what}: exited with code {code}; last lines of {log}:\n" + _tail(log))
            try:
                answer = check()
            except (httpx.HTTPError, OSError, NodeError) as e:
                answer = f"{type(e).__name__}: {e}"
            if answer is None:
                self.say(f"  {what}: up")
                return
            reason = answer
            time.sleep(0.5)
        raise NodeError(f"{what} not up after {START_TIMEOUT_S:.0f} s: {reason}; last lines of {log}:\n" + _tail(log))

    def _launch(self, name: str, *args: str, env: dict[str, str] | None = None) -> Any:
        assert self.launch is not None
        return self.launch(name if self.boot <= 1 else f"{name}-boot{self.boot}", [*self._enter(), *args], env or {})

    # In the node's own /run: a unix socket's path may not exceed 104 bytes, which a test's state folder
    # does; the host reaches it by entering the node's namespaces.
    containerd_socket = Path("/run/containerd/containerd.sock")

    def _start_containerd(self) -> None:
        root, run = self.state / "containerd", self.state / "containerd" / "state"
        config = self.state / "containerd.toml"
        cni_conf = self.state / "cni" / "net.d"
        cni_conf.mkdir(parents=True)
        (cni_conf / "10-gke-ml-labs.conflist").write_text(json.dumps(self._cni_config(), indent=2))
        runc = self.built.binary("runc")
        config.write_text(_toml({
            "grpc": {"address": str(self.containerd_socket)},
            "ttrpc": {"address": str(self.containerd_socket) + ".ttrpc"},
            "plugins.'io.containerd.internal.v1.opt'": {"path": str(self.state / "containerd" / "opt")},
            "plugins.'io.containerd.cri.v1.images'": {"snapshotter": "overlayfs"},
            # Every pod's sandbox: the stand-in under containerd's own default reference.
            "plugins.'io.containerd.cri.v1.images'.pinned_images": {"sandbox": images.PAUSE},
            # This machine's root lacks CAP_SYS_RESOURCE (its bounding set), so no process may lower its
            # oom_score_adj, as the kubelet asks for every sandbox (-998): containerd clamps it at its own.
            "plugins.'io.containerd.cri.v1.runtime'": {"netns_mounts_under_state_dir": True, "restrict_oom_score_adj": True},
            "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc": {"runtime_type": "io.containerd.runc.v2"},
            "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options": {
                "BinaryName": str(runc), "SystemdCgroup": False, "Root": str(run / "runc"),
            },
            "plugins.'io.containerd.cri.v1.runtime'.cni": {
                "bin_dirs": [str(self.built.folders["cni"])], "conf_dir": str(cni_conf),
            },
            "plugins.'io.containerd.grpc.v1.cri'": {"stream_server_address": "127.0.0.1", "stream_server_port": "0"},
        }, {"version": 3, "root": str(root / "root"), "state": str(run)}))  # fmt: skip
        # The runc shim is found on PATH, as containerd looks for it.
        path = f"{self.built.folders['containerd']}:{self.built.folders['runc']}:{os.environ.get('PATH', '')}"
        process = self._launch("containerd", str(self.built.binary("containerd")), f"--config={config}", env={"PATH": path})
        ctr = [str(self.built.binary("ctr")), f"--address={self.containerd_socket}"]
        self._until(lambda: None if subprocess.run([*self._enter(), *ctr, "version"], capture_output=True).returncode == 0 else "not serving",
                    "containerd", process.log, process)  # fmt: skip

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "gke-ml-labs",
            "plugins": [
                {
                    "type": "bridge", "bridge": "cni0", "isGateway": True, "hairpinMode": True,
                    "ipam": {"type": "host-local", "ranges": [[{"subnet": self.addresses.pods}]],
                             "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(self.state / "cni" / "ipam")},
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }  # fmt: skip

    def _import_stand_ins(self) -> None:
        """The lab's stand-in images into the node's containerd, under the references the manifests use."""
        ctr = [str(self.built.binary("ctr")), f"--address={self.containerd_socket}", "--namespace=k8s.io"]
        for archive in images.ensure(self.images, say=self.say).values():
            _run(*self._enter(), *ctr, "images", "import", str(archive))
        self.say(f"  containerd: {len(self.images)} stand-in images imported")

    def _start_logind(self) -> None:
        """The node's system bus and logind on it, before the kubelet, whose shutdown manager looks for them once."""
        config = self.state / "dbus.conf"
        config.write_text(logind.bus_config([BUS, str(self.bus_socket)]))
        self.bus_socket.unlink(missing_ok=True)
        _run(*self._enter(), "mkdir", "-p", str(Path(BUS).parent))
        process = self._launch("dbus-daemon", "dbus-daemon", f"--config-file={config}", "--nofork", "--nopidfile")
        self._until(lambda: None if self.bus_socket.is_socket() else "no socket yet", "the node's system bus", process.log, process)
        self.logind = logind.Logind(f"unix:path={self.bus_socket}", SHUTDOWN_GRACE_S, self.power_off, say=self.say)
        if self.power_thread is None:
            self.power_thread = threading.Thread(target=self._power_cycles, name="node-power", daemon=True)
            self.power_thread.start()

    def power_off(self) -> None:
        """logind's power-off: the node is recreated on the power thread (see `_power_cycles`)."""
        self.power_offs.put(True)

    def _power_cycles(self) -> None:
        """Each power-off: the node stopped (every process of it killed, as a VM stops) and started again under its
        name with a fresh disk, as a managed instance group recreates a preempted Spot VM. On a thread that lives as
        long as the node, because a process dies with the thread that started it (PR_SET_PDEATHSIG)."""
        while self.power_offs.get():
            with self.recreating:
                if self.holder is None:
                    continue  # the cluster stopped first
                self.say(f"{self.name}: powered off; recreating it (a new boot, a fresh disk, the same name)")
                try:
                    self._stop()
                    self.start()
                    self.say(f"{self.name}: recreated and Ready")
                except Exception as e:  # say it; the benchmark waiting for the node times out
                    self.say(f"error: {self.name} could not be recreated: {e}")

    def _start_kubelet(self) -> None:
        folder = self.state / "kubelet"
        config = self.state / "kubelet.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.addresses.node,
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": 10248,
            # Clients with the cluster's certificates only, each request authorised by the API server.
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.pki.ca)}},
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": CGROUP_ROOT,
            # Kubernetes 1.35's kubelet refuses cgroup v1 unless told otherwise; this machine's hierarchy
            # is v1 (GKE's nodes are v2), and what the labs check does not depend on the version.
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "clusterDNS": [self.addresses.node],
            "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": "",
            "registerWithTaints": [dict(GPU_TAINT)],
            # The machine's disk is shared with everything else: the node must not go into DiskPressure
            # (and taint itself) at GKE's thresholds, nor collect the stand-in images it cannot pull again.
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                             "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "maxPods": nodes.MAX_PODS,
            "shutdownGracePeriod": f"{SHUTDOWN_GRACE_S}s",
            "shutdownGracePeriodCriticalPods": f"{SHUTDOWN_GRACE_CRITICAL_S}s",
        }))  # fmt: skip
        node_labels = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        process = self._launch(
            "kubelet", str(self.built.binary("kubelet")),
            f"--config={config}", f"--kubeconfig={self.kubeconfigs['node']}", f"--hostname-override={self.name}",
            f"--node-ip={self.addresses.node}", f"--node-labels={node_labels}", f"--root-dir={folder}",
            f"--cert-dir={folder / 'pki'}", "--v=1",
        )  # fmt: skip
        with self._client() as client:
            self._until(lambda: self._registered(client), f"kubelet ({self.name} registered)", process.log, process)
            # What GKE's device plugin would advertise: an extended resource on the node's status, which the
            # kubelet keeps (it only manages the resources it knows).
            gpus = {GPU_RESOURCE: str(self.gpus)}
            answer = client.patch(f"/api/v1/nodes/{self.name}/status", json={"status": {"capacity": gpus}},
                                  headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
            if answer.status_code != 200:
                raise NodeError(f"{GPU_RESOURCE} on {self.name} refused: {answer.status_code} {answer.text}")
            # The kubelet derives allocatable from capacity at its next status update.
            self._until(lambda: None if client.get(f"/api/v1/nodes/{self.name}").json()["status"]["allocatable"].get(GPU_RESOURCE)
                        else f"{GPU_RESOURCE} not allocatable yet", f"kubelet ({GPU_RESOURCE} allocatable)", process.log, process)  # fmt: skip

    def _registered(self, client: httpx.Client) -> str | None:
        """None once this boot's kubelet has registered: a recreated node's object is the old one until then."""
        answer = client.get(f"/api/v1/nodes/{self.name}")
        if answer.status_code != 200:
            return f"node {self.name}: {answer.status_code}"
        ready = next((c for c in answer.json()["status"].get("conditions") or [] if c["type"] == "Ready"), None)
        beat = ready and datetime.fromisoformat(ready["lastHeartbeatTime"].replace("Z", "+00:00")).timestamp()
        return None if beat and beat >= int(self.booted_at) else f"node {self.name}: no status from this boot's kubelet yet"

    def _client(self) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.cert(certs.ADMIN.file)), str(self.pki.key(certs.ADMIN.file)))
        return httpx.Client(base_url=self.server, verify=context, timeout=5)

    def _start_kube_proxy(self) -> None:
        config = self.state / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.kubeconfigs["kube-proxy"])},
            "mode": "iptables",
            "clusterCIDR": self.addresses.pods,
            "hostnameOverride": self.name,
            "bindAddress": self.addresses.node,
            "healthzBindAddress": f"{self.addresses.node}:{KUBE_PROXY_HEALTHZ_PORT}",
            "metricsBindAddress": "127.0.0.1:10249",
            # The connection-tracking table's size is the machine's, not a network namespace's: leave it.
            "conntrack": {"maxPerCore": 0, "min": 0},
        }))  # fmt: skip
        process = self._launch("kube-proxy", str(self.built.binary("kube-proxy")), f"--config={config}", "--v=1")
        healthz = f"http://{self.addresses.node}:{KUBE_PROXY_HEALTHZ_PORT}/healthz"
        self._until(lambda: None if httpx.get(healthz, timeout=2).status_code == 200 else "/healthz not yet 200",
                    "kube-proxy", process.log, process)  # fmt: skip

    def _start_coredns(self) -> None:
        corefile = self.state / "Corefile"
        node = self.addresses.node
        corefile.write_text(
            f".:53 {{\n    bind {node}\n    errors\n    ready {node}:{COREDNS_READY_PORT}\n"
            f"    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n"
            f"        kubeconfig {self.kubeconfigs['coredns']}\n        pods insecure\n"
            "        fallthrough in-addr.arpa ip6.arpa\n    }\n    cache 30\n}\n"
        )
        with self._client() as client:
            for path, body in _coredns_rbac():
                answer = client.post(path, json=body)
                if answer.status_code not in (201, 409):
                    raise NodeError(f"CoreDNS's RBAC refused: {answer.status_code} {answer.text}")
        process = self._launch("coredns", str(self.built.binary("coredns")), "-conf", str(corefile))
        self._until(lambda: None if httpx.get(f"http://{node}:{COREDNS_READY_PORT}/ready", timeout=2).status_code == 200
                    else "/ready not yet 200", "CoreDNS", process.log, process)  # fmt: skip

    def statement(self) -> dict[str, str]:
        """The cluster statement's lines (facts.simulation) for this node: what of it is real, what stands in."""
        kube = MODULES["kube"].versions()["k8s.io/kubernetes"]
        containerd = MODULES["containerd"].versions()["github.com/containerd/containerd/v2"]
        runc = MODULES["runc"].versions()["github.com/opencontainers/runc"]
        cni = MODULES["cni"].versions()["github.com/containernetworking/plugins"]
        coredns = MODULES["coredns"].versions()["github.com/coredns/coredns"]
        stand_ins = "; ".join(f"{s.name} ({s.stands_in_for})" for s in map(images.STAND_INS.get, self.images))
        return {
            f"{REAL}node": f"{self.name}: kubelet and kube-proxy {kube}, containerd {containerd}, runc {runc}, CNI plugins "
            f"{cni} (bridge, host-local, loopback, portmap), CoreDNS {coredns}: its pods' containers execute, their "
            "probes, logs, Services and cluster DNS are real",
            f"{SIMULATED}gpu": f"{self.name} advertises {self.gpus} {GPU_RESOURCE} on its status with no device behind "
            "it and no driver, so its pods find no nvidia-smi (GKE mounts the driver's) and the driver and CUDA "
            "versions stay 'not known'; its CPU and memory are this machine's, not the machine type's"
            + ("" if self.pool_nodes == 1 else f"; it stands for the GPU pool's {self.pool_nodes} nodes at once, so a new replica "
               "finds its GPU without a node to add"),
            f"{REAL}shutdown": f"{self.name}'s kubelet shuts down gracefully as GKE's Spot nodes do (shutdownGracePeriod "
            f"{SHUTDOWN_GRACE_S} s, the last {SHUTDOWN_GRACE_CRITICAL_S} for critical pods), holding a delay lock of logind "
            f"on the node's own system bus ({_dbus_version()})",
            f"{SIMULATED}preemption": f"logind on {self.name} is a stand-in for what the kubelet uses of it (localcluster/logind.py); "
            "a preemption is its PowerOff (what `systemctl poweroff` calls) where Compute Engine's notice starts it on GKE, "
            "and the node then starts again at once under its name with a fresh disk, where a managed instance group "
            "boots a new VM (a minute or more)",
            f"{SIMULATED}images": f"no image is pulled: stand-ins built here from Debian's packages and PyPI run under "
            f"the references the manifests name: {stand_ins}",
        }

    # -------------------------------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Kill the node's PID 1 (and so every process in its namespaces), then remove its cgroups."""
        with self.recreating:
            self._stop()
        if self.power_thread is not None and self.power_thread is not threading.current_thread():
            self.power_offs.put(False)
            self.power_thread.join()
            self.power_thread = None

    def _stop(self) -> None:
        if self.logind:
            self.logind.close()
            self.logind = None
        self.bus_socket.unlink(missing_ok=True)
        if self.forwarder:
            self.forwarder.close()
            self.forwarder = None
        if self.holder and self.holder.poll() is None:
            self.holder.kill()  # unshare dies; --kill-child kills PID 1; the kernel kills the rest
            self.holder.wait()
        self.holder = None
        _remove_cgroups(CGROUP_ROOT)
        # The kernel dismantles a network namespace (and the veth pair with it) after its last process, on
        # a work queue of its own: wait for it, so a next start finds no device of ours.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while Path(f"/sys/class/net/{HOST_LINK}").exists():
            if time.monotonic() > deadline:
                raise NodeError(f"the node's network device {HOST_LINK} still exists {STOP_TIMEOUT_S:.0f} s after it stopped")
            time.sleep(0.1)


def _dbus_version() -> str:
    first = subprocess.run(["dbus-daemon", "--version"], capture_output=True, text=True, check=False).stdout.splitlines()
    return f"dbus-daemon {first[0].split()[-1]}" if first else "dbus-daemon"


def _coredns_rbac() -> list[tuple[str, dict[str, Any]]]:
    """What CoreDNS's kubernetes plugin reads (its documentation's ClusterRole), bound to its identity."""
    role = {
        "metadata": {"name": "gke-ml-labs:coredns"},
        "rules": [
            {"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
            {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
        ],
    }
    binding = {
        "metadata": {"name": "gke-ml-labs:coredns"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gke-ml-labs:coredns"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": certs.COREDNS.user}],
    }
    base = "/apis/rbac.authorization.k8s.io/v1"
    return [(f"{base}/clusterroles", role), (f"{base}/clusterrolebindings", binding)]


def _make_cgroups(root: str) -> None:
    """The kubelet's cgroupRoot in every v1 hierarchy, which the kubelet expects to exist; a new cpuset cgroup
    starts with no CPUs and no memory nodes, so it takes its parent's."""
    for hierarchy in sorted(Path("/sys/fs/cgroup").iterdir()):
        if hierarchy.name == "unified" or not hierarchy.is_dir():
            continue
        top = hierarchy / root.lstrip("/")
        top.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (hierarchy / name).exists():
                (top / name).write_text((hierarchy / name).read_text())


def _remove_cgroups(root: str, timeout_s: float = 20.0) -> None:
    """The kubelet's cgroup tree under `root` in every v1 hierarchy, deepest first, once its processes are gone."""
    deadline = time.monotonic() + timeout_s
    for hierarchy in sorted(Path("/sys/fs/cgroup").iterdir()):
        top = hierarchy / root.lstrip("/")
        if not top.is_dir():
            continue
        for folder in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [top]:
            while True:
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if time.monotonic() > deadline:
                        raise NodeError(f"cgroup {folder} not removed: {e}") from None
                    time.sleep(0.2)  # its last processes are still exiting


def _tail(path: Path, lines: int = 25) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else ["(no log)"]
    return "\n".join(f"    {line}" for line in text[-lines:])
