"""g6's in-cluster load generator: the ConfigMap and Jobs built from the g6 stack's outputs against
the Kubernetes schema and the restricted Pod Security Standard, the shipped core run exactly as the
pod runs it, and the runner's cluster layer (create, follow the log, collect, delete on failure and
Ctrl-C) against a double that plays the kubelet with recorded API objects."""

from __future__ import annotations

import base64
import copy
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pod_security
import pytest
import schemas
import yaml

from benchmarks.cluster import RUN_LABEL, KubeApiError, WaitTimeout
from benchmarks.g6 import main
from benchmarks.g6.incluster import CONTAINER, CORE_FILE, ClusterRunner, proxy_server
from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.harness import Endpoint, HarnessError
from benchmarks.harness.server import Server, http_server
from benchmarks.kube import images, objects
from benchmarks.loadgen import LoadgenError, LoadSpec, summarize
from benchmarks.loadgen.core import PLAN_ENV, OutputReader, Plan
from podspec.security import waived

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
RECORDED = json.loads((Path(__file__).parent / "data" / "g6" / "loadgen-pod.json").read_text())
GPU_TAINT = "nvidia.com/gpu"
# vLLM 0.11.2's start-up lines for an AWQ checkpoint, as its logger formats them (the messages of the files
# in brackets, at those lines of the 0.11.2 wheel): composed from the source, not recorded from a pod.
VLLM_LOG = (Path(__file__).parent / "data" / "g6" / "vllm-awq-startup.log").read_text()
VLLM_SELECTOR = {"app.kubernetes.io/name": "vllm"}
SYSTEM = {"gke-ml-labs/pool": "system"}  # the g6 stack's system_pool.node_selector


@pytest.fixture(scope="module")
def g6_outputs(tmp_path_factory) -> Path:
    """The outputs the g6 stack file really exports (the program under mocks), saved as a file."""
    from stacks.mockrun import run_stack

    path = tmp_path_factory.mktemp("g6") / "outputs.json"
    path.write_text(json.dumps(run_stack("g6").outputs))
    return path


@pytest.fixture(scope="module")
def sim_url():
    with SimTarget(gpu="l4", speedup=4.0, seed=1, base=ServerSettings(model=MODEL)).serving(ServerSettings(max_num_seqs=16)) as server:
        yield server.base_url


def _manifest(g6_outputs: Path, tmp_path: Path, *extra: str) -> list[dict[str, Any]]:
    out = tmp_path / "manifest"
    assert main(["--outputs", str(g6_outputs), "--client-manifest", str(out), "--concurrency", "1,64", "--repeats", "1",
                 *extra]) == 0  # fmt: skip
    return [yaml.safe_load(p.read_text()) for p in sorted(out.iterdir())]


def _pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


def test_client_manifest_is_valid_kubernetes_on_the_system_pool(g6_outputs, tmp_path):
    objs = _manifest(g6_outputs, tmp_path)
    outputs = json.loads(g6_outputs.read_text())
    kinds = [o["kind"] for o in objs]
    # One ConfigMap, and a Job per point: the outputs' one max-num-seqs (saved outputs describe the
    # server that runs) x concurrency 1 and 64.
    assert sorted(kinds) == ["ConfigMap", "Job", "Job"]
    for obj in objs:
        schemas.validate_core(obj)
        assert obj["metadata"]["namespace"] == outputs["endpoints"]["vllm"]["namespace"]
        assert obj["metadata"]["labels"][RUN_LABEL] == "g6-manifest"
    for job in (o for o in objs if o["kind"] == "Job"):
        pod = _pod(job)
        assert job["spec"]["template"]["metadata"]["labels"][RUN_LABEL] == "g6-manifest"
        # Placement: the system pool, never the GPU node: no GPU request, no toleration of its taint.
        assert pod["nodeSelector"] == outputs["system_pool"]["node_selector"] == SYSTEM
        assert pod["nodeSelector"] != outputs["gpu_pool"]["node_selector"]
        assert not any(t.get("key") == GPU_TAINT or t.get("operator") == "Exists" for t in pod.get("tolerations", []))
        (c,) = pod["containers"]
        assert GPU_TAINT not in json.dumps(c["resources"])
        # A CPU request that leaves the e2-standard-4 system node's controllers room, and no CPU limit.
        assert c["resources"]["requests"]["cpu"] == "2" and "cpu" not in c["resources"]["limits"]
        assert c["image"] == images.PYTHON and ":" in c["image"] and not c["image"].endswith(":latest")
        assert c["command"][:4] == ["python", "-I", "-S", "-B"]
        # What the pod runs: the core, its plan against the stack's in-cluster vLLM URL, one worker a CPU.
        env = {e["name"]: e.get("value") for e in c["env"]}
        plan = Plan.from_json(env[PLAN_ENV])
        assert plan.base_url == "http://vllm.llm.svc.cluster.local:8000" and plan.workers == 2
        assert plan.model == outputs["benchmark"]["model"]
        assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in c["env"]


def test_client_pod_meets_the_restricted_pod_security_standard(g6_outputs, tmp_path):
    job = next(o for o in _manifest(g6_outputs, tmp_path, "--client-cpus", "3") if o["kind"] == "Job")
    ((workload, pod),) = pod_security.pod_specs(job)
    # Restricted, and of the project's own rules only the CPU limit is missing, on purpose (waived).
    assert pod_security.level(pod_security.findings(pod)) == "restricted"
    assert {f.rule for f in pod_security.findings(pod)} == {"cpu-limit"} == waived(workload)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] > 0
    (c,) = pod["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True and pod["automountServiceAccountToken"] is False
    # The one writable place is an emptyDir in memory at /dev/shm.
    writable = [m for m in c["volumeMounts"] if not m.get("readOnly")]
    assert [m["mountPath"] for m in writable] == ["/dev/shm"]
    assert {"name": "shm", "emptyDir": {"sizeLimit": "16Mi", "medium": "Memory"}} in pod["volumes"]
    assert c["resources"]["requests"]["cpu"] == "3"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] > 0


def test_client_manifest_needs_the_in_cluster_client(g6_outputs, tmp_path, capsys):
    rc = main(["--outputs", str(g6_outputs), "--target", "http://127.0.0.1:9", "--client-manifest", str(tmp_path / "m")])
    assert rc == 2
    assert "--client-manifest shows the in-cluster client" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_the_shipped_core_runs_isolated_against_the_simulator(g6_outputs, tmp_path, sim_url):
    """The ConfigMap's file, as the pod sees it, under a plain isolated interpreter with no site-packages,
    with the Job's own plan pointed at the simulator on loopback: records the analysis accepts."""
    objs = _manifest(g6_outputs, tmp_path, "--requests", "12", "--input-len", "32", "--output-len", "16")
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    job = next(o for o in objs if o["kind"] == "Job" and "concurrency\": 64" not in json.dumps(o))
    mount = tmp_path / "scripts"
    _mount(cm, mount)
    (c,) = _pod(job)["containers"]
    plan = json.loads(next(e["value"] for e in c["env"] if e["name"] == PLAN_ENV))
    plan.update(base_url=sim_url, model=MODEL)  # the simulator on loopback, serving its own model
    command = [sys.executable, *c["command"][1:]]
    command[-1] = command[-1].replace(objects.SCRIPT_MOUNT, str(mount))
    done = subprocess.run(command, env={PLAN_ENV: json.dumps(plan), "NODE_NAME": "node-a"}, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    spec = LoadSpec(base_url=sim_url, model=MODEL, concurrency=1, requests=12, input_len=32, output_len=16)
    reader = OutputReader().feed_all(done.stdout.splitlines())
    stats = summarize(reader.result(plan["warmup"], plan["requests"]), spec)
    assert stats.completed == 12 and stats.failed == 0 and stats.output_tokens == 12 * 16
    assert stats.ttft_ms.p50 > 0 and stats.itl_ms is not None
    assert reader.start["node"] == "node-a" and reader.start["workers"] == 1  # one in flight needs one worker


# -- the runner's cluster layer ----------------------------------------------------------------------


def _mount(config_map: dict[str, Any], folder: Path) -> None:
    """A ConfigMap's files as the kubelet mounts them: `data` as text, `binaryData` decoded from base64."""
    folder.mkdir()
    for name, text in (config_map.get("data") or {}).items():
        (folder / name).write_text(text)
    for name, encoded in (config_map.get("binaryData") or {}).items():
        (folder / name).write_bytes(base64.b64decode(encoded))


class Kubelet:
    """A `Cluster` that plays the kubelet for the load generator's Jobs: it runs each Job's container
    command on this machine (the ConfigMap's files in a folder standing for the mount; `-S` too, as
    this interpreter is a virtualenv's), answers pod lists with the recorded pod in the phase the
    process is in, and keeps its output in a log file, as a kubelet does: a follow tails the file, and
    the whole log is the file, however much of it a broken follow had read."""

    def __init__(
        self, tmp: Path, *, pending: bool = False, follow_breaks_after: int | None = None, vllm: str | None = None
    ) -> None:
        self.tmp = tmp
        self.pending = pending
        self.follow_breaks_after = follow_breaks_after
        # `vllm`: a server on loopback standing for the stack's vLLM Service: the pods' plans are pointed
        # at it, and the service proxy forwards to it (every other Service answers 503, no endpoints).
        self.vllm = vllm
        self.proxied: list[tuple[str, str, str]] = []  # (method, service, path)
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str, str | None, str]] = []
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.node = RECORDED["node"]

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.created.append(copy.deepcopy(obj))
        name = obj["metadata"]["name"]
        if obj["kind"] == "ConfigMap":
            _mount(obj, self.tmp / name)
        elif obj["kind"] == "Job" and not self.pending:
            pod = obj["spec"]["template"]["spec"]
            (c,) = pod["containers"]
            mount = self.tmp / pod["volumes"][0]["configMap"]["name"]
            command = [sys.executable, "-S", *c["command"][1:-1], c["command"][-1].replace(objects.SCRIPT_MOUNT, str(mount))]
            env = {e["name"]: e["value"] for e in c["env"] if "value" in e} | {"NODE_NAME": self.node["metadata"]["name"]}
            if self.vllm is not None:
                env[PLAN_ENV] = json.dumps({**json.loads(env[PLAN_ENV]), "base_url": self.vllm})
            with self._log(name).open("w") as log:
                self.procs[name] = subprocess.Popen(command, env=env, cwd=self.tmp, stdout=log,
                                                    stderr=subprocess.STDOUT, text=True)  # fmt: skip
        return obj

    def _pod(self, job: str) -> dict[str, Any]:
        proc = self.procs.get(job)
        if proc is None:
            phase = "pod_pending"
        elif proc.poll() is None:
            phase = "pod_running"
        else:
            phase = "pod_succeeded" if proc.returncode == 0 else "pod_failed"
        pod = json.loads(json.dumps(RECORDED[phase]).replace("JOB", job))
        if proc is not None and proc.returncode:
            pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = proc.returncode
        return pod

    def list(self, api_version, kind, namespace=None, label_selector=None):
        if kind == "Node":
            return [self.node]
        if kind == "Service":  # vLLM's, as components/vllm.py selects its pods
            return [{"metadata": {"name": "vllm", "namespace": namespace}, "spec": {"selector": VLLM_SELECTOR}}]
        if label_selector == "app.kubernetes.io/name=vllm":
            # The pod of the last rollout, and its predecessor on its way out.
            return [_vllm_pod("vllm-7d9c-old", "2026-12-01T08:02:11Z", terminating=True),
                    _vllm_pod("vllm-7d9c-x2kq", "2026-12-01T09:13:40Z")]  # fmt: skip
        if kind == "Event":
            return []  # the run's look at what its vLLM pod waited for: nothing came up
        assert kind == "Pod" and label_selector.startswith("batch.kubernetes.io/job-name=")
        return [self._pod(label_selector.split("=", 1)[1])]

    def _log(self, job: str) -> Path:
        return self.tmp / f"{job}.log"

    def follow_log(self, namespace, name, container=None):
        """Whole lines as the container writes them, until it has ended and every line is out."""
        assert container == CONTAINER
        job = name.rsplit("-", 1)[0]
        proc = self.procs[job]
        with self._log(job).open() as log:
            n, pending = 0, ""
            while True:
                ended = proc.poll() is not None  # before the read: what it wrote before ending is in the file
                pending += log.readline()
                if pending.endswith("\n") or (ended and pending):
                    if n == self.follow_breaks_after:
                        raise KubeApiError(f"the log stream of pod {namespace}/{name} broke: connection reset")
                    yield pending.rstrip("\n")
                    n, pending = n + 1, ""
                elif ended:
                    return
                else:
                    time.sleep(0.005)  # as `tail -f` polls a file that has no new line yet

    def pod_log(self, namespace, name, container=None):
        if name.startswith("vllm-"):
            assert name == "vllm-7d9c-x2kq", "the terminating pod's log was read"
            return VLLM_LOG
        job = name.rsplit("-", 1)[0]
        self.procs[job].wait(timeout=60)
        return self._log(job).read_text()

    def delete_labelled(self, api_version, kind, namespace, label_selector):
        self.deleted.append((api_version, kind, namespace, label_selector))
        if kind == "Job":  # background propagation: the Job's pods are killed
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def _vllm(self, method: str, namespace: str, service: str, port: int, path: str) -> Server:
        self.proxied.append((method, service, path))
        if self.vllm is None or service != "vllm":
            raise KubeApiError(f"{method} {path} on service {namespace}/{service}:{port} answered HTTP 503: no endpoints")
        return http_server(self.vllm)

    def service_get(self, namespace, service, port, path, params):
        try:
            return self._vllm("GET", namespace, service, port, path).get(path)
        except HarnessError as exc:
            raise KubeApiError(str(exc)) from exc

    def service_post(self, namespace, service, port, path, body, timeout_s):
        try:
            return self._vllm("POST", namespace, service, port, path).post(path, body, timeout_s)
        except HarnessError as exc:
            raise KubeApiError(str(exc)) from exc

    def server_version(self):
        return {"gitVersion": "v1.35.7-gke.1219000"}


def _vllm_pod(name: str, created: str, terminating: bool = False) -> dict[str, Any]:
    meta = {"name": name, "namespace": "llm", "labels": VLLM_SELECTOR, "creationTimestamp": created}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-01T09:15:41Z"
    return {"metadata": meta, "status": {"phase": "Running"}}


def _spec(url: str, **kw) -> LoadSpec:
    return LoadSpec(**{"base_url": url, "model": MODEL, "input_len": 32, "output_len": 16, "concurrency": 4,
                       "requests": 12, **kw})  # fmt: skip


def _deleted_kinds(kubelet: Kubelet, run_id: str) -> set[str]:
    assert all(sel == f"{RUN_LABEL}={run_id}" for *_, sel in kubelet.deleted)
    return {kind for _, kind, _, _ in kubelet.deleted}


def test_runner_creates_follows_collects_and_deletes(tmp_path, sim_url):
    kubelet = Kubelet(tmp_path)
    progress: dict[int, list[int]] = {1: [], 4: []}
    with ClusterRunner(kubelet, "g6-12010914-ab12", "llm", SYSTEM, cpus=2, poll_s=0.05, log=lambda m: None) as runner:
        runs = [runner.run(_spec(sim_url, concurrency=c), progress[c].append) for c in (1, 4)]
        assert not kubelet.deleted
    stats = [summarize(run, _spec(sim_url)) for run in runs]
    assert all(s.completed == 12 and s.failed == 0 for s in stats)
    # Where the client ran: the recorded node and its machine type, from the pod and the Node's labels.
    place = stats[1].client
    assert (place.where, place.node, place.machine_type) == ("in-cluster", RECORDED["node"]["metadata"]["name"], "e2-standard-4")
    assert place.workers == 2 and stats[0].client.workers == 1
    # The bar's figures, streamed from the pod's log as the point ran: rising to the counted requests.
    assert all(p and p == sorted(p) and p[-1] == 12 for p in progress.values())
    kinds = [(o["kind"], o["metadata"]["name"]) for o in kubelet.created]
    assert kinds == [("ConfigMap", "g6-12010914-ab12-loadgen"), ("Job", "g6-12010914-ab12-load-1"), ("Job", "g6-12010914-ab12-load-2")]
    assert all(o["metadata"]["labels"][RUN_LABEL] == "g6-12010914-ab12" for o in kubelet.created)
    assert _deleted_kinds(kubelet, "g6-12010914-ab12") == {"Job", "ConfigMap", "Pod"}


def test_a_broken_log_stream_falls_back_to_the_whole_log(tmp_path, sim_url):
    kubelet = Kubelet(tmp_path, follow_breaks_after=1)
    seen: list[str] = []
    with ClusterRunner(kubelet, "g6-12010914-cd34", "llm", SYSTEM, poll_s=0.05, log=seen.append) as runner:
        run = runner.run(_spec(sim_url))
    assert len(run.records) == 12 and all(r.ok for r in run.records)
    assert any("broke" in m for m in seen)


def test_a_failing_load_generator_is_an_error_and_still_cleaned_up(tmp_path):
    kubelet = Kubelet(tmp_path)
    with pytest.raises(LoadgenError, match=r"exit code 2 .*cannot resolve vllm\.nowhere\.invalid"):
        with ClusterRunner(kubelet, "g6-12010914-ef56", "llm", SYSTEM, poll_s=0.05, log=lambda m: None) as runner:
            runner.run(_spec("http://vllm.nowhere.invalid:8000"))
    assert _deleted_kinds(kubelet, "g6-12010914-ef56") == {"Job", "ConfigMap", "Pod"}


def test_ctrl_c_while_following_deletes_everything(tmp_path, sim_url):
    kubelet = Kubelet(tmp_path)

    def interrupt(done: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        with ClusterRunner(kubelet, "g6-12010914-0a0b", "llm", SYSTEM, poll_s=0.05, log=lambda m: None) as runner:
            runner.run(_spec(sim_url, requests=200), interrupt)
    assert _deleted_kinds(kubelet, "g6-12010914-0a0b") == {"Job", "ConfigMap", "Pod"}
    assert all(p.poll() is not None for p in kubelet.procs.values()), "the running client was stopped"


def test_a_pod_that_cannot_be_scheduled_says_why(tmp_path):
    kubelet = Kubelet(tmp_path, pending=True)
    with pytest.raises(WaitTimeout, match="Unschedulable: 0/2 nodes are available: 1 Insufficient cpu"):
        with ClusterRunner(kubelet, "g6-12010914-1c1d", "llm", SYSTEM, start_timeout_s=0.1, poll_s=0.02, log=lambda m: None) as runner:
            runner.run(_spec("http://vllm.llm.svc.cluster.local:8000"))
    assert _deleted_kinds(kubelet, "g6-12010914-1c1d") == {"Job", "ConfigMap", "Pod"}


def test_the_server_is_read_through_the_api_servers_service_proxy(tmp_path):
    ep = Endpoint(namespace="llm", service="vllm", port=8000, path="/v1", protocol="openai")
    server = proxy_server(Kubelet(tmp_path), ep)
    assert server.base_url == "http://vllm.llm.svc.cluster.local:8000"
    with pytest.raises(HarnessError, match="GET /metrics on service llm/vllm:8000 answered HTTP 503"):
        server.get("/metrics")


def test_the_servers_log_is_its_newest_running_pods_and_a_missing_service_says_so(tmp_path):
    ep = Endpoint(namespace="llm", service="vllm", port=8000, path="/v1", protocol="openai")
    assert proxy_server(Kubelet(tmp_path), ep).log() == VLLM_LOG
    other = proxy_server(Kubelet(tmp_path), ep.model_copy(update={"service": "tgi"}))
    with pytest.raises(HarnessError, match="Service llm/tgi not found"):
        other.log()


def test_core_file_is_what_the_config_map_carries(tmp_path):
    import io
    import zipfile

    from benchmarks.g6.incluster import config_map
    from benchmarks.loadgen.runner import core_archive

    shipped = base64.b64decode(config_map("x", "llm")["binaryData"][CORE_FILE])
    assert shipped == core_archive().read_bytes()
    # Nothing but the standard library and the package itself: no module of the project or a third party.
    with zipfile.ZipFile(io.BytesIO(shipped)) as zf:
        sources = {name: zf.read(name).decode() for name in zf.namelist()}
    assert "__main__.py" in sources and "loadgen/running.py" in sources
    imports = [line.split()[1] for text in sources.values() for line in text.splitlines()
               if line.startswith(("import ", "from "))]  # fmt: skip
    assert all(m.split(".")[0] in sys.stdlib_module_names or m in ("__future__", "loadgen.running") or m.startswith(".")
               for m in imports), imports  # fmt: skip


def test_the_report_says_where_the_client_ran():
    from benchmarks.g6.report import render_report
    from benchmarks.g6.result import G6Result
    from benchmarks.harness import load_result
    from benchmarks.loadgen.stats import ClientPlace

    result = load_result(G6Result, Path(__file__).parent / "data" / "g6-result.json")
    node = RECORDED["node"]["metadata"]["name"]
    place = ClientPlace(where="in-cluster", host="g6-12010914-ab12-load-1-8mx2q", node=node,
                        machine_type="e2-standard-4", cpus=4, workers=2, python="3.12.8", cpu_s=1.2)  # fmt: skip
    points = [p.model_copy(update={"client": place, "client_bound": i == 0}) for i, p in enumerate(result.points)]
    report = render_report(result.model_copy(update={"points": points}))
    assert f"- Client: in the cluster, a Job per point next to the server, on node `{node}` (e2-standard-4)" in report
    assert "2 worker process(es)" in report and "Python 3.12.8" in report
    assert "**client-bound**" in report  # a point the client shaped is still flagged


# -- the experiments through the same runner ---------------------------------------------------------


def test_client_manifest_of_the_experiments_shows_their_points(g6_outputs, tmp_path):
    """kv: the first wave at each length, at the batch the sizing predicts; quant: each variant's points
    against the checkpoint it serves."""
    outputs = json.loads(g6_outputs.read_text())
    model = outputs["benchmark"]["model"]
    out = tmp_path / "kv"
    assert main(["--outputs", str(g6_outputs), "--client-manifest", str(out), "--experiment", "kv",
                 "--context-len", "1024,2048"]) == 0  # fmt: skip
    plans = [Plan.from_json(next(e["value"] for e in _pod(yaml.safe_load(p.read_text()))["containers"][0]["env"]
                                 if e["name"] == PLAN_ENV)) for p in sorted(out.glob("job-*.yaml"))]  # fmt: skip
    # Prompts lognormal around half the length, an output cap of the other half (stopping at EOS), cut where
    # a long prompt leaves less of max-model-len (4,096); a closed loop of C sequences, 6 requests a slot, no
    # warm-up, capped by max-num-seqs.
    assert [(max(p.output_lens), p.eos) for p in plans] == [(512, True), (1024, True)]
    assert all(i + o <= 4096 for p in plans for i, o in zip(p.input_lens, p.output_lens))
    assert all(sum(o == max(p.output_lens) for o in p.output_lens) > 0.9 * len(p.output_lens) for p in plans)
    assert [round(statistics.fmean(p.input_lens), -2) for p in plans] == [500, 1000]
    assert all(len(set(p.input_lens)) > 10 for p in plans)
    assert all(p.requests == 6 * p.concurrency and p.warmup == 0 for p in plans)
    assert all(p.concurrency == outputs["benchmark"]["max_num_seqs"] for p in plans)
    out = tmp_path / "quant"
    assert main(["--outputs", str(g6_outputs), "--client-manifest", str(out), "--experiment", "quant",
                 "--variants", "awq"]) == 0  # fmt: skip
    plans = [Plan.from_json(next(e["value"] for e in _pod(yaml.safe_load(p.read_text()))["containers"][0]["env"]
                                 if e["name"] == PLAN_ENV)) for p in sorted(out.glob("job-*.yaml"))]  # fmt: skip
    # Each point 3 times (--repeats), each repeat with its own seed.
    assert [(p.model, p.concurrency) for p in plans] == [(f"{model}-AWQ", 1), (f"{model}-AWQ", 64)] * 3
    assert len({p.seed for p in plans}) == 6
    # saturation: its first open-loop rate (the later ones follow from what it finds); prefix: its points per
    # arm (caching on, off), every prompt a group's 2,048-token prefix and 256 tokens of its own.
    for experiment, extra in (("saturation", ["--start-rate", "3"]), ("prefix", [])):
        out = tmp_path / experiment
        assert main(["--outputs", str(g6_outputs), "--client-manifest", str(out), "--experiment", experiment, *extra]) == 0
        plans = [Plan.from_json(next(e["value"] for e in _pod(yaml.safe_load(p.read_text()))["containers"][0]["env"]
                                     if e["name"] == PLAN_ENV)) for p in sorted(out.glob("job-*.yaml"))]  # fmt: skip
        if experiment == "saturation":  # 60 s of arrivals at 3 requests/s
            assert [(p.rate, p.concurrency, p.requests) for p in plans] == [(3.0, None, 180)]
        else:
            # Both arms open loop at one rate, 3 runs each; run k of each arm with the same seed (the same arrivals).
            assert [(p.rate, p.concurrency, p.prefix_len, p.prefix_groups, set(p.input_lens)) for p in plans] == [
                (2.0, None, 2048, 4, {256})] * 6
            seeds = [p.seed for p in plans]
            assert seeds[:3] == seeds[3:] and len(set(seeds)) == 3


@pytest.fixture
def in_cluster(tmp_path, sim_url, monkeypatch) -> Kubelet:
    """The stack's cluster as the Kubelet double, its vLLM the simulator: what `--outputs` connects to."""
    from benchmarks.cluster import KubeCluster

    kubelet = Kubelet(tmp_path / "cluster", vllm=sim_url)
    kubelet.tmp.mkdir()
    monkeypatch.setattr(KubeCluster, "from_kubeconfig", classmethod(lambda cls, kubeconfig: kubelet))
    return kubelet


SMALL = ["--model", MODEL, "--concurrency", "2", "--input-len", "32", "--output-len", "16", "--quiet", "--repeats", "1"]


@pytest.mark.realtime
def test_the_kv_experiment_runs_its_waves_as_jobs_and_reads_vllm_through_the_proxy(g6_outputs, tmp_path, in_cluster):
    from benchmarks.g6.experiments.kv import KvResult
    from benchmarks.harness import load_result

    out = tmp_path / "out"
    rc = main(["--outputs", str(g6_outputs), "--experiment", "kv", "--context-len", "64,128", *SMALL, "--out", str(out)])
    (folder,) = out.iterdir()
    result = load_result(KvResult, folder)
    assert rc == 0, result.meta.errors
    # The fixed concurrency at each length, then each contiguous baseline's (within the client's cap of 256).
    assert [(p.context_len, p.concurrency) for p in result.probes if p.role == "search"] == [(64, 2), (128, 2)]
    assert {p.role for p in result.probes} == {"search", "max-model-len", "prompt + max_tokens"}
    assert all(p.point.completed == 6 * p.concurrency and p.point.client.where == "in-cluster" for p in result.probes)
    # vLLM's block count came through the API server's service proxy, as did the scrapes.
    assert result.cache is not None and ("GET", "vllm", "/metrics") in in_cluster.proxied
    # A Prometheus without endpoints costs the points their GPU series, not the run.
    assert any("server metrics" in e and "kps-prometheus:9090 answered HTTP 503" in e for e in result.meta.errors)
    jobs = [o for o in in_cluster.created if o["kind"] == "Job"]
    assert len(jobs) == len(result.probes) and _deleted_kinds(in_cluster, jobs[0]["metadata"]["labels"][RUN_LABEL]) == {"Job", "ConfigMap", "Pod"}


def test_the_quant_experiment_runs_its_points_as_jobs_and_scores_quality_through_the_proxy(
    g6_outputs, tmp_path, in_cluster
):
    from benchmarks.g6.experiments.quant import QuantResult
    from benchmarks.harness import load_result

    out = tmp_path / "out"
    rc = main(["--outputs", str(g6_outputs), "--experiment", "quant", "--variants", "bf16", "--requests", "2",
               "--quality-prompts", "2", *SMALL, "--out", str(out)])  # fmt: skip
    (folder,) = out.iterdir()
    (variant,) = load_result(QuantResult, folder).variants
    assert rc == 0 and variant.error is None
    assert [p.client.where for p in variant.points] == ["in-cluster"]
    jobs = [o for o in in_cluster.created if o["kind"] == "Job"]
    assert [Plan.from_json(next(e["value"] for e in _pod(j)["containers"][0]["env"] if e["name"] == PLAN_ENV)).model
            for j in jobs] == [MODEL]  # fmt: skip
    # The quality requests went from here through the service proxy and were scored; the kernel is what
    # the log of the running vLLM pod (found through its Service's selector) names.
    assert ("POST", "vllm", "/v1/completions") in in_cluster.proxied
    assert variant.quality is not None and variant.quality.prompts == 2 and variant.quality.positions > 0
    assert variant.kernel == "awq_marlin"  # the double's pod log is an AWQ server's: read, not inferred from the variant
