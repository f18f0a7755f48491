"""What the simulated API server reads from a request body before its engine sees the request.

One reader serves both drivers of the engine (the HTTP server of app.py and the virtual-clock replay of
virtual.py), so a body means the same to both. Prompt length: a string counts one token per
whitespace-separated word; a list of ints (as `prompt` or `prompt_token_ids`) one token per id; chat
counts the words of every message's text (no chat-template tokens). The same tokens, in blocks, are
what the prefix cache recognises.

Lengths against the context, as vLLM v0.34.0's OpenAI server checks them, as v0.33.0's did (its wheel's
source: `renderers/params.py` TokenizeParams, `entrypoints/serve/utils/api_utils.py` get_max_tokens,
`sampling_params.py` SamplingParams._verify_args), refused with HTTP 400 in its words:
- max_tokens (or chat's max_completion_tokens) above max-model-len;
- a prompt longer than max-model-len ("... which exceeds this limit even without any output tokens");
- otherwise max_tokens is clamped to what the prompt leaves of the context, without a word (a
  request asking more than fits gets fewer tokens, finish_reason "length"), and then refused when
  that leaves none ("max_tokens must be at least 1, got 0.") or when min_tokens exceeds it (a
  request that forces its length, as the load generator's do without --eos).
A validation error's message carries vLLM's " (parameter=..., value=...)" suffix where vLLM's does.
"""

from __future__ import annotations

import hashlib
from typing import Any

from facts.catalogue import get_model
from benchmarks.errors import BenchmarkError
from benchmarks.sim.config import SimConfig
from benchmarks.sim.engine import Admission

DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest default; chat's default is the rest of the context


class BadRequest(BenchmarkError):
    """A request vLLM would reject; carries the HTTP status and vLLM's error type."""

    def __init__(self, message: str, *, status: int = 400, kind: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param

    def body(self) -> dict[str, Any]:
        """vLLM's ErrorResponse."""
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.status}}


def _validation(message: str, parameter: str | None = None, value: object = None) -> BadRequest:
    """vLLM's VLLMValidationError as its server answers it: str() adds the parameter and value."""
    extras = [f"{k}={v}" for k, v in (("parameter", parameter), ("value", value)) if v is not None]
    return BadRequest(f"{message} ({', '.join(extras)})" if extras else message, param=parameter)


def int_field(body: dict[str, Any], name: str, default: int | None) -> int | None:
    value = body.get(name, default)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise BadRequest(f"{name} must be a non-negative integer, got {value!r}", param=name)
    return value


def prompt_of(body: dict[str, Any]) -> str | list[int]:
    prompt = body.get("prompt_token_ids", body.get("prompt"))
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    raise BadRequest("prompt must be a string or a list of token ids (one prompt per request)", param="prompt")


def _chat_words(body: dict[str, Any]) -> list[str]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", param="messages")
    words: list[str] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            words += content.split()
        elif isinstance(content, list):
            words += [w for part in content if isinstance(part, dict) for w in str(part.get("text", "")).split()]
        else:
            raise BadRequest("each message needs a string or list content", param="messages")
    return words


def prompt_tokens_of(body: dict[str, Any], chat: bool) -> list[str] | list[int]:
    """The prompt's tokens as the prefix cache sees them: words, or the ids as given."""
    if chat:
        return _chat_words(body)
    prompt = prompt_of(body)
    return prompt.split() if isinstance(prompt, str) else list(prompt)


def block_hashes(tokens: list[int] | list[str], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of a prompt: equal only where the whole prefix up to the block is."""
    out, h = [], 0
    for k in range(len(tokens) // block_size):
        h = hash((h, tuple(tokens[k * block_size : (k + 1) * block_size])))
        out.append(h)
    return tuple(out)


class RequestReader:
    """Reads request bodies for one simulated server: its model's names, context and prefix cache."""

    def __init__(self, config: SimConfig) -> None:
        sizing = config.sizing()
        self.names = {get_model(config.model).name, config.model}
        self.max_model_len = sizing.max_model_len
        self.block_size = sizing.block_size
        self.prefix_caching = config.enable_prefix_caching

    def read(self, body: dict[str, Any], *, chat: bool) -> Admission:
        """The request as the engine takes it; BadRequest where vLLM answers with an error."""
        model = body.get("model")
        if model is not None and model not in self.names:
            raise BadRequest(f"The model `{model}` does not exist.", status=404, kind="NotFoundError", param="model")
        tokens = prompt_tokens_of(body, chat)
        temperature = body.get("temperature")
        return Admission(
            prompt_tokens=len(tokens),
            max_tokens=(max_tokens := self._max_tokens(body, len(tokens), chat=chat)),
            min_tokens=self._min_tokens(body, max_tokens),
            ignore_eos=bool(body.get("ignore_eos", False)),
            seed=int_field(body, "seed", None),
            greedy=isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0,
            prompt_digest=hashlib.blake2b(repr(tokens).encode(), digest_size=16).hexdigest(),
            block_hashes=block_hashes(tokens, self.block_size) if self.prefix_caching else (),
        )

    def _max_tokens(self, body: dict[str, Any], prompt_tokens: int, *, chat: bool) -> int:
        limit = self.max_model_len
        name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
        requested = int_field(body, name, None)
        if requested is not None and requested > limit:
            raise _validation(f"{name}={requested} cannot be greater than max_model_len={limit}. "
                              "Please request fewer output tokens.", name, requested)  # fmt: skip
        if prompt_tokens > limit:
            qualifier = "at least " if prompt_tokens == limit + 1 else ""  # vLLM's tokenizer may have cut it there
            raise _validation(
                f"This model's maximum context length is {limit} tokens. However, your prompt contains "
                f"{qualifier}{prompt_tokens} input tokens, which exceeds this limit even without any output "
                "tokens. Please reduce the length of the input prompt.",
                "input_tokens", prompt_tokens,
            )  # fmt: skip
        if requested is None and not chat:
            requested = DEFAULT_MAX_TOKENS
        granted = limit - prompt_tokens if requested is None else min(requested, limit - prompt_tokens)
        if granted < 1:
            raise _validation(f"max_tokens must be at least 1, got {granted}.", "max_tokens", granted)
        return granted

    @staticmethod
    def _min_tokens(body: dict[str, Any], max_tokens: int) -> int:
        min_tokens = int_field(body, "min_tokens", 0) or 0
        if min_tokens > max_tokens:
            raise _validation(f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.")
        return min_tokens
