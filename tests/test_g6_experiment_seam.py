"""The g6 experiment seam (benchmarks.g6.experiment): a new experiment is one module and one row of
benchmarks.g6.experiments.table, and the run never asks which experiment it holds."""

from __future__ import annotations

import argparse
import ast
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from benchmarks.g6 import cli
from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.experiment import Drive, Ending, Experiment, Written
from benchmarks.g6.experiments.table import EXPERIMENTS
from benchmarks.g6.flags import whole
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.result import ExperimentResult, G6Point
from benchmarks.g6.sweep import Outcome, PointContext, load_spec, measure_point
from benchmarks.g6.targets import ServerSettings
from benchmarks.loadgen import LoadSpec

ROOT = Path(__file__).resolve().parents[1]
QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"


class ToyParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    clients: int = Field(2, ge=1)


class ToyResult(ExperimentResult):
    point: G6Point | None = None


@dataclass
class ToyOutcome(Outcome):
    point: G6Point | None = None

    @property
    def measured(self) -> int:
        return int(self.point is not None)

    def done(self) -> str:
        return f"{self.measured} of 1 point"


class Toy(Experiment[ToyParams, ToyOutcome]):
    """One closed-loop point of --toy-clients clients: the whole of an experiment, in one class."""

    name = "toy"
    folder = f"{LAB}-toy"
    result_model = ToyResult

    def add_flags(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--toy-clients", type=whole(1), help="toy: concurrent clients")

    def parameters(self, given: dict[str, Any], params: G6Params, inv: Invocation) -> ToyParams:
        return ToyParams(**({"clients": given["toy_clients"]} if "toy_clients" in given else {}))

    def planned(self, params: G6Params, own: ToyParams, base_url: str) -> list[LoadSpec]:
        return [load_spec(params, base_url, concurrency=own.clients, requests=8)]

    def outcome(self, own: ToyParams) -> ToyOutcome:
        return ToyOutcome()

    def run(self, drive: Drive, own: ToyParams, outcome: ToyOutcome) -> None:
        mns = drive.params.max_num_seqs[0]
        with drive.target.serving(ServerSettings()) as server:
            (spec,) = self.planned(drive.params, own, server.base_url)
            outcome.point = measure_point(drive.params, spec, server, "toy", PointContext(mns, None), drive.how).point

    def write(self, ending: Ending, own: ToyParams, outcome: ToyOutcome, folder: Path) -> Written:
        result = ToyResult(meta=ending.meta, params=ending.params, point=outcome.point, cost=ending.cost)
        tokens = outcome.point.output_tokens_per_s if outcome.point else None
        return Written(result, f"# toy\n\n{tokens:.0f} output tokens/s\n", outcome.point is not None)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(EXPERIMENTS, Toy.name, Toy())  # the one row


def test_a_new_experiment_is_one_class_and_one_row_of_the_table(toy, tmp_path, capsys):
    argv = ["--sim", "--virtual", "--model", QWEN_05, "--experiment", "toy", "--toy-clients", "3", "--requests", "8",
            "--out", str(tmp_path), "--quiet"]  # fmt: skip
    assert cli.run(argv) == 0
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith("g6-toy-")
    result = json.loads((folder / "result.json").read_text())
    assert result["params"]["experiment"] == "toy"
    assert result["point"]["concurrency"] == 3  # its own flag, typed by its own parameters, reached the load
    assert result["point"]["completed"] == 8 and result["point"]["output_tokens_per_s"] > 0
    assert (folder / "report.md").read_text().startswith("# toy")
    assert result["meta"]["command"][3:6] == [LAB, "--sim", "--virtual"]


def test_an_experiments_own_flag_given_to_another_is_refused_by_name(toy, tmp_path, capsys):
    assert cli.run(["--sim", "--toy-clients", "3", "--out", str(tmp_path)]) == 2
    assert "--toy-clients applies to --experiment toy only: this sweep run would ignore it" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_an_experiments_bad_flag_value_is_argparses_one_line(toy, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.parse(["--sim", "--experiment", "toy", "--toy-clients", "0"])
    assert exc.value.code == 2
    assert "--toy-clients: expected a whole number >= 1, got '0'" in capsys.readouterr().err


def test_every_experiment_lists_its_own_flags_in_its_own_help_group():
    text = cli.parser().format_help()
    for name in EXPERIMENTS:
        assert f"--experiment {name}" in text or name == "sweep"  # the sweep has no flags of its own
    hold = text.index("\n  --hold-seconds")  # its entry, not the usage line
    assert text.index("--experiment saturation:") < hold < text.index("--experiment prefix:")


def test_no_two_experiments_share_a_flags_destination():
    """The command line sets an experiment's flags aside by destination: two experiments sharing one would
    hand one's value to the other (--burst-seconds once landed in saturation's hold_seconds)."""
    owners: dict[str, str] = {}
    for name, experiment in EXPERIMENTS.items():
        parser = argparse.ArgumentParser(add_help=False)
        experiment.add_flags(parser.add_argument_group(name))
        for action in parser._actions:
            assert action.dest not in owners, f"{name} and {owners[action.dest]} both set {action.dest}"
            owners[action.dest] = name


@pytest.mark.parametrize("module", ["benchmarks/g6/run.py", "benchmarks/g6/resolve.py", "benchmarks/g6/cli.py"])
def test_the_run_never_asks_which_experiment_it_holds(module):
    """No experiment's name is written in the modules that compose a run (the table's default aside)."""
    tree = ast.parse((ROOT / module).read_text())
    names = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    named = names & set(EXPERIMENTS)
    assert named <= ({"sweep"} if module.endswith("cli.py") else set()), f"{module} names {named}"


def test_the_agreement_check_refuses_an_experiment_it_holds_no_figure_of(toy, tmp_path, capsys):
    """A new experiment's run is not "in agreement" with the oracle because nothing was compared."""
    from benchmarks.g6.agreement import main as agreement

    argv = ["--sim", "--virtual", "--model", QWEN_05, "--experiment", "toy", "--requests", "8", "--out", str(tmp_path),
            "--quiet"]  # fmt: skip
    assert cli.run(argv) == 0
    (folder,) = tmp_path.iterdir()
    capsys.readouterr()
    assert agreement([str(folder)]) == 2
    assert "no figure of its toy run is held against the oracle" in capsys.readouterr().err
