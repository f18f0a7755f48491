"""The live path shared by every lab: parse the CLI, read the stack, run the lab on the cluster
inside a RunScope (cleanup always), save the recording, measure it and write the results folder."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from benchmarks.cluster import Cluster, KubeApiError, KubeCluster, RunScope, new_run_id
from benchmarks.errors import BenchmarkError
from benchmarks.harness import new_run_folder, read_outputs, tool_version
from benchmarks.harness.results import client_cpus
from benchmarks.kube.errors import LabError
from benchmarks.kube.evidence import cluster_statement, final_pods, node_events, run_nvidia_smi
from benchmarks.kube.record import Recording, Snapshot, helm_chart_versions, public_outputs, save_recording
from benchmarks.labs.report import write_results
from benchmarks.labs.result import LabResult
from stacks.output_folder import OutputFolderError, prepare


class LiveLab(Protocol):
    """A lab module as the live path uses it."""

    LAB: str
    TITLE: str
    DEFAULT_TIMEOUT_S: float

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def check_outputs(self, outputs: dict[str, Any]) -> None: ...

    def record(self, session: LabSession, args: argparse.Namespace) -> Recording: ...

    def measure(self, rec: Recording, source: str = "live") -> LabResult: ...

    def report_body(self, result: LabResult) -> str: ...

    def plots(self, result: LabResult, folder: Path) -> list[str]: ...


def now() -> datetime:
    return datetime.now(timezone.utc)


class LabSession:
    """One run on one cluster: the outputs, the cluster, the scope that cleans up, and progress output."""

    def __init__(self, lab: str, outputs: dict[str, Any], cluster: Cluster, run_id: str, log=print):
        self.lab = lab
        self.outputs = outputs
        self.cluster = cluster
        self.run_id = run_id
        self.log = log
        self.scope = RunScope(cluster, run_id, lab, log)
        self.started_at = now()
        self.notes: list[str] = []
        self.client_facts: dict[str, Any] = {}  # tool version, CPUs, command: kept in the recording
        # What the lab has seen so far. Labs fill these as they go, so a run that stops half way
        # still leaves a recording with its evidence (see `run`).
        self.namespaces: list[str] = []
        self.snapshots: list[Snapshot] = []
        self.logs: dict[str, str] = {}
        self.client: dict[str, Any] = {}
        self.nvidia_smi: str | None = None  # a lab whose own GPU pod ran nvidia-smi (g1's probe) sets it

    def recording(self, **parts: Any) -> Recording:
        """The recording of this run: common cluster facts, what the lab gathered, and `parts`."""
        events: list[dict[str, Any]] = []
        for ns in self.namespaces:
            events += self.cluster.list("v1", "Event", ns)
        return Recording(
            lab=self.lab,
            run_id=self.run_id,
            stack=self.outputs.get("stack") or self.outputs.get("lab"),
            started_at=self.started_at,
            finished_at=now(),
            outputs=public_outputs(self.outputs),
            server_version=self.cluster.server_version(),
            nodes=self.cluster.list("v1", "Node"),
            events=events,
            charts=self._charts(),
            notes=self.notes + parts.pop("notes", []),
            snapshots=parts.pop("snapshots", self.snapshots),
            logs=parts.pop("logs", self.logs),
            client={**self.client_facts, **self.client, **parts.pop("client", {})},
            nvidia_smi=self.nvidia_smi,
            cluster_statement=cluster_statement(self.cluster),
            **parts,
        )

    def with_evidence(self, rec: Recording) -> Recording:
        """`rec` with what the report's evidence needs from the cluster as the run ends: nvidia-smi's
        output (a one-shot pod, inside the run's scope so it is swept with the rest), the final pods
        and the GPU nodes' events. A failure here is a note, never the end of a measured run."""
        update: dict[str, Any] = {}
        try:
            if self.nvidia_smi is None:
                update["nvidia_smi"] = run_nvidia_smi(self.scope, self.outputs, log=self.log)
            update["pods"] = final_pods(self.cluster, self.namespaces)
            seen = {(e.get("metadata") or {}).get("uid") for e in rec.events}
            update["events"] = rec.events + [
                e for e in node_events(self.cluster, self.started_at) if (e.get("metadata") or {}).get("uid") not in seen
            ]
        except Exception as e:  # as the cost line: the evidence must never cost the measurement
            update["notes"] = rec.notes + [f"evidence not fully read from the cluster: {e}"]
        return rec.model_copy(update=update)

    def _charts(self) -> dict[str, str]:
        """Helm releases read from the cluster; a user who may not list Secrets still gets a report."""
        try:
            return helm_chart_versions(self.cluster.list("v1", "Secret", None, "owner=helm"))
        except Exception as e:
            self.notes.append(f"chart versions not read from the cluster (listing Helm's Secrets failed: {e})")
            return {}


def build_parser(lab: LiveLab) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python -m benchmarks {lab.LAB}", description=f"{lab.LAB}: {lab.TITLE}")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--stack", help="Pulumi stack to read outputs from (needs the pulumi CLI)")
    src.add_argument("--outputs", type=Path, help="saved `pulumi stack output --json --show-secrets` file")
    p.add_argument("--out", type=Path, default=Path("results"), help="parent folder of the results folder")
    p.add_argument(
        "--timeout", type=float, default=lab.DEFAULT_TIMEOUT_S, help="seconds allowed for each wait (default %(default)s)"
    )
    p.add_argument("--poll", type=float, default=5.0, help="seconds between polls of the cluster (default %(default)s)")
    lab.add_arguments(p)
    return p


def main(lab: LiveLab, argv: list[str] | None = None) -> int:
    return run(lab, build_parser(lab).parse_args(argv))


def run(lab: LiveLab, args: argparse.Namespace, cluster: Cluster | None = None, outputs: dict[str, Any] | None = None) -> int:
    """Run `lab` live; `cluster`/`outputs` replace the real ones (the test seam). Exit status 0 = all
    checks passed, 1 = a check failed, 2 = the run could not be made."""
    try:
        prepare(args.out, "--out")  # before any GPU minute is spent: the results must have somewhere to go
        outputs = outputs if outputs is not None else read_outputs(args.stack, args.outputs)
        lab.check_outputs(outputs)
        cluster = cluster or KubeCluster.from_kubeconfig(outputs.get("kubeconfig") or "")
        session = LabSession(lab.LAB, outputs, cluster, new_run_id(lab.LAB))
        session.client_facts = {"tool_version": tool_version(), "client_host_cpus": client_cpus(), "command": sys.argv}
        print(f"{lab.LAB}: run {session.run_id}; every object is labelled with it and deleted at the end")
        try:
            with session.scope:
                rec = session.with_evidence(lab.record(session, args))
        except (LabError, KubeApiError) as e:
            _save_partial(lab, session, args, e)
            raise
        result = lab.measure(rec, source="live")
        folder = write_results(new_run_folder(args.out, lab.LAB, session.started_at), rec, result, lab)
    except (BenchmarkError, OutputFolderError) as e:
        print(f"{lab.LAB}: {e}", file=sys.stderr)
        return 2
    print(f"{lab.LAB}: {'PASS' if result.passed else 'FAIL'}; results in {folder}")
    for c in result.checks:
        print(f"  [{'pass' if c.passed else 'FAIL'}] {c.name}: {c.evidence}")
    return 0 if result.passed else 1


def _save_partial(lab: LiveLab, session: LabSession, args: argparse.Namespace, error: Exception) -> None:
    """After a failed run (already cleaned up), keep what it saw: events often say why (quota, stock-out)."""
    session.notes.append(f"run stopped: {error}")
    try:
        folder = new_run_folder(args.out, lab.LAB, session.started_at)
        save_recording(session.recording(), folder / "recording.json")
        print(f"{lab.LAB}: partial recording (objects, events and logs seen so far) in {folder}", file=sys.stderr)
    except Exception as e:  # the original error matters more than this one
        print(f"{lab.LAB}: could not save a partial recording: {e}", file=sys.stderr)
