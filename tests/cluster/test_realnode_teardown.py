"""Nothing of the real node outlives the supervisor that started it, however the supervisor stops: no process,
mount, network device, iptables rule or port (and, but after SIGKILL, no cgroup). Its own module: the node
of test_realnode.py is stopped before these start theirs (one real node per machine at a time)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from cluster.procs import alive, descendants, listening_ports
from cluster.test_realnode import LAB, POD_TIMEOUT_S, _host_state, _pod
from kubernetes import client, config

from localcluster import images, realnode
from localcluster.build import REPO


def _serve(folder: Path) -> subprocess.Popen:
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "localcluster", "serve", "--lab", LAB, "--real-node", "--folder", str(folder)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines = []
    assert supervisor.stdout is not None
    for line in supervisor.stdout:
        lines.append(line.rstrip())
        if line.startswith("ready "):
            return supervisor
    pytest.fail("the supervisor exited before it was ready:\n" + "\n".join(lines))


# SIGINT reaches the same handler as SIGTERM (test_cluster_supervisor holds both for the control plane).
@pytest.mark.parametrize("stop_with", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_nothing_of_the_node_outlives_its_supervisor(tmp_path, stop_with):
    before, ports_before = _host_state(), listening_ports()
    supervisor = _serve(tmp_path)
    try:
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(tmp_path / "kubeconfig")))
        ns = f"t-{uuid.uuid4().hex[:8]}"
        api.create_namespace({"metadata": {"name": ns}})
        api.create_namespaced_pod(ns, _pod("idle", images.normalise("busybox:1.37.0"), ["sleep", "600"]))
        deadline = time.monotonic() + POD_TIMEOUT_S
        while api.read_namespaced_pod("idle", ns).status.phase != "Running":
            assert time.monotonic() < deadline
            time.sleep(0.5)
        # The node's processes (containerd's shims and the containers among them: comm, 15 characters at most)
        # descend from the supervisor.
        processes = descendants(supervisor.pid)
        assert {"containerd", "containerd-shim", "kubelet", "kube-proxy", "coredns", "sleep"} <= _names(processes)
        supervisor.send_signal(stop_with)
        supervisor.wait(timeout=60)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    # The kubelet's cgroups are gone; but SIGKILL gives the supervisor no chance to remove them (empty, they
    # hold nothing): the next start does. A start removes an earlier SIGKILL's, so `before` may hold some.
    expected = {**before, "cgroups": before["cgroups"] if stop_with == signal.SIGKILL else []}
    checked = [k for k in before if not (stop_with == signal.SIGKILL and k == "cgroups")]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (any(map(alive, processes)) or {k: _host_state()[k] for k in checked} != {k: expected[k] for k in checked}):
        time.sleep(0.5)
    assert [p for p in processes if alive(p)] == []
    after = _host_state()
    for key in checked:
        assert after[key] == expected[key], key
    assert listening_ports() - ports_before == set()
    if stop_with == signal.SIGKILL:  # what the next start does first, so the run leaves no cgroup behind
        realnode._remove_cgroups(realnode.CGROUP_ROOT)
        assert _host_state()["cgroups"] == []


def _names(pids: set[int]) -> set[str]:
    names = set()
    for pid in pids:
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return names
