"""The simulated vLLM backend over real HTTP on loopback: wire format, scheduling, metrics, calibration."""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.serving import get_gpu, get_model, size
from benchmarks.sim import SimConfig, running_server
from benchmarks.sim.calibrate import SERVING_CASES, simulate
from benchmarks.sim.costs import ScheduledWork, step_cost

REPO = Path(__file__).resolve().parents[1]
QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"
LLAMA_8 = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def base_url():
    with running_server(SimConfig(model=QWEN_05, max_model_len=4096, speedup=20, seed=7)) as url:
        yield url


def _events(client: httpx.Client, path: str, body: dict) -> list:
    """POST a streaming request; the decoded `data:` payloads, with "[DONE]" kept as a string."""
    events = []
    with client.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: "):]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_completion_stream_has_exactly_max_tokens_with_ignore_eos(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        events = _events(client, "/v1/completions", {
            "model": QWEN_05, "prompt": "one two three four", "max_tokens": 40, "ignore_eos": True,
            "stream_options": {"include_usage": True},
        })
    assert events[-1] == "[DONE]"
    usage = events[-2]
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 4, "completion_tokens": 40, "total_tokens": 44}
    text = "".join(e["choices"][0]["text"] for e in events[:-2])
    assert len(text.split()) == 40
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert all(e["choices"][0]["finish_reason"] is None for e in events[:-3])


def test_chat_stream_starts_with_a_role_only_chunk_and_ends_with_usage(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        events = _events(client, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "say something short"}], "max_tokens": 8,
            "ignore_eos": True, "stream_options": {"include_usage": True},
        })
        plain = _events(client, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "again"}], "max_tokens": 3, "ignore_eos": True,
        })
    first = events[0]["choices"][0]["delta"]
    assert first["role"] == "assistant" and not first.get("content")
    content = [e["choices"][0]["delta"].get("content", "") for e in events[1:-2]]
    assert all(content) and len("".join(content).split()) == 8
    assert events[-2]["usage"]["completion_tokens"] == 8 and events[-2]["usage"]["prompt_tokens"] == 3
    assert all("usage" not in e for e in plain[:-1]) and plain[-1] == "[DONE]"


def test_non_streaming_completion_and_token_id_prompts(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        body = client.post("/v1/completions", json={"prompt": list(range(300)), "max_tokens": 5,
                                                    "ignore_eos": True}).json()
        chat = client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "ignore_eos": True}).json()
    assert body["object"] == "text_completion" and body["usage"]["prompt_tokens"] == 300
    assert len(body["choices"][0]["text"].split()) == body["usage"]["completion_tokens"] == 5
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert len(chat["choices"][0]["message"]["content"].split()) == 6


def test_logprobs_come_from_one_toy_model_in_vllms_shapes(base_url):
    """A seeded sample lists, per token, the token itself then the top k keyed token_id:<id>; scoring the same
    ids through prompt_logprobs lists the same numbers (one model, whichever path asks); the same seed
    samples the same tokens."""
    ask = {"model": QWEN_05, "prompt": "one two three", "max_tokens": 12, "seed": 5, "temperature": 1.0,
           "logprobs": 3, "return_tokens_as_token_ids": True, "return_token_ids": True}  # fmt: skip
    with httpx.Client(base_url=base_url, timeout=30) as client:
        first, again = (client.post("/v1/completions", json=ask).json()["choices"][0] for _ in range(2))
        ids = first["prompt_token_ids"] + first["token_ids"]
        scored = client.post("/v1/completions", json={"model": QWEN_05, "prompt": ids, "max_tokens": 1,
                                                     "temperature": 0, "prompt_logprobs": 3}).json()  # fmt: skip
        too_many = client.post("/v1/completions", json={**ask, "logprobs": 21})
        streamed = client.post("/v1/completions", json={**ask, "stream": True})
    assert again["token_ids"] == first["token_ids"] and len(first["prompt_token_ids"]) == 3
    lp = first["logprobs"]
    assert lp["tokens"] == [f"token_id:{t}" for t in first["token_ids"]]
    assert first["text"] == "".join(f" w{t}" for t in first["token_ids"])
    entries = scored["choices"][0]["prompt_logprobs"]
    assert entries[0] is None and len(entries) == len(ids) == scored["usage"]["prompt_tokens"]
    for i, token in enumerate(first["token_ids"]):
        top = lp["top_logprobs"][i]
        assert next(iter(top)) == f"token_id:{token}" and len(top) in (3, 4)  # itself, then the top 3
        entry = entries[3 + i]
        assert next(iter(entry)) == str(token)
        assert {f"token_id:{k}": v["logprob"] for k, v in entry.items()} == top
        assert lp["token_logprobs"][i] == entry[str(token)]["logprob"]
    assert too_many.status_code == 400
    assert too_many.json()["error"]["message"] == "Requested sample logprobs of 21, which is greater than max allowed: 20"
    assert streamed.status_code == 400


def _refusal(message: str, param: str | None) -> dict:
    return {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}


def test_lengths_against_the_context_as_vllm_0_34_0_answers_them(base_url):
    """vLLM v0.34.0's words, read in its wheel's source: renderers/params.py (TokenizeParams: max_tokens above
    max_model_len, a prompt above it), entrypoints/serve/utils/api_utils.py (get_max_tokens clamps max_tokens
    to what the prompt leaves), sampling_params.py (max_tokens at least 1, min_tokens at most max_tokens);
    a VLLMValidationError's str() adds " (parameter=..., value=...)" and the server answers
    {"error": {message, type, param, code}} (entrypoints/serve/exception_handling/error_response.py)."""
    with httpx.Client(base_url=base_url, timeout=30) as client:
        def post(body: dict, path: str = "/v1/completions") -> httpx.Response:
            return client.post(path, json=body)

        too_long = post({"prompt": [1] * 4100, "max_tokens": 1})
        one_over = post({"prompt": [1] * 4097, "max_tokens": 1})
        no_room = post({"prompt": [1] * 4096, "max_tokens": 1})
        clamped = post({"prompt": [1] * 4000, "max_tokens": 200})
        forced = post({"prompt": [1] * 4000, "max_tokens": 200, "min_tokens": 200, "ignore_eos": True})
        cap = post({"prompt": [1] * 10, "max_tokens": 5000})
        chat_cap = post({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5000},
                        "/v1/chat/completions")
        wrong_model = post({"model": "other", "prompt": "x"})
    assert too_long.status_code == 400 and too_long.json() == _refusal(
        "This model's maximum context length is 4096 tokens. However, your prompt contains 4100 input tokens, which "
        "exceeds this limit even without any output tokens. Please reduce the length of the input prompt. "
        "(parameter=input_tokens, value=4100)", "input_tokens")
    assert "your prompt contains at least 4097 input tokens" in one_over.json()["error"]["message"]
    assert no_room.status_code == 400 and no_room.json() == _refusal(
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "max_tokens")
    # Asking more than fits is no error in v0.34.0: the request gets what the context leaves.
    assert clamped.status_code == 200
    assert clamped.json()["usage"]["completion_tokens"] <= 96 and clamped.json()["usage"]["prompt_tokens"] == 4000
    assert forced.status_code == 400 and forced.json() == _refusal(
        "min_tokens must be less than or equal to max_tokens=96, got 200.", None)
    assert cap.status_code == 400 and cap.json() == _refusal(
        "max_tokens=5000 cannot be greater than max_model_len=4096. Please request fewer output tokens. "
        "(parameter=max_tokens, value=5000)", "max_tokens")
    assert chat_cap.json()["error"]["param"] == "max_completion_tokens"
    assert chat_cap.json()["error"]["message"].startswith("max_completion_tokens=5000 cannot be greater than")
    assert wrong_model.status_code == 404 and wrong_model.json()["error"]["type"] == "NotFoundError"


def test_models_health_config_and_metric_names(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/v1/models").json()["data"][0]["id"] == QWEN_05
        config = client.get("/sim/config").json()
        text = client.get("/metrics").text
    expected = size(get_model(QWEN_05), get_gpu("l4"), max_model_len=4096)
    assert config["sizing"]["kv_cache_tokens"] == expected.kv_cache_tokens
    assert config["config"]["speedup"] == 20
    for name in (
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
        "vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
        "vllm:request_queue_time_seconds_bucket",
    ):
        line = next(line for line in text.splitlines() if line.startswith(name + "{"))
        assert f'model_name="{QWEN_05}"' in line and 'engine="0"' in line, name
    # vLLM's info gauge: the engine's cache configuration in labels, as its CacheConfig prints them.
    info = next(line for line in text.splitlines() if line.startswith("vllm:cache_config_info{"))
    assert f'num_gpu_blocks="{expected.num_gpu_blocks}"' in info and 'block_size="16"' in info
    assert 'gpu_memory_utilization="0.9"' in info and info.endswith(" 1.0")
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                 "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_POWER_USAGE"):
        line = next(line for line in text.splitlines() if line.startswith(name + "{"))
        assert 'gpu="0"' in line and 'modelName="NVIDIA L4"' in line and "UUID=" in line and "hostname=" in line


def test_ground_truth_records_every_token(base_url):
    with httpx.Client(base_url=base_url, timeout=30) as client:
        before = time.time()
        client.post("/v1/completions", json={"prompt": "a b c", "max_tokens": 12, "ignore_eos": True})
        records = client.get("/sim/requests").json()
    record = records[-1]
    assert record["output_tokens"] == len(record["token_times_s"]) == 12
    assert len(record["itl_s"]) == 11 and all(itl > 0 for itl in record["itl_s"])
    assert record["arrival_s"] < record["first_token_s"] <= record["finish_s"]
    assert before - 1 < record["arrival_wall_s"] < time.time()


async def _stream_all(base_url: str, bodies: list[dict], during=None) -> list[int]:
    """Run streaming completions concurrently; returns each one's token count from usage."""

    async def one(client: httpx.AsyncClient, body: dict) -> int:
        payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
        async with client.stream("POST", "/v1/completions", json=payload) as response:
            usage = None
            async for line in response.aiter_lines():
                if line.startswith("data: {") and '"usage"' in line:
                    usage = json.loads(line[6:])["usage"]
            return usage["completion_tokens"]

    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
        tasks = [asyncio.create_task(one(client, body)) for body in bodies]
        if during is not None:
            await during(client)
        return await asyncio.gather(*tasks)


def test_requests_beyond_max_num_seqs_wait():
    seen = {"waiting": 0.0, "running": 0.0}

    async def watch(client: httpx.AsyncClient) -> None:
        for _ in range(50):
            text = (await client.get("/metrics")).text
            seen["waiting"] = max(seen["waiting"], _metric(text, "vllm:num_requests_waiting"))
            seen["running"] = max(seen["running"], _metric(text, "vllm:num_requests_running"))
            if seen["waiting"] > 0:
                return
            await asyncio.sleep(0.01)

    config = SimConfig(model=QWEN_05, max_model_len=2048, max_num_seqs=2, speedup=10)
    with running_server(config) as url:
        bodies = [{"prompt": "x y z", "max_tokens": 30, "ignore_eos": True}] * 6
        counts = asyncio.run(_stream_all(url, bodies, during=watch))
    assert seen["waiting"] > 0 and seen["running"] <= 2
    assert counts == [30] * 6


def test_gpu_series_show_a_busy_bandwidth_bound_gpu_while_decoding():
    readings = {}

    async def scrape_mid_run(client: httpx.AsyncClient) -> None:
        # From the moment the sequence runs (not from the request: a busy machine may start it late),
        # past the one-second window the GPU series look back over.
        while _metric((await client.get("/metrics")).text, "vllm:num_requests_running") < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.2)
        text = (await client.get("/metrics")).text
        for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
                     "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_POWER_USAGE", "vllm:num_requests_running"):
            readings[name] = _metric(text, name)

    # About 2.5 ms per token at speedup 2: 1,400 tokens (about 3.5 s) outlast the scrape.
    with running_server(SimConfig(model=QWEN_05, max_model_len=2048, speedup=2)) as url:
        asyncio.run(_stream_all(url, [{"prompt": "x", "max_tokens": 1400, "ignore_eos": True}], during=scrape_mid_run))
    assert readings["vllm:num_requests_running"] == 1, "the scrape came after decoding ended"
    # One sequence decoding: the GPU is never idle, and memory traffic, not FLOPs, bounds it. As DCGM
    # defines them, the SMs hold warps (waiting on memory) whenever a kernel runs, so SM_ACTIVE follows
    # GPU_UTIL; it is the tensor pipe that idles.
    assert readings["DCGM_FI_DEV_GPU_UTIL"] > 80
    assert readings["DCGM_FI_PROF_SM_ACTIVE"] > 0.8
    assert readings["DCGM_FI_PROF_DRAM_ACTIVE"] > 0.5 > readings["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]
    # DRAM active is bytes moved over what the peak bandwidth moves: a step moves the 0.99 GB of weights and
    # the context's KV (12 KiB a token) in 0.84 ms + bytes / 231 GB/s; at the 1,400th token 1.007 GB in 5.20 ms,
    # 194 GB/s of 300: at most 0.646, less whatever idle time this machine adds. The roofline's memory time
    # over the step (0.84) is not it.
    assert readings["DCGM_FI_PROF_DRAM_ACTIVE"] < 0.65
    assert 0.25 * 72 < readings["DCGM_FI_DEV_POWER_USAGE"] <= 72


def test_a_client_that_hangs_up_frees_its_sequence():
    with running_server(SimConfig(model=QWEN_05, max_model_len=2048, speedup=5)) as url:
        with httpx.Client(base_url=url, timeout=30) as client:
            body = {"prompt": "x", "max_tokens": 2000, "ignore_eos": True, "stream": True}
            with client.stream("POST", "/v1/completions", json=body) as response:
                lines = response.iter_lines()
                while not next(lines).startswith("data: "):
                    pass
            for _ in range(100):
                records = client.get("/sim/requests").json()
                if records:
                    break
                time.sleep(0.01)
            text = client.get("/metrics").text
    assert records[0]["finish_reason"] == "abort" and records[0]["output_tokens"] < 2000
    assert _metric(text, "vllm:num_requests_running") == 0
    assert _metric(text, "vllm:kv_cache_usage_perc") == 0


def test_kv_exhaustion_preempts_and_still_completes_every_request():
    # 40 blocks of 16 = 640 tokens of KV; four sequences growing to 300 tokens need 76 blocks.
    config = SimConfig(model=QWEN_05, max_model_len=512, num_gpu_blocks_override=40, speedup=20)
    with running_server(config) as url:
        counts = asyncio.run(_stream_all(url, [{"prompt": [5] * 100, "max_tokens": 200, "ignore_eos": True}] * 4))
        text = httpx.get(f"{url}/metrics").text
        records = httpx.get(f"{url}/sim/requests").json()
    assert counts == [200] * 4
    assert _metric(text, "vllm:num_preemptions_total") > 0
    assert sum(r["preemptions"] for r in records) == _metric(text, "vllm:num_preemptions_total")


def test_step_time_grows_with_batch_as_the_roofline_says():
    sizing = size(get_model(LLAMA_8), get_gpu("l4"), max_model_len=4096)
    one = step_cost(sizing, [ScheduledWork(new_tokens=1, cached_tokens=2000)])
    many = step_cost(sizing, [ScheduledWork(new_tokens=1, cached_tokens=2000)] * 24)
    # 23 more sequences at 2000 tokens: their KV (2001 tokens each: 32 layers x 8 KV heads x 128 x 2
    # x 2 bytes = 131,072 B per token) and each new token's activations through the elementwise
    # kernels (7 passes over (14,336 + 4,096) x 32 layer elements of 2 bytes), over the achieved bandwidth.
    extra = 23 * (2001 * 131_072 + 7 * (14_336 + 4_096) * 32 * 2) / (300e9 * 0.77)
    assert many.memory_time_s - one.memory_time_s == pytest.approx(extra, rel=1e-3)
    assert many.duration_s > one.duration_s


def test_served_itl_rises_with_batch_size():
    # Qwen2.5-3B: 36 KiB of KV per token against 6.2 GB of weights, so 16 sequences of 6,000
    # tokens read about 60% as many KV bytes as weight bytes per step (and fit the KV pool).
    model = "Qwen/Qwen2.5-3B-Instruct"
    config = SimConfig(model=model, max_model_len=8192, speedup=10)

    async def complete_all(url: str, concurrency: int) -> None:
        # Non-streaming, so the client does no per-token work that could delay the server's clock.
        body = {"prompt": [3] * 6000, "max_tokens": 160, "ignore_eos": True}
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            await asyncio.gather(*(client.post("/v1/completions", json=body) for _ in range(concurrency)))

    def mean_itl(concurrency: int) -> float:
        """Mean gap between tokens while every sequence is decoding (prefills done, none finished).

        The mean, not the median: the engine keeps its timeline exact on average while single
        wake-ups land on the event loop's millisecond timer grid.
        """
        with running_server(config) as url:
            asyncio.run(complete_all(url, concurrency))
            records = httpx.get(f"{url}/sim/requests").json()
        start = max(r["first_token_s"] for r in records)
        end = min(r["finish_s"] for r in records)
        pairs = [(a, b) for r in records for a, b in zip(r["token_times_s"], r["token_times_s"][1:])]
        return statistics.mean(b - a for a, b in pairs if start <= a and b <= end)

    single, batched = mean_itl(1), mean_itl(16)
    sizing = size(get_model(model), get_gpu("l4"), max_model_len=8192)
    context = [ScheduledWork(new_tokens=1, cached_tokens=6100)]
    expected = step_cost(sizing, context * 16).duration_s / step_cost(sizing, context).duration_s
    assert expected > 1.4
    assert batched / single == pytest.approx(expected, rel=0.1)
    assert single == pytest.approx(step_cost(sizing, context).duration_s / 10, rel=0.1)


def test_same_seed_same_outputs_different_seed_different_lengths():
    def lengths(seed: int) -> list[tuple[int, str]]:
        out = []
        with running_server(SimConfig(model=QWEN_05, max_model_len=2048, speedup=50, seed=seed)) as url:
            for _ in range(6):
                body = httpx.post(f"{url}/v1/completions", json={"prompt": "p", "max_tokens": 40,
                                                                 "min_tokens": 5}, timeout=30).json()
                out.append((body["usage"]["completion_tokens"], body["choices"][0]["text"]))
        return out

    first, again, other = lengths(1), lengths(1), lengths(2)
    assert first == again
    assert all(5 <= n <= 40 for n, _ in first)
    assert [n for n, _ in first] != [n for n, _ in other]


def test_calibrated_l4_figures_stay_near_the_published_ones():
    """ITL and throughput within 20%, TTFT under load within 25% (docs/calibration.md)."""
    for case in SERVING_CASES:
        if case.gpu.name != "l4":
            continue
        result = simulate(case)
        assert result.itl_p50_ms == pytest.approx(case.published_itl_ms, rel=0.2)
        assert result.output_tokens_per_s == pytest.approx(case.published_output_tokens_per_s, rel=0.2)
        assert result.ttft_p50_ms == pytest.approx(case.published_ttft_ms, rel=0.25), case.concurrency


def test_cli_refuses_a_config_vllm_would_refuse():
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.sim", "--model", LLAMA_8, "--gpu", "l4", "--port", "0"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and "refuse to start" in done.stderr and "Traceback" not in done.stderr
