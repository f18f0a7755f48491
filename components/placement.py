"""Where the Kubernetes half puts pods on its cluster target: the system nodes (controllers, monitoring,
benchmark clients) and the GPU nodes (GPU workloads, GPU-node exporters).

The one place that says how a GPU workload lands on the GPU nodes, so every lab's pods request,
tolerate and select them the same way. The cluster target decides the selectors and taints: the GKE
pools this stack creates (stacks/cloud.py) or an existing cluster's nodes (stacks/kube_target.py);
nothing here knows which.
"""

from __future__ import annotations

from dataclasses import dataclass

GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class Taint:
    key: str
    value: str | None  # None: tolerated whatever its value (operator Exists)
    effect: str  # NoSchedule, PreferNoSchedule or NoExecute


@dataclass(frozen=True)
class GpuPlacement:
    """How a pod lands on the GPU nodes: request, tolerations and selector, as Kubernetes dicts."""

    node_selector: dict[str, str]
    taints: tuple[Taint, ...]

    @property
    def tolerations(self) -> list[dict[str, str]]:
        return [
            {"key": t.key, "value": t.value, "effect": t.effect, "operator": "Equal"}
            if t.value is not None
            else {"key": t.key, "effect": t.effect, "operator": "Exists"}
            for t in self.taints
        ]

    @staticmethod
    def limits(gpus: int = 1) -> dict[str, str]:
        return {GPU_RESOURCE: str(gpus)}


@dataclass(frozen=True)
class Placement:
    """The system nodes' selector (no GPU toleration: nothing of the system lands on GPU nodes) and
    the GPU nodes' placement."""

    system_node_selector: dict[str, str]
    gpu: GpuPlacement
