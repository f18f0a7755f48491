"""What g3 submits: its view of the stack outputs, and the objects of both runs.

Each job is a JobSet with one replicated Job of W workers (an Indexed Job: worker i is completion index
i), one shared GPU each, running scripts/barrier.py, so no worker works until all W are there. Worker 0
is the JobSet's coordinator: JobSet writes its DNS name into every pod's annotations, and the others
reach it there (`<jobset>-worker-0-0.<jobset>`, served by the JobSet's headless Service).

Run A (Kueue): the JobSets carry the LocalQueue label and are created suspended; Kueue resumes one
only when the whole job fits the ClusterQueue quota. Run B (default scheduler): the same JobSets in a
namespace of their own that Kueue does not manage (no queue label, and Kueue's
manageJobsWithoutQueueName is off); their pods are created behind a scheduling gate that the benchmark
lifts one pod at a time, round-robin across the jobs, so the scheduler sees the jobs' workers
interleaved, the same way on every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from benchmarks.kube import images, objects
from benchmarks.kube.errors import LabError
from benchmarks.kube.objects import GPU
from benchmarks.kube.stack import LabParams, gpu_placement, lab_params
from benchmarks.labs import workloads
from podspec.security import pod_security_labels

LAB = "g3"
SECTION = "kueue"
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")
WORKLOAD = ("kueue.x-k8s.io/v1beta2", "Workload")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REPLICATED_JOB = "worker"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
COORDINATOR_KEY = "jobset.sigs.k8s.io/coordinator"
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
RELEASE_GATE = "gke-ml-labs/g3-release"
BARRIER_PORT = 29500
SCRIPT = "barrier.py"
# Run B's namespace admits only pods that meet the restricted Pod Security Standard.
PSA_RESTRICTED = pod_security_labels("restricted")

Run = Literal["kueue", "default-scheduler"]
RUNS: tuple[Run, Run] = ("kueue", "default-scheduler")


class Quota(LabParams):
    gpus: int
    cpu: float
    memory_gib: float


class Params(LabParams):
    """outputs.benchmark.kueue of a g3 stack: the queues and the shape of one job."""

    namespace: str
    local_queue: str
    cluster_queue: str
    flavor: str
    quota: Quota
    jobs: int
    workers: int
    worker: Quota  # one worker's demand
    block_admission: bool | None = None  # Kueue's waitForPodsReady.blockAdmission, as deployed


@dataclass(frozen=True)
class Timing:
    rendezvous_timeout_s: float  # a worker gives up after this long at the barrier
    work_s: float  # what a worker does once released: hold its GPU this long


def params(outputs: dict[str, Any]) -> Params:
    return lab_params(outputs, LAB, Params, SECTION)


def pool_gpus(outputs: dict[str, Any]) -> int:
    """nvidia.com/gpu the GPU pool can ever offer (shared GPUs count one each), from the outputs."""
    pool = outputs.get("gpu_pool") or {}
    sharing = pool.get("sharing") or {}
    return int(sharing.get("max_allocatable_gpus") or pool.get("gpus_per_node", 1) * pool.get("max_nodes", 1))


def check_sizes(p: Params, pool: int) -> None:
    """The lab's shape: the quota admits two whole jobs and not three; the pool holds two and not all."""
    w = p.workers
    if not 2 * w <= p.quota.gpus < 3 * w:
        raise LabError(
            f"benchmark.kueue.quota.gpus {p.quota.gpus} must admit two whole jobs of {w} workers and not three "
            f"(allowed {2 * w} to {3 * w - 1}): fix gke-ml-labs:kueue in the stack file and `pulumi up` again"
        )
    if not 2 * w <= pool < p.jobs * w:
        raise LabError(
            f"gpu_pool offers {pool} shared GPUs: it must hold two jobs of {w} workers and not all {p.jobs} "
            f"(allowed {2 * w} to {p.jobs * w - 1}), or the run without Kueue shows no contention"
        )


def jobset_names(run_id: str, count: int) -> list[str]:
    return [f"g3-{chr(ord('a') + i)}-{run_id[-4:]}" for i in range(count)]


def scheduler_namespace(run_id: str) -> str:
    """Run B's namespace: created by the benchmark, unknown to Kueue, deleted with the run."""
    return f"g3-no-kueue-{run_id[-4:]}"


def _cpu(cores: float) -> str:
    return f"{round(cores * 1000)}m"


def _memory(gib: float) -> str:
    return f"{round(gib * 1024)}Mi"


def jobset(
    outputs: dict[str, Any],
    name: str,
    namespace: str,
    timing: Timing,
    config_map: str,
    *,
    queue: str | None,
    gated: bool,
) -> dict[str, Any]:
    """One job: W workers that each request one shared GPU and wait for each other."""
    p = params(outputs)
    selector, tolerations = gpu_placement(outputs)
    resources = {GPU: str(p.worker.gpus), "cpu": _cpu(p.worker.cpu), "memory": _memory(p.worker.memory_gib)}
    container = objects.container(
        "worker",
        images.PYTHON,
        ["python", f"{objects.SCRIPT_MOUNT}/{SCRIPT}"],
        env={
            "WORKERS": str(p.workers),
            "BARRIER_PORT": str(BARRIER_PORT),
            "RENDEZVOUS_TIMEOUT_S": f"{timing.rendezvous_timeout_s:g}",
            "WORK_S": f"{timing.work_s:g}",
            "PYTHONUNBUFFERED": "1",
        },
        field_env={"COORDINATOR": f"metadata.annotations['{COORDINATOR_KEY}']"},
        requests=resources,
        limits=resources,
        with_scripts=True,
        ports=[BARRIER_PORT],
    )
    spec = objects.pod_spec([container], node_selector=selector, tolerations=tolerations, scripts_config_map=config_map)
    if gated:
        spec["schedulingGates"] = [{"name": RELEASE_GATE}]
    job_spec = {
        "parallelism": p.workers,
        "completions": p.workers,
        "completionMode": "Indexed",  # worker i = completion index i, and a stable hostname per worker
        "backoffLimit": 0,  # a worker that gave up fails its job: no retry blurs the timing
        "template": {"spec": spec},
    }
    js_spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True},
        "coordinator": {"replicatedJob": REPLICATED_JOB, "jobIndex": 0, "podIndex": 0},
        "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job_spec}}],
        "successPolicy": {"operator": "All"},
        # No failurePolicy: the first failed Job fails the JobSet, which then stops what still runs.
    }
    if queue:
        js_spec["suspend"] = True  # Kueue resumes it on admission (the documented way to submit)
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": JOBSET[0],
        "kind": JOBSET[1],
        "metadata": objects.meta(name, namespace, labels),
        "spec": js_spec,
    }


def run_objects(outputs: dict[str, Any], run_id: str, timing: Timing, run: Run) -> list[dict[str, Any]]:
    """Everything one run creates, in creation order."""
    p = params(outputs)
    config_map = f"g3-barrier-{run_id[-4:]}"
    kueue = run == "kueue"
    namespace = p.namespace if kueue else scheduler_namespace(run_id)
    out = [] if kueue else [objects.namespace(namespace, PSA_RESTRICTED)]
    out.append(workloads.scripts_config_map(config_map, namespace, [SCRIPT]))
    for name in jobset_names(run_id, p.jobs):
        out.append(
            jobset(
                outputs, name, namespace, timing, config_map, queue=p.local_queue if kueue else None, gated=not kueue
            )
        )
    return out


def build_workloads(
    outputs: dict[str, Any], run_id: str = "manual", timing: Timing = Timing(90.0, 20.0)
) -> list[dict[str, Any]]:
    """Everything both runs create (the lab modules' common entry point)."""
    return [obj for run in RUNS for obj in run_objects(outputs, run_id, timing, run)]
