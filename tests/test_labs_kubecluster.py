"""KubeCluster (the only code that talks to a live cluster) against a loopback HTTP server that answers
the Kubernetes API paths it uses: discovery, create, list by label, delete by label, logs, the service
proxy. Checks the requests on the wire, not our own code's view of them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from benchmarks.cluster import KubeApiError, KubeCluster
from stacks.stackfile import REPO

CORE = {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
    {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": ["create", "delete", "deletecollection", "get", "list", "patch"]},
    # As the API server lists it: no deletecollection for namespaces.
    {"name": "namespaces", "singularName": "namespace", "namespaced": False, "kind": "Namespace", "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]},
    {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    {"name": "configmaps", "singularName": "configmap", "namespaced": True, "kind": "ConfigMap", "verbs": ["create", "deletecollection", "list"]},
    {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "verbs": ["get", "list"]},
]}
BATCH = {"kind": "APIResourceList", "groupVersion": "batch/v1", "resources": [
    {"name": "jobs", "singularName": "job", "namespaced": True, "kind": "Job", "verbs": ["create", "deletecollection", "list"]}]}


class _Api(BaseHTTPRequestHandler):
    calls: list[tuple[str, str, dict, object]] = []
    auth: list[str | None] = []
    content_types: list[str | None] = []

    def _send(self, code: int, body: object, ctype: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        _Api.calls.append((method, url.path, query, body))
        _Api.auth.append(self.headers.get("Authorization"))
        _Api.content_types.append(self.headers.get("Content-Type"))
        p = url.path
        if p == "/version":
            return self._send(200, {"major": "1", "minor": "35", "gitVersion": "v1.35.7-gke.1219000"})
        if p == "/api":
            return self._send(200, {"kind": "APIVersions", "versions": ["v1"]})
        if p == "/apis":
            gv = {"groupVersion": "batch/v1", "version": "v1"}
            return self._send(200, {"kind": "APIGroupList", "groups": [{"name": "batch", "versions": [gv], "preferredVersion": gv}]})
        if p == "/api/v1":
            return self._send(200, CORE)
        if p == "/apis/batch/v1":
            return self._send(200, BATCH)
        if p.endswith("/pods/follow-me/log") and query.get("follow") == "true":
            return self._follow(query)
        if p.endswith("/log"):
            # As the API server does: a pod with several containers needs `container` (no default there).
            if p.endswith("/pods/two/log") and "container" not in query:
                return self._send(400, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "BadRequest",
                                        "message": "a container name must be specified for pod two, choose one of: "
                                        "[kserve-container queue-proxy]", "code": 400})
            return self._send(200, f"step 1 t=1.0 {query.get('container', '')}".rstrip() + "\n", "text/plain")
        if "/services/down:" in p:  # the proxy's answer when no pod backs the Service
            return self._send(503, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "ServiceUnavailable",
                                    "message": "no endpoints available for service \"down\"", "code": 503})
        if "/pods/gone:" in p:  # the pod proxy's answer for a pod that no longer exists
            return self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                                    "message": "pods \"gone\" not found", "code": 404})
        if "/pods/" in p and "/proxy/" in p:
            return self._send(200, 'nv_inference_request_success{model="cifar10",version="1"} 23\n', "text/plain")
        if "/proxy/" in p:
            return self._send(200, {"status": "success", "data": {"resultType": "vector", "result": []}})
        if method == "PATCH":
            return self._send(200, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": p.rsplit("/", 1)[1]}})
        if method == "POST":
            if body["metadata"]["name"] == "exists":
                return self._send(409, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "AlreadyExists",
                                        "message": "configmaps \"exists\" already exists", "code": 409})
            return self._send(201, body)
        if query.get("labelSelector") == "hang=1":  # a connection that stalls (network drop, upgrade)
            time.sleep(3)
        if method == "GET" and query.get("labelSelector") == "refuse=me":
            return self._send(403, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
                                    "message": "pods is forbidden", "code": 403})
        if method == "GET":
            return self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                    "items": [{"metadata": {"name": "p1", "namespace": "ns"}}]})
        if method == "DELETE":
            return self._send(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        return self._send(404, {"kind": "Status", "code": 404})

    followed = threading.Event()  # set by the test once it has the first line

    def _follow(self, query: dict) -> None:
        """A log followed as the API server streams it: chunked, one write per line, held open until
        the reader has the first line (so it must not wait for the end)."""
        self.protocol_version = "HTTP/1.1"  # chunked needs it, as the API server answers
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        def chunk(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        chunk(b"gml-loadgen:progress 3 64\n")
        # A reader that waits for more than what has arrived gets a different rest.
        chunk(b"gml-loadgen:progress 9 64\nlast, no newline" if _Api.followed.wait(3) else b"the reader waited\n")
        self.wfile.write(b"0\r\n\r\n")

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_DELETE(self):
        self._route("DELETE")

    def do_PATCH(self):
        self._route("PATCH")

    def log_message(self, *args):
        pass


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # A client that stops reading (the log follower, a timeout test) is expected here, not news.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture(scope="module")
def server():
    server = _QuietServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _kubeconfig(port: int) -> dict:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me"}}],
    }


@pytest.fixture(scope="module")
def cluster(server):
    return KubeCluster.from_kubeconfig(json.dumps(_kubeconfig(server.server_port)))


def test_create_list_delete_logs_proxy_on_the_wire(cluster):
    _Api.calls.clear()
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}, "data": {"a": "b"}}
    assert cluster.create(cm)["data"] == {"a": "b"}
    assert [p["metadata"]["name"] for p in cluster.list("v1", "Pod", "ns", "run=r1")] == ["p1"]
    cluster.delete_labelled("batch/v1", "Job", "ns", "run=r1")
    assert cluster.pod_log("ns", "p1") == "step 1 t=1.0\n"
    answer = cluster.service_get("monitoring", "kps-prometheus", 9090, "api/v1/query", {"query": "up == 1"})
    assert json.loads(answer)["status"] == "success"
    assert cluster.server_version()["gitVersion"] == "v1.35.7-gke.1219000"
    calls = [(m, p, q) for m, p, q, _ in _Api.calls if not p.startswith(("/api/v1", "/apis")) or "namespaces" in p]
    assert ("POST", "/api/v1/namespaces/ns/configmaps", {}) in calls
    assert ("GET", "/api/v1/namespaces/ns/pods", {"labelSelector": "run=r1"}) in calls
    assert ("DELETE", "/apis/batch/v1/namespaces/ns/jobs", {"labelSelector": "run=r1"}) in calls
    assert ("GET", "/api/v1/namespaces/monitoring/services/kps-prometheus:9090/proxy/api/v1/query", {"query": "up == 1"}) in calls
    delete_body = next(b for m, p, _, b in _Api.calls if m == "DELETE")
    assert delete_body["propagationPolicy"] == "Background"


def test_a_merge_patch_and_a_kind_without_collection_delete_on_the_wire(cluster):
    _Api.calls.clear()
    _Api.content_types.clear()
    cluster.patch("v1", "Pod", "ns", "p1", {"spec": {"schedulingGates": None}})
    method, path, _, body = _Api.calls[-1]
    assert (method, path, body) == ("PATCH", "/api/v1/namespaces/ns/pods/p1", {"spec": {"schedulingGates": None}})
    assert _Api.content_types[-1] == "application/merge-patch+json"  # null deletes the field (RFC 7386)
    _Api.calls.clear()
    cluster.delete_labelled("v1", "Namespace", None, "run=r1")
    calls = [(m, p, q) for m, p, q, _ in _Api.calls if p.startswith("/api/v1/namespaces")]
    # The list answers one object (p1): it is deleted by name, never as a collection.
    assert calls == [("GET", "/api/v1/namespaces", {"labelSelector": "run=r1"}), ("DELETE", "/api/v1/namespaces/p1", {})]


def test_errors_name_the_object_and_the_kind(cluster):
    with pytest.raises(KubeApiError, match="creating ConfigMap ns/exists failed"):
        cluster.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "exists", "namespace": "ns"}})
    with pytest.raises(KubeApiError, match="does not serve Workload"):
        cluster.list("kueue.x-k8s.io/v1beta2", "Workload", "ns")


def test_a_kubeconfig_that_is_not_one_is_refused():
    with pytest.raises(KubeApiError, match="not a kubeconfig"):
        KubeCluster.from_kubeconfig("")
    # Outputs saved without --show-secrets carry the placeholder, not the kubeconfig.
    with pytest.raises(KubeApiError, match="--show-secrets"):
        KubeCluster.from_kubeconfig("[secret]")


def test_an_error_status_from_the_service_proxy_is_an_error_not_an_answer(cluster):
    with pytest.raises(KubeApiError, match=r"answered HTTP 503: .*no endpoints available"):
        cluster.service_get("monitoring", "down", 9090, "api/v1/query", {"query": "up"})


def test_a_post_through_the_service_proxy_carries_its_json_body(cluster):
    """What the g6 quality score sends to vLLM's completions route from outside the cluster."""
    _Api.calls.clear()
    _Api.content_types.clear()
    body = {"model": "m", "prompt": "Hi", "max_tokens": 1, "echo": True, "logprobs": 1}
    answer = cluster.service_post("llm", "vllm", 8000, "/v1/completions", body, timeout_s=5)
    assert json.loads(answer)["status"] == "success"
    assert _Api.calls[-1] == ("POST", "/api/v1/namespaces/llm/services/vllm:8000/proxy/v1/completions", {}, body)
    assert _Api.content_types[-1] == "application/json" and _Api.auth[-1] == "Bearer t0ken"
    with pytest.raises(KubeApiError, match=r"POST /v1/completions on service llm/down:8000 answered HTTP 503"):
        cluster.service_post("llm", "down", 8000, "/v1/completions", body, timeout_s=5)


def test_logs_of_a_pod_with_several_containers_name_the_container(cluster):
    with pytest.raises(KubeApiError, match="a container name must be specified"):
        cluster.pod_log("ns", "two")
    assert cluster.pod_log("ns", "two", container="kserve-container") == "step 1 t=1.0 kserve-container\n"


def test_a_refused_list_is_a_cluster_error(cluster):
    with pytest.raises(KubeApiError, match="listing Pod in ns failed"):
        cluster.list("v1", "Pod", "ns", "refuse=me")


def test_a_stalled_call_ends_at_the_request_timeout(server):
    """wait_until's deadlines and the cleanup after them hold only if no single call can hang."""
    quick = KubeCluster.from_kubeconfig(_kubeconfig(server.server_port), request_timeout_s=0.5)
    began = time.monotonic()
    with pytest.raises(KubeApiError, match="listing Pod in ns failed"):
        quick.list("v1", "Pod", "ns", "hang=1")
    assert time.monotonic() - began < 2.5


def test_the_stacks_kubeconfig_authenticates_through_the_exec_plugin(server, tmp_path, monkeypatch):
    """The kubeconfig the stack exports (components.cluster.kubeconfig) runs gke-gcloud-auth-plugin with
    Application Default Credentials and sends its token; here a stand-in plugin on PATH answers as the
    real one does (an ExecCredential), and only when asked for ADC (else it would use gcloud's account)."""
    from components.cluster import kubeconfig

    plugin = tmp_path / "gke-gcloud-auth-plugin"
    plugin.write_text("#!/bin/sh\n[ \"$*\" = --use_application_default_credentials ] || exit 1\n"
                      "echo '{\"kind\": \"ExecCredential\", \"apiVersion\": "
                      "\"client.authentication.k8s.io/v1beta1\", \"status\": {\"token\": \"ya29.plugin\", "
                      "\"expirationTimestamp\": \"2099-01-01T00:00:00Z\"}}'\n")
    plugin.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    text = kubeconfig("proj", "us-central1-a", "gml-g1", f"127.0.0.1:{server.server_port}", "TU9DSy1DQQ==")
    # The stack's endpoint is https; the loopback stand-in speaks plain http.
    cluster = KubeCluster.from_kubeconfig(text.replace("https://", "http://"))
    _Api.auth.clear()
    cluster.list("v1", "Pod", "ns", "run=r1")
    # Every request carries the plugin's token: the list, and API discovery where the client's discovery
    # cache is cold (the test alone) rather than warm (after others in this file).
    assert _Api.auth and set(_Api.auth) == {"Bearer ya29.plugin"}


def test_the_pod_proxy_reaches_one_pod_and_reports_a_missing_one(cluster):
    _Api.calls.clear()
    text = cluster.pod_get("models", "cifar10-predictor-00001-deployment-abc", 8002, "/metrics")
    assert text == 'nv_inference_request_success{model="cifar10",version="1"} 23\n'
    assert ("GET", "/api/v1/namespaces/models/pods/cifar10-predictor-00001-deployment-abc:8002/proxy/metrics", {}) in [
        (m, p, q) for m, p, q, _ in _Api.calls
    ]
    with pytest.raises(KubeApiError, match=r"GET /metrics on pod models/gone:8002 answered HTTP 404: .*not found"):
        cluster.pod_get("models", "gone", 8002, "/metrics")


# What gke-gcloud-auth-plugin prints when gcloud has no active account (its log line wraps gcloud's).
NO_ACCOUNT_STDERR = """\
E1201 09:14:07.123456   40512 cred.go:145] print credential failed with error: Failed to retrieve access token:: failure while executing gcloud, with args [config config-helper --format=json]: exit status 1 (err: ERROR: (gcloud.config.config-helper) You do not currently have an active account selected.
Please run:

  $ gcloud auth login

to obtain new credentials.

If you have already logged in with a different account, run:

  $ gcloud config set account ACCOUNT

to select an already authenticated account to use.
)
"""


@pytest.fixture
def plugin_without_account(tmp_path, monkeypatch):
    (tmp_path / "stderr.txt").write_text(NO_ACCOUNT_STDERR)
    plugin = tmp_path / "gke-gcloud-auth-plugin"
    plugin.write_text(f"#!/bin/sh\ncat {tmp_path / 'stderr.txt'} >&2\nexit 1\n")
    plugin.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    return plugin


def test_an_auth_plugin_without_an_account_is_one_line_and_nothing_else(plugin_without_account, server, capfd):
    from components.cluster import kubeconfig

    text = kubeconfig("proj", "us-central1-a", "gml-g1", f"127.0.0.1:{server.server_port}", "TU9DSy1DQQ==")
    with pytest.raises(KubeApiError) as e:
        KubeCluster.from_kubeconfig(text.replace("https://", "http://"))
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("gke-gcloud-auth-plugin could not get a token (exit 1): ERROR: (gcloud.config.config-helper) "
                              "You do not currently have an active account selected.")
    # The stack's kubeconfig runs the plugin on Application Default Credentials: that login is the fix.
    assert message.endswith("Create Application Default Credentials with `gcloud auth application-default login`, "
                            "then run again.")
    assert capfd.readouterr() == ("", ""), "no library logging, no plugin output on the terminal"


def test_the_lab_command_prints_that_one_line(plugin_without_account, server, tmp_path):
    from components.cluster import kubeconfig
    from stack_outputs import program_outputs

    outputs = program_outputs("g1")
    outputs["kubeconfig"] = kubeconfig("proj", "us-central1-a", "gml-g1", f"127.0.0.1:{server.server_port}", "TU9DSy1DQQ==")
    saved = tmp_path / "outputs.json"
    saved.write_text(json.dumps(outputs))
    done = subprocess.run([sys.executable, "-m", "benchmarks", "g1", "--outputs", str(saved), "--out", str(tmp_path / "r")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("g1: gke-gcloud-auth-plugin could not get a token (exit 1): ERROR: (gcloud.config.config-helper)")


def test_a_followed_log_arrives_line_by_line_as_it_is_written(cluster):
    _Api.calls.clear()
    _Api.followed.clear()
    lines = cluster.follow_log("llm", "follow-me", "loadgen")
    assert next(lines) == "gml-loadgen:progress 3 64"  # before the server writes anything more
    _Api.followed.set()
    assert list(lines) == ["gml-loadgen:progress 9 64", "last, no newline"]
    ((method, path, query, _),) = _Api.calls
    assert (method, path) == ("GET", "/api/v1/namespaces/llm/pods/follow-me/log")
    assert query["follow"] == "true" and query["container"] == "loadgen"
