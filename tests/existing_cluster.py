"""A lab's stack file turned to `cluster: existing`, as a user running a lab on their own cluster writes
it: the lab's own keys kept, the GKE-only ones removed, the cluster key added."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stacks.cluster_config import GKE_ONLY_KEYS
from stacks.loader import PROJECT
from stacks.mockrun import MockRun, run_stack
from stacks.stackfile import existing_keys, stack_config

KUBECONFIG = Path(__file__).resolve().parent / "data" / "cluster" / "kubeconfig.yaml"
GKE_CONTEXT = "gke_ml-labs-demo_us-central1-a_team-l4"
LOCAL_CONTEXT = "local"
# What g7 and g8 need on an existing cluster: a bucket the user already has.
BUCKETS = {"g7": "team-l4-artifacts", "g8": "team-l4-checkpoints"}


def cluster_key(stack: str, **fields: Any) -> dict[str, Any]:
    key = {"target": "existing", "kubeconfig": str(KUBECONFIG), "context": GKE_CONTEXT}
    if stack in BUCKETS:
        key["bucket"] = BUCKETS[stack]
    return {**key, **fields}


def overrides(stack: str, **fields: Any) -> dict[str, Any]:
    """run_stack overrides: the GKE-only keys the stack file sets removed, `cluster` set."""
    config, _ = stack_config(stack)
    gone = {f"{PROJECT}:{k}": None for k in GKE_ONLY_KEYS if f"{PROJECT}:{k}" in config}
    return {**gone, f"{PROJECT}:cluster": cluster_key(stack, **fields), "gcp:project": None}


def raw(stack: str, **fields: Any) -> dict[str, Any]:
    """The stack's decoded keys (as stacks.loader.parse takes them) turned to existing."""
    return existing_keys(stack, cluster_key(stack, **fields))


def run_existing(stack: str, *, preview: bool = False, **fields: Any) -> MockRun:
    return run_stack(stack, preview=preview, overrides=overrides(stack, **fields))
