"""The cost estimate of a stack file (stacks.cost_estimate) on the command line.

    python -m ops.estimate g6          # Markdown for one stack file
    python -m ops.estimate --all       # the README table over every Pulumi.*.yaml
"""

from __future__ import annotations

import argparse
import sys

from facts import prices
from stacks.config import LabConfig
from stacks.cost_estimate import estimate, markdown
from stacks.stackfile import load_config, stack_names


def table(configs: list[LabConfig]) -> str:
    """The README's per-lab cost table."""
    rows = ["| stack | region | GPU node | per hour, GPU at zero | per hour, GPU up |", "|---|---|---|---:|---:|"]
    for cfg in configs:
        est = estimate(cfg)
        rows.append(
            f"| {cfg.stack} | {est.region} | {est.gpu_node.item} | ${est.per_hour_gpu_at_zero:.3f} "
            f"| ${est.per_hour_gpu_up:.3f} |"
        )
    return "\n".join(rows) + f"\n\nList prices of {prices.PRICE_DATE} (facts/prices.py has each source).\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.estimate", description=__doc__.split("\n")[0])
    parser.add_argument("stack", nargs="?", help="stack name (Pulumi.<stack>.yaml)")
    parser.add_argument("--all", action="store_true", help="a table over every stack file")
    args = parser.parse_args(argv)
    try:
        if args.all:
            print(table([load_config(s) for s in stack_names()]))
        elif args.stack:
            print(markdown(estimate(load_config(args.stack))))
        else:
            parser.error("give a stack name or --all")
    except (prices.PricingError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
