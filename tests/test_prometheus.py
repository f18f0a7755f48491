"""Server-side truth: the one Prometheus client against a real Prometheus (Debian's package) scraping
the simulator, over plain HTTP and through a Kubernetes API server's service proxy, and the
direct-scrape arithmetic on hand-worked cases."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import httpx
import pytest

from benchmarks.cluster import KubeApiError, KubeCluster
from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.harness import ServiceRef
from benchmarks.loadgen import LoadSpec, run_load, summarize
from benchmarks.metrics import MetricsError, PrometheusClient, histogram_bucket, metrics_from_scrapes, scalar, vector
from benchmarks.metrics.scrape import Scrape
from promql import binary

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def sim_and_prometheus(tmp_path_factory):
    prometheus = binary("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    with SimTarget(gpu="l4", speedup=2.0, seed=1, base=ServerSettings(model=MODEL)).serving(ServerSettings(max_num_seqs=8)) as server:
        sim = server.base_url
        config = tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: sim\n    static_configs:\n"
            f"      - targets: ['{sim.removeprefix('http://')}']\n"
        )
        port = _free_port()
        proc = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        prom = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    if httpx.get(f"{prom}/-/ready", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"prometheus did not start: {proc.communicate()[1][-1000:]}")
                time.sleep(0.1)
            PrometheusClient.over_http(prom).wait_for_scrape(time.time() - 60, timeout_s=10)
            yield sim, prom
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_promql_reads_the_servers_view_of_a_load_window(sim_and_prometheus):
    sim, prom = sim_and_prometheus
    # Twice max-num-seqs in flight: the server must show a full batch and a queue.
    spec = LoadSpec(base_url=sim, model=MODEL, input_len=128, output_len=64, concurrency=16, requests=200, duration_s=4.0)
    stats = summarize(run_load(spec), spec)
    assert stats.completed > 16 and stats.failed == 0

    m = PrometheusClient.over_http(prom).window_metrics(stats.window.start.timestamp(), stats.window.end.timestamp())
    assert m.source == "prometheus"
    assert 0 < m.running.mean <= 8 and m.running.max == 8
    assert m.waiting.max > 0
    assert 0 < m.kv_cache_usage.max < 1
    assert m.preemptions == 0
    assert m.gpu_util.mean > 0 and m.dram_active.mean > 0 and m.fb_used_mib.max > 0
    # The server's TTFT histogram knows the median to a bucket, and the client's median lies in it
    # (the client's TTFT adds only loopback and its own microseconds to the server's).
    lower, upper = m.ttft_p50_bucket_ms
    assert lower <= stats.ttft_ms.p50 and (upper is None or stats.ttft_ms.p50 <= upper * 1.05)
    series = {s.name: s for s in m.series}
    assert len(series["running"].points) >= 3
    assert max(v for _, v in series["running"].points) == 8


def test_promql_errors_name_the_query(sim_and_prometheus):
    _, prom = sim_and_prometheus
    with pytest.raises(MetricsError, match="rejected 'sum\\(\\('"):
        PrometheusClient.over_http(prom).query("sum((", time.time())


class _ApiServer(BaseHTTPRequestHandler):
    """A loopback Kubernetes API server: discovery, and the service proxy to `prometheus` (a real
    Prometheus) for the one Service `monitoring/kps-prometheus:9090`, as a GKE API server proxies it."""

    prometheus = ""
    proxied: list[str] = []

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        url = urlsplit(self.path)
        discovery = {
            "/version": {"major": "1", "minor": "35", "gitVersion": "v1.35.7-gke.1219000"},
            "/api": {"kind": "APIVersions", "versions": ["v1"]},
            "/apis": {"kind": "APIGroupList", "groups": []},
            "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": []},
        }
        if url.path in discovery:
            return self._send(200, json.dumps(discovery[url.path]).encode(), "application/json")
        prefix = "/api/v1/namespaces/monitoring/services/kps-prometheus:9090/proxy/"
        if not url.path.startswith(prefix):
            status = {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
            return self._send(404, json.dumps(status).encode(), "application/json")
        _ApiServer.proxied.append(url.path.removeprefix(prefix))
        answer = httpx.get(f"{self.prometheus}/{url.path.removeprefix(prefix)}?{url.query}", timeout=10)
        self._send(answer.status_code, answer.content, answer.headers["content-type"])

    def log_message(self, *args):
        pass


@pytest.fixture()
def kubeconfig(sim_and_prometheus):
    """A kubeconfig (as the stack outputs carry it) for the loopback API server in front of Prometheus."""
    _ApiServer.prometheus, _ApiServer.proxied = sim_and_prometheus[1], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "me", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me"}}],
    })  # fmt: skip
    server.shutdown()


@pytest.fixture()
def api_server(kubeconfig):
    return KubeCluster.from_kubeconfig(kubeconfig)


def test_both_transports_read_the_same_prometheus(sim_and_prometheus, api_server):
    _, prom = sim_and_prometheus
    # The stack outputs' `prometheus`, as the lab benchmarks read it.
    target = ServiceRef(namespace="monitoring", service="kps-prometheus", port=9090)
    proxied = PrometheusClient.through_service_proxy(api_server, target)
    direct = PrometheusClient.over_http(prom)
    at = time.time()
    assert proxied.query("count(up)", at) == direct.query("count(up)", at) == 1.0
    (sample,) = vector(proxied.answer('up{job="sim"}'))
    assert sample.value == 1.0 and sample.labels["job"] == "sim"
    assert scalar(proxied.answer('sum(up{job="sim"})')) == 1.0
    assert _ApiServer.proxied == ["api/v1/query", "api/v1/query", "api/v1/query"]


def test_an_in_cluster_g6_run_reads_its_windows_through_the_api_server(sim_and_prometheus, kubeconfig, tmp_path):
    """What a g6 run with its client in the cluster reads: the window's server and GPU figures from the
    stack's Prometheus through the API server, the same as a direct read of that Prometheus."""
    from benchmarks.g6.cli import parse
    from benchmarks.g6.client import client_side
    from benchmarks.g6.resolve import resolve_params
    from stacks.mockrun import run_stack

    outputs = {**run_stack("g6").outputs, "kubeconfig": kubeconfig}
    outputs["prometheus"] = {"namespace": "monitoring", "service": "kps-prometheus", "port": 9090}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    params = resolve_params(parse(["--outputs", str(path)]), outputs)
    client = client_side(params, outputs, cpus=2, log=lambda m: None)
    assert params.client == "in-cluster" and client.runner.namespace == "llm"
    end = time.time() - 2  # a window Prometheus has scraped past
    proxied = client.prometheus.window_metrics(end - 6, end)
    assert proxied == PrometheusClient.over_http(sim_and_prometheus[1]).window_metrics(end - 6, end)
    assert proxied.running is not None and proxied.gpu_util is not None and proxied.kv_cache_usage is not None
    assert _ApiServer.proxied and set(_ApiServer.proxied) <= {"api/v1/query", "api/v1/query_range"}


def test_a_rejected_query_through_the_proxy_names_the_service_and_the_query(api_server):
    target = ServiceRef(namespace="monitoring", service="kps-prometheus", port=9090)
    proxied = PrometheusClient.through_service_proxy(api_server, target)
    # The API server passes Prometheus' 400 on: the cluster layer says which service answered what.
    with pytest.raises(KubeApiError, match=r"kps-prometheus:9090 answered HTTP 400: .*parse error"):
        proxied.query("sum((", time.time())
    missing = ServiceRef(namespace="monitoring", service="other", port=9090)
    elsewhere = PrometheusClient.through_service_proxy(api_server, missing)
    with pytest.raises(KubeApiError, match="monitoring/other:9090 answered HTTP 404"):
        elsewhere.answer("up")


def test_an_error_answer_fails_parsing_with_prometheus_own_words():
    # Prometheus' answer to an instant query that timed out (its API documentation's error shape).
    answer = {"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation"}
    with pytest.raises(MetricsError, match="Prometheus answered timeout: query timed out"):
        vector(answer)
    assert scalar(answer) is None
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    with pytest.raises(MetricsError, match="expected an instant vector from Prometheus, got 'matrix'"):
        vector(matrix)


def test_a_histogram_quantile_is_the_bucket_that_holds_it():
    # 10 observations: 2 under 0.1 s, 6 more under 0.2 s, 2 more under +Inf. The median (rank 5) and
    # the 20th percentile (rank 2) lie in (0.1, 0.2] and (0, 0.1]; the 99th (rank 9.9) above 0.2 s.
    buckets = {0.1: 2.0, 0.2: 8.0, float("inf"): 10.0}
    assert histogram_bucket(0.5, buckets) == (0.1, 0.2)
    assert histogram_bucket(0.2, buckets) == (0.0, 0.1)
    assert histogram_bucket(0.99, buckets) == (0.2, None)  # the +Inf bucket: no upper bound
    assert histogram_bucket(0.5, {0.1: 0.0, float("inf"): 0.0}) is None


def _text(running: float, waiting: float, preemptions: float, buckets: tuple[float, float, float]) -> str:
    le = ("0.1", "0.2", "+Inf")
    lines = [
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{model_name="m"}} {running}',
        "# TYPE vllm:num_requests_waiting gauge",
        f'vllm:num_requests_waiting{{model_name="m"}} {waiting}',
        "# TYPE vllm:num_preemptions counter",
        f'vllm:num_preemptions_total{{model_name="m"}} {preemptions}',
        "# TYPE vllm:time_to_first_token_seconds histogram",
        *(f'vllm:time_to_first_token_seconds_bucket{{le="{b}",model_name="m"}} {c}' for b, c in zip(le, buckets)),
        f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {buckets[-1]}',
        'vllm:time_to_first_token_seconds_sum{model_name="m"} 1.0',
        "# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge",
        'DCGM_FI_PROF_DRAM_ACTIVE{gpu="0"} 0.8',
        'DCGM_FI_PROF_DRAM_ACTIVE{gpu="1"} 0.6',
    ]
    return "\n".join(lines) + "\n"


def test_scrapes_give_window_figures_from_counter_deltas_and_inner_gauges():
    scrapes = [
        Scrape(100.0, _text(0, 0, 5, (10, 10, 10))),  # before the load: idle, counters already moved
        Scrape(101.0, _text(8, 4, 6, (11, 14, 15))),
        Scrape(102.0, _text(6, 0, 7, (12, 18, 20))),
        Scrape(103.0, _text(0, 0, 7, (12, 18, 20))),  # after the load
    ]
    m = metrics_from_scrapes(scrapes)
    assert (m.running.mean, m.running.max, m.waiting.max) == (7.0, 8.0, 4.0)  # idle brackets left out
    assert m.preemptions == 2.0
    # Window buckets: {0.1: 2, 0.2: 8, +Inf: 10}, the hand-worked case above.
    assert m.ttft_p50_bucket_ms == pytest.approx((100.0, 200.0))
    # The window of the middle scrape alone: the scrapes bracketing it are 101 and 103.
    inner = metrics_from_scrapes(scrapes, start=101.5, end=102.5)
    assert (inner.running.mean, inner.waiting.max) == (6.0, 0.0) and inner.preemptions == 1.0
    assert m.dram_active.mean == pytest.approx(0.7)  # averaged over GPUs
    assert [p for p in next(s for s in m.series if s.name == "running").points] == [(101.0, 8.0), (102.0, 6.0)]
    with pytest.raises(MetricsError, match="need scrapes at the start and end"):
        metrics_from_scrapes(scrapes[:1])


def test_direct_scrapes_keep_the_servers_gauges_and_prometheus_adds_the_gpu():
    from benchmarks.metrics import GaugeStats, Series, ServerMetrics, with_gpu_metrics

    scraped = ServerMetrics(source="scrape", running=GaugeStats(mean=7.5, max=8), preemptions=0.0)
    prom = ServerMetrics(
        source="prometheus",
        running=GaugeStats(mean=8, max=8),  # one 15-second sample: coarser than the scrape
        gpu_util=GaugeStats(mean=97, max=100),
        dram_active=GaugeStats(mean=0.8, max=0.9),
        series=[Series(name="gpu_util", points=[(1.0, 97.0)]), Series(name="running", points=[(1.0, 8.0)])],
    )
    merged = with_gpu_metrics(scraped, prom)
    assert merged.source == "scrape+prometheus"
    assert merged.running == scraped.running and merged.gpu_util == prom.gpu_util and merged.dram_active == prom.dram_active
    assert [s.name for s in merged.series] == ["gpu_util"]
    assert with_gpu_metrics(None, prom) is prom
    # A server that reports GPU series itself (the simulator) keeps its own.
    own = scraped.model_copy(update={"gpu_util": GaugeStats(mean=50, max=60)})
    assert with_gpu_metrics(own, prom).gpu_util == own.gpu_util
