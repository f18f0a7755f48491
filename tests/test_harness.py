"""The harness: stack outputs, the pulumi CLI seam, results folders and Markdown tables."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from benchmarks.__main__ import main as benchmarks_main
from benchmarks.harness import HarnessError, PulumiStack, RunMeta, endpoint, load_result, new_run_folder, read_outputs, save_result, section
from benchmarks.harness.markdown import table
from stacks.outputs import ServiceRef
from fake_pulumi import fake_pulumi, pulumi_calls
from stack_outputs import program_outputs

OUTPUTS = program_outputs(
    "g6",
    endpoints={"vllm": {"namespace": "serving", "service": "vllm", "port": 8000, "path": "/", "protocol": "http"}},
    prometheus={"namespace": "monitoring", "service": "prometheus", "port": 9090},
    benchmark={"model": "Qwen/Qwen2.5-1.5B-Instruct", "max_num_seqs": 16},
)


def test_outputs_from_a_saved_file(tmp_path):
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(OUTPUTS))
    outputs = read_outputs(outputs_file=path)
    ep = endpoint(outputs, "vllm", "g6")
    assert ep.in_cluster_url() == "http://vllm.serving.svc.cluster.local:8000"
    assert section(outputs, "prometheus", ServiceRef, "g6").in_cluster_url() == (
        "http://prometheus.monitoring.svc.cluster.local:9090"
    )


def test_outputs_off_the_contract_are_refused_naming_the_key(tmp_path):
    """What the program renames, the kit refuses by name (the one model of stacks/outputs.py on both sides)."""
    renamed = {("gpu_pools" if k == "gpu_pool" else k): v for k, v in OUTPUTS.items()}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(renamed))
    with pytest.raises(HarnessError, match=r"do not fit the contract.*outputs\.gpu_pool: Field required; "
                       r"outputs\.gpu_pools: Extra inputs are not permitted"):
        read_outputs(outputs_file=path)


def test_outputs_from_the_pulumi_cli(tmp_path, monkeypatch):
    state = fake_pulumi(tmp_path, monkeypatch, OUTPUTS)
    assert read_outputs(stack="g6") == OUTPUTS
    assert pulumi_calls(state) == [["stack", "output", "--json", "--show-secrets", "-s", "g6"]]


def test_missing_pulumi_cli_points_to_outputs_file(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HarnessError, match="pulumi CLI is not on PATH.*--outputs FILE"):
        read_outputs(stack="g6")


def test_outputs_errors_say_what_is_missing(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(HarnessError, match="must be a JSON object"):
        read_outputs(outputs_file=bad)
    with pytest.raises(HarnessError, match="cannot read stack outputs"):
        read_outputs(outputs_file=tmp_path / "absent.json")
    with pytest.raises(HarnessError, match="lack `prometheus`, which lab g6 needs.*present: \\['benchmark'"):
        section({"benchmark": {}}, "prometheus", ServiceRef, "g6")
    with pytest.raises(HarnessError, match="endpoints.vllm.*endpoints: \\['other'\\]"):
        endpoint({"endpoints": {"other": {}}}, "vllm", "g6")
    typo = {"prometheus": {"namespace": "m", "service": "p", "prot": 9090}}
    with pytest.raises(HarnessError, match="(?s)do not fit lab g6.*port.*Field required"):
        section(typo, "prometheus", ServiceRef, "g6")


def test_pulumi_config_round_trip_and_failures(tmp_path, monkeypatch):
    state = fake_pulumi(tmp_path, monkeypatch, OUTPUTS, fail_up_if={"vllm.max_num_seqs": "3"})
    stack = PulumiStack("g6")
    assert stack.config_get("vllm.max_num_seqs") is None
    stack.config_set("vllm.max_num_seqs", "3")
    assert stack.config_get("vllm.max_num_seqs") == "3"
    with pytest.raises(HarnessError, match="(?s)`pulumi up --yes --skip-preview -s g6` failed.*update failed"):
        stack.up()
    stack.config_rm("vllm.max_num_seqs")
    assert stack.config_get("vllm.max_num_seqs") is None
    assert ["config", "set", "--path", "vllm.max_num_seqs", "3", "-s", "g6"] in pulumi_calls(state)


def test_run_folders_are_one_per_run_and_results_round_trip(tmp_path):
    started = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)
    first, second = new_run_folder(tmp_path, "g6", started), new_run_folder(tmp_path, "g6", started)
    assert first.name == "g6-20261129T1700Z" and second.name == "g6-20261129T1700Z-2"
    meta = RunMeta(lab="g6", target="sim", model="m", started_at=started, finished_at=started,
                   client_host_cpus=2, tool_version="0.1.0", command=["python"], errors=["x"])  # fmt: skip
    save_result(meta, first)
    assert load_result(RunMeta, first) == meta
    (second / "result.json").write_text(json.dumps({**meta.model_dump(mode="json"), "surprise": 1}))
    with pytest.raises(HarnessError, match="(?s)is not a RunMeta.*surprise"):
        load_result(RunMeta, second)


def test_markdown_table_escapes_and_marks_missing_values():
    assert table(["a", "b"], [[1, None], ["x|y", 2.5]]) == "| a | b |\n|---|---|\n| 1 | — |\n| x\\|y | 2.5 |\n"


def test_unknown_lab_lists_the_labs(capsys):
    assert benchmarks_main(["g9"]) == 2
    err = capsys.readouterr().err
    assert "unknown lab 'g9'" in err and "labs: g1, g2, g3, g4, g5, g6, g7, g8" in err


def test_progress_off_a_terminal_says_when_each_point_starts_and_ends_once(capsys):
    """In a log file or CI the live bars show nothing until the run ends: a line per point instead."""
    from benchmarks.harness import RunProgress

    progress = RunProgress()
    with progress.running():
        update = progress.point("mns=8 c=1 run 1", 64)
        for done in (1, 32, 64, 64):
            update(done)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("mns=8 c=1 run 1:")]
    assert lines[0] == "mns=8 c=1 run 1: started, 64 requests"
    assert len(lines) == 2 and lines[1].startswith("mns=8 c=1 run 1: 64 of 64 in ")
    quiet = RunProgress(enabled=False)
    with quiet.running():
        quiet.point("mns=8 c=8 run 1", 64)(64)
    assert "mns=8 c=8" not in capsys.readouterr().err
