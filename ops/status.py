"""Is anything of this project still running, and what has it cost so far?

    python -m ops.status [--project P]

For every stack file: whether Pulumi state says it has resources (needs the Pulumi CLI). Then, from
the Compute API (not from Pulumi state, which a failed destroy can leave wrong): every GPU VM of
this project (GCE label app=gke-ml-labs, which every node pool sets), since when, and its cost so
far at list price. Exits 1 while any GPU node of ours is up, so `pulumi destroy && make status`
proves the lab is down.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from datetime import datetime, timezone

from pydantic import BaseModel, ConfigDict

from facts import prices
from ops.gcp import GcpClient, GcpError
from stacks.stackfile import OFFLINE_PROJECT, load_config, stack_names
from stacks.loader import ConfigError

APP_LABEL = ("app", "gke-ml-labs")  # stacks.config.LabConfig.billing_labels
GPU_MACHINE_PREFIXES = ("g2-", "a2-", "a3-", "a4-")


class GpuNode(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    zone: str
    machine_type: str
    gpus: int
    spot: bool
    lab: str
    status: str
    since: datetime
    hourly_usd: float | None  # None: not in the price table

    def hours_up(self, now: datetime) -> float:
        return max((now - self.since).total_seconds(), 0) / 3600

    def cost_so_far(self, now: datetime) -> float | None:
        return None if self.hourly_usd is None else self.hourly_usd * self.hours_up(now)


def _tail(url: str) -> str:
    return url.rsplit("/", 1)[-1]


def gpu_nodes(client: GcpClient, project: str) -> list[GpuNode]:
    """Our GPU VMs in any zone (instances.aggregatedList filtered by our label), not yet deleted."""
    nodes = []
    label_filter = f'labels.{APP_LABEL[0]}="{APP_LABEL[1]}"'
    for page in client.pages("compute", f"projects/{project}/aggregated/instances", filter=label_filter):
        for scope, listing in (page.get("items") or {}).items():
            for vm in listing.get("instances", []):
                node = _gpu_node(vm, scope)
                if node is not None:
                    nodes.append(node)
    return sorted(nodes, key=lambda n: (n.since, n.name))


def _gpu_node(vm: dict, scope: str) -> GpuNode | None:
    machine = _tail(vm.get("machineType", ""))
    gpus = sum(int(a.get("acceleratorCount", 0)) for a in vm.get("guestAccelerators") or [])
    if not gpus and machine.startswith(GPU_MACHINE_PREFIXES):
        # Accelerator-optimized machine types carry their GPUs without listing guestAccelerators.
        gpus = 1
    if not gpus or vm.get("status") in ("TERMINATED", "STOPPED"):
        return None
    scheduling = vm.get("scheduling") or {}
    spot = scheduling.get("provisioningModel") == "SPOT" or bool(scheduling.get("preemptible"))
    zone = _tail(vm.get("zone", scope))
    region = zone.rsplit("-", 1)[0]
    try:
        hourly = prices.hourly(region, machine, spot)
    except prices.PricingError:
        hourly = None
    return GpuNode(
        name=vm["name"],
        zone=zone,
        machine_type=machine,
        gpus=gpus,
        spot=spot,
        lab=(vm.get("labels") or {}).get("lab", "?"),
        status=vm.get("status", "?"),
        since=datetime.fromisoformat(vm["creationTimestamp"]),
        hourly_usd=hourly,
    )


def pulumi_stacks() -> dict[str, int] | None:
    """Resource count per stack from Pulumi state, or None without the Pulumi CLI."""
    if shutil.which("pulumi") is None:
        return None
    listing = subprocess.run(["pulumi", "stack", "ls", "--json"], capture_output=True, text=True, check=False)
    if listing.returncode != 0:
        return None
    return {s["name"]: int(s.get("resourceCount") or 0) for s in json.loads(listing.stdout or "[]")}


def report(stacks: list[str], state: dict[str, int] | None, nodes: list[GpuNode], now: datetime) -> str:
    lines = ["stacks:"]
    for stack in stacks:
        if state is None:
            lines.append(f"  {stack}: Pulumi CLI not found: cannot read state")
        else:
            count = state.get(stack, 0)
            lines.append(f"  {stack}: {count} resource(s)" + (" (run `pulumi destroy -s %s`)" % stack if count else ""))
    if not nodes:
        lines.append("GPU nodes of gke-ml-labs running now: none")
        return "\n".join(lines)
    lines.append(f"GPU nodes of gke-ml-labs running now: {len(nodes)}")
    total = 0.0
    for n in nodes:
        cost = n.cost_so_far(now)
        total += cost or 0.0
        price = "not in facts/prices.py" if n.hourly_usd is None else f"${n.hourly_usd:.4f}/h, ${cost:.2f} so far"
        lines.append(
            f"  {n.name} ({n.zone}, {n.machine_type}, {n.gpus} GPU, {'spot' if n.spot else 'on-demand'}, lab {n.lab}): "
            f"{n.status} since {n.since.isoformat()} ({n.hours_up(now):.1f} h), {price}"
        )
    lines.append(f"cost of these GPU nodes so far at list price: ${total:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None, client: GcpClient | None = None, now: datetime | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.status", description="What of gke-ml-labs is running now.")
    parser.add_argument("--project", help="GCP project (default: gcp:project of the stack files)")
    args = parser.parse_args(argv)
    stacks = stack_names()
    projects = {args.project} if args.project else set()
    if not projects:
        for stack in stacks:
            try:
                cfg = load_config(stack)
            except ConfigError:
                continue
            if cfg.project != OFFLINE_PROJECT:
                projects.add(cfg.project)
    if not projects:
        print("no project: pass --project or set gcp:project in a stack file")
        return 2
    now = now or datetime.now(timezone.utc)
    nodes = []
    with client or GcpClient() as gcp:
        for project in sorted(projects):
            try:
                nodes += gpu_nodes(gcp, project)
            except GcpError as e:
                print(f"cannot list instances of {project}: {e}")
                return 2
    print(report(stacks, pulumi_stacks(), nodes, now))
    return 1 if nodes else 0


if __name__ == "__main__":
    sys.exit(main())
