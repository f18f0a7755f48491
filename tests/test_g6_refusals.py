"""g6 refuses what cannot work before any load, in one line naming the flag or the server and what is
allowed (issue 15): a wrong target, a flag out of range, another lab's outputs, an output folder that
is a file, an in-cluster address from a laptop; and the report and plot say what they mean."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import matplotlib
import pytest

from benchmarks.g6 import main
from benchmarks.g6.plots import gpu_over_time
from benchmarks.g6.result import G6Result
from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.harness import load_result
from facts.catalogue import GPUS
from stack_outputs import program_outputs
from loopback import answering

MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
SMALL = ["--concurrency", "2", "--requests", "4", "--input-len", "32", "--output-len", "16", "--quiet", "--repeats", "1"]


@pytest.fixture(scope="module")
def sim_url() -> Iterator[str]:
    with SimTarget(gpu="l4", speedup=8.0, seed=1, base=ServerSettings(model=MODEL)).serving(ServerSettings(max_num_seqs=16)) as server:
        yield server.base_url


def _models(*ids: str) -> str:
    return json.dumps({"object": "list", "data": [{"id": i, "object": "model", "max_model_len": 4096} for i in ids]})


def _refused(argv: list[str], tmp_path: Path, capsys) -> str:
    """Run g6; it must exit 2 with one line on stderr and leave no results. The line."""
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert not out.exists() or not list(out.iterdir())
    return lines[0]


# -- a wrong target, refused before the sweep -----------------------------------------------------


def test_a_server_of_another_model_is_refused_by_name(sim_url, tmp_path, capsys):
    line = _refused(["--target", sim_url, "--model", "Qwen/Qwen2.5-1.5B-Instruct", *SMALL], tmp_path, capsys)
    assert line == f"g6: {sim_url} serves {MODEL}, not Qwen/Qwen2.5-1.5B-Instruct"


@pytest.mark.parametrize(
    "status, ctype, body, message",
    [
        (404, "application/json", '{"detail": "Not Found"}', "/v1/models answered HTTP 404: not an OpenAI-compatible server"),
        (200, "text/html", "<html>a web page</html>", "is not an OpenAI-compatible server: GET /v1/models answered no model list"),
    ],
)
def test_a_server_that_is_not_openai_compatible_is_refused(status, ctype, body, message, tmp_path, capsys):
    with answering(lambda method, path, request: (status, ctype, body)) as url:
        line = _refused(["--target", url, "--model", MODEL, *SMALL], tmp_path, capsys)
    assert message in line


def test_the_model_defaults_to_the_one_the_server_serves(sim_url, tmp_path):
    assert main(["--target", sim_url, *SMALL, "--out", str(tmp_path)]) == 0
    (folder,) = tmp_path.iterdir()
    assert load_result(G6Result, folder).params.model == MODEL


def test_a_server_of_several_models_needs_model(tmp_path, capsys):
    with answering(lambda method, path, body: (200, "application/json", _models("a/one", "b/two"))) as url:
        line = _refused(["--target", url, *SMALL], tmp_path, capsys)
    assert line == f"g6: {url} serves a/one, b/two: say which with --model"


def test_requests_longer_than_the_servers_max_model_len_are_refused(sim_url, tmp_path, capsys):
    # The simulator serves the model's own context, 32,768 tokens, as vLLM does without --max-model-len.
    line = _refused(["--target", sim_url, "--input-len", "32700", "--output-len", "100", "--quiet"], tmp_path, capsys)
    assert line.startswith(f"g6: --input-len 32700 + --output-len 100 = 32800 tokens per request: more than {MODEL}'s "
                           "max-model-len 32768")  # fmt: skip


def test_a_point_where_every_request_failed_says_so_on_the_terminal(tmp_path, capsys):
    """A server that lists the model but refuses every completion: the terminal says it as the point
    ends, not only the report."""

    def answer(method: str, path: str, body: bytes) -> tuple[int, str, str]:
        if path == "/v1/models":
            return 200, "application/json", _models(MODEL)
        return 500, "application/json", '{"error": {"message": "engine dead"}}'

    with answering(answer) as url:
        rc = main(["--target", url, *SMALL, "--out", str(tmp_path)])
    assert rc == 1
    err = capsys.readouterr().err
    assert "g6: max-num-seqs=? c=2: every request failed: {'http_500': 4}" in err


# -- flags and outputs: one line naming what is allowed ------------------------------------------


@pytest.mark.parametrize(
    "flag, value, allowed",
    [
        ("--concurrency", "-4", "expected comma-separated whole numbers >= 1, got '-4'"),
        ("--requests", "0", "expected a whole number >= 1, got '0'"),
        ("--rate", "-1", "expected comma-separated finite numbers > 0, got '-1'"),
        ("--output-len", "0", "expected a whole number >= 1, uniform:LO,HI, lognormal:MEAN,SD or file:PATH, got '0'"),
        ("--speedup", "0", "expected a finite number > 0, got '0'"),
        # No limit is no SLO: inf is refused as nan is (each would judge every request otherwise).
        ("--slo-e2e-ms", "inf", "expected a finite number > 0, got 'inf'"),
        ("--slo-e2e-ms", "nan", "expected a finite number > 0, got 'nan'"),
        ("--gpu-memory-utilization", "1.5", "expected a fraction > 0 and <= 1, got '1.5'"),
    ],
)
def test_a_flag_out_of_range_is_one_line_naming_it(flag, value, allowed, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--sim", flag, value])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"g6: argument {flag}: {allowed} (`python -m benchmarks g6 --help` lists the options)"


def test_another_labs_outputs_are_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "g5.json"
    path.write_text(json.dumps(program_outputs("g5")))
    line = _refused(["--outputs", str(path)], tmp_path, capsys)
    assert line.startswith("g6: the stack outputs are from lab 'g5', but the g6 benchmark needs a stack built with")


def test_out_pointing_at_a_file_is_refused_before_any_work(sim_url, tmp_path, capsys):
    file = tmp_path / "results"
    file.write_text("not a folder")
    assert main(["--target", sim_url, *SMALL, "--out", str(file)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"g6: --out {file}: is a file, not a folder; give a folder (it is created if missing)"


def test_an_in_cluster_address_from_a_laptop_names_the_in_cluster_runner(tmp_path, capsys, monkeypatch):
    """What this machine's resolver answers for a cluster's Service name (no DNS query leaves it)."""
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if str(host).endswith(".svc.cluster.local"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    line = _refused(["--target", "http://vllm.llm.svc.cluster.local:8000", "--model", MODEL, *SMALL], tmp_path, capsys)
    assert line == (
        "g6: http://vllm.llm.svc.cluster.local:8000 is Service llm/vllm's address inside the cluster, which this "
        "machine cannot resolve: give --stack or --outputs without --target (the load generator then runs in the "
        "cluster), or `kubectl port-forward -n llm svc/vllm 8000` and --target http://127.0.0.1:8000"
    )


# -- what the report and the plot say --------------------------------------------------------------


def test_without_gpu_the_report_says_the_gpu_is_what_is_missing(sim_url, tmp_path):
    assert main(["--target", sim_url, "--model", MODEL, *SMALL, "--out", str(tmp_path)]) == 0
    (folder,) = tmp_path.iterdir()
    report = (folder / "report.md").read_text()
    assert f"No sizing: the server's GPU is not known: give --gpu ({', '.join(GPUS)})." in report


def test_gpu_over_time_speaks_percent_and_names_each_points_segment(tmp_path):
    """Drawn from the committed example as SVG with its text kept as text: the axis and the legend
    agree on percent, and every point's segment carries its max-num-seqs and load."""
    example = load_result(G6Result, Path(__file__).resolve().parents[1] / "examples" / "g6-sim")
    path = tmp_path / "gpu.svg"
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        gpu_over_time(example, path)
    svg = path.read_text()
    assert "% (of time, of KV blocks)" in svg and "fraction" not in svg and "(%)" not in svg
    for p in example.points:
        assert f"{p.max_num_seqs} / c={p.concurrency}" in svg
