"""Lab g6's experiments: the KV cache as the limit (kv) and quantized variants (quant), end to end
against the simulator, through a stack (a fake `pulumi` on PATH) and from stored results."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.g6 import main
from benchmarks.g6.experiments.kv import KvResult, next_concurrency
from benchmarks.g6.experiments.kv_report import PLOTS as KV_PLOTS
from benchmarks.g6.experiments.kv_report import render_kv_report
from benchmarks.g6.experiments.prefix import PrefixResult
from benchmarks.g6.experiments.prefix_report import render_prefix_report
from benchmarks.g6.experiments.prompts import select
from benchmarks.g6.experiments.quant import QuantResult
from benchmarks.g6.experiments.quant_report import PLOTS as QUANT_PLOTS
from benchmarks.g6.experiments.quant_report import render_quant_report
from benchmarks.g6.experiments.saturation import SaturationResult
from benchmarks.g6.experiments.saturation_report import render_saturation_report
from benchmarks.g6.report import render_report
from benchmarks.g6.result import G6Result
from benchmarks.g6.targets import Demand, ServerSettings, SimTarget, StackTarget
from benchmarks.harness import PulumiStack, load_result
from benchmarks.harness.server import Server
from benchmarks.metrics import cache_config
from benchmarks.sim.costs import ScheduledWork, step_cost
from fake_pulumi import fake_pulumi, pulumi_calls
from stack_outputs import program_outputs

QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_15 = "Qwen/Qwen2.5-1.5B-Instruct"
FAST = ["--speedup", "20", "--scrape-interval", "0.1", "--quiet", "--repeats", "1"]
PNG = b"\x89PNG\r\n\x1a\n"


def _only_folder(out: Path) -> Path:
    (folder,) = out.iterdir()
    return folder


@pytest.fixture(scope="module")
def kv_run(tmp_path_factory) -> tuple[int, Path]:
    """A small KV pool: Qwen2.5-0.5B at utilisation 0.07 with max-num-seqs 64 keeps 19,264 tokens (1,204
    blocks): 64 sequences of 256 tokens (max-num-seqs binds), fewer of 1,024 (the cache binds: their prompts
    alone, 512 tokens on average, fill it at 37)."""
    out = tmp_path_factory.mktemp("kv")
    rc = main(["--sim", "--experiment", "kv", "--model", QWEN_05, "--gpu-memory-utilization", "0.07",
               "--max-num-seqs", "64", "--max-model-len", "1024", "--context-len", "256,1024", "--out", str(out),
               *FAST])  # fmt: skip
    return rc, _only_folder(out)


@pytest.mark.realtime
def test_kv_largest_batch_at_steady_state_is_past_the_prediction_and_below_what_the_prompts_fill(kv_run):
    rc, folder = kv_run
    assert rc == 0 and folder.name.startswith("g6-kv-")
    result = load_result(KvResult, folder)
    assert result.cache is not None and result.cache.block_size == 16
    assert result.cache.num_gpu_blocks == result.sizing.num_gpu_blocks == 1204
    capped, bound = result.lengths
    # A closed loop of 64 (max-num-seqs) ran without preemption at steady state.
    assert (capped.context_len, capped.binding, capped.measured_max_batch) == (256, "max-num-seqs", 64)
    assert all(p.concurrency <= 64 for p in result.probes)
    # 1,024 tokens hold 1,023 in KV at the cap: 64 blocks of 16, so 1,204 // 64 = 18 sequences run to their cap.
    assert (bound.blocks_per_sequence, bound.predicted_max_batch, bound.binding) == (64, 18, "kv-cache")
    # Requests stop at EOS (the simulator: uniform up to the cap of 512), so more fit than if every one ran to
    # its cap, but never more than the prompts alone fill: 19,264 tokens over 512 each.
    assert 18 < bound.measured_max_batch < 19264 // 512
    assert bound.preemption_from is not None and bound.measured_max_batch < bound.preemption_from
    probes = [p for p in result.probes if p.context_len == 1024]
    assert all(p.preemptions == 0 for p in probes if p.concurrency <= 18)
    # Traffic like production: lognormal prompts around 512 and EOS under the cap, counted by the server.
    assert all(p.point.eos and p.point.input_len.kind == "lognormal" for p in probes)
    assert all(300 < p.point.realised.input_tokens.mean < 700 and p.point.realised.output_tokens.mean < 400 for p in probes)
    # What each sequence held at the KV peak: its prompt and the output so far, less than the cap's 1,024.
    assert 400 < bound.tokens_per_sequence_at_peak.mean < 1024
    # The baselines: max-model-len reserved per sequence allows 19,264 // 1,024 = 18 at every length; the
    # request's own prompt + max_tokens (L on average), 19,264 // L; each ran as a closed loop of that many.
    for x in result.lengths:
        ml, own = x.baselines
        assert (ml.reserves, ml.max_batch, own.reserves, own.max_batch) == (
            "max-model-len", 18, "prompt + max_tokens", 19264 // x.context_len)
        for b in x.baselines:
            runs = [p for p in result.probes if p.context_len == x.context_len and p.role == b.reserves]
            # At 256 tokens 75 fit the pool's prompt + max_tokens reservations: the loop runs the 64 max-num-seqs allows.
            assert runs and all(p.concurrency == b.concurrency == min(b.max_batch, 64) for p in runs)
            # The gain is measured, run k against run k: paging's steady tok/s over the baseline's.
            paged = {p.run: p.output_tokens_per_s for p in result.probes
                     if p.context_len == x.context_len and p.concurrency == x.measured_max_batch and p.role in ("search", "paged")}
            assert b.gain.values == pytest.approx([paged[p.run] / p.output_tokens_per_s for p in runs])  # fmt: skip
    prices = [p.point.usd_per_million_output_tokens for p in result.probes]
    assert all(tp.cluster_on_demand > tp.gpu_node_on_demand > tp.gpu_node_spot > tp.giq_convention > 0 for tp in prices)


@pytest.mark.realtime
def test_kv_report_and_plots_answer_in_numbers(kv_run):
    _, folder = kv_run
    result = load_result(KvResult, folder)
    report = (folder / "report.md").read_text()
    assert report == render_kv_report(result)
    capped, bound = result.lengths
    assert f"| 1024 | 64 | 18 | 18 | {bound.measured_max_batch} |" in report
    assert f"- 256 tokens: max-num-seqs bound first: 64 ran without a preemption" in report
    assert "## PagedAttention against the reservations a server without paging must make" in report
    # Simulated figures are not vLLM's.
    assert "vLLM's blocks" not in report and "against vLLM's" not in report
    assert "the simulated server's blocks" in report and "the simulator stops each at a length uniform" in report
    assert f"The weights take {result.sizing.weight_bytes / 2**30:.2f} GiB" in report
    assert "The cheapest setting is" in report and "## Cost" in report
    for name in KV_PLOTS:
        assert (folder / name).read_bytes()[:8] == PNG


def test_next_concurrency_searches_from_the_prediction_to_the_tolerance():
    assert next_concurrency(None, None, 40, cap=100, tolerance=0.05) == 40
    assert next_concurrency(40, None, 40, cap=100, tolerance=0.05) == 50  # up 25% after a fit
    assert next_concurrency(None, 40, 40, cap=100, tolerance=0.05) == 32  # down 20% after a preemption
    assert next_concurrency(40, 50, 40, cap=100, tolerance=0.05) == 45  # then halve the gap
    assert next_concurrency(40, 42, 40, cap=100, tolerance=0.05) is None  # within max(1, 5% of 40) = 2
    assert next_concurrency(100, None, 120, cap=100, tolerance=0.05) is None  # the cap stops it
    assert next_concurrency(None, None, 120, cap=100, tolerance=0.05) == 100


@pytest.fixture(scope="module")
def quant_run(tmp_path_factory) -> tuple[int, Path]:
    """bf16 cannot start at utilisation 0.2: 4.41 GiB minus 2.88 GiB of weights and 1.41 GiB of activations
    leaves KV for fewer tokens than one 4,096-token sequence. AWQ's 1.50 GiB of weights leave room."""
    out = tmp_path_factory.mktemp("quant")
    rc = main(["--sim", "--experiment", "quant", "--variants", "bf16,fp8,awq", "--gpu-memory-utilization", "0.2",
               "--concurrency", "1,8", "--requests", "4", "--input-len", "64", "--output-len", "32",
               "--out", str(out), *FAST])  # fmt: skip
    return rc, _only_folder(out)


def test_quant_reports_a_variant_that_cannot_start_and_the_rest_stands(quant_run):
    rc, folder = quant_run
    assert rc == 1 and folder.name.startswith("g6-quant-")
    result = load_result(QuantResult, folder)
    by = {v.variant: v for v in result.variants}
    assert "vLLM would refuse to start: max_model_len 4096 is larger than" in by["bf16"].error
    assert not by["bf16"].points
    for name in ("fp8", "awq"):
        v = by[name]
        assert v.error is None and [p.concurrency for p in v.points] == [1, 8]
        assert all(p.completed == 4 for p in v.points)
        assert v.cache is not None and v.cache.num_gpu_blocks == v.sizing.num_gpu_blocks
        assert v.quality is None and "the baseline gave no reference continuations" in v.quality_note
        assert v.kernel == "not known (simulator)"
    assert by["awq"].model == "Qwen/Qwen2.5-1.5B-Instruct-AWQ" and by["awq"].quantization is None
    assert by["fp8"].model == QWEN_15 and by["fp8"].quantization == "fp8"
    # 4-bit weights stream fewer bytes per step than 8-bit ones: one stream decodes faster. Asked of the
    # simulator's step for each variant's sizing, not of these points' tokens/s: at x20 a step is shorter
    # than the event loop's timer grid, so 4 requests' wall-clock rate on a loaded machine is noise.
    assert by["awq"].sizing.weight_bytes < by["fp8"].sizing.weight_bytes
    one = [ScheduledWork(new_tokens=1, cached_tokens=64 + 16)]
    assert step_cost(by["awq"].sizing, one).duration_s < step_cost(by["fp8"].sizing, one).duration_s
    assert result.reference is None


def test_quant_report_says_which_failed_and_why(quant_run):
    _, folder = quant_run
    result = load_result(QuantResult, folder)
    report = (folder / "report.md").read_text()
    assert report == render_quant_report(result)
    assert "| bf16 | `Qwen/Qwen2.5-1.5B-Instruct` | **failed**: not started: the sizing says vLLM would refuse" in report
    assert "- **bf16** did not run: not started: the sizing says vLLM would refuse to start" in report
    assert "| fp8 | `Qwen/Qwen2.5-1.5B-Instruct` `--quantization fp8` | not known (simulator) |" in report
    assert "not measured (simulator)" in report
    assert (folder / QUANT_PLOTS[0]).read_bytes()[:8] == PNG


def test_quant_against_the_simulator_runs_the_quality_pipeline_and_reports_no_figure(tmp_path):
    """The simulator's toy model lists log-probabilities, so sampling, scoring and the bootstrap all run;
    every simulated variant is the same toy model, and the report says so rather than print its KL."""
    rc = main(["--sim", "--experiment", "quant", "--variants", "bf16,awq", "--concurrency", "1", "--requests", "2",
               "--input-len", "16", "--output-len", "8", "--quality-prompts", "8", "--quality-tokens", "16",
               "--out", str(tmp_path), *FAST])  # fmt: skip
    result = load_result(QuantResult, _only_folder(tmp_path))
    assert rc == 0, result.meta.errors
    base, awq = result.variants
    assert [c.prompt for c in result.reference] == select(8, seed=0)
    assert all(1 <= c.tokens <= 16 for c in result.reference)
    for v in (base, awq):
        # Not measured is stored as null, never as a KL of 0 with an interval of [0, 0].
        assert v.quality_note == "not measured (simulator)" and v.kernel == "not known (simulator)"
        assert v.quality is None
    saved = json.loads((_only_folder(tmp_path) / "result.json").read_text())
    assert [v["quality"] for v in saved["variants"]] == [None, None]
    report = render_quant_report(result)
    assert "| not measured (simulator) | — | — | — |" in report and "KL 0" not in report
    assert "ran end to end against the simulator's toy model" in report


# -- the variant switch through a stack --------------------------------------------------------

MODEL_PATH, QUANT_PATH = "vllm.model", "vllm.quantization"
UP = ["up", "--yes", "--skip-preview", "-s", "g6"]


def _outputs() -> dict:
    return program_outputs(
        "g6",
        endpoints={"vllm": {"namespace": "llm", "service": "vllm", "port": 8000}},
        benchmark={"model": QWEN_15, "max_num_seqs": 16, "gpu": "l4", "max_model_len": 4096},
    )


@pytest.fixture(scope="module")
def sim_15():
    target = SimTarget(gpu="l4", speedup=20.0, seed=1, base=ServerSettings(model=QWEN_15, max_model_len=4096))
    with target.serving(ServerSettings(max_num_seqs=16)) as server:
        yield server


def _quant_on_stack(tmp_path: Path, sim: Server, variants: str) -> int:
    return main(["--stack", "g6", "--target", sim.base_url, "--experiment", "quant", "--variants", variants,
                 "--concurrency", "2", "--requests", "2", "--input-len", "32", "--output-len", "16",
                 "--health-timeout", "10", "--quality-prompts", "2", "--out", str(tmp_path / "out"), "--quiet"])  # fmt: skip


def test_variants_switch_model_and_quantization_through_pulumi_and_restore_them(tmp_path, monkeypatch, sim_15):
    state = fake_pulumi(tmp_path, monkeypatch, _outputs(), config={MODEL_PATH: QWEN_15})
    assert _quant_on_stack(tmp_path, sim_15, "bf16,fp8") == 0
    calls = [c for c in pulumi_calls(state) if c[0] != "stack"]
    assert calls == [
        ["config", "get", "--path", MODEL_PATH, "-s", "g6"],
        ["config", "get", "--path", QUANT_PATH, "-s", "g6"],
        ["config", "set", "--path", QUANT_PATH, "fp8", "-s", "g6"],
        UP,
        ["config", "rm", "--path", QUANT_PATH, "-s", "g6"],
        UP,
    ]
    assert json.loads(state.read_text())["config"] == {MODEL_PATH: QWEN_15}
    result = load_result(QuantResult, _only_folder(tmp_path / "out"))
    # A stack's quality is measured, not labelled simulated: the server behind this URL is the simulator,
    # whose toy model is the same for both variants, and this process cannot read its log.
    baseline, fp8 = result.variants
    assert baseline.quality_note == "the baseline against itself: the noise floor" and baseline.quality.floor is None
    assert fp8.quality.positions == baseline.quality.positions > 0 and fp8.quality.kl.value == 0.0
    assert fp8.quality.floor is not None and not fp8.quality.floor.kl_resolved
    assert fp8.kernel == "not known (this process cannot read the server's log)"
    # The report prints the figures (a stack's, not labelled simulated) and says fp8 is not resolved.
    report = render_quant_report(result)
    assert "| 0 [0, 0] | 100.0% [100.0%, 100.0%] | +0 [+0, +0] | the floor |" in report
    assert "KL below the floor: +0 [+0, +0] nats/token above it; top-1 below the floor" in report


def test_prefix_arms_switch_prefix_caching_through_pulumi_and_restore_it(tmp_path, monkeypatch, sim_15):
    """On, then off, each with `pulumi up`, then the stack's own (unset: vLLM's default) put back."""
    state = fake_pulumi(tmp_path, monkeypatch, _outputs(), config={MODEL_PATH: QWEN_15})
    rc = main(["--stack", "g6", "--target", sim_15.base_url, "--experiment", "prefix", "--prefix-len", "64",
               "--rate", "8", "--requests", "2", "--input-len", "16", "--output-len", "4", "--health-timeout", "10",
               "--out", str(tmp_path / "out"), "--quiet", "--repeats", "1"])  # fmt: skip
    assert rc == 0
    path = "vllm.enable_prefix_caching"
    assert [c for c in pulumi_calls(state) if c[0] != "stack"] == [
        ["config", "get", "--path", path, "-s", "g6"],
        ["config", "set", "--path", path, "true", "-s", "g6"],  # a YAML boolean under --path
        UP,
        ["config", "set", "--path", path, "false", "-s", "g6"],
        UP,
        ["config", "rm", "--path", path, "-s", "g6"],
        UP,
    ]
    assert json.loads(state.read_text())["config"] == {MODEL_PATH: QWEN_15}


def test_a_variant_whose_up_fails_is_reported_and_the_stack_restored(tmp_path, monkeypatch, sim_15):
    state = fake_pulumi(tmp_path, monkeypatch, _outputs(), config={MODEL_PATH: QWEN_15},
                        fail_up_if={MODEL_PATH: "Qwen/Qwen2.5-1.5B-Instruct-AWQ"})  # fmt: skip
    assert _quant_on_stack(tmp_path, sim_15, "bf16,awq,fp8") == 1
    assert json.loads(state.read_text())["config"] == {MODEL_PATH: QWEN_15}
    calls = [c for c in pulumi_calls(state) if c[0] != "stack"]
    assert calls == [
        ["config", "get", "--path", MODEL_PATH, "-s", "g6"],
        ["config", "get", "--path", QUANT_PATH, "-s", "g6"],
        ["config", "set", "--path", MODEL_PATH, "Qwen/Qwen2.5-1.5B-Instruct-AWQ", "-s", "g6"],
        UP,  # fails
        ["config", "set", "--path", MODEL_PATH, QWEN_15, "-s", "g6"],
        ["config", "set", "--path", QUANT_PATH, "fp8", "-s", "g6"],
        UP,
        ["config", "rm", "--path", QUANT_PATH, "-s", "g6"],
        UP,
    ]
    result = load_result(QuantResult, _only_folder(tmp_path / "out"))
    by = {v.variant: v for v in result.variants}
    assert "did not run" in by["awq"].error and "update failed" in by["awq"].error
    assert by["bf16"].error is None and by["fp8"].error is None and by["fp8"].points


def test_ctrl_c_during_a_variants_up_puts_model_and_quantization_back(tmp_path, monkeypatch, sim_15):
    state = fake_pulumi(tmp_path, monkeypatch, _outputs(), config={MODEL_PATH: QWEN_15, QUANT_PATH: "fp8"})
    lines: list[str] = []

    def log(line: str) -> None:  # Ctrl-C as the variant's `pulumi up` prints its first line
        lines.append(line)
        if line.startswith("  pulumi:") and len([x for x in lines if x.startswith("  pulumi:")]) == 1:
            raise KeyboardInterrupt

    target = StackTarget(PulumiStack("g6"), sim_15, Demand(QWEN_15, 64, "flags"), health_timeout_s=10, log=log)
    awq = ServerSettings(model="Qwen/Qwen2.5-1.5B-Instruct-AWQ", quantization=None)
    with pytest.raises(KeyboardInterrupt), target.session(), target.serving(awq):
        pass
    assert json.loads(state.read_text())["config"] == {MODEL_PATH: QWEN_15, QUANT_PATH: "fp8"}
    # (The interrupted up may have ended before its cancel reached it: a "signal" entry or none.)
    assert [c for c in pulumi_calls(state) if c[:2] != ["config", "get"] and c[0] != "signal"] == [
        ["config", "set", "--path", MODEL_PATH, "Qwen/Qwen2.5-1.5B-Instruct-AWQ", "-s", "g6"],
        ["config", "rm", "--path", QUANT_PATH, "-s", "g6"],
        UP,  # interrupted as it printed its first line
        ["config", "set", "--path", MODEL_PATH, QWEN_15, "-s", "g6"],
        ["config", "set", "--path", QUANT_PATH, "fp8", "-s", "g6"],
        UP,
    ]
    assert any("restoring stack g6's vllm.model Qwen/Qwen2.5-1.5B-Instruct, vllm.quantization fp8" in x for x in lines)


# -- pieces ------------------------------------------------------------------------------------


def test_cache_config_is_read_from_vllms_info_gauge():
    # The label set of a real vLLM /metrics line, as AIBrix's runtime docs quote it.
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",'
        'enable_prefix_caching="False",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="9362",'
        'num_gpu_blocks="81767",num_gpu_blocks_override="None",sliding_window="None",swap_space_bytes="4294967296"} 1.0\n'
    )
    config = cache_config(text)
    assert (config.block_size, config.num_gpu_blocks, config.gpu_memory_utilization) == (16, 81767, 0.9)
    assert config.kv_cache_tokens == 16 * 81767
    assert cache_config("vllm:num_requests_running 0\n") is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sim", "--experiment", "kv", "--rate", "2"], "--experiment kv runs closed-loop points"),
        (["--sim", "--experiment", "quant", "--max-num-seqs", "8,16"], "give at most one --max-num-seqs"),
        (["--sim", "--experiment", "kv", "--context-len", "8192"], "exceed max-model-len 4096"),
        (["--target", "http://127.0.0.1:9", "--model", QWEN_15, "--experiment", "quant", "--variants", "bf16,awq"],
         "measures the one variant that server runs"),
        # Flags only one experiment reads, given to another: refused, never ignored without a word.
        (["--sim", "--prefix-len", "512"], "--prefix-len applies to --experiment prefix only: this sweep run would ignore it"),
        (["--sim", "--start-rate", "4"], "--start-rate applies to --experiment saturation only"),
        (["--sim", "--context-len", "1024"], "--context-len applies to --experiment kv only"),
        (["--sim", "--experiment", "kv", "--point-seconds", "5"], "--point-seconds applies to --experiment saturation only"),
        (["--sim", "--hold-seconds", "30"], "--hold-seconds applies to --experiment saturation only"),
        (["--sim", "--experiment", "saturation", "--prefix-groups", "2"], "--prefix-groups applies to --experiment prefix only"),
        (["--sim", "--experiment", "prefix", "--variants", "fp8"], "--variants applies to --experiment quant only"),
        (["--sim", "--experiment", "prefix", "--rate", "2,4"], "offers both arms one rate: give one --rate value, not 2"),
        (["--sim", "--experiment", "prefix", "--concurrency", "8"], "give --rate R instead of --concurrency"),
        (["--target", "http://127.0.0.1:9", "--virtual"], "--virtual replays the simulator's engine"),
    ],
)
def test_experiment_options_that_cannot_work_exit_2_with_a_reason(argv, message, capsys, tmp_path):
    assert main([*argv, "--out", str(tmp_path), "--quiet"]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_an_unknown_variant_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--sim", "--experiment", "quant", "--variants", "bf16,int3"])
    assert exc.value.code == 2
    assert "unknown variant(s) ['int3']" in capsys.readouterr().err


def test_the_real_node_example_is_today_s_report_and_its_oracle_finding_holds(tmp_path):
    """examples/g6-real-node: `make lab-local LAB=g6`'s benchmark, the stand-in serving on the real node, the
    load from the host through its Service. Its report is today's; replayed on the virtual clock, throughput
    and ITL agree at every point and TTFT p50 at c=128 does not (1.5x; not yet explained), as docs/labs/g6.md
    says."""
    from benchmarks.g6 import agreement

    example = Path(__file__).resolve().parents[1] / "examples" / "g6-real-node"
    result = load_result(G6Result, example)
    assert (example / "report.md").read_text() == render_report(result), "examples/g6-real-node is stale"
    assert result.params.target_kind == "url" and result.meta.simulation is not None
    shipped, oracle = agreement.replayed(example, tmp_path)
    held = {c.figure: c.agrees for c in agreement.checks(shipped, oracle) if c.agrees is not None}
    assert len(held) == 12 and [f for f, ok in held.items() if not ok] == ["max-num-seqs 256 c=128 ttft_p50_ms"]


@pytest.mark.parametrize(
    "folder, model, render",
    [("g6-kv-sim", KvResult, render_kv_report), ("g6-quant-sim", QuantResult, render_quant_report),
     ("g6-prefix-sim", PrefixResult, render_prefix_report), ("g6-saturation-sim", SaturationResult, render_saturation_report),
     ("g6-sim", G6Result, render_report)],
)  # fmt: skip
def test_the_committed_examples_are_todays_reports_of_their_results(folder, model, render):
    """examples/ shows what a run writes today: its result.json loads and its report is rendered from it."""
    example = Path(__file__).resolve().parents[1] / "examples" / folder
    result = load_result(model, example)
    assert (example / "report.md").read_text() == render(result), f"examples/{folder} is stale: rerun its command"
    assert result.meta.command[:4] == ["python", "-m", "benchmarks", "g6"] and "--sim" in result.meta.command
    # A price per token holds at 100% duty only, and the report says what the bill runs on instead.
    costs = (example / "report.md").read_text().split("## What serving costs", 1)[1]
    assert "(100% duty)" in costs and "from `make up` until `make down`" in costs


def test_the_prefix_example_says_its_hit_rate_is_bounded_by_its_workload():
    """examples/g6-prefix-sim: 4 prefixes of 2,048 tokens (128 whole blocks of 16) and 256 of each request's own,
    66 requests a run with the warm-up: at most 2048 / 2304 = 88.9% of prompt tokens can hit, and the first of
    each prefix misses, so 62 x 2048 / (66 x 2304) = 83.5% is 62/66 = 93.9% of that (by hand)."""
    example = Path(__file__).resolve().parents[1] / "examples" / "g6-prefix-sim"
    report = render_prefix_report(load_result(PrefixResult, example))
    assert "no cache serves more than 88.9% of them" in report
    assert "The 83.5% measured is 93.9% of the ceiling" in report


def test_a_simulated_quant_report_says_what_its_model_leaves_out_and_a_real_one_does_not():
    """AWQ/GPTQ dequantisation is not in the simulator's step cost and its calibration residuals are not in the
    brackets: the simulated report says both; a real server's report has no such caveat."""
    example = Path(__file__).resolve().parents[1] / "examples" / "g6-quant-sim"
    result = load_result(QuantResult, example)
    caveat = "On the simulator these are the model's figures, not a measurement."
    simulated = render_quant_report(result)
    assert caveat in simulated and "dequantisation" in simulated and "+12%" in simulated
    real = result.model_copy(update={"params": result.params.model_copy(update={"target_kind": "stack"})})
    assert caveat not in render_quant_report(real)
