"""PromQL in the tests: syntax through promql-parser (a PyPI package, offline, no binary), and
evaluation over series through a real engine, Debian's `prometheus` package (promtool, prometheus).

A test that needs one of those binaries skips where it is missing on a developer's machine, naming
the install command, and fails under CI (CI=true), which installs them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import promql_parser
import pytest

INSTALL = "apt-get install prometheus (Debian/Ubuntu)"


def syntax_errors(exprs: Iterable[str]) -> list[str]:
    """'expr: why' for each expression Prometheus' grammar rejects (function arity and argument types included)."""
    errors = []
    for expr in exprs:
        try:
            promql_parser.parse(expr)
        except ValueError as e:
            errors.append(f"{expr}: {e}")
    return errors


def under_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


def binary(name: str) -> str:
    """The path of a Debian-packaged binary; skips the test where it is missing, fails it under CI."""
    found = shutil.which(name)
    if found:
        return found
    if under_ci():
        pytest.fail(f"{name} not on PATH, and CI=true requires it: {INSTALL}", pytrace=False)
    pytest.skip(f"{name} not installed: {INSTALL}")


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60)
