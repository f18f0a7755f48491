"""Every lab: result.json round trip through the harness, report and plots from the saved result only,
and the checked-in examples/<lab>/ regenerated from the recorded fixtures."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness import load_result
from benchmarks.kube.record import load_recording
from benchmarks.labs import examples
from benchmarks.labs.report import render_report, write_results
from benchmarks.labs.result import SCHEMA_VERSION
from stacks.stackfile import REPO

LABS = examples.LABS
EXAMPLES = examples.available()
REPO = Path(__file__).resolve().parents[1]


def test_every_lab_has_a_fixture_and_is_on_the_command_line():
    from benchmarks.__main__ import LABS as CLI_LABS

    assert examples.available() == [*LABS, *examples.VARIANTS]
    assert all(CLI_LABS[lab] == f"benchmarks.labs.{lab}" for lab in LABS)


@pytest.mark.parametrize("lab", EXAMPLES)
def test_result_round_trip_report_and_plots(lab, tmp_path):
    module = importlib.import_module(f"benchmarks.labs.{examples.lab_of(lab)}")
    rec = load_recording(examples.recording_of(lab))
    result = module.measure(rec, source="fixture")
    folder = write_results(tmp_path / lab, rec, result, module)
    loaded = load_result(type(result), folder)
    assert loaded == result and loaded.schema_version == SCHEMA_VERSION
    assert load_recording(folder / "recording.json") == rec
    report = (folder / "report.md").read_text()
    assert report == render_report(loaded, module.TITLE, module.report_body(loaded), module.plots(loaded, tmp_path))
    for check in result.checks:
        assert check.name in report
    assert result.versions.kubernetes in report and rec.run_id in report
    for png in folder.glob("*.png"):
        assert png.read_bytes()[:4] == b"\x89PNG" and f"({png.name})" in report


def _without_cost(folder: Path) -> tuple[dict, str]:
    """result.json and report.md minus the cost estimate, which stacks.cost_estimate renders (its own tests)."""
    result = json.loads((folder / "result.json").read_text())
    result.pop("cost")
    report = (folder / "report.md").read_text()
    if "## Cost" in report:
        head, rest = report.split("## Cost", 1)
        report = head + (rest[rest.index("\n## "):] if "\n## " in rest else "")
    return result, report


# A snapshot, not a check of correctness: the figures themselves are checked against values read off
# each fixture by hand in tests/test_labs_<lab>.py.
@pytest.mark.parametrize("lab", EXAMPLES)
def test_checked_in_example_matches_its_fixture(lab, tmp_path):
    fresh = examples.render_example(lab, tmp_path)
    assert _without_cost(fresh) == _without_cost(REPO / "examples" / lab), (
        f"examples/{lab} is stale: run `python -m benchmarks.labs.examples {lab}`"
    )


@pytest.mark.parametrize("lab", LABS)
def test_the_labs_stack_file_gives_the_outputs_its_benchmark_needs(lab, tmp_path):
    """Contract with the platform/serving features: the outputs of Pulumi.<lab>.yaml, run under mocks,
    satisfy the benchmark, and the workloads built from them validate."""
    import schemas

    from stacks.mockrun import run_stack

    outputs = run_stack(lab, preview=False).outputs
    module = importlib.import_module(f"benchmarks.labs.{lab}")
    module.check_outputs(outputs)
    for obj in module.build_workloads(outputs, f"{lab}-0000-abcd"):
        schemas.validate_object(obj)
    # The live path reads more than check_outputs (Prometheus, gateways, namespaces): run it on these
    # outputs up to its first wait, against a cluster that never progresses. A key it reads and the
    # stack lacks surfaces here as a KeyError/ValidationError or a LabError about the outputs.
    from labs_fakes import FakeCluster

    from benchmarks.labs import live

    args = live.build_parser(module).parse_args(
        ["--outputs", "unused.json", "--out", str(tmp_path), "--timeout", "0.05", "--poll", "0.01"]
    )
    assert live.run(module, args, cluster=FakeCluster(), outputs=outputs) == 2
    (folder,) = list(tmp_path.iterdir())
    stopped = load_recording(folder / "recording.json").notes[-1]
    assert "not done after" in stopped or "InferenceService" in stopped, stopped


def test_every_in_cluster_script_compiles():
    """The scripts mounted from ConfigMaps run only in the cluster (torch); here they must at least parse."""
    from benchmarks.labs.workloads import SCRIPTS

    scripts = sorted(SCRIPTS.glob("*.py"))
    assert {p.name for p in scripts} == {
        "barrier.py", "gpu_matmul.py", "http_client.py", "ramp_client.py", "rendezvous.py", "trainer.py"
    }  # fmt: skip
    for path in scripts:
        compile(path.read_text(), str(path), "exec")


def test_images_are_pinned_to_a_tag():
    from benchmarks.kube import images

    for image in images.ALL:
        name, _, tag = image.rpartition(":")
        assert name and tag and tag != "latest" and "/" not in tag, image


@pytest.mark.parametrize("lab", LABS)
def test_a_cluster_that_never_progresses_times_out_cleanly(lab, tmp_path):
    """Each lab's live path up to its first wait: what it created is labelled and deleted, the exit
    status is 2, and a partial recording is left."""
    from labs_fakes import FakeCluster, fixture_outputs

    from benchmarks.cluster import RUN_LABEL
    from benchmarks.labs import live

    module = importlib.import_module(f"benchmarks.labs.{lab}")
    args = live.build_parser(module).parse_args(
        ["--outputs", "unused.json", "--out", str(tmp_path), "--timeout", "0.05", "--poll", "0.01"]
    )
    cluster = FakeCluster()
    assert live.run(module, args, cluster=cluster, outputs=fixture_outputs(lab)) == 2
    run_ids = {o["metadata"]["labels"][RUN_LABEL] for o in cluster.created}
    assert len(run_ids) <= 1
    for obj in cluster.created:
        key = (obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"), f"{RUN_LABEL}={next(iter(run_ids))}")
        assert key in cluster.deleted
    (folder,) = list(tmp_path.iterdir())
    assert load_recording(folder / "recording.json").notes[-1].startswith("run stopped:")


def test_an_out_that_is_a_file_stops_a_lab_before_it_reads_the_stack(tmp_path, capsys):
    """Checked first: a results folder that cannot exist would otherwise be found out after the run."""
    from labs_fakes import FakeCluster

    from benchmarks.labs import g3, live

    taken = tmp_path / "results"
    taken.write_text("not a folder\n")
    cluster = FakeCluster()
    args = live.build_parser(g3).parse_args(["--outputs", str(tmp_path / "missing.json"), "--out", str(taken)])
    assert live.run(g3, args, cluster=cluster) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"g3: --out {taken}: is a file, not a folder; give a folder (it is created if missing)"
    assert cluster.created == [] and sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_python_m_benchmarks_help_lists_the_labs():
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    for lab in ("g1", "g2", "g3", "g4", "g5", "g6", "g7", "g8"):
        assert re.search(rf"^  {lab}  \S", done.stdout, re.M), lab
    assert "python -m benchmarks <lab> --help" in done.stdout
    wrong = subprocess.run([sys.executable, "-m", "benchmarks", "g9"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and wrong.stderr.startswith("unknown lab 'g9'")
