"""g2: GPU time-slicing: how many pods one shared L4 takes, and what contention does to each.

Round k (k = 1..replicas) starts k pods, each requesting one shared `nvidia.com/gpu` and timing a
fixed fp16 matmul loop (scripts/gpu_matmul.py); the last round starts one pod more than the node
advertises, which must stay Pending (the scheduler's FailedScheduling text is the evidence). Latency
per pod is the median iteration time inside the window where all of the round's pods were running;
DCGM's GPU utilisation over each round comes from Prometheus.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.cluster import RUN_LABEL, wait_until
from benchmarks.harness import ServiceRef
from benchmarks.kube import images, objects
from benchmarks.kube.errors import LabError
from benchmarks.kube.objects import GPU, allocatable_gpus
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.stack import LabParams, gpu_placement, lab_params, require_output
from benchmarks.kube.timeline import phase
from benchmarks.labs import live, workloads
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.plotting import xy_plot
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields
from benchmarks.metrics import PrometheusClient, gpu_util_query, scalar

LAB = "g2"
TITLE = "GPU time-slicing: replicas and contention"
DEFAULT_TIMEOUT_S = 1500.0
SECTION = "gpu_sharing"
ROUND_LABEL = "gke-ml-labs/round"

_ITER = re.compile(r"^iter (\d+) t=([\d.]+) ms=([\d.]+)$")


class Params(LabParams):
    """outputs.benchmark.gpu_sharing of a g2 stack."""

    mode: str
    replicas: int
    allocatable_gpus_per_node: int


class Round(Frozen):
    pods: int  # pods started
    running: int  # pods that ran the workload
    pending: list[str]
    window_s: float | None  # how long all running pods overlapped
    latency_ms: dict[str, float]  # pod -> median iteration time in the overlap window
    mean_latency_ms: float | None
    gpu_util_pct: float | None  # DCGM_FI_DEV_GPU_UTIL averaged over the round


class G2Result(LabResult):
    mode: str
    replicas: int
    allocatable: int | None
    rounds: list[Round]
    failed_scheduling: list[str]


def pod_name(run_id: str, k: int, j: int) -> str:
    return f"g2-r{k}-p{j}-{run_id[-4:]}"


def build_workloads(outputs: dict[str, Any], run_id: str = "manual", pods: int = 1, round_no: int = 1,
                    duration_s: int = 60) -> list[dict[str, Any]]:
    """One round: the script ConfigMap (first round only) and `pods` GPU pods."""
    lab_params(outputs, LAB, Params, SECTION)  # the wrong stack fails here, before anything is built
    selector, tolerations = gpu_placement(outputs)
    cm_name = f"g2-scripts-{run_id[-4:]}"
    out = [workloads.scripts_config_map(cm_name, _namespace(outputs), ["gpu_matmul.py"])] if round_no == 1 else []
    for j in range(pods):
        # No CPU limit: the pod's kernel-launch loop is part of the latency measured (podspec.security.WAIVERS).
        spec = objects.pod_spec(
            [objects.container("matmul", images.PYTORCH_CUDA, ["python", f"{objects.SCRIPT_MOUNT}/gpu_matmul.py"],
                               env={"DURATION_S": str(duration_s)}, requests=workloads.PYTORCH_REQUESTS,
                               limits={GPU: "1", "memory": workloads.PYTORCH_MEMORY_LIMIT}, with_scripts=True)],
            node_selector=selector,
            tolerations=tolerations,
            scripts_config_map=cm_name,
        )
        out.append(objects.pod(pod_name(run_id, round_no, j), _namespace(outputs), spec, {ROUND_LABEL: str(round_no)}))
    return out


def _namespace(outputs: dict[str, Any]) -> str:
    return ((outputs.get("benchmark") or {}).get(SECTION) or {}).get("namespace", "default")


def check_outputs(outputs: dict[str, Any]) -> None:
    p = lab_params(outputs, LAB, Params, SECTION)
    gpu_placement(outputs)
    require_output(outputs, "prometheus", LAB)
    if p.allocatable_gpus_per_node < 2:
        raise LabError(f"benchmark.gpu_sharing.allocatable_gpus_per_node is {p.allocatable_gpus_per_node}: nothing is shared")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=int, default=60, help="seconds each pod runs its loop")
    parser.add_argument("--max-pods", type=int, default=0, help="largest round (default: the sharing replicas)")


def parse_iterations(text: str) -> list[tuple[int, float, float]]:
    """(iteration, epoch seconds, milliseconds) of each `iter` line."""
    return [(int(m[1]), float(m[2]), float(m[3])) for line in text.splitlines() if (m := _ITER.match(line.strip()))]


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    p = lab_params(session.outputs, LAB, Params, SECTION)
    cluster, run_id, ns = session.cluster, session.run_id, _namespace(session.outputs)
    prom = ServiceRef.model_validate(session.outputs["prometheus"])
    top = args.max_pods or p.allocatable_gpus_per_node
    session.namespaces = [ns]
    snapshots, logs = session.snapshots, session.logs
    rounds: list[dict[str, Any]] = session.client.setdefault("rounds", [])
    selector, _ = gpu_placement(session.outputs)
    node_sel = ",".join(f"{k}={v}" for k, v in selector.items())
    for k in range(1, top + 1):
        # The last round asks one pod more than the node advertises: that one must stay Pending.
        count = k + 1 if k == top else k
        for obj in build_workloads(session.outputs, run_id, count, k, args.duration):
            session.scope.create(obj)
        started = now()
        sel = f"{RUN_LABEL}={run_id},{ROUND_LABEL}={k}"

        def poll(sel: str = sel) -> Snapshot:
            pods = cluster.list("v1", "Pod", ns, sel)
            snapshots.append(Snapshot(at=now(), objects={"pods": pods, "nodes": cluster.list("v1", "Node", None, node_sel)}))
            return snapshots[-1]

        def done(s: Snapshot, k: int = k) -> bool:
            phases = [phase(x) for x in s.objects["pods"]]
            return phases.count("Succeeded") + phases.count("Failed") >= k

        wait_until(f"round {k}: {count} pod(s) on one GPU", poll, done, args.timeout, interval_s=args.poll,
                   progress=session.log, describe=lambda s: str([phase(x) for x in s.objects["pods"]]))
        for x in snapshots[-1].objects["pods"]:
            if phase(x) in ("Succeeded", "Failed"):
                logs[x["metadata"]["name"]] = cluster.pod_log(ns, x["metadata"]["name"])
        seconds = max(1, int((now() - started).total_seconds()))
        try:
            util = PrometheusClient.through_service_proxy(cluster, prom).answer(gpu_util_query(seconds))
        except Exception as e:  # keep the latencies even if Prometheus is unreachable
            session.notes.append(f"round {k}: DCGM query failed: {e}")
            util = None
        rounds.append({"round": k, "pods": count, "dcgm": util})
    return session.recording()


def measure(rec: Recording, source: str = "live") -> G2Result:
    p = lab_params(rec.outputs, LAB, Params, SECTION)
    if not rec.client.get("rounds"):
        raise LabError(f"recording of run {rec.run_id} has no rounds")
    pods_by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for snap in rec.snapshots:
        for x in snap.objects.get("pods", []):
            k = int(x["metadata"]["labels"][ROUND_LABEL])
            pods_by_round.setdefault(k, {})[x["metadata"]["name"]] = x
    rounds = [_round(r, pods_by_round.get(r["round"], {}), rec.logs) for r in rec.client["rounds"]]
    allocs = [gpus for s in rec.snapshots for n in s.objects.get("nodes", []) if (gpus := allocatable_gpus(n)) is not None]
    allocatable = max(allocs) if allocs else None
    last = rounds[-1]
    failed = [e.get("message", "") for e in rec.events
              if e.get("reason") == "FailedScheduling" and (e.get("involvedObject") or {}).get("name") in last.pending]
    insufficient = [m for m in failed if f"Insufficient {GPU}" in m]
    checks = [
        Check(
            name=f"node advertises GPUs x replicas ({p.allocatable_gpus_per_node}) shared {GPU}",
            passed=allocatable == p.allocatable_gpus_per_node,
            evidence=f"allocatable {GPU} = {allocatable} on the GPU node; stack says {p.allocatable_gpus_per_node} "
            f"({p.mode} time-slicing, {p.replicas} replicas)",
        ),
        Check(
            name="that many pods run, the one beyond stays Pending",
            passed=last.running == p.allocatable_gpus_per_node and len(last.pending) == last.pods - last.running == 1
            and bool(insufficient),
            evidence=f"{last.running} of {last.pods} ran; pending: {', '.join(last.pending) or 'none'}"
            + (f"; scheduler: \"{insufficient[-1]}\"" if insufficient else "; no 'Insufficient nvidia.com/gpu' event"),
        ),
    ]
    return G2Result(**common_fields(rec, source, checks), mode=p.mode, replicas=p.replicas, allocatable=allocatable,
                    rounds=rounds, failed_scheduling=failed)


def _round(info: dict[str, Any], pods: dict[str, dict[str, Any]], logs: dict[str, str]) -> Round:
    iters = {name: parse_iterations(logs.get(name, "")) for name in pods}
    ran = {name: it for name, it in iters.items() if it}
    pending = sorted(name for name, x in pods.items() if not ran.get(name) and phase(x) == "Pending")
    window = None
    latency: dict[str, float] = {}
    if ran:
        start = max(it[0][1] for it in ran.values())
        end = min(it[-1][1] for it in ran.values())
        if end > start:
            window = round(end - start, 3)
            for name, it in ran.items():
                inside = [ms for _, t, ms in it if start <= t <= end]
                if inside:
                    latency[name] = round(median(inside), 3)
    return Round(
        pods=info["pods"],
        running=len(ran),
        pending=pending,
        window_s=window,
        latency_ms=dict(sorted(latency.items())),
        mean_latency_ms=round(sum(latency.values()) / len(latency), 3) if latency else None,
        gpu_util_pct=scalar(info.get("dcgm")),
    )


def report_body(result: G2Result) -> str:
    base = next((r.mean_latency_ms for r in result.rounds if r.running == 1 and r.mean_latency_ms), None)
    lines = [
        "## How many pods fit",
        "",
        f"Time-slicing ({result.mode} mode, {result.replicas} replicas): the GPU node advertises "
        f"{result.allocatable} `nvidia.com/gpu`. The last round started {result.rounds[-1].pods} pods: "
        f"{result.rounds[-1].running} ran, {len(result.rounds[-1].pending)} stayed Pending.",
        "",
        *(f"> {m}" for m in result.failed_scheduling[-1:]),
        "",
        "## Latency of a fixed GPU workload as pods contend",
        "",
        "Median time of one iteration (100 fp16 4096x4096 matmuls) per pod, inside the window where all the "
        "round's pods ran. Time-slicing shares the GPU in turns: it isolates nothing and adds no capacity.",
        "",
        "| pods running | overlap window (s) | mean latency (ms) | vs one pod | per-pod latency (ms) | DCGM GPU util (%) |",
        "|---|---|---|---|---|---|",
    ]
    for r in result.rounds:
        ratio = f"{r.mean_latency_ms / base:.2f}x" if base and r.mean_latency_ms else "-"
        lines.append(
            f"| {r.running} | {r.window_s if r.window_s is not None else '-'} | "
            f"{r.mean_latency_ms if r.mean_latency_ms is not None else '-'} | {ratio} | "
            f"{', '.join(f'{v:g}' for v in r.latency_ms.values()) or '-'} | "
            f"{r.gpu_util_pct if r.gpu_util_pct is not None else '-'} |"
        )
    lines += ["", "DCGM_FI_DEV_GPU_UTIL is the share of time a kernel ran, so it reads near 100% from one pod on: "
              "it shows the GPU was busy, not how much work each pod got."]
    return "\n".join(lines)


def plots(result: G2Result, folder: Path) -> list[str]:
    points = [(float(r.running), r.mean_latency_ms) for r in result.rounds if r.mean_latency_ms is not None]
    if not points:
        return []
    xy_plot({"mean per-pod latency": points}, "Fixed GPU workload under time-slicing", "pods running on one L4",
            "ms per iteration", folder / "latency_vs_pods.png", integer_x=True)
    return ["latency_vs_pods.png"]


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)

