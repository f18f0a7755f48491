"""What a lab recording shows of the controllers and kubelet that wrote it, in a form two runs can be compared
by: every condition Kueue, JobSet, Trainer, the scheduler and the kubelet (or kwok) wrote on the recorded
objects (Workloads, JobSets, TrainJobs, Pods), as (kind, type, status, reason, message), with a g3 run's own
job names put as placeholders; and the order of a Workload's condition types. The shipped fixtures
(tests/data/labs/g3/, built by tests/g3_recording.py; tests/data/labs/g4/) are held to real runs' shapes
with these (tests/test_labs_g3.py, tests/test_labs_g4.py, tests/cluster/test_g3_local.py)."""

from __future__ import annotations

import re
from typing import Any

Shape = tuple[str, str, str, str, str]
# g3-a-8c41, g3-b-8c41-worker-0, ...: a job of the run, by its letter.
_JOB = re.compile(r"\bg3-([a-c])-[0-9a-f]{4}\b")


def _plain(text: str) -> str:
    return _JOB.sub(r"g3-\1-RUN", text)


def shapes(recording: dict[str, Any]) -> set[Shape]:
    """Every condition of the recording's Workloads, JobSets and Pods, the run's names as placeholders."""
    out = set()
    for snap in recording["snapshots"]:
        for objs in snap["objects"].values():
            for o in objs:
                for c in (o.get("status") or {}).get("conditions") or []:
                    out.add((o["kind"], c["type"], c["status"], c.get("reason") or "", _plain(c.get("message") or "")))
    return out


# Conditions a poll catches or misses by timing: Kueue's PodsReady=False before kwok marks the pods Ready
# (a second or less), and the blockAdmission wait, which on the local cluster lasts about as long.
TRANSIENT = {("Workload", "PodsReady", "False"), ("Workload", "QuotaReserved", "False", "Waiting")}


def stable(recording: dict[str, Any]) -> set[Shape]:
    """`shapes` without the TRANSIENT ones: what every run on the same cluster shows."""
    return {s for s in shapes(recording) if s[:3] not in TRANSIENT and s[:4] not in TRANSIENT}


def workload_orders(recording: dict[str, Any]) -> set[tuple[str, ...]]:
    """The condition types of each Workload as its last snapshot lists them (the order Kueue appends them)."""
    last: dict[str, dict[str, Any]] = {}
    for snap in recording["snapshots"]:
        for w in snap["objects"].get("workloads", []):
            last[w["metadata"]["name"]] = w
    return {tuple(c["type"] for c in (w.get("status") or {}).get("conditions") or []) for w in last.values()}
