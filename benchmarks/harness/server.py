"""A server under test as this process sees it: where the load generator sends, how this process
reads and asks the server (plain HTTP, or through the API server's service proxy), its health and
versions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

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


def http_server(base_url: str, timeout_s: float = 10.0) -> Server:
    """A server this process reaches at the same URL as the load generator."""
    root = base_url.rstrip("/")

    def send(method: str, path: str, body: dict[str, Any] | None, timeout: float) -> str:
        try:
            resp = httpx.request(method, root + path, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise HarnessError(f"cannot reach {base_url}: {exc or type(exc).__name__}") from exc
        if not resp.is_success:
            # A POST's error body says what the server refused (vLLM: {"error": {"message": ...}}).
            detail = f": {resp.text[:300]}" if method == "POST" else ""
            raise HarnessError(f"{method} {root}{path} answered HTTP {resp.status_code}{detail}")
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


def check_reachable(server: Server) -> None:
    """Fail fast on a target nothing listens on, instead of timing out every request of a sweep."""
    server.get("/v1/models")


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
