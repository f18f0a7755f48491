"""A Cloud Billing budget on the lab's project: alert e-mails to the billing account's admins at the
configured fractions of a monthly amount. Created and destroyed with the stack."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp


@dataclass(frozen=True)
class BudgetArgs:
    project: str
    billing_account: str  # like 012345-6789AB-CDEF01
    display_name: str  # at most 60 characters are kept
    amount_usd: float  # per calendar month, in the account's currency
    thresholds: list[float]  # alert at these fractions of the amount
    forecast: bool = True  # also alert when the month's forecast crosses 100%


def threshold_rules(args: BudgetArgs) -> list[gcp.billing.BudgetThresholdRuleArgs]:
    rules = [gcp.billing.BudgetThresholdRuleArgs(threshold_percent=t) for t in args.thresholds]
    if args.forecast:
        rules.append(gcp.billing.BudgetThresholdRuleArgs(threshold_percent=1.0, spend_basis="FORECASTED_SPEND"))
    return rules


def amount(args: BudgetArgs) -> gcp.billing.BudgetAmountArgs:
    units, fraction = divmod(round(args.amount_usd * 100), 100)
    return gcp.billing.BudgetAmountArgs(
        specified_amount=gcp.billing.BudgetAmountSpecifiedAmountArgs(units=str(units), nanos=fraction * 10_000_000)
    )


class ProjectBudget(pulumi.ComponentResource):
    def __init__(self, name: str, args: BudgetArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:budget:ProjectBudget", name, None, opts)
        # The Billing Budgets API refuses user ADC credentials without a quota project: this provider
        # bills the API calls to the lab's project (pulumi_gcp's Budget documentation).
        self.provider = gcp.Provider(
            f"{name}-provider",
            project=args.project,
            billing_project=args.project,
            user_project_override=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        project = gcp.organizations.get_project_output(project_id=args.project)
        self.budget = gcp.billing.Budget(
            name,
            billing_account=args.billing_account,
            display_name=args.display_name[:60],
            budget_filter=gcp.billing.BudgetBudgetFilterArgs(
                projects=[project.number.apply(lambda n: f"projects/{n}")],
                calendar_period="MONTH",
                credit_types_treatment="INCLUDE_ALL_CREDITS",
            ),
            amount=amount(args),
            threshold_rules=threshold_rules(args),
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider),
        )
        self.register_outputs({"budget": self.budget.name})
