"""A whole session in two commands: `make up LAB=g6` and `make down LAB=g6`.

    python -m ops.session up --stack g6 [--project P]     # preflight, then `pulumi up -s g6`
    python -m ops.session down --stack g6 [--project P]   # `pulumi destroy -s g6 --yes`, then ops.status

`down` runs the status check for the stack's project even when the destroy fails (what is left is
what matters then) and exits non-zero while anything billable of ours remains there. A stack on an
existing cluster (`cluster.target: existing`) created nothing of Google, so `down` is the destroy alone.

It runs the Pulumi CLI in the foreground rather than through the Automation API: the Automation API
drives the same CLI binary (it needs it installed all the same), and it hands a failure back as one
CommandError holding the whole captured output, while the CLI in the foreground shows Pulumi's own
progress and error lines as they happen and keeps `pulumi up`'s preview-and-confirm prompt.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

from ops import preflight, status
from stacks.loader import ConfigError
from stacks.stackfile import load_config

INSTALL_HINT = "install it (https://www.pulumi.com/docs/iac/download-install/) and run `pulumi login --local`"


def _pulumi(args: list[str]) -> int:
    path = shutil.which("pulumi")
    if path is None:
        print(f"the Pulumi CLI is not on PATH: {INSTALL_HINT}")
        return 2
    print(f"$ pulumi {' '.join(args)}", flush=True)
    try:
        return subprocess.run([path, *args], check=False).returncode
    except KeyboardInterrupt:
        return 130


def up(stack: str, project: str | None) -> int:
    flag = ["--project", project] if project else []
    if preflight.main(["--stack", stack, *flag]) != 0:
        print(f"not running `pulumi up -s {stack}`: preflight failed (above)")
        return 1
    # --config saves gcp:project into the stack file, as `pulumi config set` would.
    return _pulumi(["up", "-s", stack, *(["--config", f"gcp:project={project}"] if project else [])])


def down(stack: str, project: str | None) -> int:
    destroyed = _pulumi(["destroy", "-s", stack, "--yes"])
    if destroyed != 0:
        print(f"`pulumi destroy -s {stack}` did not finish (exit {destroyed}); what is left:")
    if _on_existing_cluster(stack):
        print(f"stack {stack} is on an existing cluster: it created nothing of Google, no status check to run")
        return destroyed
    left = status.main(["--stack", stack, *(["--project", project] if project else [])])
    return destroyed or left


def _on_existing_cluster(stack: str) -> bool:
    try:
        return load_config(stack).cluster.existing
    except (ConfigError, FileNotFoundError):
        return False  # the status check then reports the stack file and what is left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.session", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--stack", required=True, help="stack name (Pulumi.<stack>.yaml)")
    parser.add_argument("--project", help="GCP project (default: gcp:project of the stack file)")
    args = parser.parse_args(argv)
    return (up if args.action == "up" else down)(args.stack, args.project)


if __name__ == "__main__":
    sys.exit(main())
