"""A dated table of the list prices a lab pays, per region, on-demand and spot.

Only what the labs run is priced: G2 (L4) GPU machines, the E2 machines of the system pool, the
GKE cluster fee, balanced persistent disk (boot disks) and GCS standard storage. Prices move (spot
prices weekly): every entry names its source and the date it was read, and `PRICE_DATE` is the
oldest of them. A region or machine type missing here is an error listing what is known, never a
guess.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

HOURS_PER_MONTH = 730  # Google's own conversion for monthly list prices

# Sources (read on the dates given; quoted in each entry below).
FACTS = "shared/FACTS.md (Google list prices, read 2026-08-20)"
SKYPILOT = (
    "skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @006059e (Google Cloud Billing Catalog "
    "prices; VM part only for G2, the L4 is priced separately there), read 2026-11-29"
)
GKE_PRICING = "cloud.google.com/kubernetes-engine/pricing via FACTS.md: $0.10/cluster-hour, one zonal cluster free, 2026-08-20"
GCS_PRICING = "cloud.google.com/storage/pricing as transcribed by api-evangelist/gcp-cloud-storage (2026-09-20): $0.000027397/GiB-hour"
PD_PRICING = "c3x.dev 'GCP persistent disk types cost' (2026) and a Google pricing-calculator estimate (2023): pd-balanced $0.10/GiB-month"
PRICE_DATE = "2026-08-20"

# The E2 unit prices (us-central1: $0.021811 per vCPU-hour, $0.002923 per GiB-hour; 4 x 0.021811 +
# 16 x 0.002923 = 0.13402, e2-standard-4's price in the SKYPILOT table) put 65% of a standard-shape
# machine's price (4 GiB per vCPU) on its CPUs. The cost exporter splits a node's non-GPU price
# between CPU and memory with this ratio.
CPU_SHARE_OF_VM = 0.65


class PricingError(Exception):
    """A price was asked for that the table does not have."""


class MachinePrice(BaseModel):
    """USD per hour of one machine, GPUs included."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    on_demand: float = Field(gt=0)
    spot: float = Field(gt=0)
    # Fraction of the price that is the GPUs (0 for a CPU machine); splits a node's price for the
    # cost exporter. For G2: 1 - VM-only price / machine price, on-demand (SKYPILOT vs FACTS).
    gpu_share: float = Field(0.0, ge=0, lt=1)
    source: str

    def hourly(self, spot: bool) -> float:
        return self.spot if spot else self.on_demand


class RegionPrices(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    machines: dict[str, MachinePrice]
    pd_balanced_gib_month: float | None = Field(None, description="None: not priced in this region")
    gcs_standard_gib_month: float | None = None


def _g2(on_demand: float, spot: float, vm_only_on_demand: float) -> MachinePrice:
    return MachinePrice(
        on_demand=on_demand,
        spot=spot,
        gpu_share=round(1 - vm_only_on_demand / on_demand, 4),
        source=f"{FACTS}; GPU share from {SKYPILOT}",
    )


def _e2(on_demand: float, spot: float) -> MachinePrice:
    return MachinePrice(on_demand=on_demand, spot=spot, source=SKYPILOT)


PRICES: dict[str, RegionPrices] = {
    "us-central1": RegionPrices(
        machines={
            "g2-standard-4": _g2(0.7068, 0.4240, vm_only_on_demand=0.14679),
            "g2-standard-8": _g2(0.8536, 0.5120, vm_only_on_demand=0.29358),
            "e2-standard-2": _e2(0.06701, 0.02940),
            "e2-standard-4": _e2(0.13402, 0.05879),
            "e2-standard-8": _e2(0.26805, 0.11758),
        },
        pd_balanced_gib_month=0.10,
        gcs_standard_gib_month=round(0.000027397 * HOURS_PER_MONTH, 4),
    ),
    "asia-south1": RegionPrices(
        machines={
            "g2-standard-4": _g2(0.7358, 0.3569, vm_only_on_demand=0.15280),
            "g2-standard-8": _g2(0.8886, 0.4311, vm_only_on_demand=0.30560),
            "e2-standard-2": _e2(0.08048, 0.03531),
            "e2-standard-4": _e2(0.16097, 0.07062),
            "e2-standard-8": _e2(0.32194, 0.14125),
        },
    ),
}

GKE_CLUSTER_FEE_PER_HOUR = 0.10
# The free tier credits one zonal (or Autopilot) cluster per billing account: a lab's zonal cluster
# costs nothing unless the account already runs another one.
GKE_ZONAL_FREE_CLUSTERS = 1


def region_prices(region: str) -> RegionPrices:
    try:
        return PRICES[region]
    except KeyError:
        raise PricingError(
            f"no prices for region {region!r}; known regions: {', '.join(sorted(PRICES))} "
            f"(add the region to facts/prices.py with its source and date)"
        ) from None


def machine_price(region: str, machine_type: str) -> MachinePrice:
    machines = region_prices(region).machines
    try:
        return machines[machine_type]
    except KeyError:
        raise PricingError(
            f"no price for machine type {machine_type!r} in {region}; known there: {', '.join(sorted(machines))} "
            f"(add it to facts/prices.py with its source and date)"
        ) from None


def hourly(region: str, machine_type: str, spot: bool) -> float:
    """USD per hour of one machine at list price."""
    return machine_price(region, machine_type).hourly(spot)


def exporter_table(region: str) -> dict:
    """The region's machine prices as the in-cluster cost exporter reads them (prices.json)."""
    return {
        "region": region,
        "price_date": PRICE_DATE,
        "cpu_share_of_vm": CPU_SHARE_OF_VM,
        "machines": {
            name: {"on_demand": p.on_demand, "spot": p.spot, "gpu_share": p.gpu_share}
            for name, p in region_prices(region).machines.items()
        },
    }
