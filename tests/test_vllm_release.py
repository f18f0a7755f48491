"""What the project passes to and reads from vLLM exists in the pinned release, as recorded from that
release's wheel (tests/data/vllm/<version>/, README.md there says how): every server flag, every
--quantization value the config accepts, the log-probability cap the quality score needs, every /metrics
name and label the readers and dashboards use, and the simulator's /metrics page."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.g6.experiments import quality
from benchmarks.g6.targets import ServerSettings
from benchmarks.kube.phases import VLLM_LOG, vllm_time
from benchmarks.metrics import model
from benchmarks.metrics.scrape import Scrape, cache_config, metrics_from_scrapes
from benchmarks.sim.app import SimServer
from benchmarks.sim.config import SimConfig
from benchmarks.sim.engine import Engine, EngineCore
from components import versions, vllm
from components.dashboards import serving as dashboard
from components.gpu_pool import POOL_PLACEMENT
from components.naming import StackId
from stacks.serving_features import Quantization, Vllm

DATA = Path(__file__).parent / "data" / "vllm"
RELEASE = DATA / versions.VLLM_VERSION
HELP = (RELEASE / "serve-help.txt").read_text()
METRICS = (RELEASE / "metrics.txt").read_text()


def families(text: str) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(text)}


RELEASE_FAMILIES = families(METRICS)


def sample_labels(text: str) -> dict[str, set[str]]:
    """Sample name -> the label names its series carry (every `le` dropped: buckets are compared apart)."""
    seen: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            seen.setdefault(sample.name, set()).update(k for k in sample.labels if k != "le")
    return seen


def buckets(text: str, name: str) -> list[float]:
    """The `le` bounds of histogram `name`, in order."""
    return sorted({float(s.labels["le"]) for s in families(text)[name].samples if s.name == f"{name}_bucket"})


def option_default(option: str) -> str:
    """The `(default: X)` of one option in the recorded --help text."""
    block = re.search(rf"^  {re.escape(option)}\b(.*?)(?=^  -)", HELP, re.S | re.M)
    assert block, f"{option} is not in the recorded help"
    found = re.search(r"\(default:\s+([^)]*)\)", block[1])
    assert found, f"{option} has no default in the recorded help"
    return found[1].strip()


def test_every_pinned_image_is_the_recorded_release():
    assert RELEASE.is_dir(), f"no recording of {versions.VLLM_VERSION} under {DATA}: record it as README.md says"
    assert set(versions.VLLM_IMAGES.values()) == {
        f"docker.io/vllm/vllm-openai:{versions.VLLM_VERSION}",
        f"docker.io/vllm/vllm-openai:{versions.VLLM_VERSION}-cu129",
    }


def _server(weights: vllm.WeightsBucket | None = None) -> vllm.VllmServerArgs:
    """A server with every optional flag set (and the weights from a bucket, when given)."""
    return vllm.VllmServerArgs(
        stack_id=StackId(lab="g6", stack="g6"), placement=POOL_PLACEMENT, namespace="llm", model="m", dtype="bfloat16",
        max_model_len=4096, gpu_memory_utilization=0.9, max_num_seqs=8, startup_timeout_min=5, quantization="fp8",
        weights=weights,
    )


BUCKET = vllm.WeightsBucket(project="p", region="us-central1", billing_labels={}, system_node_selector={})


def test_every_server_flag_we_pass_is_one_of_the_release():
    known = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", HELP))
    passed = {arg.split("=", 1)[0] for server in (_server(), _server(BUCKET)) for arg in vllm.server_args(server)[1:]}
    assert passed == {"--dtype", "--max-num-seqs", "--max-model-len", "--gpu-memory-utilization",
                      "--quantization", "--port", "--served-model-name"}
    assert passed <= known, f"not flags of vLLM {versions.VLLM_VERSION}: {sorted(passed - known)}"
    # `vllm serve` is the command the recorded parser belongs to.
    assert vllm.COMMAND == ["vllm", "serve"] and "usage: vllm serve" in HELP


def test_the_model_is_the_positional_model_tag_first_not_the_deprecated_flag():
    # The recorded parser takes one optional positional, model_tag; --model is still a flag of v0.34.0, but
    # `vllm serve` warns it "will be removed in a future version" and rejects --served-model-name unless the
    # model comes first as the positional (vllm/utils/argparse_utils.py FlexibleArgumentParser.parse_args).
    usage = HELP.split("\n\n", 1)[0]
    assert re.search(r"\[model_tag\]\s*$", usage), "model_tag is no longer the positional of `vllm serve`"
    assert re.search(r"^positional arguments:\n  model_tag ", HELP, re.M)
    for server, model in ((_server(), "m"), (_server(BUCKET), "/weights/m")):
        args = vllm.server_args(server)
        assert args[0] == model, args
        assert not any(a.startswith("-") for a in args[:1]) and not any(a.startswith("--model") for a in args)


def test_every_setting_a_g6_experiment_changes_is_a_stack_key_and_a_flag_of_the_release():
    known = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", HELP))
    # The server fields of ServerSettings (its docstring: model .. max_model_len); the cold-start ones
    # (image streaming, weights, the pool's minimum) are stack keys, not server flags.
    server_fields = ("model", "quantization", "max_num_seqs", "gpu_memory_utilization", "max_model_len")
    assert set(server_fields) <= set(ServerSettings.model_fields)
    for field in server_fields:
        assert field in Vllm.model_fields, f"g6 sets vllm.{field}, which the stack config does not have"
        assert "--" + field.replace("_", "-") in known, f"--{field.replace('_', '-')} is not a flag of {versions.VLLM_VERSION}"


def test_every_quantization_the_config_accepts_is_one_the_release_accepts():
    methods = set((RELEASE / "quantization-methods.txt").read_text().split())
    assert set(get_args(Quantization)) <= methods
    # The g6 quantization experiment's three variants.
    assert {"fp8", "awq", "gptq"} <= methods


def test_the_quality_score_asks_for_no_more_log_probabilities_than_the_server_gives():
    # vLLM answers HTTP 400 when `logprobs` or `prompt_logprobs` exceeds --max-logprobs
    # (vllm/sampling_params.py of the release); the quality score asks for TOP_K of each.
    cap = int(option_default("--max-logprobs"))
    assert cap == 20  # the release's default, which the deployment leaves alone
    assert "--max-logprobs" not in " ".join(vllm.server_args(_server()))
    assert 1 <= quality.TOP_K <= cap


def test_every_metric_the_readers_and_dashboards_use_is_on_the_release_page():
    served = sample_labels(METRICS)
    names = set(served) | set(RELEASE_FAMILIES)
    read = [name for _, name, _ in model.GAUGES if name.startswith("vllm:")]
    read += [model.PREEMPTIONS, model.CACHE_CONFIG, model.TTFT_BUCKETS]
    read += [getattr(dashboard, k) for k in ("TTFT", "ITL", "E2E", "QUEUE_TIME", "GENERATION_TOKENS", "PROMPT_TOKENS",
                                             "RUNNING", "WAITING", "KV_CACHE", "PREEMPTIONS")]
    missing = sorted(n for n in read if n not in names)
    assert not missing, f"not served by vLLM {versions.VLLM_VERSION}: {missing}"
    # Every vLLM series is per model and engine: the readers sum or max over both.
    assert served["vllm:num_requests_running"] == {"model_name", "engine"}


def test_the_readers_get_the_kv_cache_and_the_gauges_from_the_release_page():
    # The recorded page's own values: 58059 blocks of 16 tokens at utilisation 0.9, cache dtype auto.
    kv = cache_config(METRICS)
    assert kv is not None and (kv.block_size, kv.num_gpu_blocks, kv.gpu_memory_utilization, kv.cache_dtype) == (
        16, 58059, 0.9, "auto")
    idle = metrics_from_scrapes([Scrape(0.0, METRICS), Scrape(1.0, METRICS), Scrape(2.0, METRICS)])
    assert idle.preemptions == 0.0
    assert (idle.running.max, idle.waiting.max, idle.kv_cache_usage.max) == (0.0, 0.0, 0.0)


@pytest.fixture(scope="module")
def simulated() -> str:
    server = SimServer(SimConfig(model="Qwen/Qwen2.5-1.5B-Instruct"))
    server.metrics.attach(Engine(EngineCore(server.sizing, seed=0, speedup=1.0)))
    return generate_latest(server.metrics.registry).decode()


def test_the_simulator_serves_only_names_types_and_labels_of_the_release(simulated):
    real = sample_labels(METRICS)
    sim_families = {n: f for n, f in families(simulated).items() if n.startswith("vllm:")}
    assert sim_families, "the simulator serves no vllm:* series"
    for name, family in sim_families.items():
        assert name in RELEASE_FAMILIES, f"{name} is not a metric of vLLM {versions.VLLM_VERSION}"
        assert family.type == RELEASE_FAMILIES[name].type, name
    for name, labels in sample_labels(simulated).items():
        if name.startswith("vllm:") and not name.endswith("_created"):
            assert labels <= real[name], f"{name}: labels {sorted(labels - real[name])} are not vLLM's"


@pytest.mark.parametrize("name", ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                                  "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"])
def test_the_simulator_histograms_have_the_release_buckets(simulated, name):
    assert buckets(simulated, name) == buckets(METRICS, name)


def _startup() -> tuple[dict[str, str], list[str]]:
    """The recorded logger settings and the start-up messages, each rendered as the release logs it."""
    settings, messages = {}, []
    for line in (RELEASE / "startup-messages.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            key, _, text = line.partition("\t")
            if key in ("format", "datefmt"):
                settings[key] = text
            else:
                # Every argument a number (a model name as %s would do too; GiB figures must be numbers).
                messages.append(text % ((2.89,) * len(re.findall(r"%[.\d]*[sf]", text))))
    return settings, messages


def test_the_cold_start_reads_every_start_up_message_and_its_time_as_the_release_logs_them():
    settings, messages = _startup()
    fields = {"vllm_process_name": "EngineCore_DP0", "process": 187, "levelname": "INFO", "fileinfo": "core.py",
              "lineno": 396, "asctime": "12-01 21:05:07"}
    assert settings["datefmt"] == "%m-%d %H:%M:%S"
    lines = [settings["format"] % {**fields, "message": m} for m in messages]
    started = datetime(2026, 12, 1, 21, 0, tzinfo=UTC)
    assert {vllm_time(line, started) for line in lines} == {datetime(2026, 12, 1, 21, 5, 7, tzinfo=UTC)}
    for marker in VLLM_LOG.markers:
        assert any(marker.pattern.search(line) for line in lines), f"{marker.phase}: no start-up message of the release matches"
