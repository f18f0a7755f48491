"""A server under test as this process sees it: where the load generator sends, how this process
reads and asks the server (plain HTTP, or through the API server's service proxy), its health and
versions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from benchmarks.harness.answers import body_text
from benchmarks.harness.errors import HarnessError

# GET a path of the server; the body as text. Raises HarnessError when there is no answer or the
# status is not 2xx, with a message naming the server and the path.
Reader = Callable[[str], str]
# POST a JSON body to a path of the server within a timeout in seconds; the answer as text. Raises
# HarnessError as a Reader does.
Poster = Callable[[str, dict[str, Any], float], str]


@dataclass(frozen=True)
class Server:
    """`base_url` is where the load generator sends requests (an in-cluster URL when it runs in the
    cluster); `get` and `post` are how this process reaches the server, which may be a different way in."""

    base_url: str
    get: Reader
    post: Poster
    where: str  # how `get` and `post` reach it, for messages
    # The running server's own log (a pod's, through the API server); None where this process cannot
    # read it (a URL of the user's, the simulator). Raises HarnessError as a Reader does.
    log: Callable[[], str] | None = None


class NotOk(HarnessError):
    """The server answered, with a status that is not 2xx."""


def _unreachable(base_url: str, exc: httpx.HTTPError) -> HarnessError:
    """Why a URL cannot be reached, and what to do where the reason is known: a Service's cluster DNS
    name (`svc.namespace.svc.cluster.local`) resolves only inside its cluster."""
    host = urlsplit(base_url).hostname or ""
    parts = host.split(".")
    if isinstance(exc, httpx.ConnectError) and len(parts) >= 3 and parts[2] == "svc":
        port = urlsplit(base_url).port or 80
        return HarnessError(
            f"{base_url} is Service {parts[1]}/{parts[0]}'s address inside the cluster, which this machine cannot "
            f"resolve: give --stack or --outputs without --target (the load generator then runs in the cluster), or "
            f"`kubectl port-forward -n {parts[1]} svc/{parts[0]} {port}` and --target http://127.0.0.1:{port}"
        )
    return HarnessError(f"cannot reach {base_url}: {exc or type(exc).__name__}")


def http_server(base_url: str, timeout_s: float = 10.0) -> Server:
    """A server this process reaches at the same URL as the load generator."""
    root = base_url.rstrip("/")

    def send(method: str, path: str, body: dict[str, Any] | None, timeout: float) -> str:
        try:
            resp = httpx.request(method, root + path, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise _unreachable(base_url, exc) from exc
        if not resp.is_success:
            # A POST's error body says what the server refused (vLLM: {"error": {"message": ...}}).
            detail = f": {body_text(resp.text)}" if method == "POST" else ""
            raise NotOk(f"{method} {root}{path} answered HTTP {resp.status_code}{detail}")
        return resp.text

    return Server(
        base_url=base_url,
        get=lambda path: send("GET", path, None, timeout_s),
        post=lambda path, body, timeout: send("POST", path, body, timeout),
        where=base_url,
    )


def server_versions(server: Server) -> dict[str, str]:
    """Whatever of /version and /v1/models the server answers, flattened to strings."""
    found: dict[str, str] = {}
    try:
        found["server_version"] = str(json.loads(server.get("/version")).get("version"))
    except (HarnessError, ValueError, AttributeError):
        pass
    try:
        for card in json.loads(server.get("/v1/models")).get("data", []):
            for key in ("id", "root", "owned_by", "max_model_len"):
                if card.get(key) is not None:
                    found[f"model.{key}"] = str(card[key])
    except (HarnessError, ValueError, AttributeError):
        pass
    return found


@dataclass(frozen=True)
class ServedModel:
    """One card of GET /v1/models: the name requests use, and vLLM's max-model-len where it says."""

    id: str
    max_model_len: int | None


def served_models(server: Server) -> list[ServedModel]:
    """What the server serves, from GET /v1/models; a HarnessError when it is no OpenAI-compatible server."""
    try:
        text = server.get("/v1/models")
    except NotOk as exc:
        raise HarnessError(f"{exc}: not an OpenAI-compatible server (vLLM lists its models there)") from None
    try:
        cards = json.loads(text)["data"]
        return [ServedModel(id=str(c["id"]), max_model_len=c.get("max_model_len")) for c in cards]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise HarnessError(
            f"{server.where} is not an OpenAI-compatible server: GET /v1/models answered no model list ({text[:80]!r})"
        ) from None


def only_model(server: Server) -> str:
    """The model the server serves when it serves exactly one; a HarnessError saying what it serves else."""
    ids = [m.id for m in served_models(server)]
    if len(ids) != 1:
        raise HarnessError(f"{server.where} serves {', '.join(ids) or 'no model'}: say which with --model")
    return ids[0]


def check_serves(server: Server, model: str, tokens: int | None = None, asked: str = "") -> ServedModel:
    """Fail fast, before any load, on a server that serves another model or shorter sequences than the
    run sends (`tokens` per request, asked for by the flags in `asked`), instead of recording a sweep of
    failed requests."""
    cards = served_models(server)
    card = next((m for m in cards if m.id == model), None)
    if card is None:
        raise HarnessError(f"{server.where} serves {', '.join(m.id for m in cards) or 'no model'}, not {model}")
    if tokens is not None and card.max_model_len is not None and tokens > card.max_model_len:
        raise HarnessError(
            f"{asked} = {tokens} tokens per request: more than {model}'s max-model-len {card.max_model_len} at "
            f"{server.where} (GET /v1/models); shorten them"
        )
    return card


def wait_healthy(server: Server, timeout_s: float, poll_s: float = 2.0) -> None:
    """Wait until GET /health answers, e.g. after a `pulumi up` restarted the server."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            server.get("/health")
            return
        except HarnessError as exc:
            last = str(exc)
        time.sleep(poll_s)
    raise HarnessError(f"{server.where}/health not healthy within {timeout_s:.0f}s (last: {last})")
