"""g6's cold-start experiment without a cluster: the cluster layer against a scripted cluster that
answers with the real-shape fixtures (tests/cold_start_fixtures.py), the replicas put back however the
run ends, the report and plot from a result, the plan preview, and a saved recording measured again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.cluster import KubeApiError
from benchmarks.g6 import cli
from benchmarks.g6.experiments import cold_start as cs
from benchmarks.g6.experiments.cold_start_report import render_cold_start_report
from benchmarks.g6.experiments.table import EXPERIMENTS
from benchmarks.g6.incluster import proxy_server
from benchmarks.harness import Endpoint
from benchmarks.harness.signals import Interrupted
from benchmarks.kube.phases import VLLM_LOG, phase_names
from benchmarks.kube.phases_report import WAITED_TITLE, waited_first
from tests import cold_start_fixtures as fx
from tests.labs_fakes import FakeCluster

W = cs.Where(namespace=fx.NS, deployment="vllm", gpu_pool="cloud.google.com/gke-nodepool=gpu", min_nodes=0)
ENDPOINT = Endpoint(namespace=fx.NS, service="vllm", port=8000, path="/v1", protocol="openai")
FAST = cs.ColdStartParams(repeats=1, timeout_s=5.0, poll_s=0.01)


@pytest.fixture(scope="module")
def g6_outputs() -> dict:
    """The outputs the g6 stack file really exports (the program under mocks)."""
    from stacks.mockrun import run_stack

    return json.loads(json.dumps(run_stack("g6").outputs))


class ScriptedColdStart:
    """A cluster where the Deployment starts at 1 replica: scaled to 0 its pod goes and its node goes a
    poll later; scaled to 1 the fixture's pod, node, events and log appear, and vLLM answers the third
    request. `case` picks the fixture; `on_post` may raise to play a failure or a signal."""

    def __init__(self, case: dict, answer_after: int = 2) -> None:
        self.case, self.replicas, self.node_polls, self.answer_after = case, 1, 0, answer_after
        self.cluster = FakeCluster(on_list=self.list)
        self.cluster.on_patch = self.patch
        self.cluster.on_service_post = self.post
        self.cluster.on_log = lambda *a: case["log"]

    def patch(self, api_version, kind, namespace, name, patch):
        self.replicas = patch["spec"]["replicas"]

    def list(self, api_version, kind, namespace, selector):
        if kind == "Deployment":
            return [{"metadata": {"name": "vllm", "namespace": fx.NS}, "spec": {"replicas": self.replicas}}]
        if kind == "Pod":
            return [self.case["pod"]] if self.replicas else []
        if kind == "Node":
            if selector:  # the GPU pool's nodes: the old node lingers one poll after its pod went
                self.node_polls += 1
                return [self.case["node"]] if self.node_polls == 1 and not self.replicas else []
            return [self.case["node"]] if self.case["node"] else []
        if kind == "Event":
            return self.case["events"] if self.replicas else []
        return []

    def post(self, namespace, service, port, path, body):
        if len(self.cluster.posts) <= self.answer_after:
            raise KubeApiError(f"POST {path} on service {namespace}/{service}:{port} answered HTTP 503: no endpoints")
        return json.dumps({"id": "cmpl-1", "object": "text_completion", "model": fx.MODEL,
                           "choices": [{"index": 0, "text": " there", "finish_reason": "length"}]})


class Serving:
    """The stack as configured: nothing to change, the server as it is."""

    def __init__(self, server):
        self.server, self.asked = server, []

    def session(self):
        from contextlib import nullcontext

        return nullcontext()

    def serving(self, settings):
        from contextlib import contextmanager

        @contextmanager
        def put():
            self.asked.append(settings)
            yield self.server

        return put()


def _clock(case: dict):
    """The request's send time, then its answer: the recorded cold start's own moments."""
    times = iter([case["sent"], case["first_token"]])
    return lambda: next(times)


def _run(script: ScriptedColdStart, params=FAST):
    outcome = cs.ColdStartOutcome(params=params)
    server = proxy_server(script.cluster, ENDPOINT)
    target = Serving(server)
    cs.run_cold_start(_params(), target, server, script.cluster, W, outcome, lambda line: None, _clock(script.case))
    return outcome, target


def _params():
    from benchmarks.g6.config import G6Params

    return G6Params(experiment="cold-start", target_kind="url", target="http://vllm.llm.svc.cluster.local:8000",
                    model=fx.MODEL, concurrency=[1])  # fmt: skip


def test_a_cold_start_scales_to_zero_waits_for_the_node_then_scales_to_one_and_asks_until_vllm_answers():
    script = ScriptedColdStart(fx.from_zero())
    outcome, target = _run(script)
    assert target.asked == []  # the stack as configured: no `pulumi up`, no check of a server that may be down
    assert [p[4]["spec"]["replicas"] for p in script.cluster.patched] == [0, 1, 1]  # down, up, put back
    assert len(script.cluster.posts) == 3  # two 503s while the server came up, then the answer
    assert script.cluster.posts[0][3] == "/v1/completions" and script.cluster.posts[0][4]["max_tokens"] == 1
    (record,) = outcome.records
    assert record.pod["metadata"]["name"] == fx.POD and record.node["metadata"]["name"] == fx.NODE
    assert record.tail_s is not None and record.error is None
    run = cs.to_run(record, None)
    assert run.total_s == pytest.approx(429.3) and run.failure is None
    assert [p.name for p in run.phases] == phase_names(VLLM_LOG)


@pytest.mark.parametrize("signal", [KeyboardInterrupt, Interrupted], ids=["Ctrl-C", "SIGTERM"])
def test_a_signal_mid_cold_start_puts_the_replicas_back(signal):
    script = ScriptedColdStart(fx.from_zero())

    def interrupted(*a):
        raise signal()

    script.cluster.on_service_post = interrupted
    outcome, _ = _run(script)
    assert outcome.interrupted == ("Ctrl-C" if signal is KeyboardInterrupt else "SIGTERM")
    assert script.cluster.patched[-1][4] == {"spec": {"replicas": 1}}  # as it was before the run
    assert script.replicas == 1


def test_an_image_that_never_pulls_stops_the_wait_with_the_kubelets_reason():
    script = ScriptedColdStart(fx.pull_backoff(), answer_after=10**6)
    outcome, _ = _run(script)
    (record,) = outcome.records
    assert record.first_token is None and record.error.startswith("the image did not pull (ImagePullBackOff)")
    assert len(script.cluster.posts) == 1  # it stopped at the first sign, not at the timeout


def test_a_failed_restore_says_the_command_that_finishes_it():
    script = ScriptedColdStart(fx.from_zero())
    lines: list[str] = []
    calls = {"n": 0}

    def patch(api_version, kind, namespace, name, patch):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KubeApiError("patching Deployment llm/vllm failed: HTTP 403 Forbidden")
        script.replicas = patch["spec"]["replicas"]

    script.cluster.on_patch = patch
    server = proxy_server(script.cluster, ENDPOINT)
    cs.run_cold_start(_params(), Serving(server), server, script.cluster, W, cs.ColdStartOutcome(params=FAST),
                      lines.append, _clock(script.case))  # fmt: skip
    assert any("kubectl scale deployment/vllm -n llm --replicas=1" in line for line in lines)


def test_the_warm_pool_does_not_wait_for_the_node_to_go():
    script = ScriptedColdStart(fx.image_present())
    outcome, target = _run(script, cs.ColdStartParams(settings=["warm-pool"], repeats=1, timeout_s=5.0, poll_s=0.01))
    assert script.node_polls == 0 and outcome.records[0].warm_pool
    assert target.asked == [cs.SETTINGS["warm-pool"]]
    assert cs.SETTINGS["warm-pool"].changes() == {"gpu_min_nodes": "1"}
    assert cs.SETTINGS["image-streaming"].changes() == {"vllm.image_streaming": "true"}
    assert cs.SETTINGS["gcs-weights"].changes() == {"vllm.weights": "gcs"}


def _result(records, price=None):
    from benchmarks.g6.result import GpuPrice
    from benchmarks.harness import RunMeta
    from datetime import UTC, datetime

    meta = RunMeta(lab="g6", target="http://vllm.llm.svc.cluster.local:8000", model=fx.MODEL,
                   started_at=datetime(2026, 12, 1, 9, 50, tzinfo=UTC), finished_at=datetime(2026, 12, 1, 11, tzinfo=UTC),
                   client_host_cpus=2, tool_version="test", command=["python", "-m", "benchmarks", "g6"],
                   server_versions={}, errors=[])  # fmt: skip
    price = price or GpuPrice(gpu_node_spot=0.36, gpu_node_on_demand=0.9, rest_of_cluster=0.14, configured="spot",
                              node="g2-standard-4 1x L4", region="us-central1", price_date="2026-12-01",
                              source="a test price")  # fmt: skip
    return cs.cold_start_result(meta, _params(), cs.recorded(cs.ColdStartRecording(records=records), 2.0), price, None)


def _record(case, setting="as-configured", repeat=0, tail=None):
    return cs.ColdStartRecord(setting=setting, settings=cs.SETTINGS[setting].changes(), repeat=repeat,
                              warm_pool=setting == "warm-pool", tail_s=tail, sent=case["sent"],
                              first_token=case["first_token"], error=None, pod=case["pod"], node=case["node"],
                              events=case["events"], log=case["log"])  # fmt: skip


def test_a_cold_start_costs_the_node_from_its_creation_to_the_first_answer():
    (run,) = _result([_record(fx.from_zero())]).runs
    # Node created 10:00:47, first token 10:07:09.7: 382.7 s at $0.36/h.
    assert run.cost_usd == pytest.approx(round(382.7 / 3600 * 0.36, 4))
    (warm,) = _result([_record(fx.image_present(), "warm-pool")]).runs
    assert warm.cost_usd == 0.0 and warm.node_was_up


def test_the_report_opens_with_what_the_user_waited_for_names_failures_and_prices_the_warm_pool():
    records = [_record(fx.from_zero(), tail=540.0), _record(fx.stock_out(), repeat=1),
               _record(fx.image_present(), "warm-pool")]  # fmt: skip
    text = render_cold_start_report(_result(records))
    title, first = text.split("\n\n", 2)[0], text.split("\n## ")[1]
    assert title.startswith("# Lab g6: cold start") and first.startswith(WAITED_TITLE.removeprefix("## "))
    assert "| image pulled | 151.0 |" in text and "Total: **429.3 s**" in text
    assert "as-configured repeat 2: the node scale-up failed (cluster-autoscaler FailedScaleUp): GCE out of resources" in text
    # Break-even by hand: node up 382.7 s before serving + the measured tail 540 s = 922.7 s = 15 min; a warm
    # node at $0.36/h over a 4 h gap costs (4 - 922.7/3600) x 0.36 = $1.35 more, and saves 429.3 - 105.3 s.
    assert "less than **15 min** apart" in text
    assert "| 4 h | $1.44 | $1.35 | $0.250 |" in text  # 1.35 / (324 / 60) = 0.250


def test_every_g6_report_of_a_run_that_brought_a_node_up_opens_with_its_phases():
    from benchmarks.g6.experiments.kv import KvResult
    from benchmarks.g6.experiments.kv_report import render_kv_report
    from benchmarks.g6.report import render_report
    from benchmarks.g6.result import G6Result
    from benchmarks.harness import load_result
    from benchmarks.kube.phases import extract

    case = fx.from_zero()
    waited = extract(case["pod"], case["node"], case["events"], case["log"], VLLM_LOG, container="vllm")
    examples = Path(__file__).resolve().parents[1] / "examples"
    for model, folder, render in ((G6Result, "g6-sim", render_report), (KvResult, "g6-kv-sim", render_kv_report)):
        result = load_result(model, examples / folder)
        sections = [line for line in render(result.model_copy(update={"waited": waited})).splitlines()
                    if line.startswith("## ")]  # fmt: skip
        # What the user waited for, then the answer, then the evidence of what ran and the run itself.
        assert sections[0] == WAITED_TITLE and sections[1].startswith("## The answer"), folder
        assert sections.index("## Evidence: what really ran") + 1 == sections.index("## What was run"), folder
        assert WAITED_TITLE not in render(result)  # a run that found its node up says nothing of it
    assert waited_first("# t\n\nbody\n", None) == "# t\n\nbody\n"


def test_first_serving_keeps_the_phases_only_when_the_node_came_up_during_the_run():
    case = fx.from_zero()
    script = ScriptedColdStart(case)
    first = cs.FirstServing(Serving(proxy_server(script.cluster, ENDPOINT)), script.cluster, W, lambda line: None)
    with first.serving(cs.ServerSettings()):
        pass
    assert first.waited(case["sent"]).node == fx.NODE  # the node appeared after the run began
    later = case["sent"].replace(hour=11)
    assert first.waited(later) is None  # it was already up when the run began


def test_the_plan_preview_says_what_changes_and_what_is_put_back(tmp_path, g6_outputs):
    outputs = g6_outputs
    inv = cli.parse(["--outputs", "o.json", "--experiment", "cold-start", "--settings",
                     "as-configured,image-streaming", "--repeats", "2"])  # fmt: skip
    experiment = EXPERIMENTS["cold-start"]
    own = experiment.parameters(inv.given, _params(), inv)
    (path,) = experiment.write_plan(tmp_path / "plan", _params(), own, outputs, inv.client_cpus)
    plan = yaml.safe_load(path.read_text())
    assert plan["steps"][1] == {"config": {"vllm.image_streaming": "true"}, "then": "pulumi up -s STACK"}
    assert plan["steps"][0]["each"][0] == "kubectl scale deployment/vllm -n llm --replicas=0"
    assert plan["restored_on_exit"]["replicas"].startswith("deployment/vllm in llm")


def test_the_plan_preview_from_the_command_line_touches_nothing(tmp_path, g6_outputs, capsys):
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(g6_outputs))
    assert cli.run(["--outputs", str(outputs), "--experiment", "cold-start", "--client-manifest", str(tmp_path / "m")]) == 0
    (path,) = (tmp_path / "m").iterdir()
    assert capsys.readouterr().out.strip() == str(path)
    steps = yaml.safe_load(path.read_text())["steps"]
    assert [s["setting"] for s in steps] == ["as-configured"] and steps[0]["repeats"] == 3


@pytest.mark.parametrize("argv, message", [
    (["--sim", "--experiment", "cold-start"], "give --stack STACK or --outputs FILE"),
    (["--outputs", "o.json", "--experiment", "cold-start", "--settings", "warm-pool"], "give --stack STACK"),
    (["--sim", "--recording", "r.json"], "--recording applies to --experiment cold-start only"),
])  # fmt: skip
def test_a_cold_start_asked_of_what_cannot_give_one_is_refused_in_one_line(argv, message, capsys):
    assert cli.run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_saved_recording_is_measured_again_without_a_cluster(tmp_path, g6_outputs):
    records = [_record(fx.from_zero(), tail=540.0), _record(fx.pull_backoff(), repeat=1)]
    saved = tmp_path / "recording.json"
    saved.write_text(cs.ColdStartRecording(records=records).model_dump_json())
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(g6_outputs))
    code = cli.run(["--outputs", str(outputs), "--experiment", "cold-start", "--recording", str(saved),
                    "--out", str(tmp_path / "out")])  # fmt: skip
    assert code == 1  # one of the two cold starts failed
    (folder,) = (tmp_path / "out").iterdir()
    assert {p.name for p in folder.iterdir()} >= {"result.json", "report.md", "recording.json", "cold-start-phases.png"}
    result = json.loads((folder / "result.json").read_text())
    assert [r["total_s"] for r in result["runs"]] == [429.3, 174.6]
    assert result["runs"][0]["phases"][6] | {"start": None, "end": None} == {
        "name": "image pulled", "start": None, "end": None, "seconds": 151.0, "skipped": None}


def test_the_committed_example_is_todays_report_of_its_result_and_says_it_was_constructed():
    from benchmarks.harness import load_result

    example = Path(__file__).resolve().parents[1] / "examples" / "g6-cold-start"
    result = load_result(cs.ColdStartResult, example)
    assert (example / "report.md").read_text() == render_cold_start_report(result), (
        "examples/g6-cold-start is stale: rerun the commands in tests/data/g6/make_cold_start_recording.py")
    assert "not measured on a cluster" in result.source and "--recording" in result.meta.command
    saved = cs.ColdStartRecording.model_validate_json((example / "recording.json").read_text())
    assert [cs.to_run(r, result.gpu_price) for r in saved.records] == result.runs  # measured from its recording


# --- Image streaming: did it take effect (the kubelet's pull against the image's size) ------------------

CACHED = "us-central1-docker.pkg.dev/ml-labs-demo/gml-g6-dockerhub/vllm/vllm-openai:v0.11.2"


@pytest.mark.parametrize("text, seconds", [
    ("1m57.6s", 117.6), ("2m30.871s", 150.871), ("794.767ms", 0.794767), ("3.071s", 3.071), ("1h2m3.004s", 3723.004),
    ("0s", 0.0), ("12µs", 0.000012), ("1.5", None), ("about 3s", None), ("", None),
])  # fmt: skip
def test_the_kubelets_go_durations_read_as_seconds(text, seconds):
    from benchmarks.kube.phases import go_seconds

    assert go_seconds(text) == (None if seconds is None else pytest.approx(seconds))


def test_the_pull_time_is_the_kubelets_own_not_the_wait_for_a_pull_slot():
    from benchmarks.kube.phases import extract

    case = fx.from_zero()
    pulled = next(e for e in case["events"] if e["reason"] == "Pulled")
    assert pulled["message"] == (f'Successfully pulled image "{fx.IMAGE}" in 2m30.871s (2m30.871s including waiting). '
                                 f"Image size: {fx.IMAGE_BYTES} bytes.")  # fmt: skip
    phases = extract(case["pod"], case["node"], case["events"], case["log"], VLLM_LOG, container="vllm",
                     sent=case["sent"], first_token=case["first_token"])  # fmt: skip
    assert (phases.pull_s, phases.image_bytes) == (150.871, fx.IMAGE_BYTES)
    waited = pulled | {"message": pulled["message"].replace("(2m30.871s including", "(4m1.2s including")}
    again = extract(case["pod"], case["node"], [e if e is not pulled else waited for e in case["events"]], case["log"],
                    VLLM_LOG, container="vllm")  # fmt: skip
    assert again.pull_s == 150.871
    present = fx.image_present()
    assert extract(present["pod"], present["node"], present["events"], present["log"], VLLM_LOG).pull_s is None


def _streaming_runs(*pulls_s: float | None):
    """Image-streaming repeats whose pulls took these seconds (None: a whole pull, as from Docker Hub)."""
    cases = [fx.from_zero(fx.T if p is None else fx.pull_in(fx.T, p), CACHED) for p in pulls_s]
    return _result([_record(c, "image-streaming", repeat=i) for i, c in enumerate(cases)])


def test_a_streamed_pull_takes_seconds_whatever_the_size_and_a_fallback_pulls_it_all():
    r = _streaming_runs(None, 3.1, None)
    # 9.83 GB in 3.07 s is 3.2 GB/s: no node's 10 Gbit/s (1.25 GB/s) network carries a whole image that fast;
    # 9.83 GB in 150.9 s (65 MB/s) is a whole pull.
    assert [(x.pull_s, cs.pull_verdict(x)) for x in r.runs] == [(150.871, "whole pull"), (3.071, "streamed"),
                                                                (150.871, "whole pull")]  # fmt: skip
    # A small image pulled in seconds moves too little to tell either way; the as-configured setting has no verdict.
    small = r.runs[1].model_copy(update={"image_bytes": 2_000_000_000})
    assert cs.pull_verdict(small) == "not known"
    assert cs.pull_verdict(r.runs[0].model_copy(update={"setting": "as-configured"})) is None


def test_the_report_says_the_first_repeat_apart_and_names_a_fallback_of_a_later_one():
    text = render_cold_start_report(_streaming_runs(None, 3.1, None))
    section = text.split("## Image streaming: did it take effect\n", 1)[1].split("\n## ", 1)[0]
    assert "| 2 | 3.1 | 9.83 | 3.20 | streamed | 281.5 |" in section
    assert "| 3 | 150.9 | 9.83 | 0.07 | whole pull | 429.3 |" in section
    # The first repeat's whole pull is expected (GKE: no benefit on the first pull); the third's is a fallback.
    assert "Repeat 1 is the image's first pull through the cache" in section
    assert "waited 429.3 s (pull 150.9 s); the later repeats waited 355.4 (281.5-429.3) s" in section
    assert "**Image streaming did not take effect in repeat(s) 3**" in section
    assert "did not take effect" not in render_cold_start_report(_streaming_runs(None, 3.1, 2.6))
    assert "## Image streaming" not in render_cold_start_report(_result([_record(fx.from_zero())]))
def test_the_headline_is_the_median_and_a_setting_measured_fewer_times_than_asked_is_an_error():
    """The fixture's as-configured cold starts took 429.3 and 450.3 s (and one failed): the headline is their
    median, 439.8 s, never the larger of two; the settings recorded once of the three asked are named in Errors,
    and so is the failed repeat: never "Errors: None" over runs that did not happen or did not work."""
    from benchmarks.harness import load_result

    example = Path(__file__).resolve().parents[1] / "examples" / "g6-cold-start"
    result = load_result(cs.ColdStartResult, example)
    head = result.summary[0]
    assert (head.setting, head.asked, head.measured, head.served) == ("as-configured", 3, 3, 2)
    assert head.median_total_s == pytest.approx((429.3 + 450.3) / 2)
    report = render_cold_start_report(result)
    assert "a cold start took a median 439.8 s (429.3-450.3)" in report
    assert "(repeat 1, 429.3 s)" in report  # the served run nearest the median, the shorter of two as near
    assert result.meta.errors[:2] == ["gcs-weights: 1 cold start(s) measured of the 3 asked",
                                      "warm-pool: 1 cold start(s) measured of the 3 asked"]  # fmt: skip
    assert any(e.startswith("as-configured repeat 3 failed: the node scale-up failed") for e in result.meta.errors)
    assert "## Errors\n\nNone." not in report
