"""The supervisor behind `make cluster-up`: what it starts answers, and nothing it started outlives it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client, config
from cluster.procs import alive, descendants, listening_ports

from localcluster.build import REPO

COMPONENTS = {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}


def _serve(folder: Path) -> subprocess.Popen:
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "localcluster", "serve", "--lab", "g2", "--folder", str(folder)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    lines = []
    assert supervisor.stdout is not None
    for line in supervisor.stdout:
        lines.append(line.rstrip())
        if line.startswith("ready "):
            return supervisor
    pytest.fail("the supervisor exited before it was ready:\n" + "\n".join(lines))


@pytest.mark.parametrize("stop_with", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_supervisor_leaves_no_process_and_no_port(cluster_binaries, tmp_path, stop_with):
    supervisor = _serve(tmp_path)
    children = descendants(supervisor.pid)
    names = {Path(Path(f"/proc/{pid}/exe").readlink()).name for pid in children}
    ports = listening_ports(children)
    assert names == COMPONENTS
    # etcd (client, peer), the API server, the controller manager, the scheduler, and kwok's kubelet API
    # (what the API server dials for a pod's log).
    assert len(ports) == 6
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(tmp_path / "kubeconfig")))
    assert {n.metadata.name for n in api.list_node().items} == {"system-0", "gpu-0"}

    supervisor.send_signal(stop_with)
    assert supervisor.wait(timeout=60) in (128 + stop_with, 130)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (any(alive(p) for p in children) or ports & listening_ports()):
        time.sleep(0.2)
    assert [p for p in children if alive(p)] == []
    assert ports & listening_ports() == set()
    assert not (tmp_path / "supervisor.json").exists()


def test_up_prints_the_kubeconfig_last_and_down_stops_everything(cluster_binaries, tmp_path):
    up = subprocess.run(
        [sys.executable, "-m", "localcluster", "up", "--lab", "dev", "--folder", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert up.returncode == 0, up.stdout + up.stderr
    assert up.stdout.splitlines()[-1] == str(tmp_path / "kubeconfig")
    supervisor = int(json.loads((tmp_path / "supervisor.json").read_text())["pid"])
    children = descendants(supervisor)
    assert len(children) == len(COMPONENTS)
    version = client.VersionApi(config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))).get_code()
    assert version.git_version == "v1.35.4"  # the release the build stamped, as GKE's API server reports its own

    down = subprocess.run(
        [sys.executable, "-m", "localcluster", "down", "--folder", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert down.returncode == 0 and "stopped" in down.stdout
    assert [p for p in children | {supervisor} if alive(p)] == []


def test_every_binary_keeps_the_build_info_of_its_module(built):
    expected = {
        "kube-apiserver": "k8s.io/kubernetes\tv1.35.4",
        "etcd": "go.etcd.io/etcd/server/v3\tv3.6.5",
        "kwok": "sigs.k8s.io/kwok\tv0.8.0",
        "pulumi": "github.com/pulumi/pulumi/pkg/v3\tv3.274.0",
        "pulumi-resource-kubernetes": "github.com/pulumi/pulumi-kubernetes/provider/v4\tv4.0.0-20260115033456-f47bc2d6f199",
    }
    for binary, module in expected.items():
        info = subprocess.run(["go", "version", "-m", str(built.binary(binary))], capture_output=True, text=True, check=True)
        assert module in info.stdout, f"{binary}: {info.stdout[:400]}"
