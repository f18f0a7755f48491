"""Simulated vLLM backend: OpenAI-compatible API and /metrics over a roofline-timed engine model.

    from benchmarks.sim import SimConfig, build_app, running_server
    with running_server(SimConfig(model="Qwen/Qwen2.5-0.5B-Instruct", speedup=10)) as base_url:
        ...
"""

from benchmarks.sim.app import build_app
from benchmarks.sim.config import SimConfig
from benchmarks.sim.server import SimServerError, running_server

__all__ = ["SimConfig", "SimServerError", "build_app", "running_server"]
