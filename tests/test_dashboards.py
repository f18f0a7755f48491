"""Dashboards as code: valid Grafana JSON, PromQL that Prometheus' grammar accepts and that computes
what the panel says (evaluated by promtool, a real engine), and only metric names the pinned
exporters really emit."""

import json
import re

import pytest
import yaml

from promql import promtool, syntax_errors
from components import upstream
from components.dashboards import all_dashboards, cost_dashboard, gpu, gpu_dashboard, kueue, kueue_dashboard, serving_dashboard

DASHBOARDS = {"gpu": gpu_dashboard, "kueue": kueue_dashboard, "serving": serving_dashboard, "cost": cost_dashboard}

# Kueue v0.19.2 metric names, read from pkg/metrics/metrics.go at tag v0.19.2 of kubernetes-sigs/kueue
# (Subsystem "kueue" + Name); histograms are listed with the suffixes Prometheus adds.
KUEUE_V0_19_METRICS = {
    "kueue_pending_workloads",
    "kueue_admitted_active_workloads",
    "kueue_reserving_active_workloads",
    "kueue_admitted_workloads_total",
    "kueue_evicted_workloads_total",
    "kueue_preempted_workloads_total",
    "kueue_quota_reserved_workloads_total",
    "kueue_finished_workloads_total",
    "kueue_cluster_queue_resource_usage",
    "kueue_cluster_queue_resource_reservation",
    "kueue_cluster_queue_nominal_quota",
    "kueue_cluster_queue_borrowing_limit",
    "kueue_cluster_queue_lending_limit",
    "kueue_cluster_queue_status",
    *(f"kueue_admission_wait_time_seconds{s}" for s in ("_bucket", "_sum", "_count")),
    *(f"kueue_quota_reserved_wait_time_seconds{s}" for s in ("_bucket", "_sum", "_count")),
}

# vLLM OpenAI-server metric names, read from vllm/v1/metrics/loggers.py (vllm-project/vllm) and
# vLLM's metrics documentation; prometheus_client exposes counters with `_total`, histograms with `_bucket`.
VLLM_METRICS = {
    *(
        f"vllm:{h}{s}"
        for h in (
            "time_to_first_token_seconds",
            "inter_token_latency_seconds",
            "e2e_request_latency_seconds",
            "request_queue_time_seconds",
        )
        for s in ("_bucket", "_sum", "_count")
    ),
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
}

# Concrete values for every template variable, as Grafana would substitute them.
CONCRETE = {
    "node": "gke-gml-g1-gpu-abcd",
    "namespace": "serving",
    "pod": "vllm-0",
    "cluster_queue": "gpu",
    "resource": "nvidia.com/gpu",
    "model": "qwen",
    # Grafana's global variables.
    "__rate_interval": "1m",
    "__range": "6h",
    "__range_s": "21600",
}
ALL = {name: ".*" for name in CONCRETE} | {"__rate_interval": "5m", "__range": "6h", "__range_s": "21600"}


def substitute(expr: str, values: dict[str, str]) -> str:
    # Grafana variables start with a letter or underscore; label_replace's $1 is left alone.
    return re.sub(r"\$([A-Za-z_]\w*)", lambda m: values[m.group(1)], expr)


def panel_expressions(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def variable_expressions(dashboard: dict) -> list[str]:
    """The PromQL inside each query variable's label_values(...) or query_result(...)."""
    exprs = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+),\s*\w+\)|query_result\((.+)\)", variable["query"])
        assert match, f"{dashboard['uid']} variable {variable['name']}: unexpected query {variable['query']!r}"
        exprs.append(match.group(1) or match.group(2))
    return exprs


def all_expressions(dashboard: dict) -> list[str]:
    return panel_expressions(dashboard) + variable_expressions(dashboard)


def used_metrics(dashboard: dict) -> set[str]:
    return {m for e in all_expressions(dashboard) for m in re.findall(r"\b(DCGM_FI_\w+|kueue_\w+|vllm:\w+)", e)}


@pytest.fixture(scope="module")
def dashboards() -> dict[str, dict]:
    return {name: build() for name, build in DASHBOARDS.items()}


# --- the JSON model ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", DASHBOARDS)
def test_dashboard_is_json_with_uid_title_tags_and_unique_panel_ids(dashboards, name):
    dashboard = dashboards[name]
    assert json.loads(json.dumps(dashboard)) == dashboard
    assert dashboard["uid"] == f"gke-ml-labs-{name}" and dashboard["title"]
    assert "gke-ml-labs" in dashboard["tags"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert any(p["type"] == "timeseries" for p in dashboard["panels"])


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_query_uses_the_prometheus_datasource_variable(dashboards, name):
    dashboard = dashboards[name]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_variable_an_expression_uses_is_defined(dashboards, name):
    dashboard = dashboards[name]
    defined = {v["name"] for v in dashboard["templating"]["list"]} | {"__rate_interval", "__range", "__range_s"}
    used = {m for e in all_expressions(dashboard) for m in re.findall(r"\$([A-Za-z_]\w*)", e)}
    assert used <= defined


@pytest.mark.parametrize("name", DASHBOARDS)
def test_panels_do_not_overlap(dashboards, name):
    cells = set()
    for panel in dashboards[name]["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps another panel"
                cells.add((x, y))


def test_all_dashboards_are_keyed_by_file_name():
    everything = all_dashboards()
    assert set(everything) == {f"{build()['uid']}.json" for build in DASHBOARDS.values()}
    for file_name, dashboard in everything.items():
        assert re.fullmatch(r"[-._a-zA-Z0-9]+", file_name)  # a valid ConfigMap key
        assert file_name == f"{dashboard['uid']}.json"


# --- PromQL -----------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [CONCRETE, ALL], ids=["one-value", "all-values"])
def test_every_expression_parses(dashboards, values):
    exprs = [substitute(e, values) for d in dashboards.values() for e in all_expressions(d)]
    assert len(exprs) > 40 and any("vllm:" in e for e in exprs)
    assert syntax_errors(exprs) == []


@pytest.mark.parametrize(
    "broken",
    [
        "sum by (a (up)",  # unbalanced
        "rate(vllm:generation_tokens_total)",  # rate of an instant vector
        'label_replace(up, "node", "$1", "Hostname")',  # one argument short
        "histogram_quantile(0.5, sum by (le) (rate(x_bucket[5x])))",  # bad duration
    ],
)
def test_a_broken_expression_is_caught_by_the_syntax_check(broken):
    # The check above is only worth something if the parser rejects what Prometheus would.
    assert len(syntax_errors([broken])) == 1


def panel(dashboard: dict, title: str) -> dict:
    return next(p for p in dashboard["panels"] if p["title"] == title)


def run_promql_tests(tmp_path, series: list[tuple[str, str]], cases: list[tuple[str, list[tuple[str, float]]]]):
    """Evaluate expressions over synthetic series with `promtool test rules` (a real PromQL engine)."""
    spec = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "promql_expr_test": [
                    {
                        "expr": substitute(expr, ALL),
                        "eval_time": "10m",
                        "exp_samples": [{"labels": labels, "value": value} for labels, value in expected],
                    }
                    for expr, expected in cases
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(spec))
    result = promtool("test", "rules", "test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_gpu_queries_find_the_node_under_either_exporter_label_and_count_a_shared_gpu_once(dashboards, tmp_path):
    dashboard = dashboards["gpu"]
    util = panel(dashboard, "GPU utilisation")["targets"][0]["expr"]
    by_pod = panel(dashboard, "GPU utilisation by pod")["targets"][0]["expr"]
    series = [
        # exporter < 4.6 on node a: one GPU time-shared by two pods (reported once per pod)
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="a",gpu="0",namespace="lab",pod="p1"}', "70x12"),
        ('DCGM_FI_DEV_GPU_UTIL{Hostname="a",gpu="0",namespace="lab",pod="p2"}', "70x12"),
        # exporter >= 4.6 on node b: an idle GPU no pod holds
        ('DCGM_FI_DEV_GPU_UTIL{hostname="b",gpu="0",namespace="",pod=""}', "5x12"),
    ]
    run_promql_tests(
        tmp_path,
        series,
        [
            (util, [('{node="a",gpu="0"}', 70), ('{node="b",gpu="0"}', 5)]),
            (by_pod, [('{namespace="lab",pod="p1"}', 70), ('{namespace="lab",pod="p2"}', 70)]),
        ],
    )


def test_kueue_quota_ratio_and_follower_copies(dashboards, tmp_path):
    dashboard = dashboards["kueue"]
    ratio = panel(dashboard, "Quota used / nominal")["targets"][0]["expr"]
    admitted = panel(dashboard, "Admitted workloads")["targets"][0]["expr"]
    gpu_labels = 'cohort="",cluster_queue="gpu",flavor="l4-spot",resource="nvidia.com/gpu"'
    series = [
        (f'kueue_cluster_queue_resource_usage{{{gpu_labels},replica_role="leader"}}', "2x12"),
        (f'kueue_cluster_queue_nominal_quota{{{gpu_labels},replica_role="leader"}}', "4x12"),
        (f'kueue_cluster_queue_nominal_quota{{{gpu_labels},replica_role="follower"}}', "4x12"),
        ('kueue_admitted_active_workloads{cluster_queue="gpu",replica_role="leader"}', "2x12"),
        ('kueue_admitted_active_workloads{cluster_queue="gpu",replica_role="follower"}', "2x12"),
    ]
    run_promql_tests(
        tmp_path,
        series,
        [
            (ratio, [('{cluster_queue="gpu",flavor="l4-spot",resource="nvidia.com/gpu"}', 0.5)]),
            (admitted, [('{cluster_queue="gpu"}', 2)]),
        ],
    )


def test_serving_ttft_p50_comes_from_the_histogram(dashboards, tmp_path):
    p50 = panel(dashboards["serving"], "Time to first token")["targets"][0]["expr"]
    selector = 'model_name="qwen",namespace="serving"'
    # 60 requests a minute, all with TTFT between 0.04 s and 0.06 s.
    series = [
        (f'vllm:time_to_first_token_seconds_bucket{{{selector},le="0.04"}}', "0x12"),
        (f'vllm:time_to_first_token_seconds_bucket{{{selector},le="0.06"}}', "0+60x12"),
        (f'vllm:time_to_first_token_seconds_bucket{{{selector},le="+Inf"}}', "0+60x12"),
    ]
    run_promql_tests(tmp_path, series, [(p50, [('{model_name="qwen"}', 0.05)])])


# --- metric names -----------------------------------------------------------------------------


def dcgm_fields(csv_name: str, enabled_only: bool) -> set[str]:
    """DCGM fields a counters CSV of the pinned exporter lists (commented-out lines included unless enabled_only)."""
    text = upstream.path(f"dcgm-exporter/4.5.3-4.8.2/{csv_name}").read_text()
    pattern = r"^(DCGM_FI_\w+)\s*," if enabled_only else r"^#?\s*(DCGM_FI_\w+)\s*,"
    return set(re.findall(pattern, text, re.MULTILINE))


def test_every_dcgm_metric_is_a_field_the_pinned_exporter_knows(dashboards):
    used = used_metrics(dashboards["gpu"])
    known = dcgm_fields("default-counters.csv", False) | dcgm_fields("dcp-metrics-included.csv", False)
    assert used and used <= known
    assert used == set(gpu.DCGM_METRICS), "DCGM_METRICS must list exactly what the dashboard reads"


def test_dcgm_metrics_off_by_default_are_the_ones_the_gpu_module_declares():
    # The observability component enables these through the chart's customMetrics list.
    enabled = dcgm_fields("default-counters.csv", True) | dcgm_fields("dcp-metrics-included.csv", True)
    assert set(gpu.DCGM_METRICS) - enabled == set(gpu.DCGM_OFF_BY_DEFAULT)


def test_every_kueue_metric_is_one_kueue_v0_19_emits(dashboards):
    used = used_metrics(dashboards["kueue"])
    assert used and used <= KUEUE_V0_19_METRICS, used - KUEUE_V0_19_METRICS
    assert {m.removesuffix("_bucket") for m in used} == set(kueue.KUEUE_METRICS)


def test_every_vllm_metric_is_one_vllm_emits(dashboards):
    used = used_metrics(dashboards["serving"])
    assert used and used <= VLLM_METRICS, used - VLLM_METRICS
