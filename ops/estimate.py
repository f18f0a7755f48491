"""What a lab costs per hour at list price, from its stack file: with the GPU pool at its minimum
(normally zero nodes) and with every GPU node up, boot disks included, spot or on-demand as the stack
file says. Prices come from facts/prices.py, which names the dated source of every figure.

    python -m ops.estimate g6          # one stack file: its lines (machines, disks) and notes, as Markdown
    python -m ops.estimate --all       # the README's table over every Pulumi.<stack>.yaml

A stack whose region or machine type has no price is one line naming what is missing (with --all,
after the table of the stacks that are priced; the exit status is then 1).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from facts import prices
from stacks.config import LabConfig
from stacks.cost_estimate import CostEstimate, estimate, markdown
from stacks.loader import ConfigError
from stacks.stackfile import REPO, load_config, stack_names


EXISTING = "%s: no estimate: it runs on an existing cluster (cluster.target existing), whose nodes it neither creates nor bills"


def table(estimates: list[tuple[LabConfig, CostEstimate]]) -> str:
    """The README's per-lab cost table."""
    rows = ["| stack | region | GPU node | per hour, GPU at zero | per hour, GPU up |", "|---|---|---|---:|---:|"]
    for cfg, est in estimates:
        rows.append(
            f"| {cfg.stack} | {est.region} | {est.gpu_node.item} | ${est.per_hour_gpu_at_zero:.3f} "
            f"| ${est.per_hour_gpu_up:.3f} |"
        )
    return "\n".join(rows) + f"\n\nList prices of {prices.PRICE_DATE} or later (facts/prices.py has each source).\n"


def _all(directory: Path) -> int:
    priced, unpriced = [], []
    for stack in stack_names(directory):
        try:
            cfg = load_config(stack, directory=directory)
            if cfg.cluster.existing:
                print(EXISTING % stack, file=sys.stderr)
                continue
            priced.append((cfg, estimate(cfg)))
        except prices.PricingError as e:
            unpriced.append(f"{stack}: no estimate: {e}")
        except ConfigError as e:
            unpriced.append(f"{stack}: no estimate: {e.stack_file} is invalid: {'; '.join(e.problems)}")
    if priced:
        print(table(priced))
    for line in unpriced:
        print(line, file=sys.stderr)
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
    args = parser.parse_args(argv)
    if args.all:
        return _all(directory)
    if not args.stack:
        parser.error("give a stack name or --all")
    try:
        cfg = load_config(args.stack, directory=directory)
        print(EXISTING % cfg.stack if cfg.cluster.existing else markdown(estimate(cfg)))
    except (prices.PricingError, FileNotFoundError, ConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
