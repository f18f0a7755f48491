"""Test doubles for the lab benchmarks: a cluster that records what it is asked and answers from a script,
and a real local HTTP server for the in-cluster client scripts.

Passed to the code under test through its constructor/argument (the `Cluster` protocol), never patched in.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

DATA = Path(__file__).resolve().parent / "data" / "labs"


def recording_path(lab: str) -> Path:
    return DATA / lab / "recording.json"


def fixture_outputs(lab: str) -> dict[str, Any]:
    """The stack outputs stored in a lab's recording, plus a placeholder kubeconfig."""
    outputs = json.loads(recording_path(lab).read_text())["outputs"]
    return {**outputs, "kubeconfig": "unused by the fake cluster"}


class FakeCluster:
    """Records creates, patches and deletes; `on_list(api_version, kind, namespace, selector)` answers
    lists (and may raise, to play a failure mid-run); `on_patch` sees each patch as it happens."""

    def __init__(self, on_list: Callable[[str, str, str | None, str | None], list[dict[str, Any]]] | None = None):
        self.created: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, str, str | None, str]] = []
        self.patched: list[tuple[str, str, str | None, str, dict[str, Any]]] = []
        self.on_list = on_list or (lambda *a: [])
        self.on_patch: Callable[[str, str, str | None, str, dict[str, Any]], None] = lambda *a: None
        self.logs_read: list[tuple[str, str, str | None]] = []
        self.on_log: Callable[[str, str, str | None], str] = lambda *a: ""
        self.pod_gets: list[tuple[str, str, int, str]] = []
        self.on_pod_get: Callable[[str, str, int, str], str] = lambda *a: ""
        self.posts: list[tuple[str, str, int, str, dict[str, Any]]] = []
        self.on_service_post: Callable[[str, str, int, str, dict[str, Any]], str] = lambda *a: "{}"

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.created.append(obj)
        return obj

    def list(self, api_version, kind, namespace=None, label_selector=None):
        return self.on_list(api_version, kind, namespace, label_selector)

    def delete_labelled(self, api_version, kind, namespace, label_selector):
        self.deleted.append((api_version, kind, namespace, label_selector))

    def patch(self, api_version, kind, namespace, name, patch):
        self.patched.append((api_version, kind, namespace, name, patch))
        self.on_patch(api_version, kind, namespace, name, patch)
        return {}

    def pod_log(self, namespace, name, container=None):
        self.logs_read.append((namespace, name, container))
        return self.on_log(namespace, name, container)

    def service_get(self, namespace, service, port, path, params):
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})

    def service_post(self, namespace, service, port, path, body, timeout_s):
        self.posts.append((namespace, service, port, path, body))
        return self.on_service_post(namespace, service, port, path, body)

    def pod_get(self, namespace, pod, port, path):
        self.pod_gets.append((namespace, pod, port, path))
        return self.on_pod_get(namespace, pod, port, path)

    def server_version(self):
        return {"gitVersion": "v1.35.7-gke.1219000"}


def live_args(tmp_path: Path, **extra: Any) -> argparse.Namespace:
    return argparse.Namespace(stack=None, outputs=None, out=tmp_path, timeout=1.0, poll=0.01, **extra)


def run_client_script(handler: type[BaseHTTPRequestHandler], script: str, env: dict[str, str], timeout_s: float = 60) -> str:
    """Run one of benchmarks/labs/scripts/ as the cluster runs it, against a real local HTTP server
    answering with `handler` (TARGET points at it); its stdout."""
    from benchmarks.labs.workloads import SCRIPTS

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    full = {**os.environ, "TARGET": f"http://127.0.0.1:{server.server_port}", **env}
    try:
        return subprocess.run([sys.executable, str(SCRIPTS / script)], env=full, capture_output=True, text=True,
                              timeout=timeout_s, check=True).stdout
    finally:
        server.shutdown()
