"""g1's and g2's scheduling claims on the real kube-scheduler, with the pods the g1 and g2 benchmarks
create (their own builders, from the stack outputs the program exports), on kwok nodes shaped like
each lab's pools. No container runs: placement is the scheduler's, what a pod would compute is not.

g1: the GPU probe lands on an L4 node; the pod that selects the pool without the toleration never
does, and the scheduler's refusal names the taint the way the g1 report reads it.
g2: the scheduler places exactly allocatable (GPUs x time-slicing replicas) pods per L4 for each
sharing mode's node shape, and refuses the one over.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from benchmarks.labs import g1, g2
from components.gpu_pool import GPU_RESOURCE, GPU_TAINT
from stacks.mockrun import run_stack
from stacks.stackfile import load_config
from tests.cluster.lab_cluster import LabCluster, lab_cluster, scheduling_built  # noqa: F401 (a fixture)

NVIDIA_MODE = {"gpu_sharing": {"enabled": True, "mode": "nvidia", "replicas": 4},
               "gpu_driver_version": "INSTALLATION_DISABLED"}  # fmt: skip


def _decided(cluster: LabCluster, namespace: str, names: list[str], timeout_s: float = 90) -> dict[str, dict[str, Any]]:
    """Each pod once the scheduler has placed or refused it."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = {p["metadata"]["name"]: p for p in cluster.list(f"/api/v1/namespaces/{namespace}/pods")}
        decided = {n: p for n, p in pods.items() if n in names and _scheduled(p) is not None}
        if len(decided) == len(names):
            return decided
        assert time.monotonic() < deadline, f"undecided after {timeout_s:.0f} s: {sorted(set(names) - set(decided))}"
        time.sleep(0.3)


def _scheduled(pod: dict[str, Any]) -> dict[str, Any] | None:
    c = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)
    return c if c and (c["status"] == "True" or c.get("reason") == "Unschedulable") else None


def test_g1_probe_lands_on_the_l4_node_and_the_untolerated_pod_never_does(scheduling_built, tmp_path_factory):
    outputs = run_stack("g1").outputs
    with lab_cluster(scheduling_built, load_config("g1"), tmp_path_factory.mktemp("cluster")) as cluster:
        gpu_nodes = [n for n in cluster.list("/api/v1/nodes") if "cloud.google.com/gke-accelerator" in n["metadata"]["labels"]]
        assert [n["metadata"]["labels"]["cloud.google.com/gke-accelerator"] for n in gpu_nodes] == ["nvidia-l4"]
        assert GPU_TAINT in gpu_nodes[0]["spec"]["taints"]
        for obj in g1.build_workloads(outputs, "g1-local-0001"):
            cluster.create(obj)
        probe, untolerated = g1.probe_name("g1-local-0001"), g1.untolerated_name("g1-local-0001")
        pods = _decided(cluster, "default", [probe, untolerated])
        assert pods[probe]["spec"].get("nodeName") == gpu_nodes[0]["metadata"]["name"], _scheduled(pods[probe])
        assert "nodeName" not in pods[untolerated]["spec"]
        message = _scheduled(pods[untolerated])["message"]
        # What the g1 benchmark reads as "the taint kept it off": the real scheduler's own words.
        assert g1.names_gpu_taint(message), message


@pytest.mark.parametrize("overrides", [{}, NVIDIA_MODE], ids=["gke-time-sharing", "nvidia-time-slicing"])
def test_g2_places_allocatable_replicas_per_l4_and_refuses_the_next(scheduling_built, tmp_path_factory, overrides):
    cfg = load_config("g2", overrides=overrides)
    outputs = run_stack("g2", overrides={f"gke-ml-labs:{k}": v for k, v in overrides.items()}).outputs
    per_node = outputs["benchmark"]["gpu_sharing"]["allocatable_gpus_per_node"]
    assert per_node == cfg.pool_capacity.per_node == 4  # 1 L4 x 4 replicas
    with lab_cluster(scheduling_built, cfg, tmp_path_factory.mktemp("cluster")) as cluster:
        gpu = next(n for n in cluster.list("/api/v1/nodes") if GPU_RESOURCE in n["status"]["allocatable"])
        assert gpu["status"]["allocatable"][GPU_RESOURCE] == str(per_node)
        objs = g2.build_workloads(outputs, "g2-local-0001", pods=per_node + 1)
        for obj in objs:
            cluster.create(obj)
        names = [o["metadata"]["name"] for o in objs if o["kind"] == "Pod"]
        pods = _decided(cluster, objs[0]["metadata"]["namespace"], names)
        placed = [n for n, p in pods.items() if p["spec"].get("nodeName") == gpu["metadata"]["name"]]
        refused = [_scheduled(p)["message"] for p in pods.values() if not p["spec"].get("nodeName")]
        assert len(placed) == per_node and len(refused) == 1
        assert "Insufficient nvidia.com/gpu" in refused[0], refused
