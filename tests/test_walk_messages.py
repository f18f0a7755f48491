"""Messages met on a first walk through g6: a --prometheus URL that is wrong fails the run before it
starts, in one line (unreachable, or a web server's 404 page, whose HTML is never pasted); an unknown
model's message arrives whole, names no flag g6 lacks, and the simulator dies cleanly after it."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from loopback import answering

from benchmarks.g6.cli import run
from benchmarks.metrics import MetricsError
from benchmarks.metrics.prometheus import PrometheusClient
from facts.catalogue import MODELS

# What nginx answers for a path it does not have.
NGINX_404 = ("<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1>"
             "</center>\r\n<hr><center>nginx/1.24.0</center>\r\n</body>\r\n</html>\r\n")  # fmt: skip
SIM = ["--sim", "--model", "Qwen/Qwen2.5-1.5B-Instruct", "--max-num-seqs", "8", "--concurrency", "1",
       "--requests", "4", "--quiet", "--repeats", "1"]  # fmt: skip


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_prometheus_fails_the_run_in_one_line(tmp_path, capsys):
    url = f"http://127.0.0.1:{closed_port()}"
    assert run([*SIM, "--prometheus", url, "--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert line.startswith(f"g6: Prometheus at {url} unreachable: ")
    assert not list((tmp_path / "out").glob("*/report.md")), "no report of a run that did not start"


def test_a_404_page_is_named_not_pasted():
    with answering(lambda method, path, body: (404, "text/html", NGINX_404)) as url:
        with pytest.raises(MetricsError) as e:
            PrometheusClient.over_http(url).check()
    assert str(e.value) == (f"Prometheus at {url} rejected 'vector(1)': HTTP 404 (an HTML page, not an answer of "
                            "the service's API: is the URL the service's base URL?)")


def test_an_unknown_model_is_named_whole_with_no_flag_g6_lacks(tmp_path, capsys):
    assert run(["--sim", "--model", "acme/Giant-1T", "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("g6: the simulator did not start (")
    assert line.endswith(f"): unknown model 'acme/Giant-1T'; known models: {', '.join(MODELS)}")
    assert "Fatal Python error" not in err


def test_the_simulator_exits_cleanly_on_a_bad_flag_while_its_parent_holds_stdin():
    """What g6 does: stdin a pipe held open (--watch-stdin). The reader thread must not take the
    interpreter's shutdown down with it ("Fatal Python error: _enter_buffered_busy")."""
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.sim", "--model", "acme/Giant-1T", "--watch-stdin"],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        err = proc.stderr.read()  # until the process ends; stdin stays open meanwhile, as g6 holds it
        code = proc.wait(timeout=60)
    finally:
        proc.stdin.close()
    assert code == 2
    assert err.startswith("error: unknown model 'acme/Giant-1T'") and "Fatal Python error" not in err


def test_a_404_page_of_a_server_refusing_a_post_is_named_not_pasted():
    from benchmarks.harness.server import NotOk, http_server

    with answering(lambda method, path, body: (404, "text/html", NGINX_404)) as url:
        with pytest.raises(NotOk) as e:
            http_server(url).post("/v1/completions", {"model": "m", "prompt": "hi"}, 5.0)
    assert str(e.value) == (f"POST {url}/v1/completions answered HTTP 404: (an HTML page, not an answer of the "
                            "service's API: is the URL the service's base URL?)")
