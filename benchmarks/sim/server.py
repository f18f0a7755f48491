"""Run the simulated backend in a background thread for tests and in-process benchmarks."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import uvicorn

from benchmarks.errors import BenchmarkError
from benchmarks.sim.app import build_app
from benchmarks.sim.config import SimConfig

STARTUP_TIMEOUT_S = 10.0


class SimServerError(BenchmarkError):
    """The simulated backend did not come up."""


@contextlib.contextmanager
def running_server(config: SimConfig) -> Iterator[str]:
    """Serve `config` on 127.0.0.1 on a free port; yields the base URL, stops the server on exit."""
    app = build_app(config)  # sizing errors surface here, before any thread starts
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"sim-{port}")
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base_url, thread)
        yield base_url
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_TIMEOUT_S)
        sock.close()


def _wait_healthy(base_url: str, thread: threading.Thread) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if not thread.is_alive():
                raise SimServerError(f"simulated backend at {base_url} exited during start-up")
            try:
                if client.get(f"{base_url}/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.01)
    raise SimServerError(f"simulated backend at {base_url} did not answer /health within {STARTUP_TIMEOUT_S} s")
