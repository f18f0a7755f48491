"""What a quantized variant costs in quality, scored by the servers themselves: no data set download.

1. The baseline continues each of the project's own prompts (prompts.py) by sampling at temperature
   1, seeded per prompt, and lists its top-k log-probabilities at every generated position.
2. Every variant (the baseline again included: the noise floor) scores the same token ids, prompt
   and continuation sent as ids so nothing is re-tokenized, through vLLM's `prompt_logprobs`: its own
   top-k at the same positions.
3. divergence.py turns the two into KL(baseline || variant), top-1 agreement and the log-probability
   delta of the sampled tokens, each with a bootstrap interval over prompts, and compares each variant
   with the floor.

Wire format (vLLM's completions API, checked against vLLM 0.11.2's entrypoints/openai/protocol.py and
serving_completion.py; unchanged in 0.33.0 and 0.34.0): a generation with `logprobs: k` answers
`choices[0].logprobs.top_logprobs`, one dict per generated token holding the token itself and the top
k; `return_tokens_as_token_ids` keys them `"token_id:<id>"` (decoded text collides across ids), and
`return_token_ids` adds `choices[0].prompt_token_ids`. A scoring request with `prompt_logprobs: k`
answers `choices[0].prompt_logprobs`, null for the first position, then `{"<id>": {"logprob", "rank",
"decoded_token"}}` with the prompt's own token first; such a request skips reading the prefix cache
(SamplingParams.skip_reading_prefix_cache), so every position is computed. vLLM refuses k above `--max-logprobs`
(ModelConfig.max_logprobs, 20 by default) with HTTP 400. tests/data/vllm/ has recorded bodies.
Token ids compare across variants only when they share the tokenizer, as a publisher's quantized
checkpoints of one model do (the catalogue's AWQ and GPTQ checkpoints of Qwen2.5).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from benchmarks.errors import BenchmarkError
from benchmarks.g6.experiments.divergence import Position, QualityScore, prompt_score, score
from benchmarks.harness.errors import HarnessError
from benchmarks.harness.server import Server

TOP_K = 20  # vLLM's default --max-logprobs: the most log-probabilities it lists per position
# Requests in flight at once: the continuations are batched by the server as any load is, so the
# baseline's 64 x 128 tokens take seconds of GPU time rather than minutes one after another.
CONCURRENCY = 16
# Sampling from the model's own distribution: every knob explicit, because vLLM otherwise applies the
# checkpoint's generation_config.json defaults (Qwen2.5's Instruct checkpoints lower the temperature,
# cut top-p and top-k and add a repetition penalty), and samples from another distribution would not
# estimate KL(p || q). top_k 0 disables top-k in vLLM 0.11.2, 0.33.0 and 0.34.0 (SamplingParams). The listed
# log-probabilities are the model's own either way (ModelConfig.logprobs_mode "raw_logprobs", the default).
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0}  # fmt: skip
TOKEN_ID = "token_id:"

T = TypeVar("T")
R = TypeVar("R")


class QualityError(BenchmarkError):
    """A server answer the scorer cannot use, with what was wrong and where."""


class Continuation(BaseModel):
    """One sampled continuation of the baseline, as result.json keeps it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompt: str
    text: str
    prompt_tokens: int
    tokens: int
    finish_reason: str | None


@dataclass(frozen=True)
class Sample:
    """A continuation with its token ids and the baseline's top-k at each of its positions."""

    continuation: Continuation
    prompt_ids: list[int]
    positions: list[Position]

    @property
    def ids(self) -> list[int]:
        return [p.token for p in self.positions]


def _choice(body: dict[str, Any]) -> dict[str, Any]:
    try:
        return body["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise QualityError(f"not a completions response (no choices[0]): {str(body)[:120]}") from None


def _token_id(key: str) -> int:
    if not key.startswith(TOKEN_ID):
        raise QualityError(f"log-probabilities keyed {key!r}, not {TOKEN_ID}<id>: does the server support "
                           "return_tokens_as_token_ids?")  # fmt: skip
    return int(key.removeprefix(TOKEN_ID))


def parse_sample(prompt: str, body: dict[str, Any]) -> Sample:
    """A generation answered with `logprobs`, `return_tokens_as_token_ids` and `return_token_ids`."""
    choice = _choice(body)
    logprobs, prompt_ids = choice.get("logprobs"), choice.get("prompt_token_ids")
    if not logprobs or not isinstance(prompt_ids, list):
        raise QualityError("the generation has no logprobs or no prompt_token_ids: does the server support "
                           "logprobs and return_token_ids?")  # fmt: skip
    positions = []
    for i, (key, value, top) in enumerate(zip(logprobs["tokens"], logprobs["token_logprobs"], logprobs["top_logprobs"])):
        if value is None or not top:
            raise QualityError(f"the generation lists no log-probabilities at output position {i}")
        token = _token_id(key)
        positions.append(Position(token=token, top={**{_token_id(k): v for k, v in top.items()}, token: value}))
    continuation = Continuation(prompt=prompt, text=choice.get("text", ""), prompt_tokens=len(prompt_ids),
                                tokens=len(positions), finish_reason=choice.get("finish_reason"))  # fmt: skip
    return Sample(continuation=continuation, prompt_ids=prompt_ids, positions=positions)


def parse_scores(body: dict[str, Any], sent: Sequence[int], start: int) -> list[Position]:
    """The variant's top-k at positions `start`.. of the token ids it was sent, from `prompt_logprobs`."""
    entries = _choice(body).get("prompt_logprobs")
    if not isinstance(entries, list):
        raise QualityError("the response has no prompt_logprobs: does the server support vLLM's prompt_logprobs?")
    if len(entries) != len(sent):
        raise QualityError(f"prompt_logprobs has {len(entries)} positions for the {len(sent)} token ids sent")
    positions = []
    for i in range(start, len(sent)):
        entry = entries[i]
        if not entry or str(sent[i]) not in entry:
            raise QualityError(f"prompt_logprobs: no entry for token {sent[i]} at position {i}")
        positions.append(Position(token=sent[i], top={int(k): v["logprob"] for k, v in entry.items()}))
    return positions


class QualityClient:
    """Sampled generations and scoring against one server, through the way this process reaches it
    (`Server.post`: plain HTTP, or the API server's service proxy)."""

    def __init__(self, server: Server, model: str, timeout_s: float = 120.0, concurrency: int = CONCURRENCY):
        self.server = server
        self.model = model
        self.timeout_s = timeout_s
        self.concurrency = concurrency

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            text = self.server.post("/v1/completions", {"model": self.model, **body}, self.timeout_s)
        except HarnessError as exc:
            raise QualityError(f"{self.model}: completions request failed: {exc}") from exc
        try:
            return json.loads(text)
        except ValueError as exc:
            raise QualityError(f"{self.model}: completions answered no JSON: {exc}") from exc

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """`fn` over `items`, `concurrency` at a time, in order; the first error raised."""
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(fn, items))

    def sample(self, prompt: str, max_tokens: int, seed: int) -> Sample:
        body = self._post({"prompt": prompt, "max_tokens": max_tokens, "seed": seed, **SAMPLING, "logprobs": TOP_K,
                           "return_tokens_as_token_ids": True, "return_token_ids": True})  # fmt: skip
        return parse_sample(prompt, body)

    def score(self, sample: Sample) -> list[Position]:
        """This server's top-k at each position of the sample's continuation."""
        sent = [*sample.prompt_ids, *sample.ids]
        body = self._post({"prompt": sent, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": TOP_K})
        return parse_scores(body, sent, len(sample.prompt_ids))


def reference(client: QualityClient, prompts: Sequence[str], max_tokens: int, seed: int) -> list[Sample]:
    """The baseline's continuations, prompt i sampled with seed `seed + i`."""
    return client.map(lambda item: client.sample(item[1], max_tokens, seed + item[0]), list(enumerate(prompts)))


def score_variant(client: QualityClient, ref: Sequence[Sample], seed: int, floor: QualityScore | None) -> QualityScore:
    """This server's scores of the baseline's continuations, against the baseline's own top-k."""
    scored = client.map(lambda s: client.score(s) if s.positions else [], ref)
    try:
        return score([prompt_score(s.positions, v) for s, v in zip(ref, scored)], seed, floor)
    except ValueError as exc:
        raise QualityError(str(exc)) from None
