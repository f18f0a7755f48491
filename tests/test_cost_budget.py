"""The billing budget under mocks: created only with a billing account, thresholds and amount from
config, scoped to the project, its API enabled; bad thresholds and accounts fail before anything exists."""

from __future__ import annotations

import pytest

from stacks.loader import ConfigError
from stacks.mockrun import run_stack

ACCOUNT = "012345-6789AB-CDEF01"
BUDGET = "gcp:billing/budget:Budget"


def with_budget(**budget):
    return run_stack("dev", overrides={"gke-ml-labs:budget": {"billing_account": ACCOUNT, **budget}})


def test_budget_for_the_project_with_configured_thresholds():
    run = with_budget(amount_usd=25.5, thresholds=[0.9, 0.5, 1.2])
    budget = run.one(BUDGET).inputs
    assert budget["billingAccount"] == ACCOUNT
    assert budget["amount"] == {"specifiedAmount": {"units": "25", "nanos": 500000000.0}}
    assert budget["budgetFilter"]["projects"] == ["projects/123456789012"]  # the project's number (getProject)
    assert budget["budgetFilter"]["calendarPeriod"] == "MONTH"
    assert budget["thresholdRules"] == [
        {"thresholdPercent": 0.5}, {"thresholdPercent": 0.9}, {"thresholdPercent": 1.2},
        {"thresholdPercent": 1.0, "spendBasis": "FORECASTED_SPEND"},
    ]
    services = {r.inputs["service"] for r in run.of_type("gcp:projects/service:Service")}
    assert "billingbudgets.googleapis.com" in services


def test_budget_calls_bill_the_project_and_wait_for_the_cluster():
    run = with_budget(forecast=False)
    budget = run.one(BUDGET)
    provider = run.one("pulumi:providers:gcp", "budget-provider")
    assert budget.provider.startswith(provider.urn)
    assert provider.inputs["userProjectOverride"] == "true" and provider.inputs["billingProject"] == "offline-plan-project"
    assert run.depends_on(budget, run.one("gcp:container/cluster:Cluster"))
    assert all(rule.get("spendBasis") != "FORECASTED_SPEND" for rule in budget.inputs["thresholdRules"])


def test_no_billing_account_no_budget():
    run = run_stack("dev")
    assert run.of_type(BUDGET) == []
    assert "billingbudgets.googleapis.com" not in {r.inputs["service"] for r in run.of_type("gcp:projects/service:Service")}


@pytest.mark.parametrize(
    "budget, message",
    [
        ({"thresholds": [-0.5, 0.9]}, r"thresholds \[-0.5\] out of range: each is a fraction of the amount, above 0 and at most 1.5"),
        ({"thresholds": [90]}, r"thresholds \[90.0\] out of range"),
        ({"thresholds": []}, r"at least one threshold"),
        ({"billing_account": "my-account"}, r"'my-account' is not a billing account id"),
        ({"amount_usd": 0}, r"gke-ml-labs:budget.amount_usd: Input should be greater than 0"),
    ],
)
def test_bad_budget_fails_before_anything_exists(budget, message):
    with pytest.raises(ConfigError, match=message):
        run_stack("dev", overrides={"gke-ml-labs:budget": {"billing_account": ACCOUNT, **budget}})
