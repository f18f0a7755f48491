"""The typed result every lab benchmark writes (result.json), with what is common to all labs.

Each lab subclasses `LabResult` with its own measurements. The common part carries the schema
version, the run's times, the versions read from the cluster, pass/fail checks with their evidence,
the cost estimate and what failed first time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from benchmarks.harness import RunMeta
from benchmarks.kube import evidence
from benchmarks.kube.record import GPU_DRIVER_LABEL, Recording, warning_summary

SCHEMA_VERSION = 1


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Check(Frozen):
    """One claim the lab makes, whether the run bore it out, and the evidence for it."""

    name: str
    passed: bool
    evidence: str


class ClusterVersions(Frozen):
    kubernetes: str | None = None
    kubelet: list[str] = []
    node_images: list[str] = []
    gpu_driver: str | None = None
    charts: dict[str, str] = {}
    deployed: dict[str, str] = {}


class LabResult(Frozen):
    """`meta` is the harness's RunMeta, as in g6's result: lab, target, times, tool version, command,
    server versions, the run's errors and warnings, and the evidence of what ran (`meta.evidence`)."""

    schema_version: int = SCHEMA_VERSION
    meta: RunMeta
    run_id: str
    stack: str | None
    source: str  # "live" for a run on a cluster, else the recording it was measured from
    versions: ClusterVersions
    checks: list[Check]
    cost: str | None = None

    @property
    def lab(self) -> str:
        return self.meta.lab

    @property
    def started_at(self) -> datetime:
        return self.meta.started_at

    @property
    def finished_at(self) -> datetime:
        return self.meta.finished_at

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def versions_of(rec: Recording, gpu_driver: str | None = None) -> ClusterVersions:
    """Versions read from the cluster: API server, kubelets, node images, GPU driver, Helm charts."""
    infos = [(n.get("status") or {}).get("nodeInfo") or {} for n in rec.nodes]
    drivers = sorted(
        {v for n in rec.nodes if (v := ((n.get("metadata") or {}).get("labels") or {}).get(GPU_DRIVER_LABEL))}
    )
    return ClusterVersions(
        kubernetes=rec.server_version.get("gitVersion") or rec.server_version.get("git_version"),
        kubelet=sorted({i["kubeletVersion"] for i in infos if i.get("kubeletVersion")}),
        node_images=sorted({i["osImage"] for i in infos if i.get("osImage")}),
        gpu_driver=gpu_driver or (f"GKE-installed ({', '.join(drivers)})" if drivers else None),
        charts=rec.charts,
        deployed={str(k): str(v) for k, v in (rec.outputs.get("versions") or {}).items()},
    )


def common_fields(
    rec: Recording, source: str, checks: list[Check], gpu_driver: str | None = None, model: str = ""
) -> dict[str, Any]:
    """The LabResult fields every lab fills the same way from its recording. `model` names the model
    served, for the labs that serve one (g6's RunMeta field; empty elsewhere)."""
    versions = versions_of(rec, gpu_driver)
    client = rec.client
    meta = RunMeta(
        lab=rec.lab,
        target=target_of(rec.outputs),
        model=model,
        started_at=rec.started_at,
        finished_at=rec.finished_at,
        client_host_cpus=client.get("client_host_cpus", 0),
        tool_version=client.get("tool_version", "unknown"),
        command=client.get("command", []),
        server_versions={
            k: v
            for k, v in {"kubernetes": versions.kubernetes, "gpu_driver": versions.gpu_driver, **versions.charts}.items()
            if v
        },
        errors=rec.notes + warning_summary(rec.events),
        evidence=evidence_of(rec),
        simulation=evidence.simulation_of(rec.cluster_statement, rec.nodes),
    )
    return {
        "meta": meta,
        "run_id": rec.run_id,
        "stack": rec.stack,
        "source": source,
        "versions": versions,
        "checks": checks,
        "cost": cost_estimate(rec.outputs),
    }


def target_of(outputs: dict[str, Any]) -> str:
    """What the run ran against: the GKE cluster and project the outputs name, or an existing cluster
    whose kubeconfig context names neither (stacks.kube_target: both null then)."""
    if "cluster_name" in outputs and outputs["cluster_name"] is None:
        return "an existing cluster (its kubeconfig context names no GKE cluster)"
    return f"GKE cluster {outputs.get('cluster_name', '?')} (project {outputs.get('project', '?')})"


def evidence_of(rec: Recording) -> evidence.Evidence:
    """The report's evidence block from the recording: the pods listed as the run ended and every pod
    its snapshots and final objects hold (a lab's own polls see pods the final list no longer has)."""
    pods = evidence.pods_in([[s.objects for s in rec.snapshots], rec.objects]) + rec.pods
    found = evidence.from_cluster(
        outputs=rec.outputs, server_version=rec.server_version, nodes=rec.nodes, pods=pods, events=rec.events,
        nvidia_smi=rec.nvidia_smi, started=rec.started_at, finished=rec.finished_at,
    )  # fmt: skip
    # The run's own notes (a wait that timed out, a query that failed) went wrong first time too.
    return found.model_copy(update={"first_time_problems": rec.notes + list(found.first_time_problems)})


def cost_estimate(outputs: dict[str, Any]) -> str | None:
    """The stack's hourly cost (Markdown, from stacks.cost_estimate), or None when the outputs cannot say."""
    from stacks.cost_estimate import estimate_section

    try:
        return estimate_section(outputs) or None  # "" when the outputs carry no estimate
    except Exception:  # a cost line must never cost the measurement; the report then omits it
        return None
