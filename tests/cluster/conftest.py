"""`make test-cluster`: a real control plane on loopback (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler; kwok's simulated nodes) and the real Pulumi engine, all built from Go modules.

Every test here carries the `cluster` marker, which `make test` deselects (pytest.ini)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from localcluster import build
from localcluster.controlplane import ControlPlane
from stacks.stackfile import load_config

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster_binaries() -> build.Built:
    """etcd, the Kubernetes components and kwok, built once or reused."""
    return build.ensure(("kube", "kwok"))


# The control plane, kwok, the Pulumi CLI and the Kubernetes provider (the lab controllers are the
# scheduling tests' own: tests/cluster/lab_cluster.py).
ENGINE = ("kube", "kwok", "pulumi", "pulumi-kubernetes")


@pytest.fixture(scope="session")
def built() -> build.Built:
    """The engine's binaries, built once (minutes, cold) or reused; on PATH so Pulumi finds its plugins there."""
    binaries = build.ensure(ENGINE)
    os.environ["PATH"] = binaries.path + os.pathsep + os.environ["PATH"]
    os.environ.pop("PULUMI_IGNORE_AMBIENT_PLUGINS", None)  # the provider is found as an ambient plugin
    return binaries


@pytest.fixture(scope="session")
def control_plane(cluster_binaries: build.Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("cluster"), cluster_binaries, load_config("dev")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def api(control_plane: ControlPlane) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(control_plane.kubeconfig))
