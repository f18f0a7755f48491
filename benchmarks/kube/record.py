"""A recording: the raw API objects, events, logs and client-side times one lab run saw.

The live path writes it (recording.json in the results folder) and `measure` reads only it, so a
measurement can be re-run, tested and turned into an example report without a cluster. Objects are
kept exactly as the Kubernetes API returns them.
"""

from __future__ import annotations

import base64
import gzip
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.kube.errors import LabError
from benchmarks.kube.timeline import event_time

# Node labels GKE sets that say which GPU driver the node installs.
GPU_DRIVER_LABEL = "cloud.google.com/gke-gpu-driver-version"


class Snapshot(BaseModel):
    """The objects of interest as listed at one moment (a polled series, e.g. Kueue Workloads)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    at: datetime
    objects: dict[str, list[dict[str, Any]]]


class Recording(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    lab: str
    run_id: str
    stack: str | None = None
    started_at: datetime
    finished_at: datetime
    outputs: dict[str, Any] = Field(description="stack outputs, without the kubeconfig")
    server_version: dict[str, Any] = Field(default_factory=dict, description="GET /version")
    nodes: list[dict[str, Any]] = Field(default_factory=list)
    events: list[dict[str, Any]] = Field(default_factory=list)
    charts: dict[str, str] = Field(default_factory=dict, description="Helm release -> chart-version, from the cluster")
    snapshots: list[Snapshot] = Field(default_factory=list)
    objects: dict[str, list[dict[str, Any]]] = Field(default_factory=dict, description="final state, by role")
    logs: dict[str, str] = Field(default_factory=dict, description="pod name -> log text")
    client: dict[str, Any] = Field(default_factory=dict, description="what the benchmark itself observed")
    notes: list[str] = Field(default_factory=list, description="what went wrong on the way, in order")
    pods: list[dict[str, Any]] = Field(
        default_factory=list, description="every pod of the run's namespaces as it ended (imageIDs, restarts)"
    )
    nvidia_smi: str | None = Field(None, description="output of the one-shot nvidia-smi pod on the GPU node")
    cluster_statement: dict[str, str] = Field(
        default_factory=dict, description="what the cluster says it simulates and runs for real (facts.simulation)"
    )


def save_recording(rec: Recording, path: Path) -> None:
    path.write_text(rec.model_dump_json(indent=1))


def load_recording(path: Path) -> Recording:
    try:
        return Recording.model_validate_json(path.read_text())
    except (OSError, ValueError) as e:
        raise LabError(f"cannot read recording {path}: {e}") from e


def public_outputs(outputs: dict[str, Any]) -> dict[str, Any]:
    """The outputs worth keeping in a results folder: everything but the (secret) kubeconfig."""
    return {k: v for k, v in outputs.items() if k != "kubeconfig"}


def helm_chart_versions(secrets: list[dict[str, Any]]) -> dict[str, str]:
    """Release name -> 'chart-version' of each deployed Helm release, from Helm's release Secrets.

    Helm 3 stores a release as Secret data `release`: base64 (the Secret's own encoding) of base64 of
    gzipped JSON. Only the newest deployed revision of each release counts.
    """
    newest: dict[str, tuple[int, str]] = {}
    for s in secrets:
        labels = (s.get("metadata") or {}).get("labels") or {}
        if labels.get("owner") != "helm" or labels.get("status") != "deployed":
            continue
        payload = (s.get("data") or {}).get("release")
        if not payload:
            continue
        release = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(payload))))
        chart = release["chart"]["metadata"]
        revision = int(release.get("version", 0))
        name = release["name"]
        if name not in newest or revision > newest[name][0]:
            newest[name] = (revision, f"{chart['name']}-{chart['version']}")
    return {name: chart for name, (_, chart) in sorted(newest.items())}


def warning_summary(events: list[dict[str, Any]]) -> list[str]:
    """One line per (object, reason) of the Warning events: what failed first time, oldest first."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    count: dict[tuple[str, str], int] = {}
    for e in sorted(
        (e for e in events if e.get("type") == "Warning"), key=lambda e: event_time(e).isoformat() if event_time(e) else ""
    ):
        obj = e.get("involvedObject") or {}
        key = (f"{obj.get('kind')}/{obj.get('name')}", e.get("reason", ""))
        seen.setdefault(key, e)
        count[key] = count.get(key, 0) + int(e.get("count") or 1)
    lines = []
    for key, e in seen.items():
        when = event_time(e)
        lines.append(
            f"{when.strftime('%H:%M:%S') if when else '?'} {key[0]} {key[1]} (x{count[key]}): {e.get('message', '').strip()}"
        )
    return lines
