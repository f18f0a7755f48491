"""A lab's own local cluster for the scheduling tests of tests/cluster/: a control plane shaped like the
lab's pools, the lab's controllers beside it (localcluster.controllers), and the pinned upstream CRDs
applied (the files the `upstream-crds` stand-in applies in place of the charts), through the admin's
client. Its own, not the session's: these tests fill the GPU nodes and delete them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from components import upstream
from localcluster import certs
from localcluster.build import Built, ensure
from localcluster.controllers import API_TIMEOUT_S, LabControllers, beside
from localcluster.controlplane import ControlPlane
from stacks.config import LabConfig

CONTROLLERS_TIMEOUT_S = 240.0
# What these tests run: the control plane, kwok and the controllers (not the Pulumi engine).
MODULES = ("kube", "kwok", "jobset", "kueue")


@pytest.fixture(scope="session")
def scheduling_built() -> Built:
    return ensure(MODULES)


@dataclass
class LabCluster:
    plane: ControlPlane
    controllers: LabControllers
    client: httpx.Client

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        answer = self.client.post(collection(obj), json=obj)
        if answer.status_code != 201:
            raise AssertionError(f"{obj['kind']} {obj['metadata']['name']} refused: {answer.status_code} {answer.text}")
        return answer.json()

    def apply(self, obj: dict[str, Any]) -> None:
        """Server-side apply, as Pulumi's Kubernetes provider does."""
        url = f"{collection(obj)}/{obj['metadata']['name']}"
        answer = self.client.patch(url, content=yaml.safe_dump(obj), params={"fieldManager": "gke-ml-labs-test", "force": "true"},
                                   headers={"Content-Type": "application/apply-patch+yaml"})  # fmt: skip
        if answer.status_code not in (200, 201):
            raise AssertionError(f"applying {obj['kind']} {obj['metadata']['name']}: {answer.status_code} {answer.text}")

    def get(self, path: str) -> dict[str, Any]:
        answer = self.client.get(path)
        answer.raise_for_status()
        return answer.json()

    def list(self, path: str) -> list[dict[str, Any]]:
        return self.get(path)["items"]

    def patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        answer = self.client.patch(path, json=patch, headers={"Content-Type": "application/merge-patch+json"})
        answer.raise_for_status()
        return answer.json()

    def wait_for_service_account(self, namespace: str, timeout_s: float = 60) -> None:
        """The namespace's `default` ServiceAccount, which the controller manager makes and without which
        the ServiceAccount admission plugin refuses every pod there."""
        deadline = time.monotonic() + timeout_s
        while self.client.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default").status_code != 200:
            if time.monotonic() > deadline:
                raise AssertionError(f"no default ServiceAccount in {namespace} after {timeout_s:.0f} s")
            time.sleep(0.5)

    def wait_for_controllers(self, names: list[str]) -> None:
        deadline = time.monotonic() + CONTROLLERS_TIMEOUT_S
        while sorted(self.controllers.ready) != sorted(names):
            if time.monotonic() > deadline:
                raise AssertionError(f"controllers {names} not ready in {CONTROLLERS_TIMEOUT_S:.0f} s; ready: "
                                     f"{sorted(self.controllers.ready)}; logs under {self.controllers.folder}")  # fmt: skip
            time.sleep(0.5)


def collection(obj: dict[str, Any]) -> str:
    """The REST collection of `obj`, for the core group, the built-in groups and the CRDs our labs use."""
    group_version, kind = obj["apiVersion"], obj["kind"]
    plural = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
              "JobSet": "jobsets", "CustomResourceDefinition": "customresourcedefinitions",
              "NetworkPolicy": "networkpolicies", "PriorityClass": "priorityclasses"}.get(kind, kind.lower() + "s")  # fmt: skip
    prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
    namespace = obj["metadata"].get("namespace")
    return f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"


def crd_files(component_version: str) -> list[Path]:
    """The pinned CRDs of `<component>/<version>` from the upstream lock (UPSTREAM_DIR or the cache)."""
    prefix = f"{component_version}/crds/"
    return [upstream.path(p) for p in upstream.locked_paths() if p.startswith(prefix)]


@contextmanager
def lab_cluster(built: Built, cfg: LabConfig, folder: Path, crds: tuple[str, ...] = ()) -> Iterator[LabCluster]:
    """The cluster of the lab `cfg` describes in `folder` (pytest's, so a failed run's logs stay), with
    `crds` (`<component>/<version>` of the upstream lock) applied."""
    with ControlPlane(folder, built, cfg) as plane, beside(plane, built) as lab_controllers:
        with plane.admin_client(certs.Pki(plane.state / "pki"), timeout_s=API_TIMEOUT_S) as client:
            cluster = LabCluster(plane, lab_controllers, client)
            cluster.wait_for_service_account("default")
            for name in crds:
                for file in crd_files(name):
                    cluster.apply(yaml.safe_load(file.read_text()))
            yield cluster
