"""`--experiment autoscale` as a g6 run drives it: the stack's vLLM fleet, scaled by KEDA on its queue, and
one fixed replica, under the same burst (benchmarks.g6.experiments.autoscale), its report and plot."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from benchmarks.g6.client import stack_cluster
from benchmarks.g6.config import LAB, G6Params
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiment import Drive, Ending, Experiment, Written
from benchmarks.g6.experiments.autoscale import (
    AutoscaleOutcome,
    AutoscaleParams,
    AutoscaleResult,
    Fleet,
    autoscale_result,
    policy_of,
    run_autoscale,
)
from benchmarks.g6.experiments.autoscale_report import render_autoscale_plots, render_autoscale_report
from benchmarks.g6.experiments.cold_start import vllm_where
from benchmarks.g6.flags import non_negative, positive
from benchmarks.g6.invocation import Invocation
from benchmarks.g6.sweep import load_spec
from benchmarks.loadgen import LoadSpec
from benchmarks.loadgen.spec import scheduled_requests

ARMS = ("fixed", "autoscaled")
DEFAULTS = AutoscaleParams(peak_rate=1.0)


def _arms(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names or any(n not in ARMS for n in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected arms from {', '.join(ARMS)}, comma-separated, each once; got {text!r}")
    return names


class Autoscale(Experiment[AutoscaleParams, AutoscaleOutcome]):
    name = "autoscale"
    folder = f"{LAB}-autoscale"
    result_model = AutoscaleResult

    def add_flags(self, group: argparse._ArgumentGroup) -> None:
        group.add_argument("--peak-rate", type=positive, help="requests/s at the top of the burst (required): above "
                           "what one replica holds (--experiment saturation measures it), or nothing queues")  # fmt: skip
        group.add_argument("--base-rate", type=non_negative,
                           help=f"requests/s before the burst (default {DEFAULTS.base_rate:g})")
        group.add_argument("--lead-seconds", type=non_negative,
                           help=f"seconds at the base rate first (default {DEFAULTS.lead_seconds:g})")
        group.add_argument("--rise-seconds", type=non_negative, help="seconds from the base to the peak rate: 0 is a "
                           f"step, more a linear ramp (default {DEFAULTS.rise_seconds:g})")  # fmt: skip
        group.add_argument("--burst-seconds", type=positive, metavar="SECONDS",
                           help=f"seconds at the peak rate; then no traffic (default {DEFAULTS.burst_seconds:g})")
        group.add_argument("--arms", type=_arms, help="comma-separated: fixed (the ScaledObject paused at one "
                           "replica), autoscaled (default fixed,autoscaled, in that order)")  # fmt: skip
        group.add_argument("--connections", choices=("reuse", "per-request"),
                           help="reuse: each request on the connection freed last, as an HTTP client's pool sends "
                           "them; per-request: a connection of its own each, as separate users (default reuse). A "
                           "Service balances connections, so this decides how requests spread over replicas")  # fmt: skip
        group.add_argument("--watch-seconds", type=positive, dest="watch_s", metavar="SECONDS",
                           help=f"how often the cluster is read (default {DEFAULTS.watch_s:g})")
        group.add_argument("--settle-timeout", type=positive, dest="settle_timeout_s", metavar="SECONDS",
                           help="longest wait for the fleet back at its floor after the burst (default: the "
                           "policy's scale-down window plus 12 min for the node autoscaler to remove the node)")  # fmt: skip

    def parameters(self, given: dict[str, Any], params: G6Params, inv: Invocation) -> AutoscaleParams:
        if "peak_rate" not in given:
            raise G6Error("--experiment autoscale needs --peak-rate: requests/s above what one replica holds "
                          "(--experiment saturation measures it), or nothing ever queues")  # fmt: skip
        return AutoscaleParams(**given)

    def check(self, inv: Invocation) -> None:
        if inv.sim or not (inv.stack or inv.outputs):
            raise G6Error("--experiment autoscale watches the stack's vLLM fleet scale: give --stack STACK or --outputs "
                          "FILE (with --target URL, an address of the fleet's Service, the load goes there from this "
                          "machine instead of from a Job in the cluster); --sim has no autoscaler")  # fmt: skip
        if inv.rate or inv.concurrency or inv.duration or inv.warmup:
            raise G6Error("--experiment autoscale sends its own schedule: drop --rate/--concurrency/--duration/--warmup "
                          "(--base-rate, --peak-rate, --lead-seconds, --rise-seconds and --burst-seconds shape it)")  # fmt: skip
        if inv.max_num_seqs:
            raise G6Error("--max-num-seqs: the autoscale experiment runs the stack's server as configured "
                          "(set vllm.max_num_seqs in the stack to change it)")  # fmt: skip

    def planned(self, params: G6Params, own: AutoscaleParams, base_url: str) -> list[LoadSpec]:
        schedule = own.schedule()
        return [load_spec(params, base_url, schedule=schedule, requests=scheduled_requests(schedule), warmup=0,
                          duration_s=None, connections=own.connections)]  # fmt: skip

    def outcome(self, own: AutoscaleParams) -> AutoscaleOutcome:
        return AutoscaleOutcome(params=own)

    def run(self, drive: Drive, own: AutoscaleParams, outcome: AutoscaleOutcome) -> None:
        policy = outcome.policy = policy_of(drive.outputs)
        cluster = stack_cluster(drive.client, drive.outputs or {})
        fleet = Fleet(cluster, vllm_where(drive.outputs), policy, drive.client.prometheus)
        run_autoscale(drive.params, own, drive.target, drive.how, fleet, outcome, drive.log)

    def write(self, ending: Ending, own: AutoscaleParams, outcome: AutoscaleOutcome, folder: Path) -> Written:
        result = autoscale_result(ending.meta, ending.params, outcome, ending.price, ending.cost)
        render_autoscale_plots(result, folder)
        complete = len(result.arms) == len(own.arms) and not any(s.lost for s in result.summary)
        return Written(result, render_autoscale_report(result), complete)
