"""The quant experiment's quality pipeline: vLLM's log-probability shapes, KL over top-k lists worked by
hand, and the whole pipeline over HTTP against loopback servers whose distributions the test chooses.

Recorded body (tests/data/vllm/README.md): prompt "Hi, I love my cat" on facebook/opt-125m with
`prompt_logprobs: 2`; position 1 lists token 30086 ("Hi", -9.352765083312988, rank 369), then 100
("I", -1.4278708696365356) and 133 ("The", -2.4365129470825195).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from pydantic import ValidationError

from benchmarks.g6 import main
from benchmarks.g6.experiments.divergence import Position, kl_listed, prompt_score, score
from benchmarks.g6.experiments.kernels import kernel_from_log
from benchmarks.g6.experiments.prompts import PROMPTS, select
from benchmarks.g6.experiments.quality import (
    SAMPLING,
    TOP_K,
    QualityClient,
    QualityError,
    parse_sample,
    parse_scores,
    reference,
    score_variant,
)
from benchmarks.g6.experiments.quant import QuantParams
from benchmarks.harness.server import http_server
from loopback import answering

DATA = Path(__file__).parent / "data" / "vllm"
ECHO = json.loads((DATA / "opt125m-echo-logprobs.json").read_text())
PROMPT_LOGPROBS = json.loads((DATA / "opt125m-prompt-logprobs.json").read_text())
ln = math.log


def test_the_recorded_prompt_logprobs_give_each_positions_token_and_its_list():
    sent = [2, 30086, 6, 38, 657, 127, 4758]  # </s> Hi , I love my cat: the ids the recorded body lists
    positions = parse_scores(PROMPT_LOGPROBS, sent, start=1)
    assert [p.token for p in positions] == sent[1:]
    assert positions[0].top == {30086: -9.352765083312988, 100: -1.4278708696365356, 133: -2.4365129470825195}
    with pytest.raises(QualityError, match="no entry for token 9 at position 1"):
        parse_scores(PROMPT_LOGPROBS, [2, 9, 6, 38, 657, 127, 4758], start=1)
    with pytest.raises(QualityError, match="7 positions for the 3 token ids sent"):
        parse_scores(PROMPT_LOGPROBS, [2, 30086, 6], start=1)


def test_a_generation_keyed_by_text_is_refused_with_the_flag_it_needs():
    """The recorded echo body lists top log-probabilities keyed by decoded text, which collide across ids."""
    with pytest.raises(QualityError, match="no logprobs or no prompt_token_ids"):
        parse_sample("Hi", ECHO)
    # Its ten output positions, as the same request without `echo` lists them, with the prompt's ids added.
    body = copy.deepcopy(ECHO)
    lp = body["choices"][0]["logprobs"]
    for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        lp[key] = lp[key][7:]
    body["choices"][0]["prompt_token_ids"] = [2, 30086, 6, 38, 657, 127, 4758]
    with pytest.raises(QualityError, match="keyed '-', not token_id:<id>.*return_tokens_as_token_ids"):
        parse_sample("Hi, I love my cat", body)


def test_kl_over_the_listed_tokens_and_the_rest_worked_by_hand():
    # Both list tokens 1..3 and leave 0.1 unlisted: 0.5 ln(0.5/0.45) + 0.3 ln(0.3/0.35) + 0.1 ln(0.1/0.1) + 0.1 ln 1
    # = 0.5 x 0.1053605 - 0.3 x 0.1541507 = 0.0064350.
    assert kl_listed({1: ln(0.5), 2: ln(0.3), 3: ln(0.1)}, {1: ln(0.45), 2: ln(0.35), 3: ln(0.1)}) == pytest.approx(0.0064350, abs=1e-7)
    # Only token 1 in both lists: the rest is 0.4 for p and 0.6 for q.
    # 0.6 ln(0.6/0.4) + 0.4 ln(0.4/0.6) = 0.2 x 0.4054651 = 0.0810930.
    assert kl_listed({1: ln(0.6), 2: ln(0.3)}, {4: ln(0.5), 1: ln(0.4)}) == pytest.approx(0.0810930, abs=1e-7)
    same = {1: ln(0.7), 2: ln(0.2)}
    assert kl_listed(same, same) == 0.0
    # q lists everything it gives mass to and puts none where p has 0.3: a large, finite figure.
    assert 5 < kl_listed({1: ln(0.7)}, {1: 0.0}) < 10


# -- the pipeline against loopback servers ---------------------------------------------------------
# Prompt "p<i>" is one token, id 100 + i; every continuation is token 1 eight times. The baseline lists
# P at every position, in generation and in scoring (its floor is 0). The variant lists QA on even
# prompts and QB on odd ones:
P = {1: ln(0.5), 2: ln(0.3), 3: ln(0.1)}  # and for odd prompts PB
PB = {1: ln(0.6), 2: ln(0.3)}
QA = {1: ln(0.45), 2: ln(0.35), 3: ln(0.1)}  # KL(P || QA) = 0.0064350, same top-1, delta ln(0.45/0.5) = -0.1053605
QB = {4: ln(0.5), 1: ln(0.4)}  # KL(PB || QB) = 0.0810930, top-1 4 against 1, delta ln(0.4/0.6) = -0.4054651
TOKENS = 8


def _lists(prompt_id: int, variant: bool) -> dict[int, float]:
    even = (prompt_id - 100) % 2 == 0
    if variant:
        return QA if even else QB
    return P if even else PB


def _server(variant: bool, sent: list[dict]):
    """A vLLM-shaped /v1/completions: generations with token-id keyed top logprobs, scoring by prompt_logprobs."""

    def answer(method: str, path: str, request: bytes) -> tuple[int, str, str]:
        body = json.loads(request)
        sent.append(body)
        if isinstance(body["prompt"], str):  # a generation
            pid = 100 + int(body["prompt"][1:])
            top = _lists(pid, variant)
            logprobs = {"text_offset": list(range(0, 4 * TOKENS, 4)), "token_logprobs": [top[1]] * TOKENS,
                        "tokens": ["token_id:1"] * TOKENS,
                        "top_logprobs": [{f"token_id:{t}": v for t, v in top.items()}] * TOKENS}  # fmt: skip
            choice = {"index": 0, "text": " cat" * TOKENS, "logprobs": logprobs, "finish_reason": "length",
                      "stop_reason": None, "token_ids": [1] * TOKENS, "prompt_token_ids": [pid]}  # fmt: skip
            usage = {"prompt_tokens": 1, "total_tokens": 1 + TOKENS, "completion_tokens": TOKENS}
        else:  # scoring: prompt_logprobs over the ids sent, each with the prompt's own token first
            ids = body["prompt"]
            top = _lists(ids[0], variant)
            entries = [None] + [{str(t): {"logprob": top[t], "rank": 1 + sorted(top.values(), reverse=True).index(top[t]),
                                          "decoded_token": " cat"} for t in [t, *top]} for t in ids[1:]]  # fmt: skip
            choice = {"index": 0, "text": ".", "logprobs": None, "finish_reason": "length", "stop_reason": None,
                      "prompt_logprobs": entries}  # fmt: skip
            usage = {"prompt_tokens": len(ids), "total_tokens": len(ids) + 1, "completion_tokens": 1}
        response = {"id": "cmpl-1", "object": "text_completion", "created": 1764600000, "model": "m",
                    "choices": [choice], "usage": usage}  # fmt: skip
        return 200, "application/json", json.dumps(response)

    return answer


def test_the_pipeline_recovers_the_kl_chosen_by_the_test_within_its_interval():
    prompts = [f"p{i}" for i in range(24)]
    base_sent: list[dict] = []
    variant_sent: list[dict] = []
    with answering(_server(False, base_sent)) as base_url, answering(_server(True, variant_sent)) as variant_url:
        base = QualityClient(http_server(base_url), "m", concurrency=4)
        ref = reference(base, prompts, max_tokens=TOKENS, seed=7)
        floor = score_variant(base, ref, seed=7, floor=None)
        variant = score_variant(QualityClient(http_server(variant_url), "m", concurrency=4), ref, seed=7, floor=floor)
    # Every prompt has 8 positions, half of each kind: the mean is the mean of the two figures.
    assert variant.prompts == 24 and variant.positions == 24 * TOKENS
    expected_kl = (0.0064350 + 0.0810930) / 2  # 0.0437640
    assert variant.kl.value == pytest.approx(expected_kl, abs=1e-6)
    assert variant.kl.ci95[0] < expected_kl < variant.kl.ci95[1]
    assert 0.0064350 <= variant.kl.ci95[0] and variant.kl.ci95[1] <= 0.0810930  # resampled means of the two
    assert variant.top1_agreement.value == 0.5
    assert variant.logprob_delta.value == pytest.approx((-0.1053605 - 0.4054651) / 2, abs=1e-6)
    # The baseline against itself lists the same numbers: a floor of exactly zero, and the variant above it.
    assert floor.kl.value == 0.0 and floor.top1_agreement.value == 1.0 and floor.floor is None
    assert variant.floor is not None and variant.floor.kl_resolved and variant.floor.top1_resolved
    assert variant.floor.top1_drop.value == 0.5
    # What was asked: samples at temperature 1, seeded per prompt, every knob explicit; scoring by token id.
    generations = sorted(base_sent[:24], key=lambda b: int(b["prompt"][1:]))
    assert [b["seed"] for b in generations] == list(range(7, 31))
    assert all(b.items() >= {**SAMPLING, "logprobs": TOP_K, "return_tokens_as_token_ids": True,
                             "return_token_ids": True, "max_tokens": TOKENS}.items() for b in generations)  # fmt: skip
    assert sorted(b["prompt"][0] for b in variant_sent) == list(range(100, 124))
    assert all(b["prompt"][1:] == [1] * TOKENS and b["prompt_logprobs"] == TOP_K and b["max_tokens"] == 1
               for b in variant_sent)  # fmt: skip


def test_a_difference_inside_the_noise_is_not_resolved():
    """The floor and the variant differ by the same small amount at every position on half the prompts and
    not at all on the others: the excess is real there, but the paired interval reaches zero."""
    pos = [Position(token=1, top=P)]
    shifted = [Position(token=1, top=QA)]
    floor = score([prompt_score(pos, pos) for _ in range(4)], seed=0)
    uneven = score([prompt_score(pos, shifted)] + [prompt_score(pos, pos)] * 3, seed=0, floor=floor)
    assert uneven.floor is not None and uneven.floor.kl_excess.ci95[0] == 0.0 and not uneven.floor.kl_resolved


def test_a_server_error_names_the_model_and_status():
    with answering(lambda method, path, body: (400, "application/json", json.dumps(
            {"error": {"message": "Requested sample logprobs of 20, which is greater than max allowed: 5"}}))) as url:  # fmt: skip
        client = QualityClient(http_server(url), "m")
        with pytest.raises(QualityError, match="m: completions request failed: POST .* answered HTTP 400: .*max allowed: 5"):
            reference(client, ["p0"], max_tokens=4, seed=0)


def test_more_prompts_than_the_set_holds_is_one_line_naming_the_count(capsys):
    assert len(PROMPTS) >= 64 and len(set(PROMPTS)) == len(PROMPTS)
    assert select(64, seed=0) == select(64, seed=0) and len(select(len(PROMPTS), seed=3)) == len(PROMPTS)
    with pytest.raises(SystemExit) as exc:
        main(["--sim", "--experiment", "quant", "--quality-prompts", str(len(PROMPTS) + 1)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert f"--quality-prompts: the project's prompt set has {len(PROMPTS)} prompts, got {len(PROMPTS) + 1}" in err
    with pytest.raises(ValidationError):
        QuantParams(variants=["bf16"], quality_prompts=len(PROMPTS) + 1)
    assert QuantParams(variants=["bf16"]).quality_prompts == 64 and QuantParams(variants=["bf16"]).quality_tokens == 128


# -- the kernel each variant ran, from vLLM's start-up log -------------------------------------------
AWQ_LOG = (Path(__file__).parent / "data" / "g6" / "vllm-awq-startup.log").read_text()
CONFIG_LINE = ("(EngineCore_DP0 pid=143) INFO 12-01 09:14:18 [core.py:93] Initializing a V1 LLM engine (v0.11.2) with "
               "config: model='Qwen/Qwen2.5-1.5B-Instruct', dtype=torch.bfloat16, max_seq_len=4096, "
               "quantization={}, enforce_eager=False, kv_cache_dtype=auto")  # fmt: skip


@pytest.mark.parametrize(
    "log, kernel",
    [
        (AWQ_LOG, "awq_marlin"),
        # GPTQ in 0.11.2: the method, then the mixed-precision kernel it chose (gptq_marlin.py:228 and :359).
        ("(APIServer pid=1) INFO 12-01 10:02:41 [gptq_marlin.py:228] The model is convertible to gptq_marlin during "
         "runtime. Using gptq_marlin kernel.\n(EngineCore_DP0 pid=140) INFO 12-01 10:03:05 [gptq_marlin.py:359] Using "
         "MarlinLinearKernel for GPTQMarlinLinearMethod\n", "gptq_marlin, MarlinLinearKernel (GPTQMarlinLinearMethod)"),
        # 0.33.0's wording (model_executor/kernels/linear/__init__.py).
        ("(EngineCore pid=88) INFO 12-01 10:03:05 [__init__.py:945] Using ConchLinearKernel for mixed-precision linear\n",
         "ConchLinearKernel (mixed-precision linear)"),
        # fp8 on Ada in 0.11.2 names no kernel; the engine's configuration still says the method.
        (CONFIG_LINE.format("fp8") + "\n", "not named in the log (quantization=fp8)"),
        (CONFIG_LINE.format("None") + "\n", "unquantized (no quantization method)"),
        ("INFO 12-01 10:00:00 [api_server.py:1977] vLLM API server version 0.11.2\n",
         "not in the server's log (no kernel line, no engine configuration line)"),
    ],
    ids=["awq", "gptq-0.11.2", "0.33.0", "fp8", "bf16", "no-lines"],
)  # fmt: skip
def test_the_kernel_is_what_vllms_start_up_log_names(log, kernel):
    assert kernel_from_log(log) == kernel
