"""g5's load phase: the ramp client against a real local server, the autoscaler's replicas read from
recorded PodAutoscaler/Deployment objects (the Triton fixture: counts changing when Knative's autoscaler
changes them), the scale steps attributed to rate steps, the live path against a scripted cluster, and
what Triton says about itself (its start-up log, its metrics)."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler

import pytest
import schemas
from labs_fakes import DATA, FakeCluster, live_args, run_client_script

from benchmarks.kube.record import Recording, load_recording
from benchmarks.labs import g5, g5_load, live
from benchmarks.labs.autoscaling import (
    RampPlan,
    ReplicaSample,
    expected_replicas,
    parse_ramp_log,
    scale_steps,
)
from benchmarks.labs.live import LabSession
from benchmarks.labs.serving import triton_instances, triton_success_count

TRITON = DATA / "g5-triton" / "recording.json"


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(TRITON)


@pytest.fixture(scope="module")
def load(rec) -> g5_load.LoadPhase:
    return g5.measure(rec).load


class _SlowModel(BaseHTTPRequestHandler):
    """A model server that takes 50 ms per request, whatever else is in flight."""

    protocol_version = "HTTP/1.1"  # keep-alive, as Kourier serves
    seen: list[tuple[str, str]] = []

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        _SlowModel.seen.append((self.path, self.headers["Host"]))
        time.sleep(0.05)
        body = b'{"outputs":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_ramp_client_keeps_its_schedule_against_a_slow_server():
    """Open loop: at 40 requests/s against a 50 ms server two requests are always in flight; the sends
    still leave on schedule and each latency includes the server's 50 ms, counted from the schedule."""
    env = {"HOST": "cifar10-predictor.models.example.com", "PATH_": "/v2/models/cifar10/infer", "BODY": "{}",
           "RATES": "40,20", "STEP_S": "0.5", "TIMEOUT_S": "5"}
    out = run_client_script(_SlowModel, "ramp_client.py", env)
    log = parse_ramp_log("a warning line\n" + out)
    assert log.plan is not None and log.plan.rates == [40.0, 20.0] and log.plan.step_s == 0.5
    assert log.ended_at is not None
    cold, *ramp = log.requests
    assert cold.step == -1 and cold.ok and cold.t_done <= log.plan.t0, "the ramp waits for the request from zero"
    assert [sum(1 for r in ramp if r.step == k) for k in (0, 1)] == [20, 10]
    # Scheduled 25 ms apart in step 1 and 50 ms in step 2, from t0.
    first = [r for r in ramp if r.step == 0]
    assert first[0].t_sched == pytest.approx(log.plan.t0, abs=1e-3)
    assert first[1].t_sched - first[0].t_sched == pytest.approx(0.025, abs=1e-3)
    assert all(r.ok and r.latency_s >= 0.05 for r in ramp)
    lag = sorted(r.t_send - r.t_sched for r in ramp)
    assert lag[len(lag) // 2] < 0.01, "sends leave on schedule although the server is slower than the rate"
    assert _SlowModel.seen[0] == ("/v2/models/cifar10/infer", "cifar10-predictor.models.example.com")


def test_ramp_log_lines_the_client_did_not_write_are_skipped():
    text = ('{"event":"ramp","t0":100.0,"rates":[2],"step_s":10}\nnot json {\n{"broken": \n'
            '{"i":1,"step":0,"t_sched":100.0,"t_send":100.001,"t_first_byte":null,"t_done":null,"status":null,'
            '"error":"ConnectionRefusedError: [Errno 111]"}\n')
    log = parse_ramp_log(text)
    (r,) = log.requests
    assert not r.ok and r.latency_s is None and log.ended_at is None


def test_expected_replicas_is_knatives_steady_state():
    # ceil(12 / (4 x 0.7)) = ceil(4.29) = 5, capped at max 3; 2.8 rps is exactly one replica's share.
    assert expected_replicas(12, "rps", 4, 3, None) == 3
    assert expected_replicas(12, "rps", 4, 8, None) == 5
    assert expected_replicas(2.8, "rps", 4, 8, None) == 1
    assert expected_replicas(0.1, "rps", 4, 8, None) == 1, "a serving revision keeps at least one replica"
    # Concurrency by Little's law: 20 rps x 0.35 s = 7 in flight; ceil(7 / (2 x 0.7)) = 5.
    assert expected_replicas(20, "concurrency", 2, 8, 0.35) == 5


def _sample(t: float, desired: int, ready: int) -> ReplicaSample:
    return ReplicaSample(t=t, desired=desired, actual=ready, replicas=desired, ready=ready, revisions=["r-00001"])


def test_each_scale_step_is_attributed_to_the_rate_step_that_caused_it():
    plan = RampPlan(t0=1000.0, rates=[2, 6, 3], step_s=10)
    series = [
        _sample(-8, 0, 0), _sample(-7, 1, 0), _sample(-1, 1, 1),  # the request from zero
        _sample(13, 3, 1), _sample(15.5, 3, 3),  # up, 3 s into step 2 (2 -> 6 rps)
        _sample(18, 2, 2),  # down while the rate only ever rose: the autoscaler settling
        _sample(26, 1, 1),  # down, 6 s into step 3 (6 -> 3 rps)
        _sample(37, 0, 1), _sample(41, 0, 0),  # 7 s after the ramp ended
    ]
    got = [(s.from_replicas, s.to_replicas, s.cause, s.cause_step, s.after_cause_s, s.ready_after_s)
           for s in scale_steps(series, plan)]
    assert got == [
        (0, 1, "the cold-start request", None, None, 6.0),
        (1, 3, "step 2: 2 -> 6 rps", 1, 3.0, 2.5),
        (3, 2, "no rate change (the autoscaler settling)", None, None, 0.0),
        (2, 1, "step 3: 6 -> 3 rps", 2, 6.0, 0.0),
        (1, 0, "the end of the ramp (3 -> 0 rps)", None, 7.0, 4.0),
    ]


def test_recorded_objects_have_the_api_shapes(rec):
    """Pods, Deployments, Nodes, Events and the InferenceService against their schemas; the
    PodAutoscalers (no CRD schema in upstream/) hold only the fields of Knative 1.21.1's pa_types.go."""
    pa_spec = {"containerConcurrency", "scaleTargetRef", "reachability", "protocolType"}
    pa_status = {"observedGeneration", "conditions", "annotations", "serviceName", "metricsServiceName",
                 "desiredScale", "actualScale"}
    kinds = set()
    for snap in rec.snapshots:
        for objs in snap.objects.values():
            for obj in objs:
                kinds.add(obj["kind"])
                if obj["kind"] == "PodAutoscaler":
                    assert obj["apiVersion"] == "autoscaling.internal.knative.dev/v1alpha1"
                    assert set(obj["spec"]) <= pa_spec and set(obj["status"]) <= pa_status
                    assert obj["metadata"]["labels"]["serving.kserve.io/inferenceservice"] == "cifar10"
                else:
                    schemas.validate_object(obj)
    assert kinds == {"Pod", "Deployment", "Node", "PodAutoscaler"}
    for obj in rec.nodes + rec.events + rec.objects["inferenceservice"]:
        schemas.validate_object(obj)


def test_the_ramp_measured_from_the_recording(load):
    # Steps of 60 s at 1, 4, 8, 12, 8, 4, 1 requests/s: 60 x rate requests each, all answered.
    assert [st.requests for st in load.steps] == [60, 240, 480, 720, 480, 240, 60]
    assert load.requests == 2280 and load.errors == 0 and load.client_finished
    # Target 4 rps x 70 %: ceil(rate / 2.8) within 1..3; the recorded autoscaler had reached it at every step's end.
    assert [st.expected_replicas for st in load.steps] == [1, 2, 3, 3, 3, 2, 1]
    assert [st.desired_at_end for st in load.steps] == [1, 2, 3, 3, 3, 2, 1]
    assert [st.peak_desired for st in load.steps] == [1, 2, 3, 3, 3, 3, 2]
    steps = [(s.from_replicas, s.to_replicas, s.cause_step, s.after_cause_s, s.ready_after_s) for s in load.scale_steps]
    assert steps == [
        (0, 1, None, None, 330.1),  # the request from zero: a GPU node, the driver and the image first
        (1, 2, 1, 4.3, 13.8),  # panic: the 6 s window saw twice the ready pods' worth
        (2, 3, 2, 24.3, 14.1),  # stable window: (4 x 36 + 8 x 24) / 60 = 5.6 > 2.8 x 2 after 24 s
        (3, 2, 5, 36.3, 2.1),  # (8 x 24 + 4 x 36) / 60 = 5.6 after 36 s
        (2, 1, 6, 24.3, 1.9),
        (1, 0, None, 60.3, 61.9),  # a stable window without requests, then the 60 s grace
    ]
    assert load.scale_steps[-1].cause == "the end of the ramp (1 -> 0 rps)"


def test_cold_start_from_zero_gpu_nodes_and_the_return_to_zero(load):
    c = load.cold_start
    assert load.gpu_nodes_at_start == 0 and not c.node_was_up and c.status == 200
    # API times are whole seconds; the request left at 09:00:14.2004 on the client's clock, its first byte came
    # back at 09:05:45.82.
    assert c.stages == {"pod created": 0.8, "pod scheduled": 195.8, "node ready": 78.8, "container ready": 330.8,
                        "first byte": 331.62}
    z = load.return_to_zero
    assert z.expected_after_s == 120.0
    assert z.last_request_s == pytest.approx(419.01, abs=0.01)
    assert z.desired_zero_after_s == pytest.approx(480.3 - 419.01, abs=0.01)
    assert z.replicas_zero_after_s == pytest.approx(540.4 - 419.01, abs=0.01)
    assert z.actual_zero_after_s == pytest.approx(542.2 - 419.01, abs=0.01)
    assert load.triton_instances == {"cifar10-predictor-00001-deployment-7f9c6d5b8-x7k2p": ["cifar10_0 on GPU 0"]}


def test_checks_fail_when_replicas_do_not_follow_or_the_model_runs_on_cpu(rec):
    assert g5.measure(rec).passed
    raw = json.loads(rec.model_dump_json())
    pod = "cifar10-predictor-00001-deployment-7f9c6d5b8-x7k2p"
    raw["logs"][pod] = raw["logs"][pod].replace("(GPU device 0)", "(CPU device 0)")
    for snap in raw["snapshots"]:
        for pa in snap["objects"].get("podautoscalers", []):
            pa["status"]["desiredScale"] = min(pa["status"]["desiredScale"], 2)
    failed = {c.name for c in g5.measure(Recording.model_validate(raw)).checks if not c.passed}
    assert failed == {"replicas followed the ramp up to Knative's steady state", "Triton ran the model on the GPU"}


def test_triton_log_and_metrics_as_triton_writes_them():
    log = ("I1130 09:05:42.655147 1 libtorch.cc:2360] TRITONBACKEND_ModelInstanceInitialize: cifar10_0 (GPU device 0)\n"
           "I1130 09:05:42.655901 1 libtorch.cc:2360] TRITONBACKEND_ModelInstanceInitialize: cifar10_1 (CPU device 0)\n")
    assert triton_instances(log) == ["cifar10_0 on GPU 0", "cifar10_1 on CPU 0"]
    metrics = (
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n"
        "# TYPE nv_inference_request_success counter\n"
        'nv_inference_request_success{model="cifar10",version="1"} 21\n'
        'nv_inference_request_success{model="cifar10",version="2"} 2\n'
        'nv_inference_request_success{model="other",version="1"} 9\n'
        'nv_inference_request_failure{model="cifar10",version="1"} 4\n'
    )
    assert triton_success_count(metrics, "cifar10") == 23


def test_triton_canary_is_counted_from_each_pods_inference_counter():
    """The sklearn fixture's canary, as a Triton stack records it: no access log lines, one metrics text per pod."""
    raw = json.loads((DATA / "g5" / "recording.json").read_text())
    raw["outputs"]["benchmark"] |= {"runtime": "triton", "served_model": "cifar10"}
    raw["outputs"]["endpoints"]["kserve"] |= {"protocol": "kserve-v2", "path": "/v2/models/cifar10/infer"}
    counts = {"iris-predictor-00001-deployment-6d8f9c7b5-b7v3n": 177, "iris-predictor-00002-deployment-6d8f9c7b5-h5c2d": 23}
    raw["client"]["pod_metrics"] = {pod: f'nv_inference_request_success{{model="cifar10",version="1"}} {n}\n'
                                    for pod, n in counts.items()}
    for pod in counts:
        raw["logs"].pop(pod)
    canary = g5.measure(Recording.model_validate(raw)).canary
    assert canary.answered_by == {"iris-predictor-00001": 177, "iris-predictor-00002": 23}
    assert canary.canary_share == 23 / 200


def test_ramp_flag_takes_positive_rates_or_none():
    parser = live.build_parser(g5)
    assert parser.parse_args(["--outputs", "o.json", "--ramp", "1,2.5,8"]).ramp == [1.0, 2.5, 8.0]
    assert parser.parse_args(["--outputs", "o.json", "--ramp", "none"]).ramp == []
    assert parser.parse_args(["--outputs", "o.json"]).ramp == [1.0, 4.0, 8.0, 12.0, 8.0, 4.0, 1.0]
    for bad in ("1,0", "1,-2", "fast"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--outputs", "o.json", "--ramp", bad])


def test_the_live_load_phase_against_a_scripted_cluster(tmp_path):
    """The autoscaler goes 0 -> 1 -> 2 -> 1 -> 0 while the client Job runs: the benchmark waits for zero
    GPU nodes first, keeps one snapshot per change (not per poll), reads Triton's log by container and
    stops watching once the predictor is back at zero."""
    outputs = {**load_recording(TRITON).outputs, "kubeconfig": "unused"}
    cluster = FakeCluster()
    script = [0, 0, 1, 1, 2, 2, 2, 1, 1, 0, 0]  # desired replicas, one entry per poll of the watcher
    polls = {"pa": 0, "nodes": 0}

    def pa(desired: int) -> dict:
        return {"apiVersion": "autoscaling.internal.knative.dev/v1alpha1", "kind": "PodAutoscaler",
                "metadata": {"name": "cifar10-predictor-00001", "namespace": "models"},
                "status": {"desiredScale": desired, "actualScale": desired}}

    def state() -> int:
        return script[min(polls["pa"], len(script) - 1)]

    def on_list(api_version, kind, namespace, selector):
        if kind == "InferenceService":
            return [{"metadata": {"name": "cifar10"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}]
        if kind == "PodAutoscaler":
            polls["pa"] += 1
            return [pa(state())]
        if kind == "Deployment":
            return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "cifar10-predictor-00001-deployment"},
                     "spec": {"replicas": state()}, "status": {"readyReplicas": state()}}]
        if kind == "Node":
            polls["nodes"] += 1
            return [] if polls["nodes"] > 2 else [{"metadata": {"name": "gpu-node"}, "status": {}}]
        if kind == "Pod" and selector.startswith("batch.kubernetes.io/job-name="):
            return [{"metadata": {"name": selector.split("=")[1] + "-abcde"}}]
        if kind == "Pod":
            return [{"metadata": {"name": f"cifar10-predictor-00001-deployment-x{i}"}, "status": {}} for i in range(state())]
        if kind == "Job":
            done = polls["pa"] >= 8
            return [{"metadata": {"name": j["metadata"]["name"]},
                     "status": {"conditions": [{"type": "Complete", "status": "True"}] if done else []}}
                    for j in cluster.created if j["kind"] == "Job"]
        return []

    cluster.on_list = on_list
    create, nodes_when_created = cluster.create, []

    def create_noting_the_gpu_nodes(obj):
        nodes_when_created.append(polls["nodes"])
        return create(obj)

    cluster.create = create_noting_the_gpu_nodes
    session = LabSession("g5", outputs, cluster, "g5-11300900-7e2a", log=lambda _: None)
    args = live_args(tmp_path, repeats=0, requests=0, ramp=[1.0, 3.0], step_seconds=0.1, watch_interval=0.0,
                     zero_gpu_nodes=True)
    with session.scope:
        g5.record(session, args)
    job = next(o for o in cluster.created if o["kind"] == "Job")
    env = {e["name"]: e["value"] for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert (env["RATES"], env["STEP_S"], env["TIMEOUT_S"], env["PATH_"]) == ("1,3", "0.1", "1800", "/v2/models/cifar10/infer")
    assert json.loads(env["BODY"])["inputs"][0]["shape"] == [1, 3, 32, 32]
    assert session.client["load_job"] == job["metadata"]["name"]
    # The GPU pool was at zero nodes (the third node poll) before the client Job existed.
    assert min(nodes_when_created) >= 3
    scale = [s.objects["podautoscalers"][0]["status"]["desiredScale"] for s in session.snapshots if "podautoscalers" in s.objects]
    assert scale == [0, 1, 2, 1, 0], "one snapshot per change of the autoscaler's state"
    assert ("models", "cifar10-predictor-00001-deployment-x0", "kserve-container") in cluster.logs_read
