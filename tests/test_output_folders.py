"""Folders the manifest writers fill: a read-only one is one line and exit 2, and writing a second
time leaves only the second run's objects."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.g6.cli import run as g6
from benchmarks.manifests import main as manifests
from stacks.mockrun import run_stack


@pytest.fixture(scope="module")
def g6_outputs(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("g6") / "outputs.json"
    path.write_text(json.dumps(run_stack("g6").outputs))
    return path


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_manifests_into_a_read_only_folder_is_one_line(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    assert manifests(["--out", str(folder), "g1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"--out {folder}: the folder is not writable by this user"


def test_manifests_into_a_file_is_one_line(tmp_path, capsys):
    file = tmp_path / "out.yaml"
    file.write_text("")
    assert manifests(["--out", str(file), "g1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"--out {file}: is a file, not a folder")


def test_a_second_client_manifest_replaces_the_first(g6_outputs, tmp_path, capsys):
    out = tmp_path / "manifest"
    assert g6(["--outputs", str(g6_outputs), "--client-manifest", str(out), "--concurrency", "1,8,64"]) == 0
    (out / "notes.yaml").write_text("mine: keep me\n")  # a file of the user's, not ours
    assert g6(["--outputs", str(g6_outputs), "--client-manifest", str(out), "--concurrency", "1", "--repeats", "1"]) == 0
    printed = capsys.readouterr().out.split()
    kinds = sorted(p.name.split("-")[0] for p in out.glob("*.yaml") if p.name != "notes.yaml")
    assert kinds == ["configmap", "job"], "only the second run's ConfigMap and its one Job"
    assert sorted(str(p) for p in out.glob("*.yaml") if p.name != "notes.yaml") == sorted(printed[-2:])
    assert (out / "notes.yaml").read_text() == "mine: keep me\n"
