"""g4: a two-worker PyTorchJob really rendezvoused (world size 2, ranks 0 and 1) and cleanPodPolicy did
what it says when the job completed.

One node and a gloo all-reduce of one number: a rendezvous demo, not distributed training.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.cluster import RUN_LABEL, wait_until
from benchmarks.labs import images, live, objects
from benchmarks.labs.errors import LabError
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.record import Recording, Snapshot
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields
from benchmarks.labs.stack import LabParams, gpu_placement, lab_params
from benchmarks.labs.timeline import condition_time, parse_time, phase, seconds_between

LAB = "g4"
TITLE = "Kubeflow Training Operator v1 (PyTorchJob) rendezvous"
DEFAULT_TIMEOUT_S = 1800.0
PYTORCHJOB = ("kubeflow.org/v1", "PyTorchJob")
SECTION = "training"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
LINGER_S = 20  # seconds each pod stays up after its last line, so logs are read before any cleanup

_RENDEZVOUS = re.compile(r"^rendezvous rank=(\d+) world_size=(\d+) backend=(\S+) host=(\S+) master=(\S+) cuda=(\w+)")
_ALL_REDUCE = re.compile(r"^all_reduce rank=(\d+) sum=([\d.e+-]+) expected=([\d.e+-]+)")


class Params(LabParams):
    """outputs.benchmark.training of a g4 stack."""

    namespace: str
    workers: int = 2
    gpus_per_worker: int = 1
    clean_pod_policy: str = "None"
    image: str | None = None


class RankReport(Frozen):
    pod: str
    rank: int
    world_size: int
    backend: str
    host: str
    master: str
    cuda: bool
    all_reduce_sum: float | None
    all_reduce_expected: float | None


class G4Result(LabResult):
    job: str
    clean_pod_policy: str
    world_size: int
    ranks: list[RankReport]
    job_seconds: float | None
    nodes_used: list[str]
    pods_at_completion: list[str]
    pods_remaining: list[str]
    expected_remaining: list[str]


def job_name(run_id: str) -> str:
    return f"g4-rendezvous-{run_id[-4:]}"


def build_workloads(outputs: dict[str, Any], run_id: str = "manual") -> list[dict[str, Any]]:
    p = lab_params(outputs, LAB, Params, SECTION)
    selector, tolerations = gpu_placement(outputs)
    name = job_name(run_id)
    cm = objects.scripts_config_map(f"{name}-scripts", p.namespace, ["rendezvous.py"])

    def replica(count: int) -> dict[str, Any]:
        # The operator injects MASTER_ADDR/RANK/WORLD_SIZE only into the container named "pytorch".
        gpus = {"nvidia.com/gpu": str(p.gpus_per_worker)}
        container = objects.container(
            "pytorch",
            p.image or images.PYTORCH_CUDA,
            ["python", f"{objects.SCRIPT_MOUNT}/rendezvous.py"],
            env={"LINGER_S": str(LINGER_S)},
            requests=objects.PYTORCH_REQUESTS,
            limits={**gpus, "cpu": "1", "memory": objects.PYTORCH_MEMORY_LIMIT},
            with_scripts=True,
        )
        # The operator adds an init container (init-pytorch) to Worker pods; the pod-level user (nobody)
        # lets that root-by-default image start, and the namespace enforces baseline for it.
        spec = objects.pod_spec(
            [container], node_selector=selector, tolerations=tolerations, scripts_config_map=cm["metadata"]["name"],
            restart_policy="Never",
        )
        return {"replicas": count, "restartPolicy": "Never", "template": {"spec": spec}}

    job = {
        "apiVersion": PYTORCHJOB[0],
        "kind": PYTORCHJOB[1],
        "metadata": objects.meta(name, p.namespace),
        "spec": {
            "runPolicy": {"cleanPodPolicy": p.clean_pod_policy, "backoffLimit": 0},
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(p.workers - 1)},
        },
    }
    return [cm, job]


def check_outputs(outputs: dict[str, Any]) -> None:
    p = lab_params(outputs, LAB, Params, SECTION)
    gpu_placement(outputs)
    if p.clean_pod_policy not in ("None", "Running", "All"):
        raise LabError(f"benchmark.clean_pod_policy {p.clean_pod_policy!r}: allowed None, Running, All")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--settle", type=float, default=30.0, help="seconds to wait after completion for pod cleanup")


def parse_log(pod: str, text: str) -> RankReport | None:
    """The rank's evidence from its log (see scripts/rendezvous.py), or None if it never got there."""
    rv = ar = None
    for line in text.splitlines():
        rv = rv or _RENDEZVOUS.match(line.strip())
        ar = ar or _ALL_REDUCE.match(line.strip())
    if rv is None:
        return None
    return RankReport(
        pod=pod,
        rank=int(rv[1]),
        world_size=int(rv[2]),
        backend=rv[3],
        host=rv[4],
        master=rv[5],
        cuda=rv[6] == "True",
        all_reduce_sum=float(ar[2]) if ar else None,
        all_reduce_expected=float(ar[3]) if ar else None,
    )


def expected_remaining(policy: str, pods_at_completion: list[dict[str, Any]]) -> list[str]:
    """Pods cleanPodPolicy leaves once the job is done: None keeps all, Running deletes the ones
    still running, All deletes every pod."""
    if policy == "All":
        return []
    if policy == "Running":
        return sorted(p["metadata"]["name"] for p in pods_at_completion if phase(p) not in ("Running", "Pending"))
    return sorted(p["metadata"]["name"] for p in pods_at_completion)


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    p = lab_params(session.outputs, LAB, Params, SECTION)
    cluster, name = session.cluster, job_name(session.run_id)
    for obj in build_workloads(session.outputs, session.run_id):
        session.scope.create(obj)
    session.namespaces = [p.namespace]
    session.client["job"] = name
    logs, snapshots = session.logs, session.snapshots

    def poll() -> Snapshot:
        pods = cluster.list("v1", "Pod", p.namespace, f"{JOB_NAME_LABEL}={name}")
        for pod in pods:
            if phase(pod) in ("Running", "Succeeded", "Failed"):
                text = cluster.pod_log(p.namespace, pod["metadata"]["name"])
                if text:
                    logs[pod["metadata"]["name"]] = text
        jobs = cluster.list(*PYTORCHJOB, p.namespace, f"{RUN_LABEL}={session.run_id}")
        snapshots.append(Snapshot(at=now(), objects={"pytorchjobs": jobs, "pods": pods}))
        return snapshots[-1]

    def finished(snap: Snapshot) -> bool:
        job = next(iter(snap.objects["pytorchjobs"]), None)
        return bool(job) and any(condition_time(job, c) for c in ("Succeeded", "Failed"))

    wait_until(f"PyTorchJob {name} done", poll, finished, args.timeout, interval_s=args.poll, progress=session.log,
               describe=lambda s: f"pods {[x['status'].get('phase') for x in s.objects['pods']]}")
    completed_at = len(snapshots) - 1
    # Give the operator time to apply cleanPodPolicy, then see which pods are left.
    session.log(f"waiting {args.settle:.0f}s for the operator to apply cleanPodPolicy")
    time.sleep(args.settle)
    poll()
    return session.recording(client={"completion_snapshot": completed_at})


def measure(rec: Recording, source: str = "live") -> G4Result:
    p = lab_params(rec.outputs, LAB, Params, SECTION)
    name = rec.client["job"]
    done_at = rec.client["completion_snapshot"]
    if not rec.snapshots or done_at >= len(rec.snapshots):
        raise LabError(f"recording of run {rec.run_id} lacks the snapshot at the job's completion")
    job = rec.snapshots[done_at].objects["pytorchjobs"][0]
    at_completion = rec.snapshots[done_at].objects["pods"]
    remaining = sorted(x["metadata"]["name"] for x in rec.snapshots[-1].objects["pods"])
    expected = expected_remaining(p.clean_pod_policy, at_completion)
    ranks = sorted((r for pod, text in rec.logs.items() if (r := parse_log(pod, text))), key=lambda r: r.rank)
    world = p.workers
    nodes = sorted({x["spec"].get("nodeName") for s in rec.snapshots for x in s.objects["pods"] if x["spec"].get("nodeName")})
    succeeded = condition_time(job, "Succeeded")
    status = job.get("status") or {}
    checks = [
        Check(
            name=f"rendezvous: world size {world}, ranks 0..{world - 1} each reported",
            passed=[r.rank for r in ranks] == list(range(world)) and all(r.world_size == world for r in ranks),
            evidence="; ".join(f"{r.pod}: rank {r.rank} of {r.world_size} via {r.master}" for r in ranks) or "no rank logged",
        ),
        Check(
            name="all-reduce summed every rank's value",
            passed=bool(ranks) and all(r.all_reduce_sum is not None and r.all_reduce_sum == r.all_reduce_expected for r in ranks),
            evidence=", ".join(f"rank {r.rank}: {r.all_reduce_sum:g} (expected {r.all_reduce_expected:g})" for r in ranks
                               if r.all_reduce_sum is not None) or "no all_reduce line",
        ),
        Check(
            name="PyTorchJob Succeeded",
            passed=succeeded is not None,
            evidence=", ".join(
                f"{role}: succeeded {rs.get('succeeded', 0)}, failed {rs.get('failed', 0)}"
                for role, rs in (status.get("replicaStatuses") or {}).items()
            )
            + (f"; completed {succeeded:%H:%M:%S}" if succeeded else "; not completed"),
        ),
        Check(
            name=f"cleanPodPolicy {p.clean_pod_policy}: the expected pods remain",
            passed=remaining == expected,
            evidence=f"remaining: {', '.join(remaining) or 'none'}; expected: {', '.join(expected) or 'none'}",
        ),
    ]
    return G4Result(
        **common_fields(rec, source, checks),
        job=name,
        clean_pod_policy=p.clean_pod_policy,
        world_size=world,
        ranks=ranks,
        job_seconds=seconds_between(parse_time(status.get("startTime")), parse_time(status.get("completionTime"))),
        nodes_used=nodes,
        pods_at_completion=sorted(x["metadata"]["name"] for x in at_completion),
        pods_remaining=remaining,
        expected_remaining=expected,
    )


def report_body(result: G4Result) -> str:
    one_node = len(result.nodes_used) <= 1
    return "\n".join(
        [
            "## What this shows, plainly",
            "",
            f"{'One node' if one_node else f'{len(result.nodes_used)} nodes'} ({', '.join(result.nodes_used) or '?'}), "
            f"{result.world_size} processes, a gloo all-reduce of one number: **a rendezvous demo, not distributed "
            "training**. It proves the operator wired the pods together (addresses, ranks, world size); it says "
            "nothing about training speed or scaling.",
            "",
            "## Ranks (from the pods' logs)",
            "",
            "| pod | rank | world size | backend | master | CUDA visible | all-reduce sum |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {r.pod} | {r.rank} | {r.world_size} | {r.backend} | {r.master} | {r.cuda} | "
                f"{'-' if r.all_reduce_sum is None else f'{r.all_reduce_sum:g}'} |"
                for r in result.ranks
            ),
            "",
            f"Job ran {result.job_seconds:.0f}s from start to completion." if result.job_seconds is not None else "",
            "",
            f"## cleanPodPolicy: {result.clean_pod_policy}",
            "",
            f"- pods when the job completed: {', '.join(result.pods_at_completion) or 'none'}",
            f"- pods left afterwards: {', '.join(result.pods_remaining) or 'none'}",
            f"- what the policy says should be left: {', '.join(result.expected_remaining) or 'none'}",
        ]
    )


def plots(result: G4Result, folder: Path) -> list[str]:
    return []  # a table says it better: two ranks and a list of pods


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)
