"""Proof that everything is down: what of gke-ml-labs still exists and bills, and what it has cost so far.

    python -m ops.status [--project P ...] [--stack S ...] [--gpu-only] [--json]

Checks every project named by a stack file (gcp:project, read even from a stack file whose lab config
is invalid) and every --project, in every zone and region, for every kind any lab can create and what
GKE creates for our clusters without our label (ops.inventory says what is ours and how it knows), each
with where, since when, its list price (or that facts/prices.py has none) and its cost so far. Pulumi
state is reported beside it, but the proof is the cloud's own answer: a failed destroy can leave state
wrong. A stack on an existing cluster (`cluster.target: existing`) names no project: it created nothing
of Google.

Exit status: 0 only when every project and kind was checked and nothing of ours is left (the verdict
line names what status does not list); 1 while anything of ours is left, priced or not; 2 when the
proof is incomplete (a stack file that cannot be read, a project or a kind that could not be listed,
an answer Google would not give, a Pulumi backend that cannot be read).
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
from typing import Literal

from facts import prices
from ops import inventory
from ops.gcp import ApiDisabled, CredentialsError, GcpClient, GcpError, host
from ops.inventory import Billable
from stacks.cluster_config import KEY as CLUSTER_KEY
from stacks.loader import ConfigError, decode, targets_existing
from stacks.stackfile import REPO, misnamed_stack_files, stack_config, stack_names

PULUMI_TIMEOUT_S = 60
SCHEMA_VERSION = 1
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
    not_checked: list[tuple[str, str]] = field(default_factory=list)  # (kind, why it could not be listed)

    def per_hour(self) -> float:
        return sum(b.hourly_usd for b in self.found if b.hourly_usd is not None)

    def so_far(self, now: datetime) -> float:
        return sum(c for b in self.found if (c := b.cost_so_far(now)) is not None)

    def unpriced(self) -> list[Billable]:
        return [b for b in self.found if b.hourly_usd is None]


def check_project(client: GcpClient, project: str, gpu_only: bool, stacks: list[str]) -> ProjectCheck:
    """Lists every kind (inventory.LISTERS), each on its own: one that cannot be listed is NOT CHECKED with
    why, and what it did answer in part is kept; then resolves what of it is ours."""
    result = ProjectCheck(project)
    raw: dict[str, list] = {}
    own = inventory.Ownership(stacks)
    for kind, lister in inventory.LISTERS.items():
        if gpu_only and kind != "VMs":
            continue
        try:
            raw[kind] = lister.fetch(client, project, own)
            result.checked.append(kind)
        except ApiDisabled as e:
            result.not_checked.append((kind, f"{host(lister.api)} is not enabled, so they could not be listed "
                                             f"(`gcloud services enable {host(lister.api)} --project {project}`): {e}"))  # fmt: skip
        except CredentialsError:
            raise
        except inventory.Incomplete as e:
            result.not_checked.append((kind, str(e)))
            raw[kind] = e.found
        except GcpError as e:
            result.not_checked.append((kind, str(e)))
    found = inventory.leftovers(raw, stacks, nodes_known="VMs" in result.checked)
    result.found = [b for b in found if b.gpus] if gpu_only else found
    return result


def scope(gpu_only: bool) -> str:
    return "GPU VMs" if gpu_only else ", ".join(inventory.LISTERS)


def report(check: ProjectCheck, named_by: list[str], now: datetime, gpu_only: bool) -> list[str]:
    lines = [f"project {check.project} (named by {', '.join(named_by)}; {scope(gpu_only)}; every zone and region):"]
    for kind, why in check.not_checked:
        lines.append(f"  NOT CHECKED {kind}: {why}")
    for b in check.found:
        lines.append(f"  {b.line(now)}")
    if not check.found:
        if check.checked and check.not_checked:
            lines.append(f"  none of ours among the {', '.join(check.checked)}")
        elif check.checked:
            lines.append("  none of ours")
        return lines
    unpriced = check.unpriced()
    lines.append(
        f"  {len(check.found)} of ours ({inventory.count_by_kind(check.found)}): ${check.per_hour():.4f}/h now and "
        f"${check.so_far(now):.2f} so far at list price (facts/prices.py, prices of {prices.PRICE_DATE} or later)"
        + (f"; {len(unpriced)} of them without a list price there ({inventory.count_by_kind(unpriced)}), not in "
           "these figures but counted all the same" if unpriced else "")
    )
    return lines


@dataclass(frozen=True)
class Verdict:
    word: Literal["DOWN", "NOT DOWN", "NOT PROVEN"]
    code: int
    line: str


def verdict(checks: list[ProjectCheck], unread: list[str], unchecked: list[str], gpu_only: bool) -> Verdict:
    """Never DOWN while anything of ours was found, or anything could not be checked; and a DOWN names, in
    its own line, what it did not look at."""
    found = [b for c in checks for b in c.found]
    missing = [f"{kind} in {c.project}" for c in checks for kind, _ in c.not_checked] + [
        f"project {p}" for p in unchecked] + unread  # fmt: skip
    if found:
        labs = sorted({b.lab for b in found} - {"?"})
        unpriced = [b for b in found if b.hourly_usd is None]
        per_hour = sum(b.hourly_usd for b in found if b.hourly_usd is not None)
        return Verdict("NOT DOWN", 1, (
            f"NOT DOWN: {len(found)} thing(s) of gke-ml-labs remain (${per_hour:.4f}/h at list price"
            + (f", and {len(unpriced)} without a price: {inventory.count_by_kind(unpriced)}" if unpriced else "")
            + "); " + "".join(f"`make down LAB={lab}`, " for lab in labs) + "or delete them as their lines say"
            + (f"; not checked: {'; '.join(missing)}" if missing else "")))  # fmt: skip
    if missing:
        return Verdict("NOT PROVEN", 2, "NOT PROVEN: nothing of ours found in what could be checked, but not "
                       f"checked: {'; '.join(missing)} (see above)")  # fmt: skip
    projects = ", ".join(c.project for c in checks)
    if gpu_only:
        return Verdict("DOWN", 0, f"DOWN for GPU VMs only: none of gke-ml-labs in {projects}; not checked: every "
                       "other kind (run without --gpu-only)")  # fmt: skip
    not_listed = "; ".join(f"{kind} ({why})" for kind, why in inventory.NOT_LISTED.items())
    return Verdict("DOWN", 0, f"DOWN: nothing billable of gke-ml-labs in {projects}, for the {len(inventory.LISTERS)} "
                   f"kinds listed; not checked: {not_listed}")  # fmt: skip


def as_json(state: PulumiState, unread: list[str], checks: list[ProjectCheck], projects: dict[str, list[str]],
            unchecked: list[str], result: Verdict, now: datetime, gpu_only: bool) -> str:  # fmt: skip
    """The report for scripts and dashboards: docs/schemas/status.schema.json."""
    document = {
        "schema_version": SCHEMA_VERSION,
        "verdict": result.word,
        "exit_status": result.code,
        "verdict_line": result.line,
        "checked_at": now.isoformat(),
        "price_date": prices.PRICE_DATE,
        "scope": "GPU VMs" if gpu_only else list(inventory.LISTERS),
        "not_listed": {} if gpu_only else inventory.NOT_LISTED,
        "pulumi_state": {"cli_missing": state.cli_missing, "error": state.error, "resources": state.resources},
        "stack_files_unreadable": unread,
        "projects": [
            {
                "project": c.project,
                "named_by": projects[c.project],
                "checked": c.checked,
                "not_checked": [{"kind": kind, "why": why} for kind, why in c.not_checked],
                "found": [
                    {**b.model_dump(mode="json", exclude={"node_of"}), "cost_so_far_usd": b.cost_so_far(now)}
                    for b in c.found
                ],
                "per_hour_usd": c.per_hour(),
                "so_far_usd": c.so_far(now),
                "unpriced": len(c.unpriced()),
            }
            for c in checks
        ],
        "projects_not_checked": unchecked,
    }
    return json.dumps(document, indent=2)


def main(argv: list[str] | None = None, client: GcpClient | None = None, now: datetime | None = None,
         directory: Path = REPO) -> int:  # fmt: skip
    parser = argparse.ArgumentParser(prog="python -m ops.status", description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", action="append", default=[], help="a GCP project to check (repeatable)")
    parser.add_argument("--stack", action="append", default=[],
                        help="check the project of this stack file only (repeatable; default: every stack file)")  # fmt: skip
    parser.add_argument("--gpu-only", action="store_true", help="only GPU VMs (the narrower, faster check)")
    parser.add_argument("--json", action="store_true", help="print one JSON document (docs/schemas/status.schema.json)")
    args = parser.parse_args(argv)
    stacks = args.stack or stack_names(directory)
    named, unreadable, existing = stack_projects(stacks, directory)
    # A --stack whose file is misnamed `.yml` is already one line naming it: not a second.
    unreadable += [m for m in misnamed_stack_files(directory) if not any(m in line for line in unreadable)]
    projects = {p: [] for p in args.project} | named
    for p in args.project:
        projects[p] = [*projects[p], "--project"]
    state = pulumi_state(directory)
    say = (lambda *_: None) if args.json else print
    say("\n".join(state.lines(stacks)))
    for line in unreadable:
        say(line if line.startswith("no stack file") else f"stack file {line}")
    for stack in existing:
        say(f"stack {stack}: {EXISTING}")
    unread = unreadable + ([f"Pulumi state: {state.error}"] if state.error else [])
    now = now or datetime.now(timezone.utc)
    checks: list[ProjectCheck] = []
    if not projects and existing and not unreadable:
        result = Verdict("DOWN", 0, f"DOWN: nothing billable of gke-ml-labs: {', '.join(existing)} created nothing "
                         "of Google")  # fmt: skip
        print(as_json(state, unread, checks, projects, [], result, now, args.gpu_only) if args.json else f"\n{result.line}")
        return result.code
    if not projects:
        result = Verdict("NOT PROVEN", 2, "NOT PROVEN: no project to check: pass --project (make status PROJECT=...) "
                         "or set gcp:project in a stack file")  # fmt: skip
        print(as_json(state, unread, checks, projects, [], result, now, args.gpu_only) if args.json else result.line)
        return result.code
    try:
        with client or GcpClient.from_environment() as gcp:
            for project in sorted(projects):
                try:
                    checks.append(check_project(gcp, project, args.gpu_only, stacks))
                except CredentialsError as e:
                    checks.append(ProjectCheck(project, not_checked=[("anything", str(e))]))
                    break  # the same credentials would fail for every other project
    except GcpError as e:  # a bad endpoint override, before any call
        result = Verdict("NOT PROVEN", 2, f"NOT PROVEN: cannot check any project: {e}")
        print(as_json(state, unread, [], projects, sorted(projects), result, now, args.gpu_only) if args.json else result.line)
        return result.code
    for check in checks:
        say("\n" + "\n".join(report(check, projects[check.project], now, args.gpu_only)))
    unchecked = sorted(set(projects) - {c.project for c in checks})
    for project in unchecked:
        say(f"project {project}: NOT CHECKED (credentials failed above)")
    result = verdict(checks, unread, unchecked, args.gpu_only)
    print(as_json(state, unread, checks, projects, unchecked, result, now, args.gpu_only) if args.json else f"\n{result.line}")
    return result.code


if __name__ == "__main__":
    sys.exit(main())
