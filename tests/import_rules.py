"""Which way the project's code may depend, read from its imports with `ast` (no import is executed).

    facts/        dated facts: imports nothing of the project
    podspec/      pod-spec building blocks (restricted security settings): imports nothing of the project
    components/   Pulumi components: components, podspec, facts
    stacks/       config model, lab catalogue, composition: stacks, components, podspec, facts
    ops/          operator commands: ops, stacks, podspec, facts
    benchmarks/   the measurement kit: benchmarks, stacks, ops, podspec, facts
    localcluster/ the local control plane for tests: localcluster, stacks, components, facts (it imitates
                  the cloud half's node pools, so it reads their labels and taints where they are defined)

Code that runs alone in a pod is stricter: components/scripts/ (mounted as the components.scripts
package), components/pipeline_steps/ and benchmarks/labs/scripts/ (each file runs by itself).
Every import counts, also one inside a function or under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("facts", "podspec", "components", "stacks", "ops", "benchmarks", "localcluster")


@dataclass(frozen=True)
class Rule:
    where: str  # a folder (ending in /) or a file, relative to the root
    may_import: tuple[str, ...]  # module prefixes of the project
    why: str


# The kit's packages under the cluster readers, and everything of the kit but the labs.
KIT_BELOW_KUBE = ("benchmarks.harness", "benchmarks.errors", "benchmarks.cluster", "benchmarks.loadgen", "benchmarks.metrics",
                  "benchmarks.serving", "benchmarks.sim")  # fmt: skip
KIT_BELOW_LABS = (*KIT_BELOW_KUBE, "benchmarks.kube", "benchmarks.g6", "benchmarks.sizing")

# Most specific first: a file follows the first rule whose `where` holds it.
RULES = (
    Rule("components/scripts/", ("components.scripts",), "in-cluster scripts get only components/scripts/ mounted"),
    Rule("components/pipeline_steps/", (), "each step's program runs alone in an Argo step container"),
    Rule("benchmarks/labs/scripts/", (), "each script runs alone in a benchmark pod"),
    Rule("facts/", ("facts",), "the dated facts sit under every layer"),
    # Layer 0 like facts/: the platform's pods and the kit's pods get their security settings from one
    # helper, which therefore may depend on neither.
    Rule("podspec/", ("podspec",), "the pod-spec building blocks sit under every layer"),
    Rule("components/", ("components", "podspec", "facts"), "a component takes its own args, never the lab catalogue or tools"),
    Rule("stacks/", ("stacks", "components", "podspec", "facts"), "the program never depends on the operator tools or the kit"),
    Rule("ops/", ("ops", "stacks", "podspec", "facts"), "the operator tools read stacks, never the components themselves"),
    # The kit's floors: the load generator and the harness under the cluster readers (kube/), under g6 and
    # the labs; nothing below a floor imports the floor above it.
    Rule("benchmarks/loadgen/", ("benchmarks.loadgen", "benchmarks.errors"), "the load generator ships to a pod on its own"),
    Rule("benchmarks/harness/", (*KIT_BELOW_KUBE, "stacks", "ops", "podspec", "facts"), "results, outputs and servers, for every reader"),
    Rule("benchmarks/kube/", (*KIT_BELOW_KUBE, "benchmarks.kube", "stacks", "ops", "podspec", "facts"), "reads any lab's cluster, for the labs and g6"),
    Rule("benchmarks/g6/", (*KIT_BELOW_LABS, "stacks", "ops", "podspec", "facts"), "g6 stands beside the labs, never on them"),
    Rule("benchmarks/", ("benchmarks", "stacks", "ops", "podspec", "facts"), "the kit learns the platform from stack outputs"),
    Rule("localcluster/", ("localcluster", "stacks", "components", "facts"), "a test harness: it shapes nodes like the lab's pools"),
    Rule("__main__.py", ("stacks",), "the Pulumi entry point only loads the config and runs the program"),
)


@dataclass(frozen=True)
class Import:
    file: str  # relative to the root
    line: int
    module: str  # the project module imported (a submodule where `from pkg import sub` names one)


def source_files(root: Path) -> list[Path]:
    """The project's Python files under the rules (tests and the virtualenv are not project code)."""
    files = [root / "__main__.py"] if (root / "__main__.py").exists() else []
    for package in PACKAGES:
        files += sorted((root / package).rglob("*.py")) if (root / package).is_dir() else []
    return files


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts) or "__main__"


def _is_module(root: Path, dotted: str) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def project_imports(root: Path, path: Path) -> list[Import]:
    """Every import of a project module in `path`, with its line."""
    rel = path.relative_to(root).as_posix()
    package = module_name(root, path) if path.name == "__init__.py" else module_name(root, path).rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package, `level - 1` packages up
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            # `from pkg import sub` imports the submodule when there is one; else a name from pkg.
            targets = [f"{base}.{a.name}" if _is_module(root, f"{base}.{a.name}") else base for a in node.names]
        for target in dict.fromkeys(targets):
            if target.split(".")[0] in PACKAGES:
                found.append(Import(rel, node.lineno, target))
    return found


def rule_for(rel: str) -> Rule | None:
    return next((r for r in RULES if rel == r.where or (r.where.endswith("/") and rel.startswith(r.where))), None)


def _allowed(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(f"{p}.") for p in prefixes)


def violations(root: Path) -> list[str]:
    """One line per import that breaks its file's rule: where, what it imported, and the rule."""
    out = []
    for path in source_files(root):
        rel = path.relative_to(root).as_posix()
        rule = rule_for(rel)
        if rule is None:
            continue
        for imp in project_imports(root, path):
            if not _allowed(imp.module, rule.may_import):
                allowed = ", ".join(rule.may_import) or "nothing of the project"
                where = f"{imp.file}:{imp.line}: imports {imp.module}"
                out.append(f"{where}; {rule.where} may import {allowed} ({rule.why})")
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the project modules it imports (an imported package counts as its __init__)."""
    graph: dict[str, set[str]] = {}
    for path in source_files(root):
        graph[module_name(root, path)] = {i.module for i in project_imports(root, path)}
    # An import of a name that is neither a file nor a package here (a typo) has no node: drop it.
    return {m: {t for t in targets if t in graph} for m, targets in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected group of modules, as a path that returns to its start."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph[node]:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_circle(graph, group) for group in groups]


def _circle(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node] & members):
                if nxt == start:
                    return [*paths[node], start]
                if nxt not in paths:
                    paths[nxt] = [*paths[node], nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    raise AssertionError(f"{group} is strongly connected, so a path back to {start} exists")
