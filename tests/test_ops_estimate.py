"""The dated price table and the per-lab hourly estimate (GPU pool at zero and up)."""

from __future__ import annotations

import pytest

from facts import prices
from facts.machines import G2_L4_COUNT, SYSTEM_MACHINE_TYPES
from ops import estimate as cli
from stacks import cost_estimate as est
from stacks.loader import ConfigError, parse
from stacks.stackfile import load_config, stack_names

# Google's on-demand list prices read 2026-08-20 (cloud.google.com/compute/gpus-pricing and
# vm-instance-pricing), a source independent of the table's catalogue: the catalogue's figures must
# agree with them to the fraction of a cent that source gives.
PUBLISHED_ON_DEMAND = {
    ("asia-south1", "g2-standard-4"): 0.7358,
    ("asia-south1", "g2-standard-8"): 0.8886,
    ("us-central1", "g2-standard-4"): 0.7068,
    ("us-central1", "g2-standard-8"): 0.8536,
}
# Machine prices as sums of the catalogue's rows, by hand: (VM row + L4 row) on-demand and spot.
CATALOGUE_SUMS = {
    ("us-central1", "g2-standard-4"): (0.14679 + 0.56004, 0.05874 + 0.2231),
    ("us-central1", "g2-standard-24"): (0.88075 + 1.12008, 0.35242 + 0.4462),  # 2 L4
    ("asia-south1", "g2-standard-96"): (3.66729 + 4.66381, 1.4665 + 1.8568),  # 8 L4
    ("europe-west4", "g2-standard-48"): (1.85143 + 2.35217, 0.85795 + 0.9752),  # 4 L4
    ("me-central2", "e2-standard-8"): (0.42887, 0.17653),
}


@pytest.mark.parametrize("key", sorted(PUBLISHED_ON_DEMAND))
def test_on_demand_prices_agree_with_an_independent_source(key):
    assert round(prices.hourly(*key, spot=False), 4) == PUBLISHED_ON_DEMAND[key]


@pytest.mark.parametrize("key", sorted(CATALOGUE_SUMS))
def test_a_g2_machine_is_its_vm_part_plus_its_l4s(key):
    on_demand, spot = CATALOGUE_SUMS[key]
    assert prices.hourly(*key, spot=False) == pytest.approx(on_demand, abs=1e-9)
    assert prices.hourly(*key, spot=True) == pytest.approx(spot, abs=1e-9)


def test_every_machine_the_config_accepts_is_priced_in_every_l4_region():
    assert len(prices.L4_REGIONS) == 18
    assert {"us-central1", "asia-south1", "europe-west4", "me-central2"} <= set(prices.L4_REGIONS)
    for region in prices.L4_REGIONS:
        for machine in [*G2_L4_COUNT, *SYSTEM_MACHINE_TYPES]:
            price = prices.machine_price(region, machine)
            assert 0 < price.spot < price.on_demand, f"{region}/{machine}: spot must be cheaper"
            assert (price.gpu_share > 0) == machine.startswith("g2-"), machine
            assert "read 20" in price.source and region in price.source and machine in price.source
        # More L4s, then more vCPUs, never cost less (catches a row transcribed into the wrong place).
        by_size = sorted(G2_L4_COUNT, key=lambda m: (G2_L4_COUNT[m], int(m.rsplit("-", 1)[1])))
        assert [prices.hourly(region, m, False) for m in by_size] == sorted(prices.hourly(region, m, False) for m in by_size)
    assert prices.PRICE_DATE == "2026-08-20"


def test_unknown_region_and_machine_fail_naming_what_is_missing_and_what_is_known():
    with pytest.raises(prices.PricingError, match=r"no prices for region 'europe-west9' \(.*where its source lists L4 GPUs: asia-east1, "):
        prices.hourly("europe-west9", "g2-standard-4", spot=True)
    with pytest.raises(prices.PricingError, match=r"no price for machine type 'n2-standard-4' in us-central1 \(priced there: .*g2-standard-24"):
        prices.hourly("us-central1", "n2-standard-4", spot=True)


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
    # over 730 h ($0.0068493/h): $0.1408693/h per system node. The GPU node, g2-standard-4 spot, the
    # catalogue's VM row $0.05874/h plus its L4x1 row $0.2231/h, plus 100 GB of disk ($0.0136986/h).
    system_node, gpu_node = 0.13402 + 0.0068493, 0.05874 + 0.2231 + 0.0136986
    one, two = est.estimate(lab()), est.estimate(lab(system_min_nodes=2, system_max_nodes=3))
    assert one.per_hour_gpu_at_zero == pytest.approx(system_node, abs=1e-6)
    assert two.per_hour_gpu_at_zero == pytest.approx(2 * system_node, abs=1e-6)
    assert two.per_hour_gpu_up == pytest.approx(2 * system_node + gpu_node, abs=1e-6)
    assert "| 2 x system node e2-standard-4 (on-demand) (incl. 50 GB boot disk) | $0.282 |" in est.markdown(two)


def test_spot_region_and_min_nodes_change_the_estimate():
    spot, on_demand = est.estimate(lab()), est.estimate(lab(gpu_spot=False))
    assert on_demand.per_hour_gpu_up - spot.per_hour_gpu_up == pytest.approx((0.14679 + 0.56004) - (0.05874 + 0.2231))
    mumbai = est.estimate(parse({"lab": "g6"}, stack="g6", project="p", region="asia-south1"))
    assert mumbai.gpu_node.unit_per_hour == pytest.approx(0.0611 + 0.2321), "no disk price for asia-south1: machine only"
    assert any("not priced for asia-south1" in n for n in mumbai.notes)
    warm = est.estimate(lab(gpu_min_nodes=1))
    assert warm.per_hour_gpu_at_zero == pytest.approx(warm.per_hour_gpu_up)
    assert any("never reaches zero" in n for n in warm.notes)


def test_estimate_section_from_config_and_from_outputs():
    cfg = lab()
    from_cfg = est.estimate_section(cfg)
    # Dated by when the machine prices were read (the catalogue, 2026-12-01); the fee note keeps its own date.
    assert f"**${est.estimate(cfg).per_hour_gpu_up:.3f}**" in from_cfg and "list prices read 2026-12-01" in from_cfg
    assert "$0.10/h more (read 2026-08-20)" in from_cfg
    saved = {"lab": "g6", "cost_estimate": est.estimate(cfg).model_dump()}
    assert est.estimate_section(saved) == from_cfg
    # A region without prices: the stack still deploys, and the report says nothing rather than guess.
    assert est.estimate_section({"lab": "g6", "cost_estimate": None}) == ""


def test_the_stack_exports_its_estimate_and_an_unpriced_region_does_not_block_up():
    from stacks.mockrun import run_stack

    outputs = run_stack("dev").outputs
    assert outputs["cost_estimate"] == est.estimate(load_config("dev")).model_dump()
    assert run_stack("dev", overrides={"gcp:region": "europe-west9", "gke-ml-labs:zone": None}).outputs["cost_estimate"] is None


def test_every_stack_file_has_an_estimate(capsys):
    assert cli.main(["--all"]) == 0
    out, err = capsys.readouterr()
    assert [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| g") or line.startswith("| dev")] == stack_names()
    assert err == ""


def test_a_stack_in_a_region_without_prices_gets_the_exporter_refused_in_one_line():
    with pytest.raises(ConfigError) as e:
        parse({"lab": "g6"}, stack="g6", project="p", region="europe-west9")
    (problem,) = e.value.problems
    assert problem.startswith("gke-ml-labs:cost_exporter.enabled: no prices for region 'europe-west9'")
    assert problem.endswith("set cost_exporter.enabled: false to deploy without it")
    # Every G2 type the config accepts gets its exporter, with its price in the exporter's table.
    from stacks.mockrun import run_stack

    run = run_stack("g6", overrides={"gke-ml-labs:gpu_machine_type": "g2-standard-24"})
    assert [r for r in run.resources if r.name.startswith("cost-exporter")]
    assert "g2-standard-24" in prices.exporter_table("us-central1")["machines"]


def test_system_machine_types_outside_the_price_table_are_refused():
    with pytest.raises(ConfigError, match=r"system_machine_type: 'n2-standard-4' is not a system machine type .*e2-standard-2, e2-standard-4, e2-standard-8"):
        lab(system_machine_type="n2-standard-4")


def _stack_file(folder, stack: str, **config) -> None:
    lines = "".join(f"  {k}: {v}\n" for k, v in config.items())
    (folder / f"Pulumi.{stack}.yaml").write_text(f"config:\n{lines}")


def test_all_prints_the_priced_stacks_and_one_line_per_unpriced_one(tmp_path, capsys):
    _stack_file(tmp_path, "dev", **{"gke-ml-labs:lab": "dev"})
    _stack_file(tmp_path, "paris", **{"gcp:region": "europe-west9", "gke-ml-labs:lab": "dev"})
    _stack_file(tmp_path, "paris-g6", **{"gcp:region": "europe-west9", "gke-ml-labs:lab": "g6"})
    assert cli.main(["--all"], directory=tmp_path) == 1
    out, err = capsys.readouterr()
    assert "| dev | us-central1 |" in out and "paris" not in out
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("paris: no estimate: no prices for region 'europe-west9'")
    assert lines[1].startswith("paris-g6: no estimate: Pulumi.paris-g6.yaml is invalid: gke-ml-labs:cost_exporter.enabled")
    assert cli.main(["paris"], directory=tmp_path) == 2
    assert capsys.readouterr().err.startswith("error: no prices for region 'europe-west9'")


def test_cli(capsys):
    assert cli.main(["dev"]) == 0 and "GPU pool at 1 node(s)" in capsys.readouterr().out
    assert cli.main(["nope"]) == 2 and "no stack file" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    help_text = capsys.readouterr().out
    assert "python -m ops.estimate --all" in help_text and help_text.rstrip().endswith("the exit status is then 1).")
