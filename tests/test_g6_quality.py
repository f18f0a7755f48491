"""The quant experiment's quality scorer against recorded vLLM completions responses (tests/data/vllm/).

Expected figures are worked out by hand from the recorded log-probabilities, which are quoted here:
prompt "Hi, I love my cat" on facebook/opt-125m, positions 0..6 = </s>, "Hi", ",", " I", " love",
" my", " cat" with log-probabilities (none), -9.352765083312988, -1.4278249740600586,
-0.976689338684082, -5.6148481369018555, -4.214991569519043, -4.99854040145874 and ranks 369, 1, 1,
22, 9, 3.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from benchmarks.g6.experiments.quality import (
    Continuation,
    QualityClient,
    QualityError,
    Reference,
    compare,
    reference,
    score_variant,
    scored_positions,
)
from benchmarks.harness.server import http_server
from loopback import answering

DATA = Path(__file__).parent / "data" / "vllm"
ECHO = json.loads((DATA / "opt125m-echo-logprobs.json").read_text())
PROMPT_LOGPROBS = json.loads((DATA / "opt125m-prompt-logprobs.json").read_text())
TEXTS = ["Hi", ",", " I", " love", " my", " cat"]
LOGPROBS = [-9.352765083312988, -1.4278249740600586, -0.976689338684082, -5.6148481369018555,
            -4.214991569519043, -4.99854040145874]  # fmt: skip
TOP1 = [False, True, True, False, False, False]  # ranks 369, 1, 1, 22, 9, 3


@pytest.mark.parametrize("body", [ECHO, PROMPT_LOGPROBS], ids=["echo+logprobs", "prompt_logprobs"])
def test_both_recorded_forms_give_every_prompt_position(body):
    positions = scored_positions(body)
    assert positions[0] is None  # the first token has no context
    assert [t.text for t in positions[1:]] == TEXTS
    assert [t.logprob for t in positions[1:]] == LOGPROBS
    assert [t.top1 for t in positions[1:]] == TOP1


def _reference(skip: int) -> Reference:
    """The recorded text as a baseline continuation after its first `skip` positions."""
    positions = scored_positions(ECHO)[skip:]
    prompt = "".join(TEXTS[: skip - 1])
    return Reference(
        model="facebook/opt-125m",
        continuations=[Continuation(prompt=prompt, text="".join(TEXTS[skip - 1:]), prompt_tokens=skip)],
        scores=[[t for t in positions if t is not None]],
    )


def test_a_variant_scoring_the_same_text_the_same_way_changes_nothing():
    ref = _reference(skip=1)
    score = compare(ref, ref.scores, [ref.continuations[0].text])
    assert score.mean_logprob_delta == 0.0 and score.perplexity_ratio == 1.0
    assert score.baseline_tokens == 6 and score.aligned_share == 1.0
    assert score.top1_agreement == pytest.approx(2 / 6)  # "," and " I" were the model's first choice
    assert score.identical_share == 1.0


def test_a_variant_that_splits_a_token_is_compared_on_the_same_text():
    """A variant (another tokenizer, or a merge at a boundary) splits " cat" into " c" + "at" with
    log-probabilities -3.0 and -1.5: the same text, 4.5 nats less surprising than -4.9985."""
    body = copy.deepcopy(ECHO)
    lp = body["choices"][0]["logprobs"]
    cut = lp["tokens"].index(" cat")
    lp["tokens"][cut:cut + 1] = [" c", "at"]
    lp["token_logprobs"][cut:cut + 1] = [-3.0, -1.5]
    lp["top_logprobs"][cut:cut + 1] = [{" c": -3.0, " dog": -0.5}, {"at": -1.5}]
    lp["text_offset"][cut + 1:cut + 1] = [lp["text_offset"][cut] + 2]
    body["usage"]["prompt_tokens"] += 1
    ref = _reference(skip=5)  # baseline continuation " my cat": two tokens
    variant = [t for t in scored_positions(body)[5:] if t is not None]
    assert [t.text for t in variant] == [" my", " c", "at"]
    score = compare(ref, [variant], [" my dog"])
    baseline_ll = -4.214991569519043 - 4.99854040145874
    variant_ll = -4.214991569519043 - 3.0 - 1.5
    assert score.mean_logprob_delta == pytest.approx((variant_ll - baseline_ll) / 2)
    assert score.perplexity_ratio == pytest.approx(math.exp(-(variant_ll - baseline_ll) / 2))
    # Only " my" sits at the same offset with the same text in both: one aligned position of two.
    assert score.aligned_share == 0.5 and score.top1_agreement == 0.0
    assert score.identical_share == 0.0


def test_missing_log_probabilities_are_refused_with_the_reason():
    bare = copy.deepcopy(PROMPT_LOGPROBS)
    bare["choices"][0]["prompt_logprobs"] = None
    with pytest.raises(QualityError, match="no prompt log-probabilities.*echo"):
        scored_positions(bare)
    holed = copy.deepcopy(ECHO)
    holed["choices"][0]["logprobs"]["token_logprobs"][3] = None
    with pytest.raises(QualityError, match="position 3"):
        scored_positions(holed)
    with pytest.raises(QualityError, match="not a completions response"):
        scored_positions({"error": {"message": "boom"}})


def test_the_client_generates_then_scores_from_what_the_server_answers():
    """Over HTTP (a loopback server replaying recorded bodies): the baseline writes its continuation, then
    scores prompt + continuation, skipping as many positions as the generation said the prompt had."""
    sent = []

    def answer(method: str, path: str, request: bytes) -> tuple[int, str, str]:
        body = json.loads(request)
        sent.append(body)
        if body.get("echo"):
            return 200, "application/json", json.dumps(ECHO)
        return 200, "application/json", json.dumps(
            {**PROMPT_LOGPROBS, "usage": {**PROMPT_LOGPROBS["usage"], "prompt_tokens": 5},
             "choices": [{**PROMPT_LOGPROBS["choices"][0], "text": " my cat"}]}
        )  # fmt: skip

    with answering(answer) as url:
        client = QualityClient(http_server(url), "facebook/opt-125m")
        ref = reference(client, ["Hi, I love"], max_tokens=2)
        score = score_variant(client, ref, max_tokens=2)
    assert ref.continuations[0].text == " my cat" and ref.continuations[0].prompt_tokens == 5
    assert [t.text for t in ref.scores[0]] == [" my", " cat"]
    assert sent[0] == {"model": "facebook/opt-125m", "temperature": 0.0, "prompt": "Hi, I love", "max_tokens": 2}
    assert sent[1]["prompt"] == "Hi, I love my cat" and sent[1]["echo"] is True and sent[1]["logprobs"] == 1
    assert sent[1]["prompt_logprobs"] == 1 and sent[1]["temperature"] == 0.0
    assert score.mean_logprob_delta == 0.0 and score.identical_share == 1.0


def test_a_server_error_names_the_model_and_status():
    with answering(lambda method, path, body: (400, "application/json", '{"error": {"message": "echo is not supported"}}')) as url:
        client = QualityClient(http_server(url), "m")
        with pytest.raises(QualityError, match="m: completions request failed: POST .* answered HTTP 400: .*echo is not"):
            client.generate("p", 4)
