"""What a lab costs per hour at list price: with the GPU pool at its minimum (normally zero) and with
every GPU node up. Computed from the lab config and facts.prices; exported by the program
(`cost_estimate`), shown by the offline plan and `python -m ops.estimate`, and carried by the
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
