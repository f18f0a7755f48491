"""The evidence block of every report (meta.evidence): read from API objects in GKE's shapes (the lab
fixtures, which tests/kube_fixtures.py makes realistic), the one-shot nvidia-smi pod against a cluster
double, and the "simulator" / "not known" paths offline."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest
from labs_fakes import FakeCluster, fixture_outputs, recording_path
from pod_security import findings

from benchmarks.cluster import RunScope
from benchmarks.g6 import cli, run
from benchmarks.harness import RunMeta
from benchmarks.harness.results import SIMULATOR, UNKNOWN, Evidence
from benchmarks.kube.evidence import first_time_problems, from_cluster
from benchmarks.kube.evidence import NVIDIA_SMI, collect, run_nvidia_smi
from benchmarks.kube.record import load_recording
from benchmarks.labs import g1
from benchmarks.labs.report import render_report
from stacks.mockrun import run_stack

# The keys the issue names for meta.evidence, in its order.
KEYS = [
    "gke_version", "node_image", "driver_version", "cuda_version", "image_digests", "machine_type", "zone", "spot",
    "config_sha256", "make_cost", "first_time_problems",
]  # fmt: skip
STARTED, FINISHED = datetime(2026, 11, 29, 17, 1, 57, tzinfo=UTC), datetime(2026, 11, 29, 17, 7, 33, tzinfo=UTC)


@pytest.fixture(scope="module")
def g1_result():
    return g1.measure(load_recording(recording_path("g1")), source="fixture")


def test_evidence_has_exactly_the_keys_reports_promise():
    assert list(Evidence.model_fields) == KEYS


def test_the_g1_run_carries_gke_driver_cuda_digests_and_the_node(g1_result):
    e = g1_result.meta.evidence
    # By hand from tests/data/labs/g1/recording.json: /version, the GPU node's labels and nodeInfo, the
    # banner of the probe's nvidia-smi, the probe container's imageID.
    assert e.gke_version == "v1.35.7-gke.1219000"
    assert e.node_image == ("Container-Optimized OS from Google (kernel 6.6.97+, kubelet v1.35.7-gke.1219000, "
                            "containerd://2.0.6)")  # fmt: skip
    assert (e.driver_version, e.cuda_version) == ("580.95.05", "13.0")
    assert (e.machine_type, e.zone, e.spot) == ("g2-standard-4", "us-central1-a", "spot")
    assert e.image_digests == {"docker.io/library/python:3.12.8-slim": "docker.io/library/python@sha256:" + "ab" * 32}
    # The window 17:01:57-17:07:33, from the top of its hour to the top of the hour after the run plus
    # the hour the export and the node's removal take: 17:00 to 19:00.
    assert e.make_cost == ("make cost LAB=g1 SINCE=2026-11-29T17:00 UNTIL=2026-11-29T19:00 "
                           "BILLING_TABLE=PROJECT_ID.DATASET.TABLE")  # fmt: skip
    assert e.config_sha256 == UNKNOWN  # the fixture's outputs predate the config_sha256 output
    # Both pods' FailedScheduling (the probe before the node came, the untolerated one for good).
    assert [p.split(" ")[1] for p in e.first_time_problems] == ["Pod/g1-gpu-probe-3f9a", "Pod/g1-no-toleration-3f9a"]


def test_the_g1_report_opens_with_the_evidence_and_shows_nvidia_smi(g1_result):
    report = g1.report_body(g1_result)
    assert "## nvidia-smi in a pod on the GPU node" in report
    assert "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |" in report
    full = render_report(g1_result, g1.TITLE, report, [])
    sections = [line for line in full.splitlines() if line.startswith("## ")]
    assert sections[0] == "## Evidence: what really ran"
    assert "| NVIDIA driver (nvidia-smi) | 580.95.05 |" in full


def _pod(name: str, statuses: list[dict], phase: str = "Running", **status) -> dict:
    return {"metadata": {"name": name, "namespace": "llm"}, "spec": {"containers": [{"name": s["name"]} for s in statuses]},
            "status": {"phase": phase, "containerStatuses": statuses, **status}}  # fmt: skip


def _event(kind: str, name: str, reason: str, message: str, at: str, type_: str = "Warning", count: int = 1) -> dict:
    return {"metadata": {"name": f"{name}.1", "namespace": "default"}, "involvedObject": {"kind": kind, "name": name},
            "reason": reason, "message": message, "type": type_, "count": count, "firstTimestamp": at,
            "lastTimestamp": at}  # fmt: skip


def test_what_did_not_work_first_time_lists_oom_pull_backoff_scheduling_preemption_and_node_loss():
    oom = {"name": "vllm", "image": "vllm/vllm-openai:v0.11.2", "imageID": "docker.io/vllm/vllm-openai@sha256:" + "1" * 64,
           "restartCount": 2, "ready": True, "state": {"running": {"startedAt": "2026-11-29T17:05:00Z"}},
           "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137, "startedAt": "2026-11-29T17:03:00Z",
                                        "finishedAt": "2026-11-29T17:04:50Z"}}}  # fmt: skip
    healthy = {"name": "client", "image": "python:3.12.8-slim", "imageID": "docker.io/library/python@sha256:" + "2" * 64,
               "restartCount": 0, "ready": True, "state": {"running": {}}, "lastState": {}}  # fmt: skip
    evicted = _pod("loadgen-x", [], phase="Failed", reason="Evicted",
                   message="The node was low on resource: ephemeral-storage. ")  # fmt: skip
    events = [
        _event("Pod", "vllm-0", "FailedScheduling", "0/2 nodes are available: 1 Insufficient nvidia.com/gpu.",
               "2026-11-29T17:02:10Z", count=3),
        _event("Pod", "vllm-0", "Failed", 'Failed to pull image "vllm/vllm-openai:v0.11.2": context deadline exceeded',
               "2026-11-29T17:02:40Z"),
        _event("Pod", "vllm-0", "BackOff", 'Back-off pulling image "vllm/vllm-openai:v0.11.2"', "2026-11-29T17:02:41Z"),
        _event("Node", "gke-gpu-1", "NodeNotReady", "Node gke-gpu-1 status is now: NodeNotReady",
               "2026-11-29T17:06:00Z", type_="Normal"),
        _event("Pod", "vllm-0", "Scheduled", "Successfully assigned llm/vllm-0", "2026-11-29T17:03:00Z", type_="Normal"),
        _event("Pod", "batch-1", "Preempted", "Preempted by pod 5d8c1e2a-0b6f-4c1e-9a57-3f0d2c7b9e41 on node gke-gpu-1",
               "2026-11-29T17:05:10Z", type_="Normal"),
        _event("Pod", "old", "FailedScheduling", "from an earlier run", "2026-11-29T16:30:00Z"),
    ]
    got = first_time_problems(events, [_pod("vllm-0", [oom, healthy]), evicted], STARTED, FINISHED)
    assert got == [
        "17:02:10 Pod/vllm-0 FailedScheduling (x3): 0/2 nodes are available: 1 Insufficient nvidia.com/gpu.",
        '17:02:40 Pod/vllm-0 Failed (x1): Failed to pull image "vllm/vllm-openai:v0.11.2": context deadline exceeded',
        '17:02:41 Pod/vllm-0 BackOff (x1): Back-off pulling image "vllm/vllm-openai:v0.11.2"',
        "17:05:10 Pod/batch-1 Preempted (x1): Preempted by pod 5d8c1e2a-0b6f-4c1e-9a57-3f0d2c7b9e41 on node gke-gpu-1",
        "17:06:00 Node/gke-gpu-1 NodeNotReady (x1): Node gke-gpu-1 status is now: NodeNotReady",
        "pod llm/loadgen-x failed: Evicted: The node was low on resource: ephemeral-storage.",
        "pod llm/vllm-0 container vllm: restarted 2 time(s), last ended OOMKilled (exit 137)",
    ]


def test_an_on_demand_node_and_a_cluster_without_gpu_node_say_so():
    rec = load_recording(recording_path("g1"))
    gpu_node = copy.deepcopy(next(n for n in rec.nodes if "cloud.google.com/gke-accelerator" in n["metadata"]["labels"]))
    del gpu_node["metadata"]["labels"]["cloud.google.com/gke-spot"]
    common = {"outputs": {"lab": "g6"}, "server_version": rec.server_version, "pods": [], "events": [],
              "nvidia_smi": None, "started": STARTED, "finished": FINISHED}  # fmt: skip
    assert from_cluster(nodes=[gpu_node], **common).spot == "on-demand"
    none = from_cluster(nodes=[n for n in rec.nodes if n is not gpu_node and "gke-accelerator" not in json.dumps(n)],
                        **common)  # fmt: skip
    assert (none.node_image, none.machine_type, none.zone, none.spot, none.driver_version, none.image_digests) == (
        UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN, UNKNOWN)


def test_offline_the_evidence_says_simulator_or_not_known():
    params = run.resolve_params(cli.parse(["--sim", "--model", "Qwen/Qwen2.5-1.5B-Instruct"]), None)
    sim, simulation = run.run_evidence(params, None, run.ClientSide(None, None, None), STARTED, print)
    assert sim.model_dump() == {k: SIMULATOR for k in KEYS} and simulation is None
    # A result written before meta.evidence existed reads as not known, never as a made-up value.
    old = json.loads(RunMeta(lab="g6", target="t", model="m", started_at=STARTED, finished_at=FINISHED,
                             client_host_cpus=2, tool_version="0.1.0", command=[]).model_dump_json())  # fmt: skip
    del old["evidence"]
    assert RunMeta.model_validate(old).evidence.model_dump() == {k: UNKNOWN for k in KEYS}


def _gpu_node(allocatable: str = "1") -> dict:
    node = copy.deepcopy(next(n for n in load_recording(recording_path("g1")).nodes
                              if "cloud.google.com/gke-accelerator" in n["metadata"]["labels"]))  # fmt: skip
    node["status"]["allocatable"]["nvidia.com/gpu"] = allocatable
    return node


SMI_LOG = load_recording(recording_path("g1")).nvidia_smi


def test_nvidia_smi_runs_once_in_a_restricted_gpu_pod_when_a_gpu_is_free():
    outputs = fixture_outputs("g1")

    def on_list(api_version, kind, namespace, selector):
        if kind == "Node":
            return [_gpu_node()]
        if kind == "Pod":
            return [{**copy.deepcopy(o), "status": {"phase": "Succeeded"}} for o in cluster.created]
        return []

    cluster = FakeCluster(on_list)
    cluster.on_log = lambda namespace, name, container: SMI_LOG
    with RunScope(cluster, "g6-12011700-beef", "g6", log=lambda m: None) as scope:
        assert run_nvidia_smi(scope, outputs, log=lambda m: None, sleep=lambda s: None) == SMI_LOG
    (pod,) = cluster.created
    spec = pod["spec"]
    assert spec["containers"][0]["command"] == [NVIDIA_SMI]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert spec["nodeSelector"] == outputs["gpu_pool"]["node_selector"]
    assert spec["tolerations"] == outputs["gpu_pool"]["tolerations"]
    assert spec["restartPolicy"] == "Never" and not findings(spec)
    assert cluster.deleted, "the pod is swept with the run's objects"


def test_a_busy_gpu_or_no_gpu_node_runs_no_pod_and_leaves_the_versions_not_known():
    outputs = run_stack("g6").outputs
    vllm = {"metadata": {"name": "vllm-0", "namespace": "llm"},
            "spec": {"nodeName": _gpu_node()["metadata"]["name"],
                     "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": "vllm", "image": "vllm/vllm-openai:v0.11.2", "restartCount": 0,
                 "imageID": "docker.io/vllm/vllm-openai@sha256:" + "3" * 64}]}}  # fmt: skip
    for nodes in ([_gpu_node()], []):
        cluster = FakeCluster(lambda av, kind, ns, sel, nodes=nodes: nodes if kind == "Node" else [vllm] if kind == "Pod" else [])
        e = collect(cluster, outputs, ["llm"], "g6-12011700-beef", STARTED, FINISHED, log=lambda m: None)
        assert not cluster.created
        assert (e.driver_version, e.cuda_version) == (UNKNOWN, UNKNOWN)
        assert e.image_digests == {"vllm/vllm-openai:v0.11.2": "docker.io/vllm/vllm-openai@sha256:" + "3" * 64}
        assert e.gke_version == "v1.35.7-gke.1219000"


def test_every_stack_exports_the_digest_of_its_config():
    g5, g6 = run_stack("g5").outputs["config_sha256"], run_stack("g6").outputs["config_sha256"]
    assert len(g6) == 64 and set(g6) <= set("0123456789abcdef") and g5 != g6


def test_a_run_on_the_local_cluster_says_what_was_real_and_what_simulated(tmp_path):
    """examples/g3-local/recording.json is a real `make g3-local` run: the local control plane's statement
    (kube-public/gke-ml-labs-local-cluster) and its kwok nodes become meta.simulation and the report's
    section; a run on GKE (the g1 fixture) has neither, and its result.json no such key."""
    from benchmarks.labs import examples, g3
    from benchmarks.labs.report import write_results

    rec = load_recording(examples.recording_of("g3-local"))
    simulation = g3.measure(rec).meta.simulation
    assert [line.split(" ")[:2] for line in simulation.real] == [["jobset", "v0.12.0"], ["kube-apiserver,", "kube-controller-manager"],
                                                                  ["kueue", "v0.19.2"]]  # fmt: skip
    assert simulation.simulated[0].startswith("2 nodes by kwok v0.8.0 (sigs.k8s.io/kwok)")
    assert simulation.simulated[-1] == "the run saw 2 node(s) carrying kwok's annotation kwok.x-k8s.io/node=fake: gpu-0, system-0"
    report = render_report(g3.measure(rec), g3.TITLE, "", [])
    assert report.index("## What was real and what was simulated") < report.index("## Evidence: what really ran")

    on_gke = load_recording(recording_path("g1"))
    assert on_gke.cluster_statement == {} and g1.measure(on_gke).meta.simulation is None
    saved = json.loads((write_results(tmp_path / "g1", None, g1.measure(on_gke), g1) / "result.json").read_text())
    assert "simulation" not in saved["meta"]
