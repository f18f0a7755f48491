"""g5: KServe in Knative mode: a load ramp against the autoscaler, cold start from zero, and the canary
split measured from responses.

Load ramp (benchmarks.labs.g5_load): from zero replicas (and, for a GPU predictor, zero GPU nodes) one
request wakes the predictor, then an open-loop request-rate ramp runs while the benchmark watches
Knative's PodAutoscaler and the Deployment until the predictor is back at zero.
Cold start, repeated: wait until the predictor has scaled to zero, then an in-cluster client Job sends
one request; the stages (request sent -> pod created -> scheduled -> node ready -> container ready ->
first byte) come from the client's clock and the Pod/Node timestamps (the API server's are whole
seconds). Canary: with the predictor at zero again, the client sends N requests; which revision
answered each is counted server-side (sklearn: each revision's access log; Triton: each pod's
inference counter), and the share that reached the canary is compared with the configured percentage
through a Wilson interval.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from statistics import mean
from typing import Any

from benchmarks.cluster import RUN_LABEL, wait_until
from benchmarks.kube.errors import LabError
from benchmarks.kube.phases_report import WAITED_TITLE, waited_section
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.stack import LabParams, lab_params, system_selector
from benchmarks.kube.timeline import condition_time
from benchmarks.labs import g5_load, live
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.plotting import timeline_plot
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields
from benchmarks.labs.serving import (
    ISVC,
    ISVC_LABEL,
    MODEL_CONTAINER,
    REVISION_LABEL,
    STAGES,
    TRITON_METRICS_PORT,
    ClientTarget,
    ColdStart,
    Response,
    client_job,
    cold_start,
    example_body,
    is_ready,
    parse_client_log,
    predict_count,
    traffic,
    triton_success_count,
    wilson,
)

LAB = "g5"
TITLE = "KServe in Knative mode: load ramp, cold start and canary"
DEFAULT_TIMEOUT_S = 1500.0  # a GPU predictor from zero waits for a GPU node (up to ~15 min)


class Params(LabParams):
    """outputs.benchmark of a g5 stack (flat: the serving features' keys)."""

    inference_service: str
    inference_namespace: str
    serving_version: str
    canary_version: str | None = None
    canary_traffic_percent: int = 0
    min_replicas: int = 0
    runtime: str = "sklearn"  # stacks older than the Triton option served sklearn only
    served_model: str | None = None  # None: the InferenceService's name (sklearn)

    @property
    def model(self) -> str:
        return self.served_model or self.inference_service


class Gateway(LabParams):
    namespace: str
    service: str
    port: int


class KServeEndpoint(LabParams):
    """outputs.endpoints.kserve: the route host to send through the ClusterIP Kourier gateway."""

    path: str
    protocol: str = "kserve-v1"
    route_host: str
    gateway: Gateway


class Canary(Frozen):
    configured_percent: int
    canary_revision: str | None
    requests: int
    ok: int
    answered_by: dict[str, int]  # revision -> predict calls it answered (access log, or Triton's counter)
    canary_share: float | None
    ci95: tuple[float, float] | None


class G5Result(LabResult):
    inference_service: str
    cold_starts: list[ColdStart]
    canary: Canary | None
    load: g5_load.LoadPhase | None = None


def _endpoint(outputs: dict[str, Any]) -> KServeEndpoint:
    raw = (outputs.get("endpoints") or {}).get("kserve")
    if not raw:
        raise LabError("stack outputs have no endpoints.kserve: is kserve.enabled with deploy_example in Pulumi.g5.yaml?")
    return KServeEndpoint.model_validate(raw)


def client_target(outputs: dict[str, Any]) -> ClientTarget:
    """Where g5's clients run (the system pool, the InferenceService's namespace) and what they call."""
    p = lab_params(outputs, LAB, Params)
    ep = _endpoint(outputs)
    return ClientTarget(namespace=p.inference_namespace, node_selector=system_selector(outputs),
                        gateway=ep.gateway.model_dump(), host=ep.route_host, path=ep.path)


def request_body(outputs: dict[str, Any]) -> str:
    """What the served example is sent (iris flowers over v1, or a CIFAR-10 image to Triton over v2)."""
    return example_body(_endpoint(outputs).protocol, lab_params(outputs, LAB, Params).model)


def build_workloads(outputs: dict[str, Any], run_id: str = "manual", role: str = "cold-0", count: int = 1) -> list[dict[str, Any]]:
    """The client Job (and its script ConfigMap) for one cold-start request or the canary's N."""
    return client_job(f"g5-{role}-{run_id[-4:]}", client_target(outputs), count, request_body(outputs))


def check_outputs(outputs: dict[str, Any]) -> None:
    client_target(outputs)
    request_body(outputs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=3, help="cold starts to measure")
    parser.add_argument("--requests", type=int, default=200, help="requests for the canary split")
    g5_load.add_arguments(parser)


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    p = lab_params(session.outputs, LAB, Params)
    cluster, ns = session.cluster, p.inference_namespace
    pods_selector = f"{ISVC_LABEL}={p.inference_service}"
    session.namespaces = [ns]
    isvcs = [i for i in cluster.list(*ISVC, ns) if i["metadata"]["name"] == p.inference_service]
    if not isvcs or not is_ready(isvcs[0]):
        raise LabError(f"InferenceService {ns}/{p.inference_service} is missing or not Ready: check `kubectl get isvc -n {ns}`")
    snapshots, logs = session.snapshots, session.logs

    def predictor_pods() -> Snapshot:
        snapshots.append(Snapshot(at=now(), objects={"pods": cluster.list("v1", "Pod", ns, pods_selector)}))
        return snapshots[-1]

    def at_zero(what: str) -> None:
        wait_until(f"{what}: predictor scaled to zero", predictor_pods, lambda s: not s.objects["pods"], args.timeout,
                   interval_s=args.poll, progress=session.log, describe=lambda s: f"{len(s.objects['pods'])} pod(s)")

    def client(role: str, count: int) -> str:
        objs = build_workloads(session.outputs, session.run_id, role, count)
        for obj in objs:
            session.scope.create(obj)
        name = objs[-1]["metadata"]["name"]
        sel = f"{RUN_LABEL}={session.run_id}"
        wait_until(f"{role}: client job", lambda: [j for j in cluster.list("batch/v1", "Job", ns, sel)
                                                  if j["metadata"]["name"] == name],
                   lambda js: bool(js) and bool(condition_time(js[0], "Complete") or condition_time(js[0], "Failed")),
                   args.timeout, interval_s=args.poll, progress=session.log)
        for pod in cluster.list("v1", "Pod", ns, f"batch.kubernetes.io/job-name={name}"):
            logs[pod["metadata"]["name"]] = cluster.pod_log(ns, pod["metadata"]["name"])
        predictor_pods()  # the pods that served it, before they scale away again
        return name

    if args.ramp and p.min_replicas == 0:
        g5_load.record(session, args, client_target(session.outputs), request_body(session.outputs), at_zero)
    elif args.ramp:
        session.notes.append(f"minReplicas is {p.min_replicas}: the load ramp needs a predictor that starts from zero")
    cold_jobs: list[str] = session.client.setdefault("cold_jobs", [])
    if p.min_replicas == 0:
        for r in range(args.repeats):
            at_zero(f"cold start {r + 1}/{args.repeats}")
            cold_jobs.append(client(f"cold-{r}", 1))
    else:
        session.notes.append(f"minReplicas is {p.min_replicas}: the predictor never scales to zero, no cold start to time")
    canary_job = None
    if p.canary_version:
        at_zero("canary")
        canary_job = client("canary", args.requests)
        metrics: dict[str, str] = session.client.setdefault("pod_metrics", {})
        for pod in snapshots[-1].objects["pods"]:
            name = pod["metadata"]["name"]
            if p.runtime == "triton":
                # Triton logs no access lines; its inference counter per pod says which revision answered.
                metrics[name] = cluster.pod_get(ns, name, TRITON_METRICS_PORT, "/metrics")
            else:
                # Knative adds queue-proxy beside the model server: name the container or the API refuses.
                logs[name] = cluster.pod_log(ns, name, container=MODEL_CONTAINER)
    isvc = [i for i in cluster.list(*ISVC, ns) if i["metadata"]["name"] == p.inference_service]
    return session.recording(objects={"inferenceservice": isvc}, client={"canary_job": canary_job})


def _job_log(rec: Recording, job: str) -> str:
    return "".join(text for pod, text in rec.logs.items() if pod.startswith(f"{job}-"))


def measure(rec: Recording, source: str = "live") -> G5Result:
    p = lab_params(rec.outputs, LAB, Params)
    pods: dict[str, dict[str, Any]] = {}
    for snap in rec.snapshots:
        for pod in snap.objects.get("pods", []):
            pods[pod["metadata"]["name"]] = pod
    nodes = {n["metadata"]["name"]: n for n in rec.nodes}
    colds = [_cold_start(i, parse_client_log(_job_log(rec, job)), pods, nodes, rec, p.runtime)
             for i, job in enumerate(rec.client["cold_jobs"])]  # fmt: skip
    canary = _canary(rec, p, pods) if rec.client.get("canary_job") else None
    load = g5_load.measure(rec)

    checks = g5_load.checks(load) if load is not None else []
    if p.min_replicas == 0 and rec.client["cold_jobs"]:
        served = [c for c in colds if c.status == 200 and c.stages.get("first byte") is not None]
        zero_before = _zero_before_each(rec)
        checks.append(
            Check(
                name="served from zero on every repeat",
                passed=bool(colds) and len(served) == len(colds) and zero_before,
                evidence=(f"{len(served)} of {len(colds)} answered 200; first byte after "
                          + ", ".join(f"{c.stages['first byte']:.1f}s" for c in served)
                          + ("" if zero_before else "; the predictor was NOT at zero before every request")),
            )
        )
    if canary is not None:
        lo, hi = canary.ci95 or (0.0, 1.0)
        checks.append(
            Check(
                name=f"canary share consistent with the configured {canary.configured_percent}%",
                passed=canary.ok > 0 and lo <= canary.configured_percent / 100 <= hi,
                evidence=f"{canary.answered_by.get(canary.canary_revision or '', 0)} of {sum(canary.answered_by.values())} "
                f"predict calls answered by {canary.canary_revision}: {100 * (canary.canary_share or 0):.1f}% "
                f"(95% CI {100 * lo:.1f}-{100 * hi:.1f}%)",
            )
        )
    return G5Result(**common_fields(rec, source, checks, model=p.model), inference_service=p.inference_service,
                    cold_starts=colds, canary=canary, load=load)


def _zero_before_each(rec: Recording) -> bool:
    """Every client job was preceded by a snapshot with no predictor pod (the wait for zero)."""
    empties = [s.at for s in rec.snapshots if not s.objects.get("pods")]
    return len(empties) >= len(rec.client["cold_jobs"])


def _cold_start(i: int, responses: list[Response], pods: dict[str, dict[str, Any]], nodes: dict[str, dict[str, Any]],
                rec: Recording, runtime: str) -> ColdStart:  # fmt: skip
    if not responses:
        return ColdStart(repeat=i, status=None, error="the client logged no response", pod=None, node=None,
                         node_was_up=True, stages={})
    r = responses[0]
    return cold_start(i, r.t_send, r.t_first_byte, r.status, r.error, pods, nodes, rec.events, rec.logs, runtime)


def _canary(rec: Recording, p: Params, pods: dict[str, dict[str, Any]]) -> Canary:
    responses = parse_client_log(_job_log(rec, rec.client["canary_job"]))
    isvc = (rec.objects.get("inferenceservice") or [{}])[0]
    routes = traffic(isvc)
    canary_rev = next((t["revisionName"] for t in routes if t.get("latestRevision")), None)
    answered: dict[str, int] = {}
    metrics = rec.client.get("pod_metrics") or {}
    for name, pod in pods.items():
        revision = (pod["metadata"].get("labels") or {}).get(REVISION_LABEL)
        if not revision:
            continue
        if name in metrics:
            answered[revision] = answered.get(revision, 0) + triton_success_count(metrics[name], p.model)
        elif name in rec.logs:
            answered[revision] = answered.get(revision, 0) + predict_count(rec.logs[name])
    n = sum(answered.values())
    k = answered.get(canary_rev or "", 0)
    return Canary(
        configured_percent=p.canary_traffic_percent,
        canary_revision=canary_rev,
        requests=len(responses),
        ok=sum(1 for r in responses if r.status == 200),
        answered_by=dict(sorted(answered.items())),
        canary_share=k / n if n else None,
        ci95=wilson(k, n) if n else None,
    )


def report_body(result: G5Result) -> str:
    lines = [g5_load.report(result.load), ""] if result.load is not None else []
    lines += ["## Cold start from zero", ""]
    if result.cold_starts:
        lines += [
            "Seconds after the request was sent (client clock; Pod/Node times are whole seconds). "
            "'node ready' is empty when the predictor landed on a node that was already up.",
            "",
            "| repeat | status | " + " | ".join(STAGES) + " | pod | node |",
            "|---|---|" + "---|" * len(STAGES) + "---|---|",
        ]
        for c in result.cold_starts:
            cells = ["-" if c.stages.get(s) is None else f"{c.stages[s]:.1f}" for s in STAGES]
            lines.append(f"| {c.repeat + 1} | {c.status or c.error} | " + " | ".join(cells) + f" | {c.pod or '-'} | {c.node or '-'} |")
        firsts = [c.stages["first byte"] for c in result.cold_starts if c.stages.get("first byte") is not None]
        if firsts:
            lines += ["", f"First byte: mean {mean(firsts):.1f}s, min {min(firsts):.1f}s, max {max(firsts):.1f}s "
                      f"over {len(firsts)} cold starts (the first one also pulled the image)."]
        first = next((c for c in result.cold_starts if c.phases is not None), None)
        if first is not None and first.phases is not None:
            where = (f"Repeat {first.repeat + 1}, phase by phase (pod {first.pod} on {first.node or '-'}), from the "
                     "request sent to its first byte.")  # fmt: skip
            section = waited_section(first.phases.phases, first.phases.total_s, first.phases.failure, where)
            lines += ["", section.replace(WAITED_TITLE, "### " + WAITED_TITLE.removeprefix("## "), 1)]
    else:
        lines.append("Not measured (see what failed first time).")
    lines += ["", "## Canary split", ""]
    c = result.canary
    if c is None:
        lines.append("No canary configured: set `kserve.canary` in Pulumi.g5.yaml and `pulumi up` again.")
    else:
        lo, hi = c.ci95 or (0.0, 1.0)
        lines += [
            f"{c.requests} requests ({c.ok} answered 200). Predict calls per revision, from each revision's "
            "model server (sklearn: its access log; Triton: its nv_inference_request_success counter):",
            "",
            "| revision | predict calls |",
            "|---|---|",
            *(f"| {rev}{' (canary)' if rev == c.canary_revision else ''} | {k} |" for rev, k in c.answered_by.items()),
            "",
            f"Canary share {100 * (c.canary_share or 0):.1f}%, 95% Wilson interval {100 * lo:.1f}-{100 * hi:.1f}%, "
            f"configured {c.configured_percent}%. Knative splits per request at random, so at {sum(c.answered_by.values())} "
            "requests this interval is as close as the measurement can get.",
        ]
    return "\n".join(lines)


def plots(result: G5Result, folder: Path) -> list[str]:
    files = g5_load.plot(result.load, folder) if result.load is not None else []
    return files + _cold_start_plot(result, folder)


def _cold_start_plot(result: G5Result, folder: Path) -> list[str]:
    if not result.cold_starts:
        return []
    points = []
    for s in STAGES:
        values = [c.stages[s] for c in result.cold_starts if c.stages.get(s) is not None]
        if values:
            points.append((f"{s} (mean of {len(values)})", mean(values)))
    if len(points) < 2:
        return []
    timeline_plot(points, "Cold start from zero: seconds after the request", folder / "cold_start.png")
    return ["cold_start.png"]


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)
