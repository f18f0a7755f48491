"""What a lab costs per hour at list price, always on one basis, the whole stack (cluster fee, system and
GPU nodes with their boot disks, the settings' storage): with the GPU pool at its minimum (normally zero),
with every GPU node up, and from `pulumi up` on, which is the minimum unless a workload the stack itself
deploys holds a GPU node (g6's vLLM Deployment does); and what one benchmark run adds. Computed from the
lab config and facts.prices; exported by the program (`cost_estimate`), shown by the offline plan and
`python -m ops.estimate` (whose --json the docs quote their cost figures from), and carried by the
benchmark reports.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from components.cluster import SYSTEM_DISK_GB
from facts import prices
from facts.catalogue import MODELS
from stacks.config import LabConfig


class CostLine(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    item: str
    count: int
    unit_per_hour: float
    note: str = ""

    @property
    def per_hour(self) -> float:
        return self.count * self.unit_per_hour


class CostEstimate(BaseModel):
    """USD per hour of one lab at list price; `schema_version` for saved copies (benchmark reports)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: int = 1
    lab: str
    stack: str
    region: str
    price_date: str  # the date the machine prices (every line but the cluster fee) were read
    base: list[CostLine]  # always running while the stack exists
    gpu_node: CostLine  # one GPU node (machine + boot disk)
    gpu_min_nodes: int
    gpu_max_nodes: int
    notes: list[str]
    # GPU nodes up from `pulumi up` on, and what holds them (defaults: a copy saved before these existed).
    gpu_nodes_from_up: int = 0
    held_by: str = ""
    run_gpu_minutes: int | None = None  # what one benchmark run keeps a GPU node up; None: held from up anyway

    @property
    def base_per_hour(self) -> float:
        return sum(line.per_hour for line in self.base)

    @property
    def per_hour_gpu_at_zero(self) -> float:
        """With the GPU pool at its minimum (zero nodes unless gpu_min_nodes says otherwise)."""
        return self.base_per_hour + self.gpu_min_nodes * self.gpu_node.unit_per_hour

    @property
    def per_hour_gpu_up(self) -> float:
        """With every GPU node the pool may hold up (gpu_max_nodes)."""
        return self.base_per_hour + self.gpu_max_nodes * self.gpu_node.unit_per_hour

    @property
    def per_hour_from_up(self) -> float:
        """From `pulumi up` on, with no benchmark running: the nodes the stack's own workloads hold."""
        return self.base_per_hour + self.gpu_nodes_from_up * self.gpu_node.unit_per_hour

    @property
    def per_run(self) -> float | None:
        """One benchmark run: the whole stack with its GPU node up, for the minutes the run keeps it up."""
        return None if self.run_gpu_minutes is None else self.run_gpu_minutes / 60 * self.per_hour_gpu_up


# GPU-node minutes one benchmark run keeps the node up, from the scale-up its first GPU pod causes to the
# autoscaler's removal of the idle node (about 10 minutes after its last pod), as the lab chapters reckon
# them from their runs' phases; not yet measured on GKE. g5 spends them only with a GPU runtime (Triton);
# a lab whose stack holds the GPU node from `pulumi up` on (g6) adds none: its run costs the stack's
# hourly figure for as long as it takes.
RUN_GPU_MINUTES = {"dev": 0, "g1": 10, "g2": 10, "g3": 12, "g4": 7, "g5": 0, "g6": 0, "g7": 0, "g8": 17}
GPU_RUNTIME_RUN_GPU_MINUTES = 30  # g5 with kserve.gpu (Triton): the ramp, the cold starts, the node's removal


def held_from_up(cfg: LabConfig) -> tuple[int, str]:
    """GPU nodes up from `pulumi up` on, and why: a workload the stack deploys that requests a GPU and
    never scales to zero by itself (vLLM's Deployment, one replica; a KServe predictor on the GPU with
    min_replicas above 0), else gpu_min_nodes."""
    holders = []
    if cfg.vllm.enabled:
        holders.append("the vLLM Deployment (1 replica, 1 GPU) holds the GPU node")
    if cfg.kserve.enabled and cfg.kserve.deploy_example and cfg.kserve.gpu and cfg.kserve.min_replicas > 0:
        holders.append(f"the InferenceService's min_replicas {cfg.kserve.min_replicas} on the GPU hold the GPU node")
    held = min(1, cfg.gpu_max_nodes) if holders else 0
    if cfg.gpu_min_nodes >= held:
        return cfg.gpu_min_nodes, (f"gpu_min_nodes {cfg.gpu_min_nodes}" if cfg.gpu_min_nodes else "nothing: the GPU pool "
                                   "stays at zero until a benchmark asks for a GPU")  # fmt: skip
    return held, "; ".join(holders) + " until `pulumi destroy` or the idle guard scales it to zero"


def run_gpu_minutes(cfg: LabConfig, held: int) -> int | None:
    if held:
        return None
    if cfg.lab == "g5" and cfg.kserve.gpu:
        return GPU_RUNTIME_RUN_GPU_MINUTES
    return RUN_GPU_MINUTES[cfg.lab]


def _disk_per_hour(gib_month: float | None, size_gb: int) -> float:
    return 0.0 if gib_month is None else gib_month * size_gb / prices.HOURS_PER_MONTH


def _model(spot: bool) -> str:
    return "spot" if spot else "on-demand"


def estimate(cfg: LabConfig) -> CostEstimate:
    """The lab's hourly list price; raises prices.PricingError for a region or machine not in the table."""
    region = prices.region_prices(cfg.region)
    system = prices.machine_price(cfg.region, cfg.system_machine_type)
    gpu = prices.machine_price(cfg.region, cfg.gpu_machine_type)
    pd = region.pd_balanced_gib_month
    system_node = system.hourly(cfg.system_spot) + _disk_per_hour(pd, SYSTEM_DISK_GB)
    notes = [
        "GKE cluster fee: $0.00 while this is the billing account's only zonal cluster (free tier); "
        f"otherwise ${prices.GKE_CLUSTER_FEE_PER_HOUR:.2f}/h more (read {prices.PRICE_DATE}).",
        f"System pool autoscales from {cfg.system_min_nodes} to {cfg.system_max_nodes} node(s); "
        f"the figures assume its minimum; each further node adds ${system_node:.3f}/h.",
    ]
    if pd is None:
        notes.append(f"Boot disks are not priced for {cfg.region} in facts/prices.py: not included.")
    if region.gcs_standard_gib_month is not None:
        notes.append(f"Lab buckets: ${region.gcs_standard_gib_month:.3f}/GiB-month for what they hold.")
    gpu_node = gpu.hourly(cfg.gpu_spot) + _disk_per_hour(pd, cfg.gpu_disk_gb)
    if cfg.gpu_min_nodes:
        notes.append(f"gpu_min_nodes is {cfg.gpu_min_nodes}: the GPU pool never reaches zero, a warm pool at "
                     f"${cfg.gpu_min_nodes * gpu_node * prices.HOURS_PER_MONTH:,.0f}/month (the g6 cold-start "
                     "report sets it against the minutes it saves).")  # fmt: skip
    base = [
        CostLine(item="GKE zonal cluster", count=1, unit_per_hour=0.0, note="free tier"),
        CostLine(
            item=f"system node {cfg.system_machine_type} ({_model(cfg.system_spot)})",
            count=cfg.system_min_nodes,
            unit_per_hour=system_node,
            note=f"incl. {SYSTEM_DISK_GB} GB boot disk",
        ),
    ]
    base += _cold_start_settings(cfg, region, notes)
    held, held_by = held_from_up(cfg)
    return CostEstimate(
        lab=cfg.lab,
        stack=cfg.stack,
        region=cfg.region,
        price_date=prices.CATALOGUE_DATE,
        base=base,
        gpu_node=CostLine(
            item=f"GPU node {cfg.gpu_machine_type} {cfg.gpus_per_node}x L4 ({_model(cfg.gpu_spot)})",
            count=1,
            unit_per_hour=gpu_node,
            note=f"incl. {cfg.gpu_disk_gb} GB boot disk",
        ),
        gpu_min_nodes=cfg.gpu_min_nodes,
        gpu_max_nodes=cfg.gpu_max_nodes,
        notes=notes,
        gpu_nodes_from_up=held,
        held_by=held_by,
        run_gpu_minutes=run_gpu_minutes(cfg, held),
    )


def _cold_start_settings(cfg: LabConfig, region: prices.RegionPrices, notes: list[str]) -> list[CostLine]:
    """What `vllm.image_streaming` and `vllm.weights: gcs` add: storage of the cached image and of the
    weights (the warm pool is gpu_min_nodes, priced with the pool)."""
    v = cfg.vllm
    if not v.enabled:
        return []
    if v.image_streaming:
        notes.append(f"Image cache (Artifact Registry remote repository of Docker Hub): "
                     f"${prices.ARTIFACT_REGISTRY_GB_MONTH:.2f}/GB-month beyond the first "
                     f"{prices.ARTIFACT_REGISTRY_FREE_GB:g} GB for the images it caches (the vLLM image: its size is "
                     "the g6 cold-start report's 'image GB pulled'); image streaming itself is not priced "
                     "separately in facts/prices.py's sources.")  # fmt: skip
    if v.weights != "gcs":
        return []
    spec = MODELS.get(v.model)
    if spec is None or region.gcs_standard_gib_month is None:
        notes.append(f"Weights bucket: not priced ({'model not in the catalogue' if spec is None else cfg.region}).")
        return []
    # The checkpoint as stored: bf16/fp16 weights, two bytes each (the catalogue's parameter count).
    gib = spec.parameter_count * 2 / 2**30
    return [CostLine(item=f"weights bucket ({v.model}, {gib:.1f} GiB)", count=1,
                     unit_per_hour=round(gib * region.gcs_standard_gib_month / prices.HOURS_PER_MONTH, 6),
                     note=f"GCS standard, ${gib * region.gcs_standard_gib_month:.2f}/month")]  # fmt: skip


def markdown(est: CostEstimate) -> str:
    """The estimate as a Markdown section (title, table, notes)."""
    lines = [
        f"### Cost estimate (list prices read {est.price_date}, {est.region}, USD)",
        "",
        "| | per hour |",
        "|---|---:|",
        *(f"| {line.count} x {line.item} ({line.note}) | ${line.per_hour:.3f} |" for line in est.base),
        f"| each {est.gpu_node.item} ({est.gpu_node.note}) | ${est.gpu_node.unit_per_hour:.3f} |",
        f"| **GPU pool at {est.gpu_min_nodes} node(s)** | **${est.per_hour_gpu_at_zero:.3f}** |",
        f"| **GPU pool at {est.gpu_max_nodes} node(s)** | **${est.per_hour_gpu_up:.3f}** |",
        *([f"| **from `pulumi up` on ({est.gpu_nodes_from_up} GPU node(s): {est.held_by})** | "
           f"**${est.per_hour_from_up:.3f}** |"] if est.gpu_nodes_from_up > est.gpu_min_nodes else []),
        "",
        *(f"- {note}" for note in est.notes),
    ]
    return "\n".join(lines) + "\n"


def estimate_section(cfg_or_outputs: LabConfig | dict[str, Any]) -> str:
    """Markdown cost section for a report, from a LabConfig or a stack's outputs (`cost_estimate`).

    "" when the outputs carry no estimate (a region the price table does not know).
    """
    if isinstance(cfg_or_outputs, LabConfig):
        return markdown(estimate(cfg_or_outputs))
    saved = cfg_or_outputs.get("cost_estimate")
    return markdown(CostEstimate.model_validate(saved)) if isinstance(saved, dict) else ""


# Why a stack on an existing cluster has no estimate: only what a stack creates is priced.
EXISTING_NOT_PRICED = "it runs on an existing cluster (cluster.target existing), whose nodes it neither creates nor bills"


def estimate_or_none(cfg: LabConfig) -> CostEstimate | None:
    """The estimate, or None where prices are unknown (a missing price must never block `pulumi up`)
    or there is nothing to price (an existing cluster)."""
    if cfg.cluster.existing:
        return None
    try:
        return estimate(cfg)
    except prices.PricingError:
        return None
