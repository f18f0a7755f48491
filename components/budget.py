"""A Cloud Billing budget on the lab's project: alert e-mails to the billing account's admins at the
configured fractions of a monthly amount. Created and destroyed with the stack."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from stacks.config import LabConfig


@dataclass(frozen=True)
class BudgetArgs:
    cfg: LabConfig


def threshold_rules(cfg: LabConfig) -> list[gcp.billing.BudgetThresholdRuleArgs]:
    rules = [gcp.billing.BudgetThresholdRuleArgs(threshold_percent=t) for t in cfg.budget.thresholds]
    if cfg.budget.forecast:
        rules.append(gcp.billing.BudgetThresholdRuleArgs(threshold_percent=1.0, spend_basis="FORECASTED_SPEND"))
    return rules


def amount(cfg: LabConfig) -> gcp.billing.BudgetAmountArgs:
    units, fraction = divmod(round(cfg.budget.amount_usd * 100), 100)
    return gcp.billing.BudgetAmountArgs(
        specified_amount=gcp.billing.BudgetAmountSpecifiedAmountArgs(units=str(units), nanos=fraction * 10_000_000)
    )


class ProjectBudget(pulumi.ComponentResource):
    def __init__(self, name: str, args: BudgetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:budget:ProjectBudget", name, None, opts)
        cfg = args.cfg
        # The Billing Budgets API refuses user ADC credentials without a quota project: this provider
        # bills the API calls to the lab's project (pulumi_gcp's Budget documentation).
        self.provider = gcp.Provider(
            f"{name}-provider",
            project=cfg.project,
            billing_project=cfg.project,
            user_project_override=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        project = gcp.organizations.get_project_output(project_id=cfg.project)
        self.budget = gcp.billing.Budget(
            name,
            billing_account=cfg.budget.billing_account,
            display_name=f"gke-ml-labs {cfg.stack}"[:60],
            budget_filter=gcp.billing.BudgetBudgetFilterArgs(
                projects=[project.number.apply(lambda n: f"projects/{n}")],
                calendar_period="MONTH",
                credit_types_treatment="INCLUDE_ALL_CREDITS",
            ),
            amount=amount(cfg),
            threshold_rules=threshold_rules(cfg),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )
        self.register_outputs({"budget": self.budget.name})
