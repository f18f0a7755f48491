"""The stack outputs: the contract the program writes (stacks/program.py) and the measurement kit and the
dashboards read (DESIGN.md, "Stack outputs"). One model for both sides: the program exports through
`StackOutputs.contract`, which refuses a key the model does not name and a key it lacks, and the kit reads
`pulumi stack output` (or a saved file) through `StackOutputs.model_validate`, so a key renamed on one side
fails on the other. `benchmark` is each lab's own section, modelled by the lab's benchmark.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

FROZEN = ConfigDict(frozen=True, extra="forbid")


class Pool(BaseModel):
    """A node pool, and the selector that lands a pod on it."""

    model_config = FROZEN

    name: str | None  # None: an existing cluster's nodes, in no pool the project made
    node_selector: dict[str, str]


class GpuPool(Pool):
    machine_type: str
    accelerator: str
    gpus_per_node: int
    spot: bool | None  # None: not known (an existing cluster's pool)
    min_nodes: int | None  # None: not known (an existing cluster's pool)
    max_nodes: int
    sharing: dict[str, Any] | None = Field(description="GPU sharing (time-sharing or MPS), None: whole GPUs")
    tolerations: list[dict[str, str]]


class ServiceRef(BaseModel):
    """A Service in the cluster, as the kit reaches it (in-cluster DNS, or the API server's service proxy)."""

    model_config = FROZEN

    namespace: str
    service: str
    port: int

    def in_cluster_url(self) -> str:
        return f"http://{self.service}.{self.namespace}.svc.cluster.local:{self.port}"


class Endpoint(BaseModel):
    """endpoints[name]: a ClusterIP service. Unknown keys are ignored: an endpoint may carry more for
    other readers (KServe's route host)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    namespace: str
    service: str
    port: int
    path: str = "/"
    protocol: str = Field("http", description="what the service speaks: http, https, openai, ...")

    def server_url(self) -> str:
        """The server's root URL from inside the cluster (the benchmark's client should run there)."""
        scheme = "https" if self.protocol == "https" else "http"  # openai is HTTP underneath
        return f"{scheme}://{self.service}.{self.namespace}.svc.cluster.local:{self.port}"

    def in_cluster_url(self) -> str:
        """The server's URL including the endpoint's path."""
        return self.server_url() + self.path.rstrip("/")


class Grafana(ServiceRef):
    dashboards: dict[str, str]  # title -> uid


class StackOutputs(BaseModel):
    """Every key `pulumi stack output` shows for a lab's stack. The engine does not export a top-level output
    whose value is None (the local cluster's real engine showed it for an existing cluster's project, region,
    cluster name and bucket), so every key that may be None reads as None when it is absent."""

    model_config = FROZEN

    lab: str
    lab_title: str
    config_sha256: str
    project: str | None = None  # None: an existing cluster outside Google Cloud
    region: str | None = None
    zones: list[str]
    cluster_name: str | None = None  # None: an existing cluster whose context names none
    cluster_target: str
    kubeconfig: str | None = None  # a secret: absent from public outputs (recordings, the shipped fixtures)
    system_pool: Pool
    gpu_pool: GpuPool
    namespaces: list[str]
    endpoints: dict[str, Endpoint]
    prometheus: ServiceRef | None = None
    grafana: Grafana | None = None
    artifact_bucket: str | None = None
    labels: dict[str, str]
    versions: dict[str, str]
    benchmark: dict[str, Any]
    cost_estimate: dict[str, Any] | None = None  # stacks.cost_estimate.CostEstimate, None without a price table

    @classmethod
    def contract(cls, **outputs: Any) -> dict[str, Any]:
        """The program's outputs as it exports them (values may still be Pulumi Outputs), once their keys are
        the contract's: a key the model does not name, or one it lacks, raises before anything is exported."""
        unknown, missing = sorted(outputs.keys() - cls.model_fields.keys()), sorted(cls.model_fields.keys() - outputs.keys())
        if unknown or missing:
            raise ValueError(f"stack outputs off the contract (stacks/outputs.py): unknown {unknown}, missing {missing}")
        return outputs
