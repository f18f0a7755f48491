"""One exception root for the measurement kit (benchmarks.errors.BenchmarkError) and one for the operator
tools (ops.errors.OpsError): a command line catches one class and prints its one line."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from benchmarks.errors import BenchmarkError
from ops.errors import OpsError

ROOT = Path(__file__).resolve().parents[1]
# Not errors of the kit's: the load generator's core runs alone in a pod with the standard library only (its
# errors become LoadgenError where its output is read), and SIGTERM stops a run as Ctrl-C does.
OUTSIDE = {"benchmarks.loadgen.core.plan.PlanError", "benchmarks.loadgen.core.wire.OutputError",
           "benchmarks.harness.signals.Interrupted"}  # fmt: skip


def _exception_classes(package: str) -> dict[str, type]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = [node.name for node in tree.body if isinstance(node, ast.ClassDef) and node.bases]
        if not names:
            continue
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        loaded = importlib.import_module(module)
        for name in names:
            cls = getattr(loaded, name)
            if issubclass(cls, BaseException):
                found[f"{module}.{name}"] = cls
    return found


@pytest.mark.parametrize(("package", "root", "at_least"), [("benchmarks", BenchmarkError, 12), ("ops", OpsError, 12)])
def test_every_exception_a_package_defines_derives_from_its_root(package, root, at_least):
    classes = _exception_classes(package)
    assert len(classes) >= at_least  # the scan found the package's classes (LoadgenError, GcpError...)
    stray = sorted(name for name, cls in classes.items() if not issubclass(cls, root) and name not in OUTSIDE)
    assert stray == []
    assert {name for name in OUTSIDE if name.startswith(package)} <= set(classes)  # those named above still exist


def test_the_two_cluster_errors_are_named_for_what_they_are():
    from benchmarks.cluster import KubeApiError
    from localcluster.controlplane import ControlPlaneError

    assert issubclass(KubeApiError, BenchmarkError) and not issubclass(ControlPlaneError, BenchmarkError)
