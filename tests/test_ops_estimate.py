"""The dated price table and the per-lab hourly estimate (GPU pool at zero and up)."""

from __future__ import annotations

import pytest

from facts import prices
from ops import estimate as cli
from stacks import cost_estimate as est
from stacks.loader import parse
from stacks.stackfile import load_config, stack_names

# FACTS.md's verified list prices (2026-08-20): the table must carry exactly these.
FACTS = {
    ("asia-south1", "g2-standard-4"): (0.7358, 0.3569),
    ("asia-south1", "g2-standard-8"): (0.8886, 0.4311),
    ("us-central1", "g2-standard-4"): (0.7068, 0.4240),
    ("us-central1", "g2-standard-8"): (0.8536, 0.5120),
}


@pytest.mark.parametrize("key", sorted(FACTS))
def test_table_carries_the_verified_prices(key):
    region, machine = key
    assert (prices.hourly(region, machine, spot=False), prices.hourly(region, machine, spot=True)) == FACTS[key]


def test_every_price_names_its_source_and_the_table_its_date():
    for region, table in prices.PRICES.items():
        for machine, price in table.machines.items():
            assert "read 20" in price.source, f"{region}/{machine} has no dated source"
            assert price.spot < price.on_demand, f"{region}/{machine}: spot must be cheaper"
            assert (price.gpu_share > 0) == machine.startswith("g2-"), machine
    assert prices.PRICE_DATE == "2026-08-20"


def test_unknown_region_and_machine_fail_listing_what_is_known():
    with pytest.raises(prices.PricingError, match=r"no prices for region 'europe-west9'; known regions: asia-south1, us-central1"):
        prices.hourly("europe-west9", "g2-standard-4", spot=True)
    with pytest.raises(prices.PricingError, match=r"no price for machine type 'g2-standard-96' in us-central1; known there: .*g2-standard-4"):
        prices.hourly("us-central1", "g2-standard-96", spot=True)


def lab(**raw):
    return parse({"lab": "g6", **raw}, stack="g6", project="p", region=None)


def test_gpu_up_adds_one_gpu_node_per_max_node():
    one, two = est.estimate(lab()), est.estimate(lab(gpu_max_nodes=2))
    node = prices.hourly("us-central1", "g2-standard-4", spot=True)
    assert one.per_hour_gpu_at_zero == two.per_hour_gpu_at_zero
    assert one.per_hour_gpu_up - one.per_hour_gpu_at_zero == pytest.approx(node + 0.10 * 100 / 730)
    assert two.per_hour_gpu_up - two.per_hour_gpu_at_zero == pytest.approx(2 * (one.per_hour_gpu_up - one.per_hour_gpu_at_zero))
    system = prices.hourly("us-central1", "e2-standard-4", spot=False)
    assert one.per_hour_gpu_at_zero == pytest.approx(system + 0.10 * 50 / 730), "cluster fee is free tier"


def test_the_estimate_scales_with_the_system_node_count():
    # By hand: e2-standard-4 on-demand in us-central1 $0.13402/h (4 vCPU x $0.021811 + 16 GiB x
    # $0.002923, Google's E2 unit prices) plus its 50 GB pd-balanced boot disk at $0.10/GiB-month
    # over 730 h ($0.0068493/h): $0.1408693/h per system node. The GPU node, g2-standard-4 spot,
    # $0.4240/h plus 100 GB of disk ($0.0136986/h).
    system_node, gpu_node = 0.13402 + 0.0068493, 0.4240 + 0.0136986
    one, two = est.estimate(lab()), est.estimate(lab(system_min_nodes=2, system_max_nodes=3))
    assert one.per_hour_gpu_at_zero == pytest.approx(system_node, abs=1e-6)
    assert two.per_hour_gpu_at_zero == pytest.approx(2 * system_node, abs=1e-6)
    assert two.per_hour_gpu_up == pytest.approx(2 * system_node + gpu_node, abs=1e-6)
    assert "| 2 x system node e2-standard-4 (on-demand) (incl. 50 GB boot disk) | $0.282 |" in est.markdown(two)


def test_spot_region_and_min_nodes_change_the_estimate():
    spot, on_demand = est.estimate(lab()), est.estimate(lab(gpu_spot=False))
    assert on_demand.per_hour_gpu_up - spot.per_hour_gpu_up == pytest.approx(0.7068 - 0.4240)
    mumbai = est.estimate(parse({"lab": "g6"}, stack="g6", project="p", region="asia-south1"))
    assert mumbai.gpu_node.unit_per_hour == pytest.approx(0.3569), "no disk price for asia-south1: machine only"
    assert any("not priced for asia-south1" in n for n in mumbai.notes)
    warm = est.estimate(lab(gpu_min_nodes=1))
    assert warm.per_hour_gpu_at_zero == pytest.approx(warm.per_hour_gpu_up)
    assert any("never reaches zero" in n for n in warm.notes)


def test_estimate_section_from_config_and_from_outputs():
    cfg = lab()
    from_cfg = est.estimate_section(cfg)
    assert f"**${est.estimate(cfg).per_hour_gpu_up:.3f}**" in from_cfg and "2026-08-20" in from_cfg
    saved = {"lab": "g6", "cost_estimate": est.estimate(cfg).model_dump()}
    assert est.estimate_section(saved) == from_cfg
    # A region without prices: the stack still deploys, and the report says nothing rather than guess.
    assert est.estimate_section({"lab": "g6", "cost_estimate": None}) == ""


def test_the_stack_exports_its_estimate_and_an_unpriced_region_does_not_block_up():
    from stacks.mockrun import run_stack

    outputs = run_stack("dev").outputs
    assert outputs["cost_estimate"] == est.estimate(load_config("dev")).model_dump()
    assert run_stack("dev", overrides={"gcp:region": "europe-west9", "gke-ml-labs:zone": None}).outputs["cost_estimate"] is None


def test_every_stack_file_has_an_estimate():
    rows = cli.table([load_config(s) for s in stack_names()]).splitlines()
    assert len(rows) == 2 + len(stack_names()) + 2


def test_an_unpriced_machine_skips_the_cost_exporter_instead_of_blocking_up():
    from stacks.mockrun import run_stack

    run = run_stack("g6", overrides={"gke-ml-labs:gpu_machine_type": "g2-standard-24"})
    assert not [r for r in run.resources if r.name.startswith("cost-exporter")]
    assert run.one("gcp:container/nodePool:NodePool", "gpu-pool")
    assert [r for r in run_stack("g6").resources if r.name.startswith("cost-exporter")]


def test_cli(capsys):
    assert cli.main(["dev"]) == 0 and "GPU pool at 1 node(s)" in capsys.readouterr().out
    assert cli.main(["nope"]) == 2 and "no stack file" in capsys.readouterr().err
