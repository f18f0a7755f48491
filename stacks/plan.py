"""The offline plan: what `pulumi up -s <stack>` would create, with no CLI, credentials or network.

    python -m stacks.plan g6                 # a table: type, name, the settings that matter
    python -m stacks.plan g6 --json          # the same, machine-readable (with every input)
    python -m stacks.plan g6 --k8s-out DIR   # every Kubernetes object (and Helm values) as YAML
    python -m stacks.plan g6 --preview       # as a first preview sees it (cloud outputs unknown)
    python -m stacks.plan g5 --dir DIR       # a stack file kept elsewhere (DIR/Pulumi.g5.yaml)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable

import yaml

from facts.prices import PricingError
from stacks.config import LabConfig
from stacks.cost_estimate import EXISTING_NOT_PRICED, estimate, markdown
from stacks.loader import ConfigError
from stacks.mockrun import MockRun, Recorded, run_stack
from stacks.output_folder import OutputFolderError, prepare
from stacks.stackfile import REPO, load_config

KUBERNETES = "kubernetes:"
# Resources that are not Kubernetes objects themselves, though their type says kubernetes.
_NOT_OBJECTS = ("kubernetes:helm.sh/", "kubernetes:yaml/", "kubernetes:kustomize/", "pulumi:providers:")


def _get(d: dict[str, Any], *path: str) -> Any:
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def _node_pool(i: dict[str, Any]) -> str:
    nc, auto = i.get("nodeConfig") or {}, i.get("autoscaling") or {}
    accel = ", ".join(
        f"{int(a.get('count', 0))}x {a.get('type')}"
        + (f" {sharing.get('gpuSharingStrategy')} x{_num(sharing.get('maxSharedClientsPerGpu'))}"
           if (sharing := a.get("gpuSharingConfig")) else "")
        for a in nc.get("guestAccelerators") or []
    )
    taints = ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in nc.get("taints") or [])
    parts = [
        nc.get("machineType"),
        "spot" if nc.get("spot") else "on-demand",
        f"nodes {_num(auto.get('totalMinNodeCount'))}..{_num(auto.get('totalMaxNodeCount'))}",
        accel and f"gpus {accel}",
        taints and f"taint {taints}",
    ]
    return "; ".join(p for p in parts if p)


def _num(v: Any) -> Any:
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _inference_service(i: dict[str, Any]) -> str:
    p = _get(i, "spec", "predictor") or {}
    model = p.get("model") or {}
    fmt = model.get("modelFormat") or {}
    server = model.get("runtime") or "auto-selected runtime"
    gpus = _get(model, "resources", "limits", "nvidia.com/gpu")
    parts = [
        f"{_get(i, 'metadata', 'namespace')}/{_get(i, 'metadata', 'name')}",
        f"{server} ({' '.join(str(fmt[k]) for k in ('name', 'version') if k in fmt)})",
        str(model.get("storageUri")),
        f"replicas {_num(p.get('minReplicas'))}..{_num(p.get('maxReplicas'))} on {p.get('scaleMetric')} "
        f"{_num(p.get('scaleTarget'))} per replica",
        f"{gpus} nvidia.com/gpu each" if gpus else "CPU",
        f"canary {_num(p['canaryTrafficPercent'])}%" if "canaryTrafficPercent" in p else "",
    ]
    return "; ".join(x for x in parts if x)


SETTINGS: dict[str, Callable[[dict[str, Any]], str]] = {
    "gcp:container/cluster:Cluster": lambda i: (
        f"{i.get('location')}; channel {_get(i, 'releaseChannel', 'channel')}; "
        f"deletion protection {i.get('deletionProtection')}; workload pool {_get(i, 'workloadIdentityConfig', 'workloadPool')}"
    ),
    "gcp:container/nodePool:NodePool": _node_pool,
    "gcp:projects/service:Service": lambda i: i.get("service", ""),
    "gcp:compute/subnetwork:Subnetwork": lambda i: (
        f"{i.get('ipCidrRange')} + " + ", ".join(f"{r['rangeName']} {r['ipCidrRange']}" for r in i.get("secondaryIpRanges") or [])
    ),
    "gcp:projects/iAMMember:IAMMember": lambda i: f"{i.get('role')}",
    "gcp:compute/network:Network": lambda i: f"{i.get('name')}; auto subnets {i.get('autoCreateSubnetworks')}",
    "gcp:serviceaccount/account:Account": lambda i: f"{i.get('accountId')}",
    "gcp:storage/bucket:Bucket": lambda i: f"{i.get('name')} {i.get('location')}; force destroy {i.get('forceDestroy')}",
    "kubernetes:serving.kserve.io/v1beta1:InferenceService": _inference_service,
    "kubernetes:helm.sh/v3:Release": lambda i: (
        f"{i.get('chart')} {i.get('version')} -> ns {i.get('namespace')}"
        + (f" (repo {_get(i, 'repositoryOpts', 'repo')})" if _get(i, "repositoryOpts", "repo") else "")
    ),
}


def settings(r: Recorded) -> str:
    if r.type in SETTINGS:
        return SETTINGS[r.type](r.inputs)
    if r.type.startswith(KUBERNETES) and not r.type.startswith(_NOT_OBJECTS):
        meta = r.inputs.get("metadata") or {}
        return f"{meta.get('namespace', '')}/{meta.get('name', '')}".lstrip("/")
    if r.type.startswith(("kubernetes:yaml/", "kubernetes:kustomize/")):
        return str(r.inputs.get("file") or r.inputs.get("directory") or "")
    return ""


def rows(run: MockRun) -> list[dict[str, str]]:
    """Custom resources only: components are groupings, not things that are created or billed."""
    # Manifest files and kustomize directories are (remote) components too, but each stands for real objects.
    manifests = ("kubernetes:yaml/", "kubernetes:kustomize/")
    return [
        {"type": r.type, "name": r.name, "settings": settings(r)}
        for r in run.resources
        if r.custom or r.type.startswith(manifests)
    ]


def kubernetes_objects(run: MockRun) -> list[tuple[str, dict[str, Any]]]:
    """(file name, body) for every Kubernetes object and Helm values set the stack creates."""
    out = []
    for r in run.resources:
        if r.type == "kubernetes:helm.sh/v3:Release":
            out.append((f"helm-{r.inputs.get('name', r.name)}.values.yaml", r.inputs.get("values") or {}))
        elif r.type.startswith(KUBERNETES) and not r.type.startswith(_NOT_OBJECTS):
            meta = r.inputs.get("metadata") or {}
            kind = r.inputs.get("kind", r.type.rsplit(":", 1)[-1])
            stem = "-".join(p for p in (kind, meta.get("namespace"), meta.get("name") or r.name) if p)
            out.append((f"{stem}.yaml".lower(), _ints(r.inputs)))
    return out


def _ints(value: Any) -> Any:
    # The engine hands numbers over as floats; write 8000, not 8000.0.
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return _num(value)


def _table(run: MockRun, cfg: LabConfig) -> str:
    body = rows(run)
    width = {k: max([len(k)] + [len(r[k]) for r in body]) for k in ("type", "name")}
    lines = [f"{'type':<{width['type']}}  {'name':<{width['name']}}  settings"]
    lines += [f"{r['type']:<{width['type']}}  {r['name']:<{width['name']}}  {r['settings']}" for r in body]
    mode = "preview (cloud outputs unknown)" if run.preview else "update"
    lines.append(f"\n{len(body)} resources for stack {run.stack} ({mode}).")
    lines.append("\n" + cost_section(cfg))
    return "\n".join(lines)


def cost_section(cfg: LabConfig) -> str:
    """The estimate, or one line saying which price is missing (the stack still deploys) or that there
    is nothing to price."""
    if cfg.cluster.existing:
        return f"No cost estimate: {EXISTING_NOT_PRICED}."
    try:
        return markdown(estimate(cfg))
    except PricingError as e:
        return f"No cost estimate: {e}."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stacks.plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("stack", help="stack name: the X of Pulumi.X.yaml")
    parser.add_argument("--json", action="store_true", help="print JSON (every resource with all its inputs)")
    parser.add_argument("--preview", action="store_true", help="plan as a first preview (unknown cloud outputs)")
    parser.add_argument("--k8s-out", type=Path, metavar="DIR", help="write every Kubernetes object as YAML here")
    parser.add_argument(
        "--dir", type=Path, default=REPO, help="folder holding Pulumi.<stack>.yaml (default: the project)"
    )
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.stack, directory=args.dir)  # a wrong stack name or config fails before anything is written
        if args.k8s_out:
            prepare(args.k8s_out, "--k8s-out")
        run = run_stack(args.stack, preview=args.preview, directory=args.dir)
    except (ConfigError, FileNotFoundError, OutputFolderError) as e:
        print(e, file=sys.stderr)
        return 2
    if args.k8s_out:
        objects = kubernetes_objects(run)
        for file_name, body in objects:
            (args.k8s_out / file_name).write_text(yaml.safe_dump(body, sort_keys=False))
        print(f"wrote {len(objects)} Kubernetes objects to {args.k8s_out}", file=sys.stderr)
    if args.json:
        resources = [
            {"type": r.type, "name": r.name, "settings": settings(r), "inputs": _ints(r.inputs)}
            for r in run.resources
            if r.custom
        ]
        outputs = {k: v for k, v in run.outputs.items() if k != "kubeconfig"}
        print(json.dumps({"stack": run.stack, "preview": run.preview, "resources": resources, "outputs": outputs}, indent=2, default=str))
    else:
        print(_table(run, cfg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
