"""Config of cost safety: a billing budget, the idle guard and the cost exporter."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from facts import prices

_BILLING_ACCOUNT = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")
# Budget alert thresholds are fractions of the amount; above 1.5 an alert would come far too late
# to matter for a lab (and is almost always a percent typed as 90 instead of 0.9).
MAX_THRESHOLD = 1.5


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Budget(_Model):
    """A Cloud Billing budget on the project, created when `billing_account` is set."""

    billing_account: str | None = Field(
        None, description="billing account id like 012345-6789AB-CDEF01; unset: no budget"
    )
    amount_usd: float = Field(50.0, gt=0, description="budget per calendar month, in the account's currency")
    thresholds: list[float] = Field(
        default_factory=lambda: [0.5, 0.9, 1.0], description="alert at these fractions of the amount"
    )
    forecast: bool = Field(True, description="also alert when the month's forecast crosses 100%")

    @field_validator("billing_account")
    @classmethod
    def _account(cls, v: str | None) -> str | None:
        if v is not None and not _BILLING_ACCOUNT.match(v):
            raise ValueError(
                f"{v!r} is not a billing account id: expected 18 hex digits as XXXXXX-XXXXXX-XXXXXX "
                "(`gcloud billing accounts list`)"
            )
        return v

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, v: list[float]) -> list[float]:
        bad = [t for t in v if not 0 < t <= MAX_THRESHOLD]
        if bad:
            raise ValueError(
                f"thresholds {bad} out of range: each is a fraction of the amount, above 0 and at most "
                f"{MAX_THRESHOLD} (0.9 means 90%)"
            )
        if not v:
            raise ValueError("give at least one threshold, e.g. [0.5, 0.9, 1.0]")
        return sorted(set(v))

    @property
    def enabled(self) -> bool:
        return self.billing_account is not None


class IdleGuard(_Model):
    """A CronJob that stops this project's GPU workloads once they have run longer than the TTL."""

    enabled: bool = Field(False, description="switch the feature on (the labs that need it switch it on themselves)")
    ttl_minutes: int = Field(180, description="a GPU workload older than this is scaled to zero or deleted")
    schedule: str = Field("*/10 * * * *", description="cron schedule of the guard")
    dry_run: bool = Field(False, description="log what would be stopped, stop nothing")

    @field_validator("ttl_minutes")
    @classmethod
    def _ttl(cls, v: int) -> int:
        if v < 1:
            raise ValueError(
                f"ttl_minutes {v}: must be at least 1 (a TTL of zero would stop every GPU workload as "
                "soon as it starts); turn the guard off with idle_guard.enabled: false instead"
            )
        return v

    @field_validator("schedule")
    @classmethod
    def _cron(cls, v: str) -> str:
        if len(v.split()) != 5:
            raise ValueError(f"{v!r} is not a 5-field cron schedule like '*/10 * * * *'")
        return v


class CostExporter(_Model):
    """Prometheus gauges of what each namespace and pod costs per hour, and their dashboard."""

    enabled: bool = Field(False, description="switch the feature on (the labs that need it switch it on themselves)")
    refresh_seconds: int = Field(60, ge=15, le=3600, description="how often the exporter re-reads nodes and pods")


def check(
    *, cost_exporter: CostExporter, observability_enabled: bool, region: str, machine_types: tuple[str, ...]
) -> list[str]:
    """Cross-field rules of these features; each problem names its keys and what is allowed."""
    problems = []
    if cost_exporter.enabled:
        # The exporter serves the price table's figures for the stack's machines: without them it
        # would export nothing true, so it is refused here rather than dropped with a warning.
        if region not in prices.PRICES:
            # The region is the culprit: without L4 rows in the catalogue it has no GPU node to price.
            problems.append(
                f"gcp:region: {region!r} is not among the regions where the catalogue in facts/prices.py lists L4 "
                f"GPUs ({', '.join(prices.L4_REGIONS)}), which every lab's GPU pool needs: pick one of them, or, if Google "
                "offers L4 there now, set cost_exporter.enabled: false (the cost exporter serves that catalogue's prices)"
            )
        else:
            try:
                for machine in machine_types:
                    prices.machine_price(region, machine)
            except prices.PricingError as e:
                problems.append(f"gke-ml-labs:cost_exporter.enabled: {e}, so the exporter has no figures to serve: "
                                "set cost_exporter.enabled: false to deploy without it")  # fmt: skip
    if cost_exporter.enabled and not observability_enabled:
        problems.append(
            "gke-ml-labs:cost_exporter.enabled: needs gke-ml-labs:observability.enabled (the in-cluster "
            "Prometheus scrapes its gauges and Grafana shows them); turn observability on or the exporter off"
        )
    return problems
