"""What a lab costs at list price, from its stack file, on one basis, the whole stack: per hour with the
GPU pool at its minimum (normally zero nodes), with every GPU node up, and from `make up` on (a workload
the stack deploys may hold a GPU node: g6's vLLM does), boot disks included, spot or on-demand as the
stack file says; and what one benchmark run adds. Prices come from facts/prices.py, which names the
dated source of every figure.

    python -m ops.estimate g6          # one stack file: its lines (machines, disks) and notes, as Markdown
    python -m ops.estimate --all       # the per-lab table of docs/operations.md over every Pulumi.<stack>.yaml
    python -m ops.estimate --all --json   # the same as JSON (docs/schemas/estimate.schema.json): the docs quote it

A stack whose region or machine type has no price, or whose stack file is wrong, is one line naming what
is missing (with --all, after the table of the stacks that are priced; the exit status is then 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from facts import prices
from stacks.config import LabConfig
from stacks.cost_estimate import EXISTING_NOT_PRICED, CostEstimate, estimate, markdown
from stacks.loader import ConfigError
from stacks.stackfile import REPO, load_config, stack_names


SCHEMA_VERSION = 1
# Variants the docs price beside the stack files: name -> (stack, changed object keys).
VARIANTS = {"g5 on Triton": ("g5", {"kserve": {"runtime": "triton"}})}  # kserve.runtime: triton


def _per_run(est: CostEstimate) -> str:
    return "the stack's hourly figure for as long as it runs" if est.per_run is None else f"${est.per_run:.3f}"


def table(estimates: list[tuple[LabConfig, CostEstimate]]) -> str:
    """The per-lab cost table (docs/operations.md quotes its figures)."""
    rows = ["| stack | region | GPU node | per hour, GPU at zero | per hour, GPU up | per hour from `make up` on "
            "| GPU minutes per benchmark run | per run |", "|---|---|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for cfg, est in estimates:
        minutes = "held from up" if est.run_gpu_minutes is None else str(est.run_gpu_minutes)
        rows.append(
            f"| {cfg.stack} | {est.region} | {est.gpu_node.item} | ${est.per_hour_gpu_at_zero:.3f} "
            f"| ${est.per_hour_gpu_up:.3f} | ${est.per_hour_from_up:.3f} | {minutes} | {_per_run(est)} |"
        )
    return "\n".join(rows) + f"\n\nList prices of {prices.PRICE_DATE} or later (facts/prices.py has each source).\n"


def unit_prices(cfg: LabConfig) -> dict:
    """The list prices the stack's figures are made of, as facts/prices.py gives them for its region."""
    region = prices.region_prices(cfg.region)
    gpu = prices.machine_price(cfg.region, cfg.gpu_machine_type)
    return {
        "gke_cluster_fee_per_hour": prices.GKE_CLUSTER_FEE_PER_HOUR,
        "gpu_machine_spot_per_hour": gpu.spot,
        "gpu_machine_on_demand_per_hour": gpu.on_demand,
        "system_machine_per_hour": prices.hourly(cfg.region, cfg.system_machine_type, cfg.system_spot),
        "pd_balanced_gib_month": region.pd_balanced_gib_month,
        "gcs_standard_gib_month": region.gcs_standard_gib_month,
    }


def as_json(cfg: LabConfig, est: CostEstimate) -> dict:
    """One stack's estimate for scripts (docs/schemas/estimate.schema.json): the saved model, its sums
    per hour, day and month, and the unit prices they are made of."""
    sums = {"gpu_at_zero": est.per_hour_gpu_at_zero, "gpu_up": est.per_hour_gpu_up, "from_up": est.per_hour_from_up}
    return {
        **est.model_dump(),
        **{f"per_hour_{k}": v for k, v in sums.items()},
        **{f"per_day_{k}": v * 24 for k, v in sums.items()},
        **{f"per_month_{k}": v * prices.HOURS_PER_MONTH for k, v in sums.items()},
        "per_run": est.per_run,
        "unit_prices": unit_prices(cfg),
    }


def everything(directory: Path = REPO) -> tuple[list[tuple[LabConfig, CostEstimate]], list[tuple[str, str]]]:
    """Every stack file's estimate, and (stack, why) for each that has none."""
    priced, unpriced = [], []
    for stack in stack_names(directory):
        try:
            cfg = load_config(stack, directory=directory)
            if cfg.cluster.existing:
                print(f"{stack}: no estimate: {EXISTING_NOT_PRICED}", file=sys.stderr)
                continue
            priced.append((cfg, estimate(cfg)))
        except prices.PricingError as e:
            unpriced.append((stack, f"no estimate: {e}"))
        except ConfigError as e:
            unpriced.append((stack, f"no estimate: {e.stack_file} is invalid: {'; '.join(e.problems)}"))
    return priced, unpriced


def all_as_json(directory: Path = REPO) -> dict:
    priced, unpriced = everything(directory)
    variants = []
    for name, (stack, changes) in VARIANTS.items():
        if stack in stack_names(directory):
            try:
                cfg = load_config(stack, directory=directory, changes=changes)
                variants.append({"variant": name, **as_json(cfg, estimate(cfg))})
            except (ConfigError, prices.PricingError):
                continue  # its stack file's own problem is in "unpriced"
    return {"schema_version": SCHEMA_VERSION, "price_date": prices.PRICE_DATE,
            "stacks": [as_json(cfg, est) for cfg, est in priced], "variants": variants,
            "unpriced": [{"stack": stack, "problem": problem} for stack, problem in unpriced]}  # fmt: skip


def _all(directory: Path, as_json_: bool) -> int:
    priced, unpriced = everything(directory)
    if as_json_:
        print(json.dumps(all_as_json(directory), indent=2))
        return 1 if unpriced else 0
    if priced:
        print(table(priced))
    for stack, problem in unpriced:
        print(f"{stack}: {problem}", file=sys.stderr)
    return 1 if unpriced else 0


def main(argv: list[str] | None = None, directory: Path = REPO) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ops.estimate",
        description=__doc__.split("\n\n")[0],
        epilog="examples:\n" + "\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("stack", nargs="?", help="stack name: the X of Pulumi.X.yaml")
    parser.add_argument("--all", action="store_true", help="a table over every stack file")
    parser.add_argument("--json", action="store_true", help="print JSON (docs/schemas/estimate.schema.json)")
    args = parser.parse_args(argv)
    if args.all:
        return _all(directory, args.json)
    if not args.stack:
        parser.error("give a stack name or --all")
    try:
        cfg = load_config(args.stack, directory=directory)
        if cfg.cluster.existing:  # with --json on stderr, as --all says it: stdout stays JSON or nothing
            print(f"{cfg.stack}: no estimate: {EXISTING_NOT_PRICED}", file=sys.stderr if args.json else sys.stdout)
            return 0
        est = estimate(cfg)
    except (prices.PricingError, FileNotFoundError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(as_json(cfg, est), indent=2) if args.json else markdown(est))
    return 0


if __name__ == "__main__":
    sys.exit(main())
