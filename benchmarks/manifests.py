"""Every Kubernetes object a lab benchmark creates, written as YAML without a cluster: each lab's own
`build_workloads` (g6: its in-cluster client, as `--client-manifest` writes it, one point), fed with
what its stack file would export (the program run under Pulumi mocks, stacks.mockrun). For reading
what a benchmark will run before paying for it, and for policy scanners.

    python -m benchmarks.manifests --out DIR [lab ...]
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

import yaml

from benchmarks.__main__ import LABS as BENCHMARKS
from benchmarks.kube import evidence
from stacks.loader import ConfigError
from stacks.mockrun import run_stack
from stacks.output_folder import OutputFolderError, prepare


LABS = tuple(sorted(BENCHMARKS))
RUN_ID = "plan-0000"  # object names end in a run's last four characters


def workloads(lab: str, outputs: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects `python -m benchmarks <lab>` creates first, built from the stack's outputs, and the
    one-shot nvidia-smi pod every run may end with (the evidence of its report)."""
    if lab == "g6":
        from benchmarks.g6 import cli, resolve
        from benchmarks.g6.experiments.table import EXPERIMENTS

        inv = cli.parse(["--outputs", "outputs.json", "--concurrency", "1"])
        params = resolve.resolve_params(inv, outputs)
        sweep = EXPERIMENTS[inv.experiment]
        own = sweep.client_objects(params, sweep.parameters(inv.given, params, inv), outputs, inv.client_cpus)
    else:
        own = importlib.import_module(f"benchmarks.labs.{lab}").build_workloads(outputs, run_id=RUN_ID)
    return own + [evidence.nvidia_smi_pod(outputs, RUN_ID)]


def file_name(lab: str, obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return "-".join(p for p in (lab, obj["kind"].lower(), meta.get("namespace"), meta["name"]) if p) + ".yaml"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.manifests", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the YAML files")
    parser.add_argument("labs", nargs="*", metavar="lab", help=f"labs to write (default: all of {', '.join(LABS)})")
    args = parser.parse_args(argv)
    unknown = [lab for lab in args.labs if lab not in LABS]
    if unknown:
        parser.error(f"unknown lab(s) {', '.join(unknown)}; labs: {', '.join(LABS)}")
    try:
        prepare(args.out, "--out")
    except OutputFolderError as e:
        print(e, file=sys.stderr)
        return 2
    for lab in args.labs or LABS:
        try:
            objects = workloads(lab, run_stack(lab).outputs)
        except (ConfigError, FileNotFoundError) as e:
            print(f"{lab}: {e}", file=sys.stderr)
            return 2
        for obj in objects:
            (args.out / file_name(lab, obj)).write_text(yaml.safe_dump(obj, sort_keys=False))
        print(f"{lab}: {len(objects)} objects", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
