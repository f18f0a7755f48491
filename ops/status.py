"""Proof that everything is down: what of gke-ml-labs still exists and bills, and what it has cost so far.

    python -m ops.status [--project P ...] [--stack S ...] [--gpu-only]

Checks every project named by a stack file (gcp:project, read even from a stack file whose lab config
is invalid) and every --project, in every zone and region: GKE clusters, VMs, persistent disks,
static addresses, forwarding rules and buckets labelled app=gke-ml-labs, and HMAC keys of the
stacks' service accounts (ops.inventory), each with
where, since when, its list price and its cost so far. Pulumi state is reported beside it, but the
proof is the cloud's own answer: a failed destroy can leave state wrong. A stack on an existing
cluster (`cluster.target: existing`) names no project: it created nothing of Google.

Exit status: 0 only when every project was checked and nothing billable of ours exists; 1 while
something billable exists; 2 when the proof is incomplete (a stack file that cannot be read, a
project or a kind of resource that could not be listed, a Pulumi backend that cannot be read).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from facts import prices
from ops import inventory
from ops.gcp import ApiDisabled, CredentialsError, GcpClient, GcpError
from ops.inventory import Billable
from stacks.cluster_config import KEY as CLUSTER_KEY
from stacks.loader import ConfigError, decode, targets_existing
from stacks.stackfile import REPO, stack_config, stack_names

PULUMI_TIMEOUT_S = 60
# A stack on an existing cluster bills nothing of ours; what it applied there is its Pulumi state.
EXISTING = ("on an existing cluster (cluster.target existing): it created nothing of Google, so no project of "
            "its is checked; its objects on that cluster are the Pulumi state above (`make down` removes them)")


@dataclass(frozen=True)
class PulumiState:
    """What `pulumi stack ls` says: no CLI (benign), an error (the backend cannot be read), or counts."""

    cli_missing: bool = False
    error: str | None = None
    resources: dict[str, int] = field(default_factory=dict)

    def lines(self, stacks: list[str]) -> list[str]:
        if self.cli_missing:
            return ["Pulumi state: Pulumi CLI not found on PATH, state not read (the cloud check below is the proof)"]
        if self.error is not None:
            return [f"Pulumi state: cannot read the backend: {self.error}"]
        lines = ["Pulumi state:"]
        for stack in stacks:
            count = self.resources.get(stack, 0)
            hint = f" (run `make down LAB={stack}`)" if count else ""
            lines.append(f"  {stack}: stack has {count} resource(s){hint}")
        return lines


def pulumi_state(directory: Path = REPO) -> PulumiState:
    if shutil.which("pulumi") is None:
        return PulumiState(cli_missing=True)
    try:
        done = subprocess.run(
            ["pulumi", "stack", "ls", "--json"], capture_output=True, text=True, check=False, cwd=directory,
            timeout=PULUMI_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return PulumiState(error=f"`pulumi stack ls` did not finish: {e}")
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return PulumiState(error=f"`pulumi stack ls` failed (not logged in? run `pulumi login`): {said}")
    try:
        listing = json.loads(done.stdout or "[]")
        return PulumiState(resources={s["name"]: int(s.get("resourceCount") or 0) for s in listing})
    except (ValueError, KeyError, TypeError) as e:
        return PulumiState(error=f"`pulumi stack ls --json` printed no stack list: {e}")


def stack_projects(stacks: list[str], directory: Path) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """project -> the stack files naming it, one line per stack file that cannot be read, and the stacks
    on an existing cluster (which name no project: they create nothing of Google). Only gcp:project and
    the cluster target are read, so a stack file whose lab config is invalid still names its project."""
    projects: dict[str, list[str]] = {}
    unreadable, existing = [], []
    for stack in stacks:
        try:
            config, _ = stack_config(stack, directory)
        except (ConfigError, FileNotFoundError) as e:
            unreadable.append(str(e))  # one line: a StackFileError names file:line:column
            continue
        project = config.get("gcp:project")
        if targets_existing(decode(config.get(CLUSTER_KEY))):
            existing.append(stack)
        elif project:
            projects.setdefault(project, []).append(f"Pulumi.{stack}.yaml")
    return projects, unreadable, existing


@dataclass
class ProjectCheck:
    project: str
    found: list[Billable] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # the kinds listed
    not_checked: list[str] = field(default_factory=list)  # what could not be listed, and why


def check_project(client: GcpClient, project: str, gpu_only: bool) -> ProjectCheck:
    result = ProjectCheck(project)

    def attempt(what: str, api: str, call):
        try:
            found = call()
            result.checked.append(what)
            return found
        except ApiDisabled as e:
            result.not_checked.append(
                f"{what}: {api} is not enabled, so they could not be listed "
                f"(`gcloud services enable {api} --project {project}`): {e}"
            )
        except CredentialsError:
            raise
        except inventory.Incomplete as e:
            result.not_checked.append(f"{what}: {e}")
            return e.found
        except GcpError as e:
            result.not_checked.append(f"{what}: {e}")
        return []

    nodes = attempt("VMs", "compute.googleapis.com", lambda: inventory.vms(client, project))
    if gpu_only:
        result.found = [n for n in nodes if n.gpus]
        return result
    counted = nodes if "VMs" in result.checked else None  # no node counts when the VMs could not be listed
    result.found += attempt("clusters", inventory.CLUSTER_API, lambda: inventory.clusters(client, project, counted))
    result.found += nodes
    for what, (api, lister) in inventory.LISTERS.items():
        if what != "VMs":
            result.found += attempt(what, api, lambda lister=lister: lister(client, project))
    return result


def report(check: ProjectCheck, named_by: list[str], now: datetime, gpu_only: bool) -> list[str]:
    scope = "GPU VMs" if gpu_only else "clusters, VMs, disks, addresses, forwarding rules, buckets, HMAC keys"
    lines = [f"project {check.project} (named by {', '.join(named_by)}; {scope}, every zone and region):"]
    for line in check.not_checked:
        lines.append(f"  NOT CHECKED {line}")
    for b in check.found:
        lines.append(f"  {b.line(now)}")
    if not check.found:
        if check.checked and check.not_checked:
            lines.append(f"  none of ours among the {', '.join(check.checked)}")
        elif check.checked:
            lines.append("  none of ours")
        return lines
    priced = [b.cost_so_far(now) for b in check.found if b.hourly_usd is not None]
    unpriced = len(check.found) - len(priced)
    per_hour = sum(b.hourly_usd for b in check.found if b.hourly_usd is not None)
    lines.append(
        f"  {len(check.found)} billable ({inventory.count_by_kind(check.found)}): ${per_hour:.4f}/h now and "
        f"${sum(priced):.2f} so far at list price (facts/prices.py, prices of {prices.PRICE_DATE} or later)"
        + (f"; {unpriced} of them with no list price there, not in these figures" if unpriced else "")
    )
    return lines


def main(argv: list[str] | None = None, client: GcpClient | None = None, now: datetime | None = None,
         directory: Path = REPO) -> int:  # fmt: skip
    parser = argparse.ArgumentParser(prog="python -m ops.status", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", action="append", default=[], help="a GCP project to check (repeatable)")
    parser.add_argument("--stack", action="append", default=[],
                        help="check the project of this stack file only (repeatable; default: every stack file)")  # fmt: skip
    parser.add_argument("--gpu-only", action="store_true", help="only GPU VMs (the narrower, faster check)")
    args = parser.parse_args(argv)
    stacks = args.stack or stack_names(directory)
    named, unreadable, existing = stack_projects(stacks, directory)
    projects = {p: [] for p in args.project} | named
    for p in args.project:
        projects[p] = [*projects[p], "--project"]
    state = pulumi_state(directory)
    print("\n".join(state.lines(stacks)))
    for line in unreadable:
        print(f"stack file {line}")
    for stack in existing:
        print(f"stack {stack}: {EXISTING}")
    if not projects and existing and not unreadable:
        print(f"\nDOWN: nothing billable of gke-ml-labs: {', '.join(existing)} created nothing of Google")
        return 0
    if not projects:
        print("no project to check: pass --project (make status PROJECT=...) or set gcp:project in a stack file")
        return 2
    now = now or datetime.now(timezone.utc)
    checks: list[ProjectCheck] = []
    try:
        with client or GcpClient.from_environment() as gcp:
            for project in sorted(projects):
                try:
                    checks.append(check_project(gcp, project, args.gpu_only))
                except CredentialsError as e:
                    checks.append(ProjectCheck(project, not_checked=[f"anything: {e}"]))
                    break  # the same credentials would fail for every other project
    except GcpError as e:  # a bad endpoint override, before any call
        print(f"cannot check any project: {e}")
        return 2
    for check in checks:
        print("\n" + "\n".join(report(check, projects[check.project], now, args.gpu_only)))
    unchecked = sorted(set(projects) - {c.project for c in checks})
    for project in unchecked:
        print(f"project {project}: NOT CHECKED (credentials failed above)")
    return _verdict(checks, unreadable + ([f"Pulumi state: {state.error}"] if state.error else []), unchecked)


def _verdict(checks: list[ProjectCheck], unread: list[str], unchecked: list[str]) -> int:
    found = [b for c in checks for b in c.found]
    incomplete = unread or unchecked or any(c.not_checked for c in checks)
    if found:
        labs = sorted({b.lab for b in found} - {"?"})
        print(f"\nNOT DOWN: {len(found)} billable thing(s) of gke-ml-labs remain; "
              + "".join(f"`make down LAB={lab}`, " for lab in labs) + "or delete them as their lines say")  # fmt: skip
        return 1
    if incomplete:
        print("\nNOT PROVEN: nothing of ours found in what could be checked, but the check is incomplete (see above)")
        return 2
    print(f"\nDOWN: nothing billable of gke-ml-labs in {', '.join(c.project for c in checks)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
