"""Lab g6 end to end against the simulator, its stack sweep through pulumi, its analysis and report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.g6 import main
from benchmarks.g6.analysis import analyse
from benchmarks.g6.plots import PLOTS, render_plots
from benchmarks.g6.price import Run, cheapest
from benchmarks.g6.report import THIN, render_report
from benchmarks.g6.result import G6Result, TokenPrices
from benchmarks.g6.targets import Demand, ServerSettings, SimTarget, StackTarget
from benchmarks.harness import PulumiStack, load_result, save_result
from benchmarks.harness.server import http_server
from benchmarks.loadgen import Slo
from benchmarks.metrics import GaugeStats, ServerMetrics
from benchmarks.serving.sizing import roofline, size
from facts.catalogue import get_gpu, get_model
from fake_pulumi import fake_pulumi, pulumi_calls
from stack_outputs import program_outputs

FIXTURE = Path(__file__).parent / "data" / "g6-result.json"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
CONFIG_PATH = "vllm.max_num_seqs"  # the stack config field a sweep changes
SMALL = ["--input-len", "64", "--output-len", "64", "--quiet", "--repeats", "1"]


def _only_folder(out: Path) -> Path:
    (folder,) = out.iterdir()
    return folder


@pytest.mark.realtime
def test_sim_sweep_leaves_result_report_and_plots(tmp_path):
    rc = main(["--sim", "--model", MODEL, "--max-num-seqs", "4,16", "--concurrency", "1,8", "--requests", "16",
               "--speedup", "2", "--scrape-interval", "0.2", "--out", str(tmp_path), *SMALL])  # fmt: skip
    assert rc == 0
    folder = _only_folder(tmp_path)
    assert folder.name.startswith("g6-")
    result = load_result(G6Result, folder)
    assert [(p.max_num_seqs, p.concurrency) for p in result.points] == [(4, 1), (4, 8), (16, 1), (16, 8)]
    assert all(p.completed == 16 and p.failed == 0 and p.output_tokens == 16 * 64 for p in result.points)
    by = {(p.max_num_seqs, p.concurrency): p for p in result.points}
    # Eight clients against four slots: the batch is capped by max-num-seqs and requests queue.
    assert by[4, 8].bound == "max-num-seqs"
    assert by[4, 8].ttft_ms.p50 > 3 * by[16, 8].ttft_ms.p50
    # One stream is memory-bandwidth-bound on the roofline and below it.
    assert by[16, 1].bound == "memory-bandwidth"
    assert 0.2 < by[16, 1].roofline_share < 1.0
    assert by[16, 8].observed_batch > 4 * by[16, 1].observed_batch
    assert all(p.server is not None and p.server.source == "scrape" for p in result.points)
    assert [s.max_num_seqs for s in result.sizing] == [4, 16]
    assert result.meta.server_versions.get("model.id") == MODEL
    assert (folder / "report.md").read_text() == render_report(result)
    for name in PLOTS:
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # One window, one set of requests: every request returns 64 tokens, so tokens/s is 64 x requests/s.
    for p in result.points:
        assert p.output_tokens_per_s == pytest.approx(64 * p.requests_per_s)
        assert p.ttft_ms.n == 16 and p.itl_ms.n == 16 * 63
        assert p.ttft_ms.ci95["p50"][0] <= p.ttft_ms.p50 <= p.ttft_ms.ci95["p50"][1]
    # GPU time: one stream's time per output token cannot beat the roofline's decode step on the L4
    # (it would, at half of it, were the simulator's x2 time left unconverted).
    step_ms = roofline(result.sizing[1], [1], 64 + 32)[0].step_time_s * 1000
    assert step_ms < by[16, 1].tpot_ms.p50 < 2 * step_ms
    # Priced as Pulumi.g6.yaml runs the stack, from the price catalogue's rows for us-central1:
    # g2-standard-4 is its VM part (spot $0.05874/h, on-demand $0.14679/h) plus one L4 ($0.2231, $0.56004),
    # with a 100 GB pd-balanced boot disk ($0.10 per GiB-month over 730 h); beside it the system node,
    # e2-standard-4 on-demand ($0.13402/h) with a 50 GB disk, and a free zonal cluster.
    spot = 0.05874 + 0.2231 + 100 * 0.10 / 730
    on_demand = 0.14679 + 0.56004 + 100 * 0.10 / 730
    rest = 0.13402 + 50 * 0.10 / 730
    price = result.gpu_price
    assert (price.gpu_node_spot, price.gpu_node_on_demand, price.rest_of_cluster) == pytest.approx((spot, on_demand, rest))
    assert price.price_date == "2026-12-01"
    for p in result.points:
        tp, per_s = p.usd_per_million_output_tokens, p.output_tokens_per_s * 3600 / 1e6
        assert tp.gpu_node_spot == pytest.approx(spot / per_s)
        assert tp.cluster_on_demand == pytest.approx((on_demand + rest) / per_s)
        # GKE Inference Quickstart counts a 64-token prompt as 16 output tokens' worth.
        assert tp.giq_convention == pytest.approx(spot / ((p.output_tokens_per_s + p.requests_per_s * 16) * 3600 / 1e6))


def test_repeats_run_the_grid_over_each_with_its_own_seed_and_answer_with_a_rerun_interval(tmp_path):
    rc = main(["--sim", "--model", MODEL, "--max-num-seqs", "16", "--concurrency", "1,4", "--requests", "8",
               "--speedup", "4", "--scrape-interval", "0.2", "--out", str(tmp_path), "--input-len", "64",
               "--output-len", "64", "--quiet", "--repeats", "2"])  # fmt: skip
    assert rc == 0
    result = load_result(G6Result, _only_folder(tmp_path))
    # Interleaved: the whole grid, then the whole grid again, every run of every point with a seed of its own.
    assert [(p.concurrency, p.repeat) for p in result.points] == [(1, 0), (4, 0), (1, 1), (4, 1)]
    assert len({p.seed for p in result.points}) == 4
    report = render_report(result)
    assert "## The answer: every point over its 2 runs" in report and "every point 2 times (interleaved)" in report
    a, b = (p.output_tokens_per_s for p in result.points if p.concurrency == 4)
    # Two runs: their mean, and t(0.975, 1) = 12.706 times their standard deviation |a - b| / sqrt(2), times
    # sqrt(2/2): where a rerun's mean of two falls 95% of the time.
    mean, half = (a + b) / 2, 12.706 * abs(a - b) / math.sqrt(2)
    assert f"| 16 | c=4 | 2 | {mean:,.0f} ({max(0.0, mean - half):,.0f}–{mean + half:,.0f}) |" in report


def test_result_round_trips_through_json(tmp_path):
    result = load_result(G6Result, FIXTURE)
    save_result(result, tmp_path)
    assert load_result(G6Result, tmp_path) == result
    assert json.loads((tmp_path / "result.json").read_text())["schema_version"] == 1


def test_report_and_plots_from_a_stored_result(tmp_path):
    result = load_result(G6Result, FIXTURE)
    report = render_report(result)
    for p in result.points:
        # Each quantile with its interval; 24 requests make every TTFT p99 a thin one (under 100 samples).
        (lo50, hi50), (lo99, hi99) = p.ttft_ms.ci95["p50"], p.ttft_ms.ci95["p99"]
        assert f"{p.ttft_ms.p50:.1f} ({lo50:.1f}–{hi50:.1f}) / {p.ttft_ms.p99:.1f} ({lo99:.1f}–{hi99:.1f})†" in report
        assert f"**{p.bound}**: {p.bound_reason}" in report
        low, high = p.server.ttft_p50_bucket_ms
        assert f"({low:,.0f}, {high:,.0f}]" in report  # the server's TTFT as the bucket it is
    assert f"`{' '.join(result.meta.command)}`" in report
    assert result.meta.started_at.isoformat() in report and result.meta.finished_at.isoformat() in report
    assert "Every time and rate is GPU time" in report and "Times and rates are GPU time: simulated x2, converted" in report
    assert "a chunk may carry several tokens" in report
    assert "## What the numbers mean" in report and "## Errors\n\nNone." in report
    assert "capped by **max-num-seqs**" in report
    paths = render_plots(result, tmp_path)
    assert [p.name for p in paths] == list(PLOTS)
    assert all(p.stat().st_size > 10_000 for p in paths)


def _usd(spot: float) -> TokenPrices:
    return TokenPrices(gpu_node_spot=spot, gpu_node_on_demand=3 * spot, cluster_spot=2 * spot,
                       cluster_on_demand=4 * spot, giq_convention=spot / 2)  # fmt: skip


def test_the_cheapest_point_within_the_slos_is_named():
    result = load_result(G6Result, FIXTURE)
    a, b, *_ = result.points
    cheap, dear = (a, b) if a.output_tokens_per_s > b.output_tokens_per_s else (b, a)
    priced = [Run("cheap", None, cheap.model_copy(update={"usd_per_million_output_tokens": _usd(0.05)})),
              Run("dear", None, dear.model_copy(update={"usd_per_million_output_tokens": _usd(0.50)}))]  # fmt: skip
    params = result.params.model_copy(update={"slo": Slo()})  # the points' latencies are GPU time already
    assert "none given" in cheapest(priced, params) and "The cheapest setting is **cheap**" in cheapest(priced, params)
    loose = params.model_copy(update={"slo_itl_ms": max(cheap.itl_ms.p99, dear.itl_ms.p99) + 1})
    assert "The cheapest setting that meets them in every run is **cheap**" in cheapest(priced, loose)
    # A TTFT limit between the two points' p99s leaves only the one with the lower TTFT.
    low, high = sorted([cheap, dear], key=lambda p: p.ttft_ms.p99)
    between = params.model_copy(update={"slo": Slo(ttft_ms=low.ttft_ms.p99 + 0.1)})
    assert high.ttft_ms.p99 > between.slo.ttft_ms
    winner = "cheap" if low is cheap else "dear"
    assert f"meets them in every run is **{winner}**" in cheapest(priced, between)
    none = params.model_copy(update={"slo": Slo(ttft_ms=0.001)})
    text = cheapest(priced, none)
    assert "No setting meets them" in text and "cheap" in text and "TTFT p99" in text


def test_the_cheapest_setting_is_priced_over_its_runs_not_by_its_luckiest():
    """A setting whose runs cost $0.10 and $0.30 per million tokens costs what its mean throughput does:
    2 / (1/0.10 + 1/0.30) = $0.15 (by hand), above a steady $0.12, though its luckiest run is the cheapest
    run of all; and a setting meets an SLO only when every run of it does."""
    result = load_result(G6Result, FIXTURE)
    fast, slow = sorted(result.points[:2], key=lambda p: p.ttft_ms.p99)
    runs = [Run("lucky", 0, fast.model_copy(update={"usd_per_million_output_tokens": _usd(0.10)})),
            Run("lucky", 1, fast.model_copy(update={"usd_per_million_output_tokens": _usd(0.30)})),
            Run("steady", 0, fast.model_copy(update={"usd_per_million_output_tokens": _usd(0.12)})),
            Run("steady", 1, fast.model_copy(update={"usd_per_million_output_tokens": _usd(0.12)}))]  # fmt: skip
    params = result.params.model_copy(update={"slo": Slo()})
    assert "The cheapest setting is **steady**: **$0.120 per million output tokens**" in cheapest(runs, params)
    assert "lucky run 1" in [r.label for r in runs]
    alone = cheapest(runs[:2], params)
    assert "**lucky**: **$0.150 per million output tokens**" in alone and "over 2 runs" in alone
    # steady's second run misses a TTFT limit its first meets: steady fails, lucky (both runs fast) passes.
    missed = runs[:3] + [Run("steady", 1, slow.model_copy(update={"usd_per_million_output_tokens": _usd(0.12)}))]
    limit = params.model_copy(update={"slo": Slo(ttft_ms=fast.ttft_ms.p99 + 0.1)})
    assert slow.ttft_ms.p99 > limit.slo.ttft_ms
    assert "meets them in every run is **lucky**" in cheapest(missed, limit)


def test_report_lists_errors_and_client_bound_points():
    result = load_result(G6Result, FIXTURE)
    points = [p.model_copy(update={"client_bound": i == 0}) for i, p in enumerate(result.points)]
    broken = result.model_copy(
        update={"meta": result.meta.model_copy(update={"errors": ["c=8: 3 failed requests {'http_500': 3}"]}),
                "points": points}
    )  # fmt: skip
    report = render_report(broken)
    assert "- c=8: 3 failed requests {'http_500': 3}" in report
    assert "**client-bound**" in report and "1 point(s) were client-bound" in report
    assert report.count("**below load**") == 1  # the note that explains the mark, no point
    # A c=8 point whose counted requests held 3 in flight at max-num-seqs 16 ran at under 90% of 8.
    short = [p.model_copy(update={"in_flight_mean": 3.0}) if (p.max_num_seqs, p.concurrency) == (16, 8) else p
             for p in result.points]  # fmt: skip
    assert render_report(result.model_copy(update={"points": short})).count("3.0 **below load**") == 1


@pytest.fixture(scope="module")
def sim_url():
    with SimTarget(gpu="l4", speedup=4.0, seed=1, base=ServerSettings(model=MODEL)).serving(ServerSettings(max_num_seqs=16)) as server:
        yield server.base_url


def _stack_outputs(tmp_path: Path) -> dict:
    return program_outputs(
        "g6",
        endpoints={"vllm": {"namespace": "serving", "service": "vllm", "port": 8000}},
        prometheus={"namespace": "monitoring", "service": "prometheus", "port": 9090},
        benchmark={"model": MODEL, "max_num_seqs": 16, "gpu": "l4", "sweep": {"max_num_seqs": [4, 8], "concurrency": [2]}},
    )


def test_stack_sweep_changes_max_num_seqs_through_pulumi_and_restores_it(tmp_path, monkeypatch, sim_url):
    state = fake_pulumi(tmp_path, monkeypatch, _stack_outputs(tmp_path), config={CONFIG_PATH: "16"})
    # --target: the client reaches vLLM through a URL of its own (here the simulator).
    rc = main(["--stack", "g6", "--target", sim_url, "--requests", "4", "--health-timeout", "10",
               "--out", str(tmp_path / "out"), *SMALL])  # fmt: skip
    assert rc == 0
    calls = [c for c in pulumi_calls(state) if c[0] != "stack"]
    assert calls == [
        ["config", "get", "--path", CONFIG_PATH, "-s", "g6"],
        ["config", "set", "--path", CONFIG_PATH, "4", "-s", "g6"],
        ["up", "--yes", "--skip-preview", "-s", "g6"],
        ["config", "set", "--path", CONFIG_PATH, "8", "-s", "g6"],
        ["up", "--yes", "--skip-preview", "-s", "g6"],
        ["config", "set", "--path", CONFIG_PATH, "16", "-s", "g6"],
        ["up", "--yes", "--skip-preview", "-s", "g6"],
    ]
    assert json.loads(state.read_text())["config"] == {CONFIG_PATH: "16"}
    result = load_result(G6Result, _only_folder(tmp_path / "out"))
    assert result.params.target_kind == "stack" and result.params.stack == "g6"
    assert [(p.max_num_seqs, p.concurrency) for p in result.points] == [(4, 2), (8, 2)]


def test_stack_sweep_restores_the_original_value_when_an_up_fails(tmp_path, monkeypatch, sim_url, capsys):
    state = fake_pulumi(tmp_path, monkeypatch, _stack_outputs(tmp_path), config={CONFIG_PATH: "16"}, fail_up_if={CONFIG_PATH: "8"})
    rc = main(["--stack", "g6", "--target", sim_url, "--requests", "2", "--out", str(tmp_path / "out"), *SMALL])
    assert rc == 2
    assert "update failed" in capsys.readouterr().err
    calls = [c for c in pulumi_calls(state) if c[0] != "stack"]
    assert calls[-2:] == [["config", "set", "--path", CONFIG_PATH, "16", "-s", "g6"], ["up", "--yes", "--skip-preview", "-s", "g6"]]
    assert json.loads(state.read_text())["config"] == {CONFIG_PATH: "16"}


def test_saved_outputs_give_model_and_server_parameters(tmp_path, sim_url):
    outputs = _stack_outputs(tmp_path)
    outputs["benchmark"]["sweep"] = {}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    rc = main(["--outputs", str(path), "--target", sim_url, "--concurrency", "2", "--requests", "4",
               "--out", str(tmp_path / "out"), *SMALL])  # fmt: skip
    assert rc == 0
    result = load_result(G6Result, _only_folder(tmp_path / "out"))
    assert (result.params.target_kind, result.params.model, result.params.gpu) == ("url", MODEL, "l4")
    # The server's current max-num-seqs from the outputs labels the point (it cannot change here).
    assert [p.max_num_seqs for p in result.points] == [16]
    assert [s.max_num_seqs for s in result.sizing] == [16]


def _on_the_local_cluster(tmp_path: Path, monkeypatch, url: str, *extra: str) -> Path:
    """A g6 run from this machine (--outputs, --target) against a cluster that states what it simulates, as
    `make lab-local LAB=g6` runs it; its results folder."""
    from benchmarks.cluster import KubeCluster
    from facts.simulation import STATEMENT_NAME, STATEMENT_NAMESPACE
    from labs_fakes import FakeCluster

    kwok_node = {"metadata": {"name": "system-0", "annotations": {"kwok.x-k8s.io/node": "fake"},
                              "labels": {"cloud.google.com/gke-nodepool": "system"}}, "status": {}}  # fmt: skip
    statement = {"metadata": {"name": STATEMENT_NAME, "namespace": STATEMENT_NAMESPACE},
                 "data": {"real.node": "gpu-0: kubelet and kube-proxy v1.35.4", "simulated.gpu": "no device"}}  # fmt: skip
    answers = {"Node": [kwok_node], "ConfigMap": [statement]}
    cluster = FakeCluster(lambda api_version, kind, namespace, selector: answers.get(kind, []))
    monkeypatch.setattr(KubeCluster, "from_kubeconfig", staticmethod(lambda *a, **k: cluster))
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "outputs.json"
    outputs = program_outputs("g6")  # what the stack file exports: the stand-in serves its settings
    outputs["benchmark"] = {**outputs["benchmark"], "model": MODEL, "max_num_seqs": 16}
    path.write_text(json.dumps({**outputs, "kubeconfig": "a kubeconfig"}))
    rc = main(["--outputs", str(path), "--target", url, "--concurrency", "2", "--requests", "4",
               "--out", str(tmp_path / "out"), *SMALL, *extra])  # fmt: skip
    assert rc == 0
    return _only_folder(tmp_path / "out")


def test_load_from_this_machine_still_reports_what_the_stack_s_cluster_ran_and_simulated(tmp_path, monkeypatch, sim_url):
    """`make lab-local LAB=g6` sends the load from the host (--target) to the stack's Service: what ran and
    what the local cluster simulated are read from the stack's cluster all the same, and said under the
    title, before any figure (the first such run's report had neither)."""
    folder = _on_the_local_cluster(tmp_path, monkeypatch, sim_url)
    result = load_result(G6Result, folder)
    assert result.meta.evidence.gke_version == "v1.35.7-gke.1219000"  # the fake cluster's, as its API answered
    assert result.meta.simulation is not None
    assert result.meta.simulation.real == ["gpu-0: kubelet and kube-proxy v1.35.4"]
    assert result.meta.simulation.simulated[0] == "no device" and "system-0" in result.meta.simulation.simulated[1]
    report = (folder / "report.md").read_text()
    assert report.index("## What was real and what was simulated") < report.index("## The answer")


@pytest.mark.realtime
def test_a_run_on_the_local_cluster_s_stand_in_is_held_to_the_oracle_and_can_disagree(tmp_path, monkeypatch, capsys):
    """Its vLLM was the simulator's stand-in (no image is pulled there): the agreement check replays the same
    plans as the --sim run of the stack's model and settings. A stand-in in real time agrees; one running
    4x fast (its figures not GPU time) disagrees."""
    from benchmarks.g6 import agreement

    folders = {}
    for speedup in (1.0, 4.0):
        base = ServerSettings(model=MODEL)
        with SimTarget(gpu="l4", speedup=speedup, seed=1, base=base).serving(ServerSettings(max_num_seqs=16)) as server:
            folders[speedup] = _on_the_local_cluster(tmp_path / str(speedup), monkeypatch, server.base_url)
    assert agreement.main([str(folders[1.0])]) == 0, capsys.readouterr()
    assert agreement.main([str(folders[4.0])]) == 1
    assert "**no**" in capsys.readouterr().out


def test_an_unset_value_is_removed_again_after_ctrl_c(tmp_path, monkeypatch, sim_url):
    state = fake_pulumi(tmp_path, monkeypatch, _stack_outputs(tmp_path))
    target = StackTarget(PulumiStack("g6"), http_server(sim_url), Demand(MODEL, 64, "flags"), health_timeout_s=10)
    with pytest.raises(KeyboardInterrupt), target.session(), target.serving(ServerSettings(max_num_seqs=8)):
        raise KeyboardInterrupt
    calls = pulumi_calls(state)
    assert calls[-2:] == [["config", "rm", "--path", CONFIG_PATH, "-s", "g6"], ["up", "--yes", "--skip-preview", "-s", "g6"]]
    assert json.loads(state.read_text())["config"] == {}


def test_an_up_the_timer_killed_names_pulumi_cancel_and_the_printed_command_finishes_the_restore(tmp_path, monkeypatch):
    """A SIGKILLed `pulumi up` leaves the file backend's lock, so the restore's own `up` fails on it; the
    command the error prints unlocks the stack first, and run as printed it puts the config back."""
    import shlex
    import subprocess

    from benchmarks.g6.targets import RestoreError

    state = fake_pulumi(tmp_path, monkeypatch, _stack_outputs(tmp_path), config={CONFIG_PATH: "16"}, hold_ups=(1,))
    stack = PulumiStack("g6", up_timeout_s=1.0)
    target = StackTarget(stack, http_server("http://127.0.0.1:9"), Demand(MODEL, 64, "flags"), health_timeout_s=1)
    with pytest.raises(RestoreError) as raised, target.session(), target.serving(ServerSettings(max_num_seqs=8)):
        pass
    message = str(raised.value)
    assert stack.lock_left and "currently locked by 1 lock(s)" in message
    command = message.rsplit("finish it with: ", 1)[1]
    assert command == ("pulumi cancel --yes -s g6 && pulumi refresh -s g6 && "
                       f"pulumi config set --path {CONFIG_PATH} 16 -s g6 && pulumi up -s g6 --yes")
    for step in command.split(" && "):
        subprocess.run(shlex.split(step), check=True, capture_output=True)
    assert json.loads(state.read_text())["config"] == {CONFIG_PATH: "16"}
    assert pulumi_calls(state)[-1] == ["up", "-s", "g6", "--yes"] and not Path(f"{state}.lock").exists()


def test_a_stack_point_without_an_up_still_checks_the_server_is_reachable(tmp_path, monkeypatch):
    """The first point often needs no `pulumi up` (the stack already runs that value): an unreachable
    server (the in-cluster URL from a laptop) must stop the sweep, not become a point of connect errors."""
    from benchmarks.harness import HarnessError

    fake_pulumi(tmp_path, monkeypatch, _stack_outputs(tmp_path), config={CONFIG_PATH: "16"})
    target = StackTarget(PulumiStack("g6"), http_server("http://127.0.0.1:9"), Demand(MODEL, 64, "flags"), health_timeout_s=1)
    with pytest.raises(HarnessError, match="cannot reach http://127.0.0.1:9"), target.session(), target.serving(ServerSettings(max_num_seqs=16)):
        pass


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sim", "--stack", "g6", "--model", MODEL], "--sim starts its own server"),
        (["--target", "http://127.0.0.1:9", "--model", MODEL, "--max-num-seqs", "8,32"], "needs --sim or --stack"),
        (["--model", MODEL], "say what to measure"),
        (["--target", "http://127.0.0.1:9", "--model", MODEL, "--speedup", "4"], "--speedup applies to --sim only"),
        (["--target", "http://127.0.0.1:9", "--model", MODEL, "--rate", "2", "--concurrency", "4"], "not both"),
        (["--target", "http://127.0.0.1:9", "--model", MODEL], "cannot reach http://127.0.0.1:9"),
        (["--sim", "--model", "acme/unknown-7b"], "the simulator did not start"),
    ],
)
def test_conflicting_options_exit_2_with_a_reason(argv, message, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def _server(**kw) -> ServerMetrics:
    base = dict(source="scrape", running=GaugeStats(mean=4, max=4), waiting=GaugeStats(mean=0, max=0),
                kv_cache_usage=GaugeStats(mean=0.2, max=0.3), preemptions=0.0)  # fmt: skip
    return ServerMetrics(**{**base, **kw})


def test_analysis_labels_what_bounds_a_point():
    sizing = size(get_model(MODEL), get_gpu("l4"), max_num_seqs=8)
    kw = dict(output_tokens_per_s=500.0, mean_decoding=4.0, concurrency=4, max_num_seqs=8, sizing=sizing, context_len=288)
    assert analyse(server=_server(kv_cache_usage=GaugeStats(mean=0.9, max=0.99)), **kw).bound == "kv-cache"
    assert analyse(server=_server(preemptions=3.0), **kw).bound == "kv-cache"
    full = _server(running=GaugeStats(mean=8, max=8), waiting=GaugeStats(mean=2, max=5))
    assert analyse(server=full, **kw).bound == "max-num-seqs"
    # c = max-num-seqs = 8: one scrape of 20 caught a request between its send and its admission.
    turnover = _server(running=GaugeStats(mean=7.6, max=8), waiting=GaugeStats(mean=1 / 20, max=1))
    at_the_limit = {**kw, "concurrency": 8, "mean_decoding": 7.6}
    assert analyse(server=turnover, **at_the_limit).bound != "max-num-seqs"
    offered = analyse(server=_server(), **{**kw, "concurrency": 16, "mean_decoding": 7.6})
    assert offered.bound == "max-num-seqs" and "16 requests offered" in offered.bound_reason
    small = analyse(server=_server(), **kw)
    rf = roofline(sizing, [4], 288)[0]
    assert small.bound == rf.bound == "memory-bandwidth"
    assert small.roofline_share == pytest.approx(500.0 / rf.tokens_per_s_total)
    assert analyse(server=None, **{**kw, "sizing": None}).bound == "unknown"



def test_reads_what_the_g6_stack_file_really_exports(tmp_path):
    """The contract: the outputs of Pulumi.g6.yaml (run under mocks) drive a sweep without any flag."""
    from benchmarks.g6.cli import parse
    from benchmarks.g6.price import cost_section, stack_gpu_price
    from benchmarks.g6.resolve import read_stack_outputs, resolve_params
    from stacks.mockrun import run_stack

    outputs = run_stack("g6").outputs
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    inv = parse(["--outputs", str(path)])
    params = resolve_params(inv, read_stack_outputs(inv))
    assert params.target == "http://vllm.llm.svc.cluster.local:8000", "the client adds /v1/... itself"
    assert params.prometheus == "http://kps-prometheus.monitoring.svc.cluster.local:9090"
    assert params.model == outputs["benchmark"]["model"] and params.gpu == "l4"
    # Saved outputs describe the server that runs: its max_num_seqs, not the stack's sweep grid.
    assert params.max_num_seqs == [outputs["benchmark"]["max_num_seqs"]]
    assert params.concurrency == outputs["benchmark"]["sweep"]["concurrency"]
    assert params.max_model_len == outputs["benchmark"]["max_model_len"]
    cost = cost_section(outputs, params, 60.0, stack_gpu_price(outputs, params))
    assert "GPU pool at 1 node(s)" in cost
    # One minute measured, plus the 15 min scale-up assumed and the autoscaler's 10 min idle tail.
    assert "1.0 min of measurements on the GPU" in cost and "the GPU node up about 26 min" in cost


def test_the_answer_table_flags_a_p99_resting_on_fewer_than_100_requests():
    # The sweep's c=1 and c=8 points send 32 and 64 requests a run: their TTFT p99 is a run's maximum or next to it.
    shipped = load_result(G6Result, Path(__file__).resolve().parents[1] / "examples" / "g6-sim")
    answer = render_report(shipped).split("## The answer", 1)[1].split("\n## ", 1)[0]
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in answer.splitlines() if line.startswith("| 32 |")}
    counts = {p.concurrency: p.ttft_ms.n for p in shipped.points if p.max_num_seqs == 32}
    assert counts[1] < 100 and counts[8] < 100 and counts[32] >= 100
    ttft_p99 = {load: line.split("|")[7] for (_, load), line in rows.items()}
    assert THIN in ttft_p99["c=1"] and THIN in ttft_p99["c=8"] and THIN not in ttft_p99["c=32"]
    assert f"{THIN} a run of the point has fewer than 100 samples behind its p99" in answer
