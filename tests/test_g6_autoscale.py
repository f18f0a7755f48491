"""g6's autoscale experiment without a cluster: its figures from a hand-built record (every expected value by
hand arithmetic), the run against a scripted fleet (the ScaledObject paused for the fixed arm and resumed
however the run ends, the fleet read until it is back at its floor), its report, plot and refusals."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from benchmarks.g6 import cli
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiment import Ending
from benchmarks.g6.experiments import autoscale as a
from benchmarks.g6.experiments import cold_start as cs
from benchmarks.g6.experiments.autoscale_report import PLOT, render_autoscale_plots, render_autoscale_report
from benchmarks.g6.experiments.table import EXPERIMENTS
from benchmarks.g6.result import GpuPrice
from benchmarks.g6.sweep import Measurement
from benchmarks.g6.config import G6Params
from benchmarks.harness import RunMeta, RunProgress
from benchmarks.loadgen import LoadRun, Record, Slo
from benchmarks.loadgen.core import arrival_offsets
from tests import cold_start_fixtures as fx
from tests import kube_fixtures as kf
from tests.labs_fakes import FakeCluster

STARTED = fx.SENT - timedelta(seconds=60)  # the burst (the fixture's request) comes 60 s into the arm
PRICE = GpuPrice(gpu_node_spot=0.30, gpu_node_on_demand=0.90, rest_of_cluster=0.15, configured="spot",
                 node="g2-standard-4", region="us-central1", price_date="2026-12-01", source="test")  # fmt: skip
POLICY = a.ScalingPolicy(scaled_object="vllm", metric="vllm:num_requests_waiting",
                         query='sum(vllm:num_requests_waiting{namespace="llm",service="vllm"})', target=10,
                         min_replicas=1, max_replicas=3, polling_interval_s=15, scale_up_stabilization_s=0,
                         scale_down_stabilization_s=300)  # fmt: skip
QUOTA = "pod didn't trigger scale-up: 1 max node group size reached"


def renamed(obj, pod: str, node: str):
    """A fixture object about another pod (and node): the API's names, everywhere they appear."""
    return json.loads(json.dumps(obj).replace(fx.POD, pod).replace(fx.NODE, node))


def fleet_objects() -> tuple[list, list, list]:
    """The floor's pod (up an hour), a new replica from zero (the cold-start fixture's), and one the pool had
    no room for (the node autoscaler at its ceiling): pods, nodes, events, as a real cluster lists them."""
    floor = renamed(fx.pod(t={k: v - 3600 for k, v in fx.T.items()}), "vllm-6d8f7b9c5-aaaaa", "gke-gml-g6-gpu-7c2e9a1f-a1b2")
    grown = renamed(fx.pod(), "vllm-6d8f7b9c5-bbbbb", "gke-gml-g6-gpu-7c2e9a1f-c3d4")
    stuck = renamed(fx.pod(ready=False, scheduled=False), "vllm-6d8f7b9c5-ccccc", "none")
    nodes = [renamed(fx.node(-3700, -3650), "x", "gke-gml-g6-gpu-7c2e9a1f-a1b2"),
             renamed(fx.node(), "x", "gke-gml-g6-gpu-7c2e9a1f-c3d4")]  # fmt: skip
    events = renamed(fx.from_zero_events(), "vllm-6d8f7b9c5-bbbbb", "gke-gml-g6-gpu-7c2e9a1f-c3d4") + renamed([
        fx.event(1.0, "FailedScheduling", "Warning", fx.FAILED_SCHEDULING, count=9, last=500.0),
        fx.event(12.0, "NotTriggerScaleUp", "Normal", QUOTA, count=40, last=500.0),
    ], "vllm-6d8f7b9c5-ccccc", "none")  # fmt: skip
    rec = kf.realistic({"pods": [floor, grown, stuck], "nodes": nodes, "events": events})
    return rec["pods"], rec["nodes"], rec["events"]


def sample(s: float, desired: int, pods: int, pending: int, ready: int, nodes: int, hpa: bool = True) -> a.Sample:
    return a.Sample(at=STARTED + timedelta(seconds=s), desired=desired, pods=pods, pending=pending, ready=ready,
                    gpu_nodes=nodes, hpa_desired=desired if hpa else None, hpa_metric=12.5 if hpa else None)  # fmt: skip


def seen(sent_s: float, ttft_ms: float | None, error: str | None = None, slo_ms: float = 1000) -> a.RequestSeen:
    return a.RequestSeen(sent_s=sent_s, ttft_ms=ttft_ms, e2e_ms=(ttft_ms or 0) + 500, output_tokens=0 if error else 128,
                         error=error, slo_met=error is None and ttft_ms is not None and ttft_ms <= slo_ms)  # fmt: skip


def autoscaled_record() -> a.ArmRecord:
    """The fleet: 3 wanted at 60 s; a second node at 120 s; the new replica serving at 510 s while the third
    waits on the pool's ceiling; back to 1 wanted at 960 s and to one node at 1,590 s. Nine requests sent,
    eight counted (one lost), one of them failed."""
    pods, nodes, events = fleet_objects()
    samples = [sample(0, 1, 1, 0, 1, 1), sample(60, 3, 3, 2, 1, 1), sample(120, 3, 3, 1, 1, 2),
               sample(510, 3, 3, 1, 2, 2), sample(960, 1, 1, 0, 1, 2), sample(1590, 1, 1, 0, 1, 1)]  # fmt: skip
    requests = [seen(10, 50), seen(30, 60), seen(61, 900), seen(70, 1500), seen(100, 2500), seen(300, 800),
                seen(600, 400), seen(650, None, "timeout_first_token")]  # fmt: skip
    return a.ArmRecord(arm="autoscaled", started=STARTED, schedule=[(0, 0.5), (60, 0.5), (60, 8), (660, 8)],
                       planned_requests=9, floor=1, requests=requests, samples=samples, pods=pods,
                       logs={"vllm-6d8f7b9c5-bbbbb": fx.vllm_log()}, nodes=nodes, events=events,
                       queue=[(60.0, 30.0), (120.0, 40.0)], settled_at_s=1590.0, ended_s=1590.0,
                       queue_by_pod={"vllm-6d8f7b9c5-aaaaa": [(60.0, 30.0), (120.0, 30.0)],
                                     "vllm-6d8f7b9c5-bbbbb": [(60.0, 0.0), (120.0, 10.0)]})  # fmt: skip


def fixed_record() -> a.ArmRecord:
    samples = [sample(0, 1, 1, 0, 1, 1, hpa=False), sample(700, 1, 1, 0, 1, 1, hpa=False)]
    requests = [seen(10, 50), seen(30, 70), seen(61, 3000), seen(300, 9000), seen(600, 20000)]
    return a.ArmRecord(arm="fixed", started=STARTED, schedule=[(0, 0.5), (60, 0.5), (60, 8), (660, 8)],
                       planned_requests=5, floor=1, requests=requests, samples=samples, pods=[], logs={}, nodes=[],
                       events=[], ended_s=700.0)  # fmt: skip


def test_the_autoscaled_arm_is_measured_from_its_record_alone():
    s = a.summarise(autoscaled_record(), PRICE)
    assert (s.sent, s.completed, s.failed, s.lost) == (9, 7, {"timeout_first_token": 1}, 1)
    # Within 1,000 ms: 50, 60, 900, 800, 400; over the arrivals' 640 s (10 to 650).
    assert s.slo_met == 5 and s.goodput_rps == pytest.approx(5 / 640, abs=5e-4)
    # Seven TTFTs 50..2,500: the median is 800; p99 at rank 0.99 x 6 = 5.94, 1,500 + 0.94 x 1,000.
    assert (s.ttft_p50_ms, s.ttft_p99_ms) == (800.0, 2440.0)
    # Sent while fewer served than wanted (60 s to 960 s): 900, 1,500, 2,500, 800, 400 ms; rank 3.96.
    assert (s.short_requests, s.short_ttft_p99_ms) == (5, 2460.0)
    # Wanted at the read of 60 s (before the new pod's creation at 60.6); served when that pod turned Ready,
    # 428 s after the request in whole seconds: 10:07:08 against the arm's start 09:59:00.4, before the read of 510 s.
    assert (s.peak_desired, s.peak_ready, s.first_wanted_s) == (3, 2, 60.0)
    assert s.first_served_s == pytest.approx(487.6)
    # Pods: 1 x 60 + 3 x 60 + 3 x 390 + 3 x 450 + 1 x 630 = 3,390 s; nodes above one: 390 + 450 + 630 = 1,470 s.
    assert s.replica_minutes == pytest.approx(56.5) and s.extra_node_minutes == pytest.approx(24.5)
    # Above the floor of 1: 2 x (60 + 390 + 450) = 1,800 s.
    assert s.extra_replica_minutes == pytest.approx(30.0)
    assert s.scale_ups == 1
    assert s.extra_cost_usd == pytest.approx(1470 / 3600 * 0.30, abs=1e-4)
    assert s.settled
    # The queue's integral per replica: 30 x 60 = 1,800 and 10 x 60 / 2 = 300 of 2,100.
    assert s.queue_share == {"vllm-6d8f7b9c5-aaaaa": pytest.approx(0.857, abs=1e-3),
                             "vllm-6d8f7b9c5-bbbbb": pytest.approx(0.143, abs=1e-3)}  # fmt: skip


def test_each_new_replica_has_its_start_phase_by_phase_and_a_full_pool_says_pending_quota():
    grown, stuck = a.summarise(autoscaled_record(), PRICE).new_replicas  # the floor's pod is not new
    assert grown.pod.endswith("bbbbb") and grown.waiting_for is None
    # The fixture's moments, cut to the API's whole seconds, from the arm's start 60.4 s before its request.
    assert grown.created_s == pytest.approx(60.6) and grown.ready_s == pytest.approx(487.6)
    phases = {p.name: p.seconds for p in grown.phases.phases}
    assert phases["node ready"] == pytest.approx(30.0) and phases["image pulled"] == pytest.approx(151.0)
    assert stuck.ready_s is None and QUOTA in stuck.waiting_for
    assert a.pending_label(stuck.waiting_for) == "pending: quota"
    assert a.pending_label("the image did not pull (ErrImagePull): not found") == "pending"


def test_a_fleet_that_scales_down_under_the_same_load_and_back_is_said_to_cycle():
    """On the queue, a fleet that keeps up empties it, so the HPA drops to the floor and the queue rebuilds: two
    rises in one burst are named, with why; one rise is not."""
    rec = autoscaled_record()
    cycled = rec.model_copy(update={"samples": [*rec.samples[:5], sample(1000, 2, 2, 0, 2, 2), sample(1590, 1, 1, 0, 1, 1)]})
    outcome = a.AutoscaleOutcome(params=a.AutoscaleParams(peak_rate=8), policy=POLICY, records=[cycled])
    report = render_autoscale_report(a.autoscale_result(_meta(), _params(), outcome, PRICE, None))
    assert "The fleet left its floor 2 times in one burst" in report and "ceil(waiting / 10)" in report
    outcome.records = [rec]
    assert "left its floor" not in render_autoscale_report(a.autoscale_result(_meta(), _params(), outcome, PRICE, None))


def test_a_lost_request_is_counted_and_said_and_the_run_is_not_complete(tmp_path):
    rec = autoscaled_record()
    outcome = a.AutoscaleOutcome(params=a.AutoscaleParams(peak_rate=8), policy=POLICY, records=[rec])
    result = a.autoscale_result(_meta(), _params(), outcome, PRICE, None)
    assert "autoscaled: 1 of 9 requests the schedule sent were never counted by the client" in result.meta.errors
    written = EXPERIMENTS["autoscale"].write(Ending(_meta(), _params(), PRICE, None, None), outcome.params, outcome, tmp_path)
    assert not written.complete
    # Every request counted: nothing lost, nothing said about it.
    whole = rec.model_copy(update={"planned_requests": 8})
    assert a.summarise(whole, PRICE).lost == 0
    assert not [e for e in a.shortfalls([a.summarise(whole, PRICE)]) if "never counted" in e]


def test_the_report_compares_the_fleet_with_one_fixed_replica_and_draws_the_timeline(tmp_path):
    outcome = a.AutoscaleOutcome(params=a.AutoscaleParams(peak_rate=8, base_rate=0.5),
                                 policy=POLICY, records=[fixed_record(), autoscaled_record()])  # fmt: skip
    result = a.autoscale_result(_meta(), _params(), outcome, PRICE, None)
    report = render_autoscale_report(result)
    assert "a replica above the floor was wanted at 60 s and one served at 488 s" in report
    # 5 within the SLO against the fixed replica's 2 (+3), for 1,470 node-seconds at $0.30/h: $0.1225;
    # $0.1225 / 3 x 1,000 = $40.83 per 1,000 more.
    assert "5 requests within the SLO against 2 (+3) for $0.122 of extra GPU node time" in report
    assert "$40.83 per 1,000 more" in report
    assert "pending: quota" in report and "0.5 req/s for 60 s, a step to 8 req/s" in report
    # 86% of the queue on one replica: the report says why a new replica did not take the backlog.
    assert "`vllm-6d8f7b9c5-aaaaa` 86%, `vllm-6d8f7b9c5-bbbbb` 14%" in report
    assert "The Service balances connections, not requests" in report
    assert render_autoscale_plots(result, tmp_path) == [tmp_path / PLOT]
    assert (tmp_path / PLOT).stat().st_size > 10_000


def _meta() -> RunMeta:
    return RunMeta(lab="g6", target="stack g6", model=fx.MODEL, started_at=STARTED, finished_at=STARTED + timedelta(hours=1),
                   client_host_cpus=2, tool_version="test", command=["python", "-m", "benchmarks", "g6"])  # fmt: skip


def _params(**kw) -> G6Params:
    return G6Params(experiment="autoscale", target_kind="stack", target="stack g6", stack="g6", client="in-cluster",
                    model=fx.MODEL, slo=Slo(ttft_ms=1000), **kw)  # fmt: skip


# The run against a scripted fleet -----------------------------------------------------------------------


class ScriptedFleet:
    """A cluster whose vLLM fleet sits at one replica; while the autoscaled arm's load runs it grows to two
    (a new Ready pod on a new node) and, a few reads after the load ends, it is back at one. The fixed arm
    sees the ScaledObject paused: no HPA."""

    def __init__(self) -> None:
        self.grown, self.reads_after = False, 0
        self.paused: str | None = None
        self.cluster = FakeCluster(on_list=self.list)
        self.cluster.on_patch = self.patch
        self.cluster.on_log = lambda ns, name, c: f"log of {name}"
        pods, nodes, _ = fleet_objects()
        self.floor_pod, self.new_pod = pods[0], pods[1]
        self.nodes = nodes

    def patch(self, api_version, kind, namespace, name, patch):
        assert (kind, name) == ("ScaledObject", "vllm")
        self.paused = patch["metadata"]["annotations"][a.PAUSED_REPLICAS]

    def list(self, api_version, kind, namespace, selector):
        if self.grown is False and self.reads_after:
            self.reads_after += 1
        grown = self.grown or 0 < self.reads_after < 4
        if kind == "Pod" and 2 <= self.reads_after < 4:  # scaled away: no longer Ready, being deleted
            leaving = json.loads(json.dumps(self.new_pod))
            leaving["metadata"]["deletionTimestamp"] = kf.api_time(fx.at(500))
            next(c for c in leaving["status"]["conditions"] if c["type"] == "Ready")["status"] = "False"
            return [self.floor_pod, leaving]
        if kind == "Deployment":
            return [{"metadata": {"name": "vllm", "namespace": "llm"}, "spec": {"replicas": 2 if grown else 1}}]
        if kind == "Pod":
            return [self.floor_pod, self.new_pod] if grown else [self.floor_pod]
        if kind == "Node":
            return self.nodes if grown else self.nodes[:1]
        if kind == "ScaledObject":
            status = {} if self.paused else {"hpaName": "keda-hpa-vllm"}
            return [{"metadata": {"name": "vllm", "namespace": "llm"}, "status": status}]
        if kind == "HorizontalPodAutoscaler":
            return [{"metadata": {"name": "keda-hpa-vllm"}, "status": {"desiredReplicas": 2 if grown else 1, "currentMetrics": [
                {"type": "External", "external": {"metric": {"name": "s0-prometheus"}, "current": {"averageValue": "12500m"}}}]}}]
        return []


class ScriptedRunner:
    """Answers each point at its planned times: every request 50 ms to its first token. The autoscaled arm's
    load grows the fleet, and it shrinks a few reads after; `interrupt` plays a Ctrl-C in the fixed arm."""

    def __init__(self, fleet: ScriptedFleet, interrupt: bool = False) -> None:
        self.fleet, self.interrupt, self.specs = fleet, interrupt, []

    def run(self, spec, on_progress=None) -> LoadRun:
        self.specs.append(spec)
        if self.interrupt:
            raise KeyboardInterrupt
        if self.fleet.paused is None:
            self.fleet.grown = True
            time.sleep(0.05)  # the watcher reads the grown fleet
            self.fleet.grown, self.fleet.reads_after = False, 1
        offsets = arrival_offsets(spec.plan())
        records = [Record(i=i, scheduled=100 + t, sent=100 + t, first_token=100.05 + t, end=100.2 + t, output_tokens=128)
                   for i, t in enumerate(offsets)]  # fmt: skip
        return LoadRun(records=records, warmup=[], stopped_by="requests", wall_offset=fx.SENT.timestamp() - 100,
                       client={})  # fmt: skip


class Serving:
    """The stack's server as configured, at its Service's address."""

    @contextmanager
    def serving(self, settings):
        yield type("Server", (), {"base_url": "http://vllm.llm.svc:8000"})()


def _run(fleet: ScriptedFleet, runner: ScriptedRunner, arms=("fixed", "autoscaled")) -> a.AutoscaleOutcome:
    own = a.AutoscaleParams(peak_rate=40, base_rate=0, lead_seconds=0, burst_seconds=1, arms=list(arms), watch_s=0.005,
                            settle_timeout_s=5)  # fmt: skip
    outcome = a.AutoscaleOutcome(params=own, policy=POLICY)
    how = Measurement(runner, None, RunProgress(enabled=False), None)
    where = a.Where(namespace="llm", deployment="vllm", gpu_pool="cloud.google.com/gke-nodepool=gpu", min_nodes=0)
    a.run_autoscale(_params(), own, Serving(), how, a.Fleet(fleet.cluster, where, POLICY, None), outcome, lambda m: None)
    return outcome


def test_the_fixed_arm_pauses_the_scaled_object_at_one_and_the_autoscaled_arm_watches_it_grow_and_settle():
    fleet = ScriptedFleet()
    runner = ScriptedRunner(fleet)
    outcome = _run(fleet, runner)
    fixed, auto = outcome.records
    # Paused at "1" for the fixed arm, then the annotation removed (null in a merge patch).
    assert [p[4]["metadata"]["annotations"][a.PAUSED_REPLICAS] for p in fleet.cluster.patched] == ["1", None]
    assert all(x.hpa_desired is None for x in fixed.samples)
    # Both arms sent the same schedule (40 req/s for 1 s: 40 requests), each with prompts of its own.
    assert [s.requests for s in runner.specs] == [40, 40] and runner.specs[0].seed != runner.specs[1].seed
    assert len(auto.requests) == auto.planned_requests == 40
    assert max(x.desired for x in auto.samples) == 2 and max(x.hpa_metric or 0 for x in auto.samples) == 12.5
    # The new pod's log was read once it was Ready; the fleet was seen back at its floor.
    assert ("llm", fleet.new_pod["metadata"]["name"], "vllm") in fleet.cluster.logs_read
    assert auto.settled_at_s is not None and auto.logs[fleet.new_pod["metadata"]["name"]].startswith("log of")
    assert auto.requests[0].sent_s == pytest.approx(arrival_offsets(runner.specs[1].plan())[0], abs=1e-3)
    # The new pod as it was when Ready (it left the fleet no longer Ready): its start ends at /health.
    (grown,) = [r for r in a.new_replicas(auto) if r.pod == fleet.new_pod["metadata"]["name"]]
    assert grown.ready_s is not None and grown.phases.seconds("engine ready (/health)") is not None
    kept = next(p for p in auto.pods if p["metadata"]["name"] == fleet.new_pod["metadata"]["name"])
    assert not kept["metadata"].get("deletionTimestamp")


def test_a_ctrl_c_in_the_fixed_arm_resumes_the_scaled_object_and_keeps_what_was_measured():
    fleet = ScriptedFleet()
    outcome = _run(fleet, ScriptedRunner(fleet, interrupt=True))
    assert outcome.interrupted == "Ctrl-C" and outcome.records == []
    assert fleet.paused is None and len(fleet.cluster.patched) == 2


def test_the_experiment_refuses_what_it_cannot_run_in_one_line(tmp_path, capsys):
    for argv, said in [
        (["--sim", "--peak-rate", "10"], "--sim has no autoscaler"),
        (["--target", "http://127.0.0.1:9", "--peak-rate", "10"], "give --stack STACK or --outputs FILE"),
        (["--stack", "g6", "--peak-rate", "10", "--rate", "3"], "sends its own schedule"),
        (["--stack", "g6", "--peak-rate", "10", "--max-num-seqs", "8"], "runs the stack's server as configured"),
    ]:
        assert cli.run(["--experiment", "autoscale", *argv, "--out", str(tmp_path)]) == 2
        assert said in capsys.readouterr().err
    for argv, said in [
        (["--experiment", "autoscale", "--stack", "g6", "--arms", "fixed,fixed"], "each once"),
        (["--experiment", "autoscale", "--stack", "g6", "--base-rate", "-1"], "a finite number >= 0"),
    ]:
        with pytest.raises(SystemExit) as exited:
            cli.run([*argv, "--out", str(tmp_path)])
        assert exited.value.code == 2 and said in capsys.readouterr().err
    assert cli.run(["--experiment", "saturation", "--sim", "--peak-rate", "10", "--out", str(tmp_path)]) == 2
    assert "--peak-rate applies to --experiment autoscale only" in capsys.readouterr().err
    with pytest.raises(G6Error, match="needs --peak-rate"):
        EXPERIMENTS["autoscale"].parameters({}, _params(), None)
    with pytest.raises(G6Error, match="outputs.benchmark.autoscaling is empty"):
        a.policy_of({"benchmark": {"model": fx.MODEL, "autoscaling": None}})


def test_the_policy_is_read_from_what_the_autoscaled_g6_stack_exports():
    from stacks.mockrun import run_stack

    outputs = json.loads(json.dumps(run_stack("g6", overrides={
        "gke-ml-labs:gpu_max_nodes": 2, "gke-ml-labs:autoscaling": {"enabled": True, "max_replicas": 2}}).outputs))  # fmt: skip
    policy = a.policy_of(outputs)
    assert (policy.scaled_object, policy.metric, policy.min_replicas, policy.max_replicas) == (
        "vllm", "vllm:num_requests_waiting", 1, 2)  # fmt: skip
    assert policy.query == 'sum(vllm:num_requests_waiting{namespace="llm",service="vllm"})'
    with pytest.raises(G6Error, match="autoscaling.enabled true"):
        a.policy_of(json.loads(json.dumps(run_stack("g6").outputs)))
    one = {"benchmark": {"autoscaling": {**policy.model_dump(), "max_replicas": 1}}}
    with pytest.raises(G6Error, match="cannot grow .*max_replicas 1 is its floor"):
        a.policy_of(one)


def test_the_client_manifest_shows_the_burst_as_one_job_whose_plan_follows_the_schedule(tmp_path, capsys):
    """--client-manifest: the load Job the run would create, touching nothing; its plan is the schedule's."""
    from stacks.mockrun import run_stack

    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps(run_stack("g6", overrides={
        "gke-ml-labs:gpu_max_nodes": 2, "gke-ml-labs:autoscaling": {"enabled": True, "max_replicas": 2}}).stack_output()))  # fmt: skip
    argv = ["--outputs", str(outputs), "--experiment", "autoscale", "--peak-rate", "20", "--lead-seconds", "30",
            "--burst-seconds", "120", "--client-manifest", str(tmp_path / "plan")]  # fmt: skip
    assert cli.run(argv) == 0
    jobs = [yaml.safe_load(f.read_text()) for f in sorted((tmp_path / "plan").glob("*.yaml"))]
    (job,) = [j for j in jobs if j["kind"] == "Job"]
    env = {e["name"]: e.get("value") for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    plan = json.loads(env["LOADGEN_PLAN"])
    # 0.5 req/s for 30 s, then 20 req/s for 120 s: 15 + 2,400 requests, no warm-up.
    assert plan["schedule"] == [[0.0, 0.5], [30.0, 0.5], [30.0, 20.0], [150.0, 20.0]]
    assert (plan["requests"], plan["warmup"], plan["rate"], plan["concurrency"]) == (2415, 0, None, None)


def test_the_rise_is_a_step_or_a_ramp_of_the_given_length():
    step = a.AutoscaleParams(peak_rate=8, base_rate=0.5, lead_seconds=60, burst_seconds=600).schedule()
    assert step == [(0.0, 0.5), (60.0, 0.5), (60.0, 8.0), (660.0, 8.0)]
    ramp = a.AutoscaleParams(peak_rate=8, base_rate=0, lead_seconds=0, rise_seconds=120, burst_seconds=60).schedule()
    assert ramp == [(0.0, 0.0), (120.0, 8.0), (180.0, 8.0)]



def test_the_gpu_pool_s_nodes_are_found_by_the_pool_s_own_node_selector():
    """On GKE the stack's label on the pool's nodes; on an existing cluster (no pool name of ours) the
    selector its GPU pods use: never a pool name that no node carries."""
    saved = json.loads((Path(__file__).parent / "data" / "g6" / "g6-outputs.json").read_text())
    assert cs.vllm_where(saved).gpu_pool == "gke-ml-labs/pool=gpu"
    existing = {"gpu_pool": {"name": None, "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"}},
                "endpoints": saved["endpoints"], "benchmark": saved["benchmark"]}  # fmt: skip
    assert cs.vllm_where(existing).gpu_pool == "cloud.google.com/gke-accelerator=nvidia-l4"


@pytest.mark.parametrize("folder", ["g6-autoscale-local", "g6-autoscale-local-per-request"])
def test_the_shipped_local_examples_show_the_fleet_rise_and_fall_back_with_every_request_counted(folder):
    """examples/g6-autoscale-local[-per-request]: KEDA, the HPA and the replicas were real on the local cluster's
    node. The fleet rose above one replica under the burst and was back at its floor after it, the queue beside
    it, no request lost, and each report and its figures are what its records say."""
    path = Path(__file__).parents[1] / "examples" / folder
    r = a.AutoscaleResult.model_validate_json((path / "result.json").read_text())
    arms = {rec.arm: rec for rec in r.arms}
    auto = arms["autoscaled"]
    assert max(x.ready for x in auto.samples) >= 2 and max(x.hpa_desired or 0 for x in auto.samples) >= 2
    assert (auto.samples[-1].desired, auto.samples[-1].ready) == (auto.floor, auto.floor) and auto.settled_at_s
    assert max(v for _, v in auto.queue) > r.policy.target  # the queue that made it grow, from Prometheus
    # Paused at one: no HPA after the first read (this run's read the HPA before KEDA had removed it) and one replica.
    assert all(x.hpa_desired is None for x in arms["fixed"].samples[1:]) and {x.desired for x in arms["fixed"].samples} == {1}
    for rec in r.arms:
        assert len(rec.requests) == rec.planned_requests
    assert [a.summarise(rec, r.gpu_price) for rec in r.arms] == r.summary
    assert (path / "report.md").read_text() == render_autoscale_report(r)
    assert r.meta.simulation is not None and any("KEDA v2.20.2" in line for line in r.meta.simulation.real)
    assert f"--connections {r.autoscale.connections}" in " ".join(r.meta.command) or r.autoscale.connections == "reuse"
