"""One direction of dependency: facts, podspec <- components <- stacks <- ops <- benchmarks, checked on the
source tree's imports (tests/import_rules.py), and no import circles anywhere in it."""

from __future__ import annotations

from pathlib import Path

import pytest
from import_rules import RULES, cycles, import_graph, rule_for, source_files, violations

ROOT = Path(__file__).resolve().parents[1]


def test_every_import_goes_the_allowed_way():
    found = violations(ROOT)
    assert not found, "imports against the layering:\n" + "\n".join(found)


def test_no_import_circles():
    found = cycles(import_graph(ROOT))
    assert not found, "import circles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_every_source_file_falls_under_a_rule():
    files = [p.relative_to(ROOT).as_posix() for p in source_files(ROOT)]
    assert [f for f in files if rule_for(f) is None] == [] and len(files) > 100


# ---------------------------------------------------------------- the checker itself, on planted trees


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for package in ("facts", "podspec", "components", "stacks", "ops", "benchmarks"):
        (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / package / "__init__.py").touch()
    return tmp_path


@pytest.mark.parametrize(
    ("rel", "text", "expected"),
    [
        (
            "components/kueue.py",
            "import pulumi\n\nfrom stacks.config import LabConfig\n",
            "components/kueue.py:3: imports stacks.config; components/ may import components, podspec, facts",
        ),
        (
            "facts/prices.py",
            "def table():\n    from ops import status\n",
            "facts/prices.py:2: imports ops.status; facts/ may import facts",
        ),
        (
            "stacks/program.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from benchmarks.serving import catalogue\n",
            "stacks/program.py:3: imports benchmarks.serving.catalogue; "
            "stacks/ may import stacks, components, podspec, facts",
        ),
        (
            "benchmarks/labs/objects.py",
            "from components.cluster import POOL_LABEL\n",
            "benchmarks/labs/objects.py:1: imports components.cluster; "
            "benchmarks/ may import benchmarks, stacks, ops, podspec, facts",
        ),
        (
            "podspec/security.py",
            "from components.naming import k8s_labels\n",
            "podspec/security.py:1: imports components.naming; podspec/ may import podspec",
        ),
        (
            "components/scripts/idle_guard.py",
            "from components.naming import k8s_labels\n",
            "components/scripts/idle_guard.py:1: imports components.naming; "
            "components/scripts/ may import components.scripts",
        ),
        (
            "benchmarks/labs/scripts/trainer.py",
            "from .helpers import x\n",
            "benchmarks/labs/scripts/trainer.py:1: imports benchmarks.labs.scripts.helpers; "
            "benchmarks/labs/scripts/ may import nothing of the project",
        ),
    ],
    ids=["component-reads-config", "lazy-import-in-facts", "type-checking-import", "kit-reads-component",
         "pod-settings-read-a-component", "pod-script-reaches-out", "relative-import"],
)
def test_a_planted_bad_import_is_named_with_its_file_line_and_rule(tmp_path, rel, text, expected):
    targets = ["ops/status.py", "benchmarks/serving/__init__.py", "benchmarks/serving/catalogue.py",
               "components/cluster.py", "components/naming.py", "benchmarks/labs/scripts/helpers.py"]
    root = _tree(tmp_path, {**dict.fromkeys(targets, ""), rel: text})
    (found,) = violations(root)
    assert found.startswith(expected), found


def test_allowed_imports_pass_the_checker(tmp_path):
    root = _tree(
        tmp_path,
        {
            "facts/prices.py": "import json\n",
            "components/kueue.py": "from components import naming\nfrom facts.prices import table\n",
            "podspec/security.py": "import copy\n",
            "benchmarks/labs/objects.py": "from podspec.security import restricted\n",
            "components/naming.py": "",
            "components/scripts/idle_guard.py": "from components.scripts.kube_api import KubeApi\n",
            "stacks/program.py": "from components.kueue import Kueue\nfrom stacks import config\n",
            "stacks/config.py": "",
            "ops/estimate.py": "from stacks.program import build\n",
            "benchmarks/g6/cli.py": "from ops.estimate import main\nfrom stacks.program import build\n",
            "__main__.py": "from stacks.program import build\n",
        },
    )
    assert violations(root) == []


def test_a_planted_circle_is_named_module_by_module(tmp_path):
    root = _tree(
        tmp_path,
        {
            # The circle issue 13 broke: the program -> the estimate -> the stack-file reader -> the mock
            # runner, which imports the program lazily inside a function.
            "stacks/program.py": "from ops.estimate import estimate_or_none\n",
            "ops/estimate.py": "from ops import stackfile\n",
            "ops/stackfile.py": "from stacks.mockrun import stack_config\n",
            "stacks/mockrun.py": "def run_stack():\n    from stacks.program import build\n",
            "stacks/config.py": "from stacks import platform_features\n",
            "stacks/platform_features.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from stacks.config import LabConfig\n"
            ),
            "stacks/loader.py": "from stacks.config import LabConfig\n",  # imports into a circle, is on none
        },
    )
    assert sorted(cycles(import_graph(root))) == [
        ["ops.estimate", "ops.stackfile", "stacks.mockrun", "stacks.program", "ops.estimate"],
        ["stacks.config", "stacks.platform_features", "stacks.config"],
    ]


def test_rules_are_ordered_most_specific_first():
    # A folder's rule must come before any rule of a folder holding it, or it would never apply.
    for i, rule in enumerate(RULES):
        for earlier in RULES[:i]:
            assert not rule.where.startswith(earlier.where), f"{earlier.where} hides {rule.where}"
