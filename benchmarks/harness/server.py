"""What a target server says about itself: health and versions (vLLM's /version, /v1/models)."""

from __future__ import annotations

import time

import httpx

from benchmarks.harness.errors import HarnessError


def server_versions(base_url: str, timeout_s: float = 5.0) -> dict[str, str]:
    """Whatever of /version and /v1/models the server answers, flattened to strings."""
    found: dict[str, str] = {}
    with httpx.Client(base_url=base_url, timeout=timeout_s) as client:
        try:
            resp = client.get("/version")
            if resp.status_code == 200:
                found["server_version"] = str(resp.json().get("version"))
        except (httpx.HTTPError, ValueError):
            pass
        try:
            resp = client.get("/v1/models")
            if resp.status_code == 200:
                for card in resp.json().get("data", []):
                    for key in ("id", "root", "owned_by", "max_model_len"):
                        if card.get(key) is not None:
                            found[f"model.{key}"] = str(card[key])
        except (httpx.HTTPError, ValueError):
            pass
    return found


def check_reachable(base_url: str, timeout_s: float = 10.0) -> None:
    """Fail fast on a target nothing listens on, instead of timing out every request of a sweep."""
    try:
        httpx.get(base_url.rstrip("/") + "/v1/models", timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise HarnessError(f"cannot reach {base_url}: {exc or type(exc).__name__}") from exc


def wait_healthy(base_url: str, timeout_s: float, poll_s: float = 2.0) -> None:
    """Wait until GET /health answers 200, e.g. after a `pulumi up` restarted the server."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            resp = httpx.get(base_url.rstrip("/") + "/health", timeout=5.0)
            if resp.status_code == 200:
                return
            last = f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            last = str(exc) or type(exc).__name__
        time.sleep(poll_s)
    raise HarnessError(f"{base_url}/health not healthy within {timeout_s:.0f}s (last: {last})")
