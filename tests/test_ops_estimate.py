"""The dated price table and the per-lab hourly estimate (GPU pool at zero and up)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from facts import prices
from facts.machines import G2_L4_COUNT, SYSTEM_MACHINE_TYPES
from ops import estimate as cli
from stacks import cost_estimate as est
from stacks.loader import ConfigError, parse
from stacks.stackfile import load_config, stack_names

REPO = Path(__file__).resolve().parents[1]

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


def test_a_stack_in_a_region_without_prices_names_the_region_as_the_culprit_in_one_line():
    with pytest.raises(ConfigError) as e:
        parse({"lab": "g6"}, stack="g6", project="p", region="europe-north1")
    (problem,) = e.value.problems
    assert problem.startswith("gcp:region: 'europe-north1' is not among the regions where the catalogue in "
                              "facts/prices.py lists L4 GPUs (asia-east1, ")
    assert problem.endswith("set cost_exporter.enabled: false (the cost exporter serves that catalogue's prices)")
    assert "\n" not in str(e.value)
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
    assert lines[1].startswith("paris-g6: no estimate: Pulumi.paris-g6.yaml is invalid: gcp:region: 'europe-west9'")
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


# --- from `make up` on and per benchmark run, on the whole stack's basis ---------------------------------

SYSTEM_NODE = 0.13402 + 0.10 * 50 / 730  # e2-standard-4 on-demand + its 50 GB pd-balanced boot disk, by hand
GPU_NODE = 0.05874 + 0.2231 + 0.10 * 100 / 730  # g2-standard-4 spot (VM row + L4 row) + its 100 GB disk


def _gpu_holders(stack: str, overrides: dict | None = None) -> int:
    """From the plan, independently of the estimate: GPU nodes held from `pulumi up` on by workloads the
    stack deploys (a Deployment or StatefulSet with replicas, an InferenceService with minReplicas, that
    requests nvidia.com/gpu), or the pool's own minimum."""
    from stacks.mockrun import run_stack

    run = run_stack(stack, overrides=overrides)
    held = 0
    for r in run.resources:
        spec = r.inputs.get("spec") or {}
        asks = '"nvidia.com/gpu"' in json.dumps(spec)
        if r.type in ("kubernetes:apps/v1:Deployment", "kubernetes:apps/v1:StatefulSet") and asks:
            held = max(held, 1 if spec.get("replicas", 1) else 0)
        if r.type == "kubernetes:serving.kserve.io/v1beta1:InferenceService" and asks:
            held = max(held, 1 if (spec.get("predictor") or {}).get("minReplicas") else 0)
    (pool,) = [r for r in run.resources if r.type == "gcp:container/nodePool:NodePool" and "gpu" in r.name]
    return max(held, int(pool.inputs["autoscaling"]["totalMinNodeCount"]))


@pytest.mark.parametrize("stack,overrides", [(s, None) for s in stack_names()] + [
    ("g5", {"gke-ml-labs:kserve": json.dumps({"runtime": "triton", "min_replicas": 1})}),
    ("g1", {"gke-ml-labs:gpu_min_nodes": 1}),
])  # fmt: skip
def test_what_the_stack_costs_from_make_up_on_follows_what_it_really_deploys(stack, overrides):
    cfg = load_config(stack)
    if overrides:
        from stacks.stackfile import stack_config
        from stacks.loader import decode

        config, _ = stack_config(stack)
        raw = {k.removeprefix("gke-ml-labs:"): decode(v) for k, v in {**config, **{k: v if isinstance(v, str) else
               json.dumps(v) for k, v in overrides.items()}}.items() if k.startswith("gke-ml-labs:")}  # fmt: skip
        cfg = parse(raw, stack=stack, project="p", region=config.get("gcp:region"))
    e = est.estimate(cfg)
    held = _gpu_holders(stack, overrides)
    assert e.gpu_nodes_from_up == held
    assert e.per_hour_from_up == pytest.approx(SYSTEM_NODE + held * GPU_NODE, abs=1e-6)


def test_g6_costs_its_gpu_node_from_make_up_on_and_a_run_adds_none():
    e = est.estimate(load_config("g6"))
    assert e.per_hour_from_up == pytest.approx(SYSTEM_NODE + GPU_NODE, abs=1e-6)  # $0.436, not $0.141
    assert e.held_by.startswith("the vLLM Deployment (1 replica, 1 GPU) holds the GPU node")
    assert e.run_gpu_minutes is None and e.per_run is None
    assert "| **from `pulumi up` on (1 GPU node(s): the vLLM Deployment" in est.markdown(e) and "$0.436" in est.markdown(e)


@pytest.mark.parametrize("stack,minutes", [("g1", 10), ("g3", 12), ("g8", 17), ("g7", 0)])
def test_a_benchmark_run_is_priced_by_the_whole_stack_with_its_gpu_node_up(stack, minutes):
    e = est.estimate(load_config(stack))
    assert e.run_gpu_minutes == minutes
    assert e.per_run == pytest.approx(minutes / 60 * (SYSTEM_NODE + GPU_NODE), abs=1e-6)  # g1: $0.073, not $0.05


def test_json_follows_the_documented_schema(capsys):
    import jsonschema

    schema = json.loads((REPO / "docs" / "schemas" / "estimate.schema.json").read_text())
    assert cli.main(["--all", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, schema)
    assert [s["stack"] for s in document["stacks"]] == stack_names()
    (triton,) = document["variants"]
    assert triton["variant"] == "g5 on Triton" and triton["run_gpu_minutes"] == 30
    assert triton["per_run"] == pytest.approx(0.5 * (SYSTEM_NODE + GPU_NODE), abs=1e-6)  # $0.218
    assert cli.main(["g6", "--json"]) == 0
    one = json.loads(capsys.readouterr().out)
    jsonschema.validate(one, schema["$defs"]["stack"] | {"$defs": schema["$defs"]})
    assert one["per_day_from_up"] == pytest.approx(24 * (SYSTEM_NODE + GPU_NODE), abs=1e-5)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "stacks": [{**one, "per_run": -1}]}, schema)
