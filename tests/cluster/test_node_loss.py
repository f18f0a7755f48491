"""g8's spot node lost under a running Job, on the real kube-controller-manager (node lifecycle, pod
garbage collector, Job controller) and kube-scheduler: the kwok GPU node's Node object is deleted
under the g8 benchmark's own Job, then registered again (the managed instance group's new VM).

What this run shows, against what the g8 report assumes (a preemption through simulateMaintenanceEvent:
the kubelet's graceful node shutdown fails the pod with DisruptionTarget before the VM stops): a Node
deleted outright has no kubelet to shut down; the pod garbage collector alone fails the orphaned pod,
with DisruptionTarget (DeletionByPodGC), once its quarantine has passed; the Job's podFailurePolicy
ignores that failure (no backoff spent) and its controller makes a replacement at once, which waits
Unschedulable until a GPU node is back. No container runs: the pod's work is kwok's delay.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from benchmarks.labs import g8
from components.namespaces import namespace
from localcluster.nodes import JOB_DELAY_ANNOTATION
from stacks.compose_platform import stack_id
from stacks.mockrun import run_stack
from stacks.stackfile import load_config
from tests.cluster.lab_cluster import lab_cluster, scheduling_built  # noqa: F401 (a fixture)

RUN_ID = "g8-local-0001"
PODGC_QUARANTINE_S = 40  # kube-controller-manager's pod GC: orphaned pods wait this long (pkg/controller/podgc)


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def test_a_deleted_spot_node_under_the_g8_job(scheduling_built, tmp_path_factory):
    cfg = load_config("g8")
    outputs = run_stack("g8").outputs
    p = g8.lab_params(outputs, g8.LAB, g8.Params, g8.SECTION)
    with lab_cluster(scheduling_built, cfg, tmp_path_factory.mktemp("cluster")) as cluster:
        cluster.create(namespace(stack_id(cfg), p.namespace, "checkpoints", "restricted"))
        cluster.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": p.service_account, "namespace": p.namespace}})
        cluster.wait_for_service_account(p.namespace)
        config_map, job = g8.build_workloads(outputs, RUN_ID, "with-checkpoints")
        template = job["spec"]["template"]
        template.setdefault("metadata", {}).setdefault("annotations", {})[JOB_DELAY_ANNOTATION] = "600s"
        cluster.create(config_map)
        cluster.create(job)
        pods_path = f"/api/v1/namespaces/{p.namespace}/pods?labelSelector=batch.kubernetes.io/job-name={job['metadata']['name']}"
        job_path = f"/apis/batch/v1/namespaces/{p.namespace}/jobs/{job['metadata']['name']}"

        def wait(what: str, done, timeout_s: float = 180) -> list[dict[str, Any]]:
            deadline = time.monotonic() + timeout_s
            while True:
                pods = cluster.list(pods_path)
                if done(pods):
                    return pods
                assert time.monotonic() < deadline, f"{what}: not within {timeout_s:.0f} s; pods: {json.dumps(pods)[:2000]}"
                time.sleep(0.25)

        running = wait("the job's pod running", lambda ps: any((x.get("status") or {}).get("phase") == "Running" for x in ps))
        first = next(x for x in running if (x.get("status") or {}).get("phase") == "Running")
        node = cluster.get(f"/api/v1/nodes/{first['spec']['nodeName']}")
        deleted_at = _now()
        cluster.client.delete(f"/api/v1/nodes/{node['metadata']['name']}").raise_for_status()

        seen: dict[str, Any] = {}

        def replaced(pods: list[dict[str, Any]]) -> bool:
            old = next((x for x in pods if x["metadata"]["uid"] == first["metadata"]["uid"]), None)
            if old is not None and "failed" not in seen and (old.get("status") or {}).get("phase") == "Failed":
                seen["failed"] = (_now(), _condition(old, "DisruptionTarget"))
            if old is None and "gone" not in seen:
                seen["gone"] = _now()
            new = [x for x in pods if x["metadata"]["uid"] != first["metadata"]["uid"]]
            if new and "replacement" not in seen:
                seen["replacement"] = _now()
            waiting = [x for x in new if (_condition(x, "PodScheduled") or {}).get("reason") == "Unschedulable"]
            return "gone" in seen and bool(waiting)

        pods = wait("the orphaned pod failed and replaced", replaced, timeout_s=PODGC_QUARANTINE_S + 120)
        replacement = next(x for x in pods if x["metadata"]["uid"] != first["metadata"]["uid"])
        status = cluster.get(job_path)["status"]

        # The managed instance group's new VM registers under the same name.
        fresh = {"apiVersion": "v1", "kind": "Node",
                 "metadata": {k: node["metadata"][k] for k in ("name", "labels", "annotations")},
                 "spec": {"taints": node["spec"]["taints"]},
                 "status": {k: node["status"][k] for k in ("capacity", "allocatable", "addresses", "daemonEndpoints")}}  # fmt: skip
        back_at = _now()
        cluster.create(fresh)
        placed = wait("the replacement placed on the new node",
                      lambda ps: any((x["spec"].get("nodeName") == node["metadata"]["name"]) for x in ps
                                     if x["metadata"]["uid"] == replacement["metadata"]["uid"]))  # fmt: skip
        placed_at = _now()

        failed_at, disruption = seen.get("failed", (None, None))
        timeline = {
            "node deleted": deleted_at.isoformat(),
            "old pod Failed (pod GC)": failed_at.isoformat() if failed_at else None,
            "old pod gone": seen["gone"].isoformat(),
            "replacement created": seen["replacement"].isoformat(),
            "replacement creationTimestamp": replacement["metadata"]["creationTimestamp"],
            "node registered again": back_at.isoformat(),
            "replacement scheduled": placed_at.isoformat(),
            "disruption condition": disruption,
            "job status while replaced": {k: status.get(k) for k in ("active", "failed", "succeeded", "ready")},
            "replacement refused": (_condition(replacement, "PodScheduled") or {}).get("message"),
        }
        out = os.environ.get("GML_CLUSTER_OUT")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / "g8-node-loss.json").write_text(json.dumps(timeline, indent=2) + "\n")
        print(json.dumps(timeline, indent=2))

        # The pod GC, not a kubelet, ended the pod, after its quarantine; the Job did not count it as a failure.
        assert disruption and disruption["reason"] == "DeletionByPodGC", timeline
        assert (seen["gone"] - deleted_at).total_seconds() >= PODGC_QUARANTINE_S - 1, timeline
        assert not status.get("failed"), timeline
        assert "didn't match Pod's node affinity/selector" in timeline["replacement refused"], timeline
        assert len([x for x in placed if x["metadata"]["uid"] == replacement["metadata"]["uid"]]) == 1
