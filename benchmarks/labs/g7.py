"""g7: the Argo train -> register -> deploy DAG: the artefact flows to the bucket with its metadata,
the InferenceService it deploys serves, and a failure-injection run shows what one failed step does.

Run 1 submits a Workflow that references the stack's WorkflowTemplate (`workflowTemplateRef`) with
`fail_step=none`, then checks models/<model>/<workflow>/model.joblib and metadata.json in the bucket
through the Cloud Storage JSON API under Application Default Credentials (ops.gcp's client: no key
to create; GKE_ML_LABS_ENDPOINT_STORAGE and GOOGLE_OAUTH_ACCESS_TOKEN as for the operator commands),
waits for the InferenceService to be Ready and sends it
requests from an in-cluster client. Run 2 sets `fail_step` (register by default) and reads from the
Workflow's status.nodes which steps failed, were retried (child attempts of a Retry node) and were
skipped (Omitted/Skipped), and the final phase.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from benchmarks.cluster import RUN_LABEL, wait_until
from benchmarks.kube import objects
from benchmarks.kube.errors import LabError
from benchmarks.kube.record import Recording, Snapshot
from benchmarks.kube.stack import LabParams, lab_params, require_output, system_selector
from benchmarks.kube.timeline import phase
from benchmarks.labs import live
from benchmarks.labs.live import LabSession, now
from benchmarks.labs.result import Check, Frozen, LabResult, common_fields
from benchmarks.labs.serving import ISVC, ClientTarget, client_job, is_ready, parse_client_log
from ops.gcp import CredentialsError, GcpClient, GcpError

LAB = "g7"
TITLE = "Argo Workflows: train, register, deploy, and a failed step"
DEFAULT_TIMEOUT_S = 1800.0
WORKFLOW = ("argoproj.io/v1alpha1", "Workflow")
STEPS = ("train", "register", "deploy")
# Knative's Kourier gateway as its release manifest installs it, used when the stack exports none.
DEFAULT_GATEWAY = {"namespace": "kourier-system", "service": "kourier", "port": 80}
DONE_PHASES = ("Succeeded", "Failed", "Error")


class Retry(LabParams):
    limit: int
    policy: str


class Params(LabParams):
    """outputs.benchmark of a g7 stack (flat: the serving features' keys)."""

    workflow_template: str
    workflow_namespace: str
    bucket: str
    model_name: str
    retry: Retry


class StepOutcome(Frozen):
    step: str
    phase: str  # of the task node (for a retried step: its Retry node)
    attempts: int
    attempt_phases: list[str]
    message: str | None


class Artefact(Frozen):
    prefix: str
    objects: dict[str, int]  # key -> size in bytes
    metadata: dict[str, Any] | None
    error: str | None


class WorkflowRun(Frozen):
    name: str
    fail_step: str
    phase: str | None
    steps: list[StepOutcome]


class G7Result(LabResult):
    runs: list[WorkflowRun]
    artefact: Artefact | None
    served: int
    requests: int


def workflow_name(run_id: str, fail_step: str) -> str:
    return f"g7-{fail_step}-{run_id[-4:]}"


def build_workloads(outputs: dict[str, Any], run_id: str = "manual", fail_step: str = "none") -> list[dict[str, Any]]:
    """The Workflow of one run: the stack's template, with `fail_step` set."""
    p = lab_params(outputs, LAB, Params)
    return [
        {
            "apiVersion": WORKFLOW[0],
            "kind": WORKFLOW[1],
            "metadata": objects.meta(workflow_name(run_id, fail_step), p.workflow_namespace),
            "spec": {
                "workflowTemplateRef": {"name": p.workflow_template},
                "arguments": {"parameters": [{"name": "fail_step", "value": fail_step}]},
            },
        }
    ]


def check_outputs(outputs: dict[str, Any]) -> None:
    lab_params(outputs, LAB, Params)
    require_output(outputs, "artifact_bucket", LAB)
    system_selector(outputs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--fail-step", choices=[s for s in STEPS], default="register",
                        help="the step the failure-injection run makes exit non-zero")
    parser.add_argument("--requests", type=int, default=5, help="requests sent to the deployed model")


def check_artefact(gcs: GcpClient, bucket: str, model: str, workflow: str) -> Artefact:
    """What the register step left in the bucket: objects under models/<model>/<workflow>/ and the
    parsed metadata.json. Errors are kept, not raised: a missing artefact is a finding."""
    prefix = f"models/{model}/{workflow}/"
    try:
        found = {
            o["name"][len(prefix):]: int(o.get("size", 0))
            for page in gcs.pages("storage", f"b/{quote(bucket, safe='')}/o", prefix=prefix)
            for o in page.get("items", [])
        }
        metadata = None
        if "metadata.json" in found:
            metadata = gcs.get("storage", f"b/{quote(bucket, safe='')}/o/{quote(prefix + 'metadata.json', safe='')}",
                               alt="media")  # fmt: skip
        return Artefact(prefix=prefix, objects=found, metadata=metadata, error=None)
    except GcpError as e:
        return Artefact(prefix=prefix, objects={}, metadata=None, error=f"{type(e).__name__}: {e}")


def step_outcomes(workflow: dict[str, Any]) -> list[StepOutcome]:
    """Per DAG task: its phase, and the attempts under it when Argo retried it (status.nodes)."""
    nodes = (workflow.get("status") or {}).get("nodes") or {}
    out = []
    for step in STEPS:
        task = next((n for n in nodes.values() if n.get("displayName") == step and n.get("type") != "Pod"), None)
        task = task or next((n for n in nodes.values() if n.get("displayName") == step), None)
        if task is None:
            out.append(StepOutcome(step=step, phase="NotReached", attempts=0, attempt_phases=[], message=None))
            continue
        attempts = [nodes[c] for c in task.get("children", []) if c in nodes and nodes[c].get("type") == "Pod"]
        if task.get("type") == "Pod":
            attempts = [task]
        out.append(
            StepOutcome(
                step=step,
                phase=task.get("phase", "Unknown"),
                attempts=len(attempts),
                attempt_phases=[a.get("phase", "Unknown") for a in attempts],
                message=task.get("message") or next((a.get("message") for a in attempts if a.get("message")), None),
            )
        )
    return out


def record(session: LabSession, args: argparse.Namespace) -> Recording:
    p = lab_params(session.outputs, LAB, Params)
    cluster, ns, run_id = session.cluster, p.workflow_namespace, session.run_id
    session.namespaces = [ns]
    snapshots, logs, client = session.snapshots, session.logs, session.client
    client.update({"workflows": [], "client_job": None})

    def submit(fail_step: str) -> dict[str, Any]:
        for obj in build_workloads(session.outputs, run_id, fail_step):
            session.scope.create(obj)
        name = workflow_name(run_id, fail_step)

        def poll() -> Snapshot:
            wfs = [w for w in cluster.list(*WORKFLOW, ns, f"{RUN_LABEL}={run_id}") if w["metadata"]["name"] == name]
            snapshots.append(Snapshot(at=now(), objects={"workflows": wfs}))
            return snapshots[-1]

        snap = wait_until(f"workflow {name}", poll,
                          lambda s: bool(s.objects["workflows"]) and phase(s.objects["workflows"][0]) in DONE_PHASES,
                          args.timeout, interval_s=args.poll, progress=session.log,
                          describe=lambda s: str({n.get("displayName"): n.get("phase") for w in s.objects["workflows"]
                                                  for n in (w.get("status") or {}).get("nodes", {}).values()}))
        client["workflows"].append({"name": name, "fail_step": fail_step})
        return snap.objects["workflows"][0]

    good = submit("none")
    if phase(good) == "Succeeded":
        try:
            with GcpClient.from_environment() as gcs:
                client["artefact"] = check_artefact(gcs, p.bucket, p.model_name, good["metadata"]["name"]).model_dump()
        except CredentialsError as e:  # raised before the first call; a failed read is kept in the artefact
            session.notes.append(f"artefact check skipped: {e}")
        isvc = wait_until(f"InferenceService {ns}/{p.model_name} Ready",
                          lambda: [i for i in cluster.list(*ISVC, ns) if i["metadata"]["name"] == p.model_name],
                          lambda xs: bool(xs) and is_ready(xs[0]), args.timeout, interval_s=args.poll, progress=session.log)[0]
        snapshots.append(Snapshot(at=now(), objects={"inferenceservices": [isvc]}))
        host = urlsplit(isvc["status"]["url"]).hostname
        gateway = ((session.outputs.get("endpoints") or {}).get("kserve") or {}).get("gateway") or DEFAULT_GATEWAY
        target = ClientTarget(namespace=ns, node_selector=system_selector(session.outputs), gateway=gateway, host=host,
                              path=f"/v1/models/{p.model_name}:predict")
        objs = client_job(f"g7-client-{run_id[-4:]}", target, args.requests)
        for obj in objs:
            session.scope.create(obj)
        job = objs[-1]["metadata"]["name"]
        wait_until("client job", lambda: cluster.list("v1", "Pod", ns, f"batch.kubernetes.io/job-name={job}"),
                   lambda pods: any(phase(x) in ("Succeeded", "Failed") for x in pods),
                   args.timeout, interval_s=args.poll, progress=session.log)
        for pod in cluster.list("v1", "Pod", ns, f"batch.kubernetes.io/job-name={job}"):
            logs[pod["metadata"]["name"]] = cluster.pod_log(ns, pod["metadata"]["name"])
        client["client_job"] = job
    else:
        session.notes.append(f"the normal run ended {good['status']['phase']}: {good['status'].get('message', '')}")
    submit(args.fail_step)
    return session.recording()


def measure(rec: Recording, source: str = "live") -> G7Result:
    p = lab_params(rec.outputs, LAB, Params)
    final: dict[str, dict[str, Any]] = {}
    for snap in rec.snapshots:
        for w in snap.objects.get("workflows", []):
            final[w["metadata"]["name"]] = w
    runs = []
    for info in rec.client.get("workflows", []):
        w = final.get(info["name"], {})
        runs.append(WorkflowRun(name=info["name"], fail_step=info["fail_step"],
                                phase=phase(w), steps=step_outcomes(w)))
    if not runs:
        raise LabError(f"recording of run {rec.run_id} has no workflow")
    artefact = Artefact.model_validate(rec.client["artefact"]) if rec.client.get("artefact") else None
    job = rec.client.get("client_job")
    responses = [r for pod, text in rec.logs.items() if job and pod.startswith(f"{job}-") for r in parse_client_log(text)]
    served = sum(1 for r in responses if r.status == 200)
    normal = next((r for r in runs if r.fail_step == "none"), None)
    failing = [r for r in runs if r.fail_step != "none"]
    checks = [
        Check(
            name="the DAG ran train -> register -> deploy and Succeeded",
            passed=bool(normal) and normal.phase == "Succeeded" and all(s.phase == "Succeeded" for s in normal.steps),
            evidence=", ".join(f"{s.step} {s.phase}" for s in normal.steps) + f"; workflow {normal.phase}"
            if normal else "no normal run",
        ),
        Check(
            name="the artefact and its metadata are in the bucket",
            passed=bool(artefact) and not artefact.error and "model.joblib" in artefact.objects
            and bool(artefact.metadata) and artefact.metadata.get("workflow") == (normal.name if normal else None),
            evidence=(f"gs://{p.bucket}/{artefact.prefix}: "
                      + (artefact.error or ", ".join(f"{k} ({v} B)" for k, v in artefact.objects.items())
                         + f"; metadata.workflow = {(artefact.metadata or {}).get('workflow')}"))
            if artefact else "not checked (see what failed first time)",
        ),
        Check(
            name="the deployed InferenceService serves",
            passed=bool(responses) and served == len(responses),
            evidence=f"{served} of {len(responses)} requests answered 200",
        ),
    ]
    for run in failing:
        failed = next((s for s in run.steps if s.step == run.fail_step), None)
        later = [s for s in run.steps if STEPS.index(s.step) > STEPS.index(run.fail_step)]
        retried = failed is not None and failed.attempts == p.retry.limit + 1
        checks.append(
            Check(
                name=f"fail_step={run.fail_step}: that step failed after its retries, later steps never ran, the DAG failed",
                passed=failed is not None and failed.phase == "Failed" and retried
                and all(s.phase in ("Omitted", "Skipped", "NotReached") for s in later) and run.phase == "Failed",
                evidence=f"{run.fail_step}: {failed.phase if failed else '?'} after {failed.attempts if failed else 0} "
                f"attempt(s) (retry limit {p.retry.limit}, {p.retry.policy}); "
                + ", ".join(f"{s.step} {s.phase}" for s in later) + f"; workflow {run.phase}",
            )
        )
    return G7Result(**common_fields(rec, source, checks, model=p.model_name), runs=runs, artefact=artefact,
                    served=served, requests=len(responses))


def report_body(result: G7Result) -> str:
    lines = ["## Runs", ""]
    for run in result.runs:
        lines += [
            f"### {run.name} (fail_step={run.fail_step}): {run.phase}",
            "",
            "| step | phase | attempts | attempt phases | message |",
            "|---|---|---|---|---|",
            *(f"| {s.step} | {s.phase} | {s.attempts} | {', '.join(s.attempt_phases) or '-'} | "
              f"{(s.message or '-').replace('|', '/')} |" for s in run.steps),
            "",
        ]
    lines += ["Omitted: Argo did not run the task because a task it depends on failed.", "", "## Artefact", ""]
    a = result.artefact
    if a is None:
        lines.append("Not checked.")
    else:
        lines += [f"Prefix `{a.prefix}`: " + (a.error or ", ".join(f"`{k}` ({v} bytes)" for k, v in a.objects.items())), ""]
        if a.metadata:
            lines += ["```json", json.dumps(a.metadata, indent=1), "```"]
    lines += ["", "## Serving", "", f"{result.served} of {result.requests} requests to the deployed model answered 200."]
    return "\n".join(lines)


def plots(result: G7Result, folder: Path) -> list[str]:
    return []  # the step table is the picture


def run(args: argparse.Namespace) -> int:
    return live.run(sys.modules[__name__], args)


def main(argv: list[str] | None = None) -> int:
    return live.main(sys.modules[__name__], argv)
