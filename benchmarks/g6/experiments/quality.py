"""What a quantized variant costs in quality, scored by the servers themselves: no data set download.

1. The baseline writes greedy continuations of the project's own prompts (prompts.py) and scores
   them: the log-probability of every continuation token given what precedes it.
2. Each variant (the baseline again included, as the noise floor of a rerun) scores the same
   prompt + baseline continuation through the completions API's prompt log-probabilities, and
   writes its own greedy continuation of each prompt.
3. Against the baseline: the mean log-likelihood delta per baseline token, the perplexity ratio on
   the baseline's text, top-1 agreement (where the variant's most likely token is the one the
   baseline chose), and the share of continuations that stay identical under greedy decoding.

Log-probabilities come from `echo` + `logprobs` (`choices[0].logprobs`, OpenAI's legacy format) or,
when echo brings none, vLLM's `prompt_logprobs`; tests/data/vllm/ has recorded bodies of both.
A variant may split the continuation into tokens differently (another tokenizer, or merges at a
boundary): its log-likelihood still covers the same text, so the delta is per *baseline* token, and
top-1 agreement counts only positions where both split the text the same way (the aligned share says
how many). Which tokens are the continuation is decided by position (the prompt's token count, from
the same server's generation response), not by `text_offset`: offsets count token-string lengths,
and a BOS token or a byte-level fragment shifts them away from the text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from benchmarks.harness.errors import HarnessError
from benchmarks.harness.server import Server


class QualityError(Exception):
    """A server answer the scorer cannot use, with what was wrong and where."""


class Token(BaseModel):
    """One position of a scored text: its token, log-probability, and whether it was the top-1 choice."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str
    logprob: float
    top1: bool | None  # None: the response listed no alternatives at this position


def _echo_tokens(logprobs: dict[str, Any], count: int) -> list[Token | None]:
    tokens, values, tops = logprobs["tokens"], logprobs["token_logprobs"], logprobs.get("top_logprobs") or []
    out: list[Token | None] = [None]
    for i in range(1, count):
        if values[i] is None:
            raise QualityError(f"echo logprobs: no log-probability at prompt position {i}")
        top = tops[i] if i < len(tops) else None
        # The top-k dict holds the token itself and the most likely ones, keyed by decoded text.
        best = max(top.values()) if top else None
        out.append(Token(text=tokens[i], logprob=values[i], top1=None if best is None else values[i] >= best))
    return out


def _prompt_logprob_tokens(entries: list[dict[str, Any] | None], count: int) -> list[Token | None]:
    out: list[Token | None] = [None]
    for i in range(1, count):
        entry = entries[i] if i < len(entries) else None
        if not entry:
            raise QualityError(f"prompt_logprobs: no entry at prompt position {i}")
        # vLLM lists the prompt's own token first, then the top-k; its rank says whether it was top-1.
        own = next(iter(entry.values()))
        out.append(Token(text=own["decoded_token"], logprob=own["logprob"], top1=own["rank"] == 1))
    return out


def scored_positions(body: dict[str, Any]) -> list[Token | None]:
    """Every prompt position of a completions response (None at position 0, which has no context)."""
    try:
        choice = body["choices"][0]
        count = body["usage"]["prompt_tokens"]
    except (KeyError, IndexError, TypeError) as exc:
        raise QualityError(f"not a completions response (no choices[0] or usage.prompt_tokens): {exc!r}") from None
    echo = choice.get("logprobs")
    if echo and any(v is not None for v in (echo.get("token_logprobs") or [])[1:count]):
        return _echo_tokens(echo, count)
    entries = choice.get("prompt_logprobs")
    if entries and any(entries[1:count]):
        return _prompt_logprob_tokens(entries, count)
    raise QualityError(
        "the response has no prompt log-probabilities (neither echo logprobs nor prompt_logprobs): "
        "does the server support `echo` with `logprobs`?"
    )


class Continuation(BaseModel):
    """A greedy continuation of one prompt, and how many tokens the server made of the prompt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str
    text: str
    prompt_tokens: int


class Reference(BaseModel):
    """The baseline's continuations and its scores of them: what every variant is compared with."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    continuations: list[Continuation]
    scores: list[list[Token]]


class QualityScore(BaseModel):
    """A variant against the reference, over every prompt with a non-empty continuation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompts: int
    baseline_tokens: int
    mean_logprob_delta: float  # per baseline token: (variant LL - baseline LL) / baseline tokens
    perplexity_ratio: float  # variant's perplexity on the baseline's text over the baseline's own
    top1_agreement: float | None  # over aligned positions; None when no position listed alternatives
    aligned_share: float  # positions both split the same way, of the baseline's tokens
    identical_share: float  # greedy continuations equal to the baseline's, of all prompts


def _spans(tokens: Sequence[Token]) -> dict[tuple[int, str], Token]:
    """Tokens keyed by (offset from the continuation's start, text)."""
    spans, offset = {}, 0
    for token in tokens:
        spans[(offset, token.text)] = token
        offset += len(token.text)
    return spans


def compare(reference: Reference, scores: Sequence[Sequence[Token]], texts: Sequence[str]) -> QualityScore:
    """A variant's scores of the reference continuations and its own greedy texts, against the reference."""
    base_ll = variant_ll = 0.0
    base_tokens = aligned = agree = listed = used = 0
    for ref, variant in zip(reference.scores, scores):
        if not ref:
            continue  # the baseline ended at once (EOS): nothing to score
        used += 1
        base_ll += sum(t.logprob for t in ref)
        variant_ll += sum(t.logprob for t in variant)
        base_tokens += len(ref)
        ref_spans, variant_spans = _spans(ref), _spans(variant)
        for key in ref_spans.keys() & variant_spans.keys():
            aligned += 1
            top1 = variant_spans[key].top1
            if top1 is not None:
                listed += 1
                agree += top1
    if not base_tokens:
        raise QualityError("every baseline continuation is empty: nothing to score")
    delta = (variant_ll - base_ll) / base_tokens
    identical = sum(ref.text == text for ref, text in zip(reference.continuations, texts))
    return QualityScore(
        prompts=used,
        baseline_tokens=base_tokens,
        mean_logprob_delta=delta,
        perplexity_ratio=math.exp(-delta),
        top1_agreement=agree / listed if listed else None,
        aligned_share=aligned / base_tokens,
        identical_share=identical / len(reference.continuations),
    )


class QualityClient:
    """Greedy generations and prompt scoring against one server, through the way this process reaches
    it (`Server.post`: plain HTTP, or the API server's service proxy)."""

    def __init__(self, server: Server, model: str, timeout_s: float = 120.0):
        self.server = server
        self.model = model
        self.timeout_s = timeout_s

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            text = self.server.post(
                "/v1/completions", {"model": self.model, "temperature": 0.0, **body}, self.timeout_s
            )
        except HarnessError as exc:
            raise QualityError(f"{self.model}: completions request failed: {exc}") from exc
        try:
            return json.loads(text)
        except ValueError as exc:
            raise QualityError(f"{self.model}: completions answered no JSON: {exc}") from exc

    def generate(self, prompt: str, max_tokens: int) -> Continuation:
        body = self._post({"prompt": prompt, "max_tokens": max_tokens})
        try:
            return Continuation(prompt=prompt, text=body["choices"][0]["text"], prompt_tokens=body["usage"]["prompt_tokens"])
        except (KeyError, IndexError, TypeError) as exc:
            raise QualityError(f"{self.model}: a generation without choices[0].text or usage: {exc!r}") from None

    def score(self, skip: int, text: str) -> list[Token]:
        """Log-probabilities of the tokens of `text` after its first `skip` positions (the prompt's)."""
        # Both forms asked for: echo + logprobs is OpenAI's, prompt_logprobs vLLM's extension.
        body = self._post({"prompt": text, "max_tokens": 1, "echo": True, "logprobs": 1, "prompt_logprobs": 1})
        return [t for t in scored_positions(body)[skip:] if t is not None]


def reference(client: QualityClient, prompts: Sequence[str], max_tokens: int) -> Reference:
    continuations = [client.generate(p, max_tokens) for p in prompts]
    scores = [client.score(c.prompt_tokens, c.prompt + c.text) for c in continuations]
    return Reference(model=client.model, continuations=continuations, scores=scores)


def score_variant(client: QualityClient, ref: Reference, max_tokens: int) -> QualityScore:
    """The variant's scores of the reference texts and its own greedy continuations, compared."""
    own = [client.generate(c.prompt, max_tokens) for c in ref.continuations]
    scores = [client.score(o.prompt_tokens, c.prompt + c.text) for o, c in zip(own, ref.continuations)]
    return compare(ref, scores, [o.text for o in own])
