"""The test tooling for PromQL: the offline syntax check, and what a missing Prometheus binary does."""

from __future__ import annotations

import pytest

import promql
from benchmarks.metrics.prometheus import gpu_util_query


def test_the_syntax_check_reads_vllm_names_and_the_lab_queries():
    exprs = [
        'histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{model_name="q"}[5m])))',
        "max(vllm:num_requests_running) / max(vllm:num_requests_waiting offset 1m)",
        'label_replace(DCGM_FI_DEV_GPU_UTIL, "node", "$1", "Hostname", "(.*)")',
        gpu_util_query(30),
    ]
    assert promql.syntax_errors(exprs) == []
    (error,) = promql.syntax_errors(["sum(vllm:num_requests_running"])
    assert error.startswith("sum(vllm:num_requests_running: ")


def test_a_missing_binary_skips_with_the_install_command(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^promtool not installed: apt-get install prometheus \(Debian/Ubuntu\)$"):
        promql.binary("promtool")


def test_a_missing_binary_fails_under_ci(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"^prometheus not on PATH, and CI=true requires it: apt-get install"):
        promql.binary("prometheus")
