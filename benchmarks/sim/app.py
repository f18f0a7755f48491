"""HTTP face of the simulated backend: vLLM's OpenAI-compatible routes, /metrics and ground truth.

Request bodies are read by admission.py (prompt tokens, lengths against the context, vLLM's 400s), the
reader the virtual-clock replay uses too. Each generated token is one word with a leading space, so a
client counting words in the streamed text counts tokens.

Non-streamed completions that ask for `logprobs`, `prompt_logprobs` or `return_token_ids` are
answered from the toy model (toymodel.py) in vLLM's shapes: prompt words become token ids, the
continuation is sampled from it (seeded by `seed`, greedy at temperature 0), and at most
MAX_LOGPROBS log-probabilities are listed per position, as vLLM's default --max-logprobs allows.

Streaming chat sends its role-only chunk as soon as the request is accepted, before any token
exists: a client that times the first chunk instead of the first content token measures nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from facts.catalogue import get_gpu, get_model
from benchmarks.sim import toymodel
from benchmarks.sim.admission import BadRequest, RequestReader, int_field, prompt_of
from benchmarks.sim.config import SimConfig
from benchmarks.sim.engine import Engine, EngineCore, SimRequest
from benchmarks.sim.metrics import SimMetrics

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
TOY_FIELDS = ("logprobs", "prompt_logprobs", "return_token_ids")


def _error(exc: BadRequest) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


def _token_text(request: SimRequest, position: int) -> str:
    return f" w{(request.index * 7919 + position) % 997}"


def _prompt_ids(body: dict[str, Any]) -> list[int]:
    """The prompt as the toy model's token ids: a string's words mapped, a list of ids as given."""
    prompt = prompt_of(body)
    if isinstance(prompt, str):
        return [toymodel.token_id(word) for word in prompt.split()]
    ids = list(prompt)
    if ids and max(ids) >= toymodel.VOCAB:
        raise BadRequest(f"Token id {max(ids)} is out of vocabulary", param="prompt")
    return ids


def _logprobs_field(body: dict[str, Any], name: str) -> int | None:
    value = int_field(body, name, None)
    if value is not None and value > MAX_LOGPROBS:
        kind = "sample" if name == "logprobs" else "prompt"
        raise BadRequest(f"Requested {kind} logprobs of {value}, which is greater than max allowed: {MAX_LOGPROBS}")
    return value


class SimServer:
    """One simulated vLLM server: engine, metrics and route handlers."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.sizing = config.sizing()
        self.model_name = get_model(config.model).name
        self.reader = RequestReader(config)
        self.metrics = SimMetrics(
            model_name=self.model_name,
            gpu=get_gpu(config.gpu),
            sizing=self.sizing,
            num_gpu_blocks_override=config.num_gpu_blocks_override,
        )
        self.engine: Engine | None = None
        self.created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        core = EngineCore(self.sizing, seed=self.config.seed, speedup=self.config.speedup,
                          prefix_caching=self.config.enable_prefix_caching, on_token=self._token, on_finish=self._finish)  # fmt: skip
        self.engine = Engine(core)
        self.metrics.attach(self.engine)
        task = asyncio.create_task(self.engine.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _token(self, request: SimRequest) -> None:
        self.metrics.on_token(request)
        if request.events is not None:
            request.events.put_nowait(request.output_tokens)

    def _finish(self, request: SimRequest) -> None:
        self.metrics.on_finish(request)
        if request.events is not None:
            request.events.put_nowait(None)  # the handler's stream ends

    # -- plain routes -------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> JSONResponse:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": self.model_name,
            "parent": None,
            "max_model_len": self.sizing.max_model_len,
        }
        return JSONResponse({"object": "list", "data": [card]})

    async def prometheus(self, request: Request) -> Response:
        # The 0.0.4 text format: what vLLM and dcgm-exporter serve and Prometheus 2.x parses.
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_PLAIN_0_0_4)

    async def sim_requests(self, request: Request) -> JSONResponse:
        assert self.engine is not None
        return JSONResponse([r.record() for r in self.engine.finished])

    async def sim_config(self, request: Request) -> JSONResponse:
        return JSONResponse({"config": self.config.model_dump(), "sizing": self.sizing.model_dump()})

    # -- generation ---------------------------------------------------------------------------
    async def completions(self, request: Request) -> Response:
        return await self._generate(request, chat=False)

    async def chat_completions(self, request: Request) -> Response:
        return await self._generate(request, chat=True)

    async def _generate(self, http: Request, *, chat: bool) -> Response:
        try:
            body = await self._body(http)
            admission = self.reader.read(body, chat=chat)
            toy = None
            if not chat and any(body.get(name) is not None for name in TOY_FIELDS):
                if body.get("stream"):
                    raise BadRequest("the simulator lists log-probabilities and token ids on non-streamed completions only")
                toy = _Toy(body, _prompt_ids(body), admission.seed)
        except BadRequest as exc:
            return _error(exc)
        assert self.engine is not None
        sim = self.engine.submit(admission)
        shape = _ChatShape(self, sim) if chat else _CompletionShape(self, sim)
        if body.get("stream"):
            options = body.get("stream_options") or {}
            include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
            return StreamingResponse(self._stream(sim, shape, include_usage), media_type="text/event-stream")
        await self._drain(sim)
        return JSONResponse(shape.whole() if toy is None else toy.whole(shape))

    async def _body(self, http: Request) -> dict[str, Any]:
        try:
            body = await http.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadRequest("request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        return body

    async def _drain(self, sim: SimRequest) -> None:
        assert sim.events is not None and self.engine is not None
        try:
            while await sim.events.get() is not None:
                pass
        finally:
            self.engine.abort(sim)

    async def _stream(self, sim: SimRequest, shape: _Shape, include_usage: bool) -> AsyncIterator[str]:
        assert sim.events is not None and self.engine is not None
        try:
            for chunk in shape.opening():
                yield _sse(chunk)
            sent = 0
            while (count := await sim.events.get()) is not None:
                text = "".join(_token_text(sim, i) for i in range(sent, count))
                sent = count
                # As vLLM does, the chunk with the last token carries the finish reason.
                last = sim.finish_reason is not None and count == sim.output_tokens
                yield _sse(shape.delta(text, sim.finish_reason if last else None))
            if include_usage:
                yield _sse(shape.usage_chunk())
            yield "data: [DONE]\n\n"
        finally:
            # A client that went away mid-stream frees its sequence, as vLLM aborts it.
            self.engine.abort(sim)


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload)}\n\n"


class _Shape:
    """The JSON of one response kind (completion or chat), streamed or whole."""

    object_whole = ""
    object_chunk = ""
    id_prefix = ""

    def __init__(self, server: SimServer, sim: SimRequest) -> None:
        self.server = server
        self.sim = sim
        self.id = f"{self.id_prefix}-{sim.request_id}"

    def _envelope(self, kind: str) -> dict[str, Any]:
        created = int(self.sim.arrival_wall_s)
        return {"id": self.id, "object": kind, "created": created, "model": self.server.model_name}

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.sim.prompt_tokens,
            "total_tokens": self.sim.prompt_tokens + self.sim.output_tokens,
            "completion_tokens": self.sim.output_tokens,
        }

    def usage_chunk(self) -> dict[str, Any]:
        return {**self._envelope(self.object_chunk), "choices": [], "usage": self.usage()}

    def text(self) -> str:
        return "".join(_token_text(self.sim, i) for i in range(self.sim.output_tokens))

    def opening(self) -> list[dict[str, Any]]:
        return []

    def delta(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        raise NotImplementedError

    def whole(self) -> dict[str, Any]:
        raise NotImplementedError


class _CompletionShape(_Shape):
    object_whole = object_chunk = "text_completion"
    id_prefix = "cmpl"

    def delta(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
        return {**self._envelope(self.object_chunk), "choices": [choice]}

    def whole(self) -> dict[str, Any]:
        choice = {
            "index": 0,
            "text": self.text(),
            "logprobs": None,
            "finish_reason": self.sim.finish_reason,
            "stop_reason": None,
        }
        return {**self._envelope(self.object_whole), "choices": [choice], "usage": self.usage()}


class _Toy:
    """A completion answered from the toy model: its continuation, log-probabilities and token ids."""

    def __init__(self, body: dict[str, Any], prompt_ids: list[int], seed: int | None) -> None:
        self.prompt_ids = prompt_ids
        self.logprobs = _logprobs_field(body, "logprobs")
        self.prompt_logprobs = _logprobs_field(body, "prompt_logprobs")
        self.as_ids = bool(body.get("return_tokens_as_token_ids"))
        self.return_ids = bool(body.get("return_token_ids"))
        temperature = body.get("temperature")
        self.rng = None if temperature == 0 else random.Random(seed) if seed is not None else random.Random()

    def _key(self, token: int) -> str:
        return f"token_id:{token}" if self.as_ids else toymodel.text(token)

    def _sample_logprobs(self, ids: list[int]) -> dict[str, Any]:
        """vLLM's CompletionLogProbs: per token its log-probability and a dict of the token itself then the top k."""
        assert self.logprobs is not None
        tokens, values, tops, offsets, offset = [], [], [], [], 0
        prev = self.prompt_ids[-1] if self.prompt_ids else 0
        for token in ids:
            value = toymodel.logprob(prev, token)[0]
            tokens.append(self._key(token))
            values.append(value)
            tops.append({self._key(t): lp for t, lp in {token: value, **toymodel.top(prev, self.logprobs)}.items()})
            offsets.append(offset)
            offset += len(toymodel.text(token))
            prev = token
        return {"text_offset": offsets, "token_logprobs": values, "tokens": tokens, "top_logprobs": tops}

    def _prompt_entries(self) -> list[dict[str, Any] | None]:
        """vLLM's prompt_logprobs: null first, then {id: {logprob, rank, decoded_token}}, the prompt's token first."""
        assert self.prompt_logprobs is not None
        entries: list[dict[str, Any] | None] = [None]
        for prev, token in zip(self.prompt_ids, self.prompt_ids[1:]):
            own = toymodel.logprob(prev, token)
            ranked = enumerate(toymodel.successors(prev)[: self.prompt_logprobs], start=1)
            listed = {token: own, **{t: (lp, rank) for rank, (t, lp) in ranked}}
            entries.append({str(t): {"logprob": lp, "rank": rank, "decoded_token": toymodel.text(t)}
                            for t, (lp, rank) in listed.items()})  # fmt: skip
        return entries

    def whole(self, shape: _Shape) -> dict[str, Any]:
        body = shape.whole()
        prev = self.prompt_ids[-1] if self.prompt_ids else 0
        ids = toymodel.continue_from(prev, shape.sim.output_tokens, self.rng)
        choice = body["choices"][0]
        choice["text"] = "".join(toymodel.text(t) for t in ids)
        choice["logprobs"] = None if self.logprobs is None else self._sample_logprobs(ids)
        choice["prompt_logprobs"] = None if self.prompt_logprobs is None else self._prompt_entries()
        choice["token_ids"] = ids if self.return_ids else None
        choice["prompt_token_ids"] = self.prompt_ids if self.return_ids else None
        return body


class _ChatShape(_Shape):
    object_whole = "chat.completion"
    object_chunk = "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def opening(self) -> list[dict[str, Any]]:
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        return [{**self._envelope(self.object_chunk), "choices": [choice]}]

    def delta(self, text: str, finish_reason: str | None) -> dict[str, Any]:
        delta = {"content": text} if text else {}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._envelope(self.object_chunk), "choices": [choice]}

    def whole(self) -> dict[str, Any]:
        message = {"role": "assistant", "content": self.text()}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": self.sim.finish_reason}
        return {**self._envelope(self.object_whole), "choices": [choice], "usage": self.usage()}


def build_app(config: SimConfig) -> Starlette:
    """An ASGI app serving one simulated vLLM engine; the engine runs while the app's lifespan does."""
    server = SimServer(config)
    routes = [
        Route("/health", server.health, methods=["GET"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/v1/completions", server.completions, methods=["POST"]),
        Route("/v1/chat/completions", server.chat_completions, methods=["POST"]),
        Route("/metrics", server.prometheus, methods=["GET"]),
        Route("/sim/requests", server.sim_requests, methods=["GET"]),
        Route("/sim/config", server.sim_config, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=server.lifespan)
