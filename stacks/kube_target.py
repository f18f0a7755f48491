"""The cluster target for `cluster: existing`: a kubeconfig context of a cluster that already exists (a
user's own GKE cluster, any cluster with L4 nodes, or the local control plane the tests start). Nothing of
Google is created; the Kubernetes half is applied through this context alone.

The stack's `kubeconfig` output (what the benchmarks connect with) is that context alone, with the
files it names made absolute, so it works wherever the outputs are read on this machine.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.placement import GpuPlacement, Placement, Taint
from stacks.cluster_config import KEY, Cluster
from stacks.cluster_target import ClusterTarget, TargetOutputs
from stacks.config import LabConfig
from stacks.loader import ConfigError

# gcloud names the context of a GKE cluster gke_<project>_<location>_<cluster>; a context so named says
# which project, location and cluster the stack runs on. Any other name says nothing of GKE.
_GKE_CONTEXT = re.compile(r"^gke_(?P<project>[a-z][-a-z0-9]{4,28}[a-z0-9])_(?P<location>[a-z]+-[a-z]+[0-9]+(?:-[a-z])?)_(?P<cluster>[a-z0-9-]+)$")
_ZONE = re.compile(r"^(?P<region>[a-z]+-[a-z]+[0-9]+)-[a-z]$")
# GKE's node labels a GPU selector may name: the pool its nodes come from, and whether they are spot VMs.
NODEPOOL_LABEL = "cloud.google.com/gke-nodepool"
SPOT_LABEL = "cloud.google.com/gke-spot"
# The fields of a kubeconfig that name files, which kubectl reads relative to the kubeconfig's folder.
_FILE_FIELDS = {"cluster": ("certificate-authority",), "user": ("client-certificate", "client-key", "tokenFile")}


def _problem(stack: str, key: str, text: str) -> ConfigError:
    return ConfigError(f"Pulumi.{stack}.yaml", [f"{KEY}.{key}: {text}"])


def context_kubeconfig(cluster: Cluster, stack: str) -> dict[str, Any]:
    """The kubeconfig of `cluster.context` alone, its files absolute; a ConfigError naming the key when
    the file or the context is not there."""
    path = Path(cluster.kubeconfig or "").expanduser()
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise _problem(stack, "kubeconfig", f"cannot read {path}: {e}") from None
    if not isinstance(config, dict):
        raise _problem(stack, "kubeconfig", f"{path} is not a kubeconfig (no mapping)")

    def named(kind: str, name: str | None) -> dict[str, Any] | None:
        return next((e for e in config.get(f"{kind}s") or [] if isinstance(e, dict) and e.get("name") == name), None)

    context = named("context", cluster.context)
    if context is None:
        known = ", ".join(str(c.get("name")) for c in config.get("contexts") or [] if isinstance(c, dict)) or "none"
        raise _problem(stack, "context", f"{cluster.context!r} is not a context of {path} (contexts: {known})")
    body = context.get("context") or {}
    found = {kind: named(kind, body.get(kind)) for kind in ("cluster", "user")}
    for kind, entry in found.items():
        if entry is None:
            raise _problem(stack, "context", f"context {cluster.context!r} names {kind} {body.get(kind)!r}, which {path} lacks")
    folder = path.resolve().parent
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [_absolute(found["cluster"], "cluster", folder)],
        "users": [_absolute(found["user"], "user", folder)],
        "contexts": [context],
        "current-context": cluster.context,
    }


def _absolute(entry: dict[str, Any], kind: str, folder: Path) -> dict[str, Any]:
    inner = dict(entry.get(kind) or {})
    for key in _FILE_FIELDS[kind]:
        if inner.get(key) and not Path(inner[key]).is_absolute():
            inner[key] = str(folder / inner[key])
    return {**entry, kind: inner}


def gke_identity(context: str) -> dict[str, str | None]:
    """Project, region, zone and cluster name from a context gcloud named; all None for any other."""
    m = _GKE_CONTEXT.match(context)
    if m is None:
        return {"project": None, "region": None, "zone": None, "cluster": None}
    zone = _ZONE.match(m["location"])
    return {
        "project": m["project"],
        "region": zone["region"] if zone else m["location"],
        "zone": m["location"] if zone else None,
        "cluster": m["cluster"],
    }


def build(cfg: LabConfig) -> ClusterTarget:
    c = cfg.cluster
    kubeconfig = pulumi.Output.secret(yaml.safe_dump(context_kubeconfig(c, cfg.stack), sort_keys=False))
    # Not delete_unreachable (the GKE target's choice, for a cluster it deletes itself): an existing
    # cluster that does not answer must fail `destroy`, never have its objects forgotten.
    provider = k8s.Provider("cluster-k8s", kubeconfig=kubeconfig)
    gke = gke_identity(c.context or "")
    gpus = c.gpu_nodes
    spot = gpus.node_selector.get(SPOT_LABEL)
    return ClusterTarget(
        provider=provider,
        placement=Placement(
            system_node_selector=dict(c.system_node_selector),
            gpu=GpuPlacement(
                node_selector=dict(gpus.node_selector),
                taints=tuple(Taint(key=t.key, value=t.value, effect=t.effect) for t in gpus.taints),
            ),
        ),
        charts=c.charts,
        outputs=TargetOutputs(
            project=gke["project"],
            region=gke["region"],
            zones=[gke["zone"]] if gke["zone"] else [],
            cluster_name=gke["cluster"],
            kubeconfig=kubeconfig,
            system_pool=c.system_node_selector.get(NODEPOOL_LABEL),
            gpu_pool=gpus.node_selector.get(NODEPOOL_LABEL),
            gpu_spot=None if spot is None else spot == "true",
            gpu_min_nodes=None,
        ),
    )
