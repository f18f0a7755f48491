"""Composes the cost features of a lab onto the base platform (see stacks/context.py): the billing
budget, the idle guard and the cost exporter."""

from __future__ import annotations

from typing import Any

import pulumi

from components import cost_exporter, idle_guard
from components.budget import BudgetArgs, ProjectBudget
from stacks.config import LabConfig
from stacks.context import PlatformContext, stack_id

BUDGET_API = "billingbudgets.googleapis.com"


def apis(cfg: LabConfig) -> list[str]:
    """Google APIs these features need besides the base ones."""
    return [BUDGET_API] if cfg.budget.enabled else []


def cluster_overrides(cfg: LabConfig) -> dict[str, Any]:
    """GkeClusterArgs fields these features decide: none."""
    return {}


def gpu_pool_overrides(cfg: LabConfig) -> dict[str, Any]:
    """GpuNodePoolArgs fields these features decide: none."""
    return {}


def budget_args(cfg: LabConfig) -> BudgetArgs:
    b = cfg.budget
    assert b.billing_account is not None, "a budget exists only with a billing account"
    return BudgetArgs(
        project=cfg.project,
        billing_account=b.billing_account,
        display_name=f"gke-ml-labs {cfg.stack}",
        amount_usd=b.amount_usd,
        thresholds=b.thresholds,
        forecast=b.forecast,
    )


def idle_guard_args(cfg: LabConfig, system_node_selector: dict[str, str]) -> idle_guard.IdleGuardArgs:
    g = cfg.idle_guard
    return idle_guard.IdleGuardArgs(
        stack_id=stack_id(cfg),
        ttl_minutes=g.ttl_minutes,
        schedule=g.schedule,
        system_node_selector=system_node_selector,
        dry_run=g.dry_run,
        keda=cfg.autoscaling.enabled,
    )


def cost_exporter_args(
    cfg: LabConfig, system_node_selector: dict[str, str], prometheus: pulumi.Resource | None = None
) -> cost_exporter.CostExporterArgs:
    return cost_exporter.CostExporterArgs(
        stack_id=stack_id(cfg),
        region=cfg.region,
        refresh_seconds=cfg.cost_exporter.refresh_seconds,
        system_node_selector=system_node_selector,
        prometheus=prometheus,
    )


def compose(ctx: PlatformContext) -> None:
    """Register these features' components and add their stack outputs to ctx.outputs."""
    cfg = ctx.cfg
    if cfg.budget.enabled:
        # After the cluster, which itself waits for the project's APIs: the budget needs
        # billingbudgets.googleapis.com enabled before its first call.
        ProjectBudget("budget", budget_args(cfg), opts=pulumi.ResourceOptions(depends_on=[ctx.google.cluster]))
    if cfg.idle_guard.enabled:
        guard = idle_guard_args(cfg, ctx.target.placement.system_node_selector)
        idle_guard.IdleGuard("idle-guard", guard, opts=ctx.k8s_opts())
        ctx.outputs.namespaces.append(idle_guard.NAMESPACE)
    if cfg.cost_exporter.enabled:  # the config refuses it where the price table has no figures
        cost_exporter.CostExporter(
            "cost-exporter",
            cost_exporter_args(cfg, ctx.target.placement.system_node_selector, ctx.ready.get("prometheus")),
            opts=ctx.k8s_opts(),
        )
        ctx.outputs.namespaces.append(cost_exporter.NAMESPACE)
        ctx.outputs.endpoints["cost_exporter"] = {
            "namespace": cost_exporter.NAMESPACE,
            "service": cost_exporter.NAME,
            "port": cost_exporter.PORT,
            "path": "/metrics",
            "protocol": "http",
        }
