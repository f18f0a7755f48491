"""`--experiment cold-start` as a g6 run drives it: what the first request of a session waits for when the
GPU pool is at zero, phase by phase (benchmarks.g6.experiments.cold_start), its report and plot; a saved
recording measured again without a cluster (--recording)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiment import Drive, Ending, Experiment, Written
from benchmarks.g6.experiments import cold_start
from benchmarks.g6.experiments.cold_start import (
    SETTINGS,
    ColdStartOutcome,
    ColdStartParams,
    ColdStartRecording,
    ColdStartResult,
    cold_start_result,
)
from benchmarks.g6.experiments.cold_start_report import render_cold_start_plots, render_cold_start_report
from benchmarks.g6.incluster import ClusterRunner
from benchmarks.g6.invocation import Invocation
from stacks.output_folder import prepare


def _settings(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    unknown = [n for n in names if n not in SETTINGS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown setting(s) {unknown or text!r}; allowed: {', '.join(SETTINGS)}")
    return names


class ColdStart(Experiment[ColdStartParams, ColdStartOutcome]):
    name = "cold-start"
    folder = f"{LAB}-cold-start"
    result_model = ColdStartResult
    concurrency = (1,)
    measures_cold_start = True

    def add_flags(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--settings", type=_settings, help="comma-separated, each put in place with "
                           "`pulumi config set` + `pulumi up` and restored after (default as-configured; allowed: "
                           f"{', '.join(SETTINGS)})")  # fmt: skip
        group.add_argument("--recording", type=Path, help="measure a saved recording.json again (no cluster)")

    def parameters(self, given: dict[str, Any], params: G6Params, inv: Invocation) -> ColdStartParams:
        # Each wait is bounded by --health-timeout.
        return ColdStartParams(settings=given.get("settings") or ["as-configured"], repeats=params.repeats,
                               timeout_s=inv.health_timeout)  # fmt: skip

    def check(self, inv: Invocation) -> None:
        if inv.sim or inv.target:
            raise G6Error("--experiment cold-start scales the stack's vLLM and its GPU pool: give --stack STACK or "
                          "--outputs FILE (no --sim, no --target)")  # fmt: skip
        if not (inv.stack or inv.outputs):
            raise G6Error("--experiment cold-start needs --stack STACK or --outputs FILE (with --recording: the "
                          "outputs of the stack it was recorded on)")  # fmt: skip
        settings, recording = inv.given.get("settings"), inv.given.get("recording")
        if settings and set(settings) != {"as-configured"} and not inv.stack and recording is None:
            raise G6Error("--settings other than as-configured change the stack (`pulumi config set` + `pulumi up`): "
                          "give --stack STACK")  # fmt: skip

    def write_plan(self, folder: Path, params: G6Params, own: ColdStartParams, outputs: dict[str, Any] | None,
                   cpus: int) -> list[Path]:  # fmt: skip
        """What the experiment will do and restore, as YAML, touching nothing."""
        prepare(folder, "--client-manifest")
        path = folder / "cold-start-plan.yaml"
        path.write_text(yaml.safe_dump(cold_start.plan(outputs or {}, cold_start.vllm_where(outputs), own, params.stack),
                                       sort_keys=False))  # fmt: skip
        return [path]

    def recorded(self, inv: Invocation, own: ColdStartParams) -> ColdStartOutcome | None:
        path = inv.given.get("recording")
        if path is None:
            return None
        try:
            recording = ColdStartRecording.model_validate_json(path.read_text())
        except (OSError, ValueError) as exc:
            raise G6Error(f"cannot read recording {path}: {exc}") from None
        return cold_start.recorded(recording, own.poll_s)

    def outcome(self, own: ColdStartParams) -> ColdStartOutcome:
        return ColdStartOutcome(params=own)

    def run(self, drive: Drive, own: ColdStartParams, outcome: ColdStartOutcome) -> None:
        runner, server = drive.client.runner, drive.client.server
        # A cold start names a stack, never --target: the client side is the cluster's.
        assert isinstance(runner, ClusterRunner) and server is not None
        cold_start.run_cold_start(drive.params, drive.target, server, runner.cluster, cold_start.vllm_where(drive.outputs),
                                  outcome, drive.log)  # fmt: skip

    def write(self, ending: Ending, own: ColdStartParams, outcome: ColdStartOutcome, folder: Path) -> Written:
        result = cold_start_result(ending.meta, ending.params, outcome, ending.price, ending.cost)
        # The raw objects, events and logs, so the run can be measured again (--recording).
        recording = ColdStartRecording(source=outcome.source, records=outcome.records)
        (folder / "recording.json").write_text(recording.model_dump_json(indent=1))
        render_cold_start_plots(result, folder)
        return Written(result, render_cold_start_report(result), all(run.failure is None for run in result.runs))
