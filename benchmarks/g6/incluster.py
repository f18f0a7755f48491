"""The g6 load generator inside the cluster: one Job per load point, next to vLLM, on the system pool.

The Job runs the project's load generator core (benchmarks/loadgen/core/, standard library only) as a
zip archive from a ConfigMap with `python -I -S -B` in a plain Python image: nothing is installed at run time, so the
cluster needs no egress. Progress and the per-request records come back in the pod's log (lines
framed by the core's prefix), which `ClusterRunner` follows through the API server and reads with
the same reader as a local run. The server itself is read (health, versions, /metrics) through the
API server's service proxy: no port-forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.cluster import RUN_LABEL, Cluster, KubeApiError, RunScope, run_labels, wait_until, with_labels
from benchmarks.g6.config import LAB
from benchmarks.harness import Endpoint
from benchmarks.harness.errors import HarnessError
from benchmarks.harness.server import Server
from benchmarks.kube import images, objects
from benchmarks.kube.timeline import phase
from benchmarks.loadgen import LoadgenError, LoadRun, LoadSpec
from benchmarks.loadgen.core import PLAN_ENV, OutputReader
from benchmarks.loadgen.runner import CORE_FLAGS, Progress, core_archive, placed, read_output
from podspec.security import Scratch
from stacks.output_folder import prepare

CORE_FILE = "loadgen.pyz"
CONTAINER = "loadgen"
# The default CPU request: the g6 stack's system node (e2-standard-4, 3.92 CPUs allocatable) carries
# the controllers' requests (about 1.1 CPUs: GKE's own pods, kube-prometheus-stack, the idle guard and
# the cost exporter); two more leave them room. One worker process (one event loop) per CPU.
DEFAULT_CPUS = 2
# A finished Job and its pod go away this long after the end even if the laptop that started them
# died before its cleanup ran.
TTL_AFTER_FINISHED_S = 900
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
SHM = Scratch("shm", "/dev/shm", "16Mi", medium="Memory")


def memory_mib(spec: LoadSpec, workers: int) -> int:
    """Memory the core needs for one point: interpreters, the encoded requests (each worker may end up
    with its own copy), and every read of every response kept until the run ends (~300 B a read)."""
    total = spec.warmup_requests + spec.requests
    input_lens, output_lens = spec.lengths()
    requests_mib = (7 * (sum(input_lens) + total * spec.prefix_len) + 300 * total) * (workers + 1) / 2**20
    reads_mib = (sum(output_lens) + 4 * total) * 300 / 2**20
    return 64 + 24 * workers + math.ceil(requests_mib + reads_mib)


def config_map_name(run_id: str) -> str:
    return f"{run_id}-loadgen"


def job_name(run_id: str, point: int) -> str:
    return f"{run_id}-load-{point}"


def config_map(name: str, namespace: str) -> dict[str, Any]:
    """The load generator core (its zip archive), as the pod will see it at objects.SCRIPT_MOUNT."""
    return objects.config_map(name, namespace, {}, binary={CORE_FILE: core_archive().read_bytes()})


def job(
    name: str, namespace: str, node_selector: dict[str, str], spec: LoadSpec, scripts: str, cpus: int
) -> dict[str, Any]:
    """One load point as a Job on the system pool (`node_selector`, from the stack outputs): the core
    with its plan in the environment."""
    memory = memory_mib(spec, cpus)
    client = objects.container(
        CONTAINER,
        images.PYTHON,
        ["python", *CORE_FLAGS, f"{objects.SCRIPT_MOUNT}/{CORE_FILE}"],
        env={PLAN_ENV: spec.plan(workers=cpus).to_json()},
        # A CPU request and no CPU limit: a limit would throttle the very thing being measured (the
        # client's timing), and CFS throttling shows up as client lag in bursts of 100 ms periods.
        requests={"cpu": str(cpus), "memory": f"{memory}Mi"},
        limits={"memory": f"{2 * memory}Mi"},
        with_scripts=True,
    )
    # Where the client ran goes into its records: the node's name from the downward API.
    client["env"].append({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    # The restricted Pod Security Standard with a read-only root: the one place the core writes is
    # /dev/shm (multiprocessing's locks are POSIX semaphores there).
    pod = objects.pod_spec([client], node_selector=node_selector, scripts_config_map=scripts, scratch=(SHM,), home=None)
    # The vLLM Service's environment variables would only add noise to the pod.
    pod["enableServiceLinks"] = False
    return objects.job(name, namespace, pod, ttl_after_finished_s=TTL_AFTER_FINISHED_S)


def proxy_server(cluster: Cluster, endpoint: Endpoint) -> Server:
    """vLLM as this process reaches it: through the API server's service proxy."""
    ns, service, port = endpoint.namespace, endpoint.service, endpoint.port

    def get(path: str) -> str:
        try:
            return cluster.service_get(ns, service, port, path, {})
        except KubeApiError as exc:
            raise HarnessError(str(exc)) from exc

    def post(path: str, body: dict[str, Any], timeout_s: float) -> str:
        try:
            return cluster.service_post(ns, service, port, path, body, timeout_s)
        except KubeApiError as exc:
            raise HarnessError(str(exc)) from exc

    def log() -> str:
        try:
            return server_log(cluster, endpoint)
        except KubeApiError as exc:
            raise HarnessError(str(exc)) from exc

    where = f"service {ns}/{service}:{port} through the API server"
    return Server(base_url=endpoint.server_url(), get=get, post=post, where=where, log=log)


def server_log(cluster: Cluster, endpoint: Endpoint) -> str:
    """The log of the newest running pod behind the endpoint's Service (after a rollout the old pod
    may still be on its way out), found through the Service's own selector."""
    ns, name = endpoint.namespace, endpoint.service
    service = next((s for s in cluster.list("v1", "Service", ns) if s["metadata"]["name"] == name), None)
    selector = ((service or {}).get("spec") or {}).get("selector")
    if not selector:
        raise KubeApiError(f"Service {ns}/{name} " + ("has no pod selector" if service else "not found"))
    pods = [
        p for p in cluster.list("v1", "Pod", ns, ",".join(f"{k}={v}" for k, v in sorted(selector.items())))
        if phase(p) == "Running" and not p["metadata"].get("deletionTimestamp")
    ]  # fmt: skip
    if not pods:
        raise KubeApiError(f"no running pod behind Service {ns}/{name}")
    newest = max(pods, key=lambda p: p["metadata"].get("creationTimestamp") or "")
    return cluster.pod_log(ns, newest["metadata"]["name"])


def _phase(pods: list[dict[str, Any]]) -> str:
    return (phase(pods[0]) or "Pending") if pods else "no pod yet"


def _waiting_reason(pods: list[dict[str, Any]]) -> str:
    """Why a pod is not running yet, as the API says (unschedulable, image pull, ...)."""
    if not pods:
        return "no pod yet"
    status = pods[0].get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("status") == "False" and cond.get("message"):
            return f"{cond.get('reason')}: {cond['message']}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason')}: {waiting.get('message', '')}".rstrip(": ")
    return status.get("phase", "Pending")


def _termination(pod: dict[str, Any]) -> str:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        done = (cs.get("state") or {}).get("terminated")
        if done:
            return f"exit code {done.get('exitCode')} ({done.get('reason')})"
    return (pod.get("status") or {}).get("phase", "unknown")


class ClusterRunner:
    """Runs each load point as a Job next to the server; a context manager whose exit deletes every
    object it created, however the run ends (RunScope: error, Ctrl-C, SIGTERM)."""

    def __init__(
        self,
        cluster: Cluster,
        run_id: str,
        namespace: str,
        node_selector: dict[str, str],
        *,
        cpus: int = DEFAULT_CPUS,
        start_timeout_s: float = 600.0,
        poll_s: float = 2.0,
        log: Callable[[str], None] = print,
    ) -> None:
        self.cluster = cluster
        self.run_id = run_id
        self.namespace = namespace
        self.node_selector = node_selector
        self.cpus = cpus
        self.start_timeout_s = start_timeout_s
        self.poll_s = poll_s
        self.log = log
        self.scope = RunScope(cluster, run_id, LAB, log)
        self._points = 0
        self._machine_types: dict[str, str | None] = {}

    def __enter__(self) -> ClusterRunner:
        self.scope.__enter__()
        try:
            self.scope.create(config_map(config_map_name(self.run_id), self.namespace))
        except BaseException:
            self.scope.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.scope.__exit__(*exc)

    def run(self, spec: LoadSpec, on_progress: Progress | None = None) -> LoadRun:
        self._points += 1
        name = job_name(self.run_id, self._points)
        self.scope.create(job(name, self.namespace, self.node_selector, spec, config_map_name(self.run_id), self.cpus))
        pod = self._started(name)
        pod_name = pod["metadata"]["name"]
        reader = OutputReader(on_progress)
        try:
            reader.feed_all(self.cluster.follow_log(self.namespace, pod_name, CONTAINER))
        except KubeApiError as exc:
            self.log(f"{name}: {exc}; reading the whole log once it ends")
        if reader.end is None:
            # The stream broke, or ended early: the finished pod's whole log still holds every line.
            pod = self._finished(name)
            reader = OutputReader(on_progress).feed_all(self.cluster.pod_log(self.namespace, pod_name, CONTAINER).splitlines())
            if reader.end is None:
                raise LoadgenError(
                    f"load generator Job {self.namespace}/{name} ended with {_termination(pod)} and no records: "
                    f"{reader.failure()}"
                )
        run = read_output(reader, spec, f"load generator Job {self.namespace}/{name}")
        node = pod.get("spec", {}).get("nodeName") or run.client.get("node")
        return placed(run, where="in-cluster", node=node, machine_type=self._machine_type(node))

    def _pods(self, job_name: str) -> list[dict[str, Any]]:
        return self.cluster.list("v1", "Pod", self.namespace, f"batch.kubernetes.io/job-name={job_name}")

    def _started(self, job_name: str) -> dict[str, Any]:
        """The Job's pod once its container runs (or already ended); an error naming why it does not."""
        pods = wait_until(
            f"{job_name}: load generator pod",
            lambda: self._pods(job_name),
            lambda ps: _phase(ps) in ("Running", "Succeeded", "Failed"),
            self.start_timeout_s,
            interval_s=self.poll_s,
            progress=self.log,
            describe=_waiting_reason,
        )
        return pods[0]

    def _finished(self, job_name: str) -> dict[str, Any]:
        pods = wait_until(
            f"{job_name}: load generator pod to finish",
            lambda: self._pods(job_name),
            lambda ps: _phase(ps) in ("Succeeded", "Failed"),
            60.0,
            interval_s=self.poll_s,
            progress=self.log,
            describe=_phase,
        )
        return pods[0]

    def _machine_type(self, node: object) -> str | None:
        if not isinstance(node, str):
            return None
        if node not in self._machine_types:
            labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in self.cluster.list("v1", "Node")}
            self._machine_types[node] = labels.get(node, {}).get(INSTANCE_TYPE)
        return self._machine_types[node]


def manifests(
    namespace: str, node_selector: dict[str, str], specs: list[LoadSpec], cpus: int, run_id: str = f"{LAB}-manifest"
) -> list[dict[str, Any]]:
    """Every object a run with these points creates, labelled as the runner labels them."""
    cm = config_map_name(run_id)
    objs = [config_map(cm, namespace)]
    objs += [job(job_name(run_id, k), namespace, node_selector, spec, cm, cpus) for k, spec in enumerate(specs, 1)]
    return [with_labels(obj, run_labels(run_id, LAB)) for obj in objs]


def write_manifests(folder: Path, objects: list[dict[str, Any]]) -> list[Path]:
    """`objects` as YAML files in `folder`, in place of those an earlier --client-manifest left there (fewer
    points now would otherwise leave its extra Jobs beside the new ones)."""
    prepare(folder, "--client-manifest")
    for old in folder.glob("*.yaml"):
        if _benchmark_object(old):
            old.unlink()
    paths = []
    for obj in objects:
        path = folder / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(obj, sort_keys=False))
        paths.append(path)
    return paths


def _benchmark_object(path: Path) -> bool:
    """A file holding one object labelled as a benchmark run's (benchmarks.cluster.RUN_LABEL)."""
    try:
        obj = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    labels = (obj.get("metadata") or {}).get("labels") if isinstance(obj, dict) else None
    return isinstance(labels, dict) and RUN_LABEL in labels
