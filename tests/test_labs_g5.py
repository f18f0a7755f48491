"""g5: the in-cluster HTTP client against a real local server, cold start and canary measurement from
a recorded run, Wilson interval, client Job builder against the schemas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler

import pytest
import schemas
from labs_fakes import fixture_outputs, recording_path, run_client_script

from benchmarks.kube.errors import LabError
from benchmarks.kube.record import Recording, load_recording
from benchmarks.labs import g5
from benchmarks.labs.serving import parse_client_log, predict_count, wilson
from benchmarks.labs.workloads import SCRIPTS


@pytest.fixture(scope="module")
def rec() -> Recording:
    return load_recording(recording_path("g5"))


class _Predictor(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, bytes]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Predictor.seen.append((self.path, self.headers["Host"], body))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"predictions":[1,1]}')

    def log_message(self, *args):
        pass


def test_client_script_against_a_real_server():
    env = {"HOST": "iris-predictor.models.example.com", "PATH_": "/v1/models/iris:predict",
           "BODY": '{"instances": [[1, 2, 3, 4]]}', "COUNT": "3", "TIMEOUT_S": "5"}
    out = run_client_script(_Predictor, "http_client.py", env, timeout_s=30)
    responses = parse_client_log("some warning\n" + out)
    assert [r.status for r in responses] == [200, 200, 200]
    assert all(r.t_send <= r.t_first_byte <= r.t_done for r in responses)
    assert responses[0].body == '{"predictions":[1,1]}'
    assert _Predictor.seen[0] == ("/v1/models/iris:predict", "iris-predictor.models.example.com", b'{"instances": [[1, 2, 3, 4]]}')


def test_client_script_counts_a_refused_connection_as_an_error():
    env = {**os.environ, "TARGET": "http://127.0.0.1:9", "PATH_": "/", "BODY": "{}", "COUNT": "1", "TIMEOUT_S": "2"}
    out = subprocess.run([sys.executable, str(SCRIPTS / "http_client.py")], env=env, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    (r,) = parse_client_log(out)
    assert r.status is None and "ConnectionRefused" in r.error


def test_client_job_validates_and_runs_on_the_system_pool():
    for obj in g5.build_workloads(fixture_outputs("g5"), "g5-0000-abcd", "canary", 200):
        schemas.validate_object(obj)
        if obj["kind"] == "Job":
            spec = obj["spec"]["template"]["spec"]
            assert spec["nodeSelector"] == {"gke-ml-labs/pool": "system"} and "tolerations" not in spec
            env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
            assert env["HOST"] == "iris-predictor.models.example.com" and env["COUNT"] == "200"
            assert env["TARGET"] == "http://kourier.kourier-system.svc.cluster.local:80"


def test_a_stack_without_the_system_pool_output_is_refused_before_anything_runs():
    older = {k: v for k, v in fixture_outputs("g5").items() if k != "system_pool"}
    with pytest.raises(LabError, match="system_pool lacks node_selector"):
        g5.check_outputs(older)


def test_wilson_matches_the_textbook_values():
    lo, hi = wilson(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    assert wilson(0, 20)[0] == 0.0 and wilson(0, 0) == (0.0, 1.0)


def test_predict_count_reads_uvicorn_access_lines():
    log = (
        'INFO:     10.0.0.1:0 - "POST /v1/models/iris:predict HTTP/1.1" 200 OK\n'
        'INFO:     10.0.0.1:0 - "POST /v1/models/iris%3Apredict HTTP/1.1" 200 OK\n'
        'INFO:     10.0.0.1:0 - "POST /v1/models/iris:predict HTTP/1.1" 500 Internal Server Error\n'
        'INFO:     10.0.0.1:0 - "GET /v1/models/iris HTTP/1.1" 200 OK\n'
    )
    assert predict_count(log) == 2


def test_recorded_objects_have_the_api_shapes(rec):
    for obj in [o for s in rec.snapshots for v in s.objects.values() for o in v] + rec.events + rec.objects["inferenceservice"]:
        schemas.validate_object(obj)


def test_cold_starts_and_canary_from_the_recording(rec):
    result = g5.measure(rec)
    assert result.passed, result.checks
    for c in result.cold_starts:
        s = c.stages
        assert s["pod created"] <= s["pod scheduled"] <= s["container ready"] <= s["first byte"]
        assert c.node_was_up and s["node ready"] is None  # a CPU predictor on the system pool
    canary = result.canary
    # Counted by hand in the predictors' logs: 177 predictions on revision 00001, 23 on 00002 (the canary).
    assert canary.canary_revision == "iris-predictor-00002"
    assert (canary.requests, canary.answered_by) == (200, {"iris-predictor-00001": 177, "iris-predictor-00002": 23})
    assert canary.canary_share == pytest.approx(23 / 200)


def test_a_split_far_from_the_configured_percent_fails(rec):
    raw = json.loads(rec.model_dump_json())
    raw["outputs"]["benchmark"]["canary_traffic_percent"] = 50
    result = g5.measure(Recording.model_validate(raw))
    assert not result.checks[-1].passed


def test_the_canary_reads_the_model_servers_log_by_container_name(tmp_path):
    """A predictor pod holds kserve-container and Knative's queue-proxy; the API server refuses a log
    request that names no container, so the canary count must name the model server's."""
    from labs_fakes import FakeCluster, live_args

    from benchmarks.labs.live import LabSession

    outputs = fixture_outputs("g5")
    ready = {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z"}
    predictor = {"metadata": {"name": "iris-predictor-00002-deployment-abc", "namespace": "models"},
                 "spec": {"containers": [{"name": "kserve-container"}, {"name": "queue-proxy"}]}}
    cluster = FakeCluster()

    def on_list(api_version, kind, namespace, selector):
        if kind == "InferenceService":
            return [{"metadata": {"name": "iris", "namespace": "models"}, "status": {"conditions": [ready]}}]
        if kind == "Job":
            return [{"metadata": {"name": j["metadata"]["name"]}, "status": {"conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-11-29T10:01:00Z"}]}}
                for j in cluster.created if j["kind"] == "Job"]
        if kind == "Pod" and selector == f"{g5.ISVC_LABEL}=iris":
            return [predictor] if any(j["kind"] == "Job" for j in cluster.created) else []
        return []

    def on_log(namespace, name, container):
        if name == predictor["metadata"]["name"] and container is None:
            raise RuntimeError("a container name must be specified for pod, choose one of: [kserve-container queue-proxy]")
        return ""

    cluster.on_list, cluster.on_log = on_list, on_log
    session = LabSession("g5", outputs, cluster, "g5-11291000-abcd", log=lambda _: None)
    with session.scope:
        g5.record(session, live_args(tmp_path, repeats=0, requests=3, ramp=[]))
    assert (("models", predictor["metadata"]["name"], "kserve-container")) in cluster.logs_read
