"""The autoscale experiment's Markdown report and timeline plot, pure functions of a saved AutoscaleResult."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

from benchmarks.g6.experiments.autoscale import ArmRecord, ArmSummary, AutoscaleResult, pending_label  # noqa: E402
from benchmarks.g6.report import errors_section, title  # noqa: E402
from benchmarks.harness.markdown import num, table  # noqa: E402
from benchmarks.kube.evidence import markdown as evidence_section  # noqa: E402

PLOT = "autoscale-timeline.png"


def _schedule_text(r: AutoscaleResult) -> str:
    a = r.autoscale
    rise = "a step" if a.rise_seconds == 0 else f"a linear rise over {a.rise_seconds:g} s"
    return (f"{a.base_rate:g} req/s for {a.lead_seconds:g} s, {rise} to {a.peak_rate:g} req/s, held "
            f"{a.burst_seconds:g} s, then no traffic (open loop: Poisson arrivals at that rate)")  # fmt: skip


def _policy_text(r: AutoscaleResult) -> str:
    p = r.policy
    return (f"KEDA keeps `{p.metric}` at {p.target:g} per replica (`{p.query}`), between {p.min_replicas} and "
            f"{p.max_replicas} replicas, read every {p.polling_interval_s} s; HPA stabilisation {p.scale_up_stabilization_s} s "
            f"up, {p.scale_down_stabilization_s} s down")  # fmt: skip


def _arms_table(summary: list[ArmSummary]) -> str:
    rows = [
        [s.arm, s.sent, s.completed, sum(s.failed.values()), s.lost, s.slo_met, num(s.goodput_rps, 2), num(s.ttft_p50_ms),
         num(s.ttft_p99_ms), f"{num(s.short_ttft_p99_ms)} ({s.short_requests})" if s.short_requests else None,
         f"{s.peak_desired} / {s.peak_ready}", num(s.replica_minutes), num(s.extra_replica_minutes),
         num(s.extra_node_minutes),
         None if s.extra_cost_usd is None else f"${s.extra_cost_usd:.3f}"]
        for s in summary
    ]  # fmt: skip
    return table(["arm", "sent", "completed", "failed", "lost", "within SLO", "goodput (req/s)", "TTFT p50 (ms)",
                  "TTFT p99 (ms)", "TTFT p99 while short (requests)", "peak replicas wanted / ready", "replica-min",
                  "above the floor", "extra GPU node-min", "burst cost"], rows)  # fmt: skip


def _verdict(r: AutoscaleResult) -> str | None:
    arms = {s.arm: s for s in r.summary}
    auto, fixed = arms.get("autoscaled"), arms.get("fixed")
    if auto is None:
        return None
    reacted = ("no replica above the floor was ever wanted: the burst never lifted the queue above the target"
               if auto.first_wanted_s is None else
               f"the rate left its base at {r.autoscale.burst_at_s:g} s; a replica above the floor was wanted at "
               f"{auto.first_wanted_s:.0f} s and one served at "
               + (f"{auto.first_served_s:.0f} s" if auto.first_served_s is not None else "no time in the run"))  # fmt: skip
    text = f"**Autoscaled: {reacted} (the cluster read every {r.autoscale.watch_s:g} s).**"
    if fixed is not None:
        more = auto.slo_met - fixed.slo_met
        cost = auto.extra_cost_usd
        each = f", ${cost / more * 1000:.2f} per 1,000 more" if cost is not None and more > 0 else ""
        paid = (f" for ${cost:.3f} of extra GPU node time, the scale-down tail included{each}" if cost is not None else
                f" for {auto.extra_replica_minutes:.1f} replica-minutes above the floor (an L4 each on GKE; no price: "
                "the outputs carry no cost estimate)")  # fmt: skip
        text += (f" Against one fixed replica under the same schedule: {auto.slo_met} requests within the SLO "
                 f"against {fixed.slo_met} ({more:+d}){paid}.")  # fmt: skip
    return text + "\n"


# Above this share of the queue on one replica while others serve, the load was not spread by request.
UNEVEN = 0.75


def _cycles(r: AutoscaleResult) -> str | None:
    """A fleet that scaled down under an unchanged load and came back, and why a queue target does that."""
    auto = next((s for s in r.summary if s.arm == "autoscaled"), None)
    if auto is None or auto.scale_ups < 2 or r.policy.metric != "vllm:num_requests_waiting":
        return None
    return (f"The fleet left its floor {auto.scale_ups} times in one burst. Scaling on waiting requests: once the "
            f"replicas keep up the queue is empty, the HPA's desired replicas, ceil(waiting / {r.policy.target:g}), "
            f"fall to the floor, it scales down after its {r.policy.scale_down_stabilization_s} s window, and the "
            "queue rebuilds on the replicas left. A longer scale-down window (HPA's default 300 s) spaces the "
            "cycles; scaling on `num_requests_running` (the batch, which stays as long as the load does) holds the "
            "fleet.\n")  # fmt: skip


def _spread(r: AutoscaleResult) -> str | None:
    """How the fleet's queue was spread over its replicas, and why when it was not."""
    auto = next((s for s in r.summary if s.arm == "autoscaled"), None)
    if auto is None or len(auto.queue_share) < 2:
        return None
    shares = ", ".join(f"`{pod}` {share:.0%}" for pod, share in sorted(auto.queue_share.items(), key=lambda x: -x[1]))
    text = f"Each replica's share of the autoscaled fleet's queue (waiting requests x time): {shares}."
    if max(auto.queue_share.values()) > UNEVEN and r.autoscale.connections == "reuse":
        text += (" The Service balances connections, not requests (kube-proxy picks a pod per new connection), and "
                 "a client that reuses its keep-alive connections sends each request on the one freed last: while "
                 "arrivals outpace the first replica, every connection it frees is taken again at once, so its "
                 "backlog stays until the burst ends and the new replica gets only what finds no free connection. "
                 "A request-level balancer in front (GKE's Inference Gateway, or any L7 proxy) or clients that do "
                 "not reuse connections (`--connections per-request` sends so) let a new replica drain the "
                 "backlog.")  # fmt: skip
    return text + "\n"


def _replicas_table(summary: list[ArmSummary]) -> str:
    rows = []
    for s in summary:
        for x in s.new_replicas:
            phases = ", ".join(f"{p.name} {p.seconds:.0f} s" for p in x.phases.phases if p.seconds is not None)
            rows.append([s.arm, f"`{x.pod}`", num(x.created_s, 0), num(x.ready_s, 0), phases or None,
                         pending_label(x.waiting_for) and f"{pending_label(x.waiting_for)}: {x.waiting_for}"])  # fmt: skip
    if not rows:
        return "No replica was created during the run.\n"
    return table(["arm", "pod", "created (s)", "ready (s)", "phases from the pod's creation", "never served"], rows)


def render_autoscale_report(r: AutoscaleResult) -> str:
    m, p = r.meta, r.params
    out = [title("the vLLM fleet autoscaled on its queue, under a burst", m, p)]
    verdict = _verdict(r)
    if verdict:
        out.append(verdict)
    slo = ", ".join(f"{k} {v:g} ms" for k, v in (("TTFT", p.slo.ttft_ms), ("TPOT", p.slo.tpot_ms), ("E2E", p.slo.e2e_ms))
                    if v is not None) or "none set: every completed request counts"  # fmt: skip
    out += [
        evidence_section(m.evidence),
        "## What was run\n",
        f"- Command: `{' '.join(m.command)}`",
        f"- Schedule, each arm: {_schedule_text(r)}; {p.input_len.describe()} prompt and {p.output_len.describe()} "
        "output tokens per request, prompts of its own for each arm; "
        + ("each request on the keep-alive connection freed last (an HTTP client's pool)." if r.autoscale.connections
           == "reuse" else "each request on a connection of its own, closed after it (separate users)."),
        f"- Policy: {_policy_text(r)}.",
        "- Arms: " + "; ".join({"fixed": "`fixed`: the ScaledObject paused at one replica (KEDA's "
                                "autoscaling.keda.sh/paused-replicas), resumed after",
                                "autoscaled": "`autoscaled`: from the floor, then watched until the fleet was back at "
                                "its floor with no extra GPU node"}[a] for a in r.autoscale.arms) + ".",  # fmt: skip
        f"- SLO: {slo}.",
        "",
        "## Both arms\n",
        "Every request the schedule sent is counted: completed, failed (by the client's error) or lost (never "
        "answered, which should be 0). \"While short\": sent while fewer replicas served than the autoscaler "
        "wanted. Replica-minutes count pods holding or waiting for a GPU; the burst's cost is the GPU nodes above "
        "the arm's first count, at the node's hourly price, until the run's end.\n",
        _arms_table(r.summary),
        *([spread] if (spread := _spread(r)) else []),
        *([cycles] if (cycles := _cycles(r)) else []),
        f"Plot: `{PLOT}` (replicas, GPU nodes and the queue over time; every request's TTFT beneath).\n",
        "## Each new replica, phase by phase\n",
        "From the pod's creation (when the ReplicaSet acted on the HPA) to Ready (its /health probe; the Service "
        "then sends it requests), as the cold-start experiment measures a start (benchmarks.kube.phases).\n",
        _replicas_table(r.summary),
        errors_section(m.errors),
    ]
    if r.cost:
        out.append(f"## Cost\n\n{r.cost.replace('### ', '')}")
    return "\n".join(out)


def _steps(ax: plt.Axes, rec: ArmRecord, value: str, **style: object) -> None:
    xs = [(s.at - rec.started).total_seconds() for s in rec.samples]
    ax.step(xs, [getattr(s, value) for s in rec.samples], where="post", **style)


def render_autoscale_plots(r: AutoscaleResult, folder: Path) -> list[Path]:
    """Per arm: replicas wanted and ready, GPU nodes and the queue against time; beneath, every request's TTFT
    at its send time (failed ones marked along the top), the offered rate behind it."""
    if not r.arms:
        return []
    fig, axes = plt.subplots(2 * len(r.arms), 1, figsize=(11, 4.2 * len(r.arms)), sharex=True, layout="constrained",
                             height_ratios=[1, 1.2] * len(r.arms), squeeze=False)  # fmt: skip
    for k, rec in enumerate(r.arms):
        top, bottom = axes[2 * k][0], axes[2 * k + 1][0]
        _steps(top, rec, "desired", label="replicas wanted", color="tab:blue")
        _steps(top, rec, "ready", label="replicas ready (serving)", color="tab:green")
        _steps(top, rec, "gpu_nodes", label="GPU nodes", color="tab:gray", linestyle="--")
        top.set_ylabel("count")
        top.set_ylim(bottom=0)
        top.yaxis.get_major_locator().set_params(integer=True)
        top.set_title(f"{rec.arm}: the fleet")
        if rec.queue:
            twin = top.twinx()
            twin.plot([t for t, _ in rec.queue], [v for _, v in rec.queue], color="tab:red", alpha=0.7,
                      label=f"{r.policy.metric} (fleet)")  # fmt: skip
            for pod, points in sorted(rec.queue_by_pod.items()):
                twin.plot([t for t, _ in points], [v for _, v in points], linestyle=":", linewidth=1,
                          label=f"{pod[-5:]} alone")  # fmt: skip
            twin.set_ylabel(r.policy.metric)
            twin.set_ylim(bottom=0)
            twin.legend(loc="upper right", fontsize=8)
        top.legend(loc="upper left", fontsize=8)
        top.grid(True, alpha=0.3)
        ok = [x for x in rec.requests if x.ttft_ms is not None and x.error is None]
        bottom.scatter([x.sent_s for x in ok], [x.ttft_ms for x in ok], s=3, alpha=0.4,
                       c=["tab:blue" if x.slo_met else "tab:orange" for x in ok])  # fmt: skip
        failed = [x for x in rec.requests if x.error is not None]
        if failed:
            high = max((x.ttft_ms for x in ok), default=1000.0) * 1.5
            bottom.scatter([x.sent_s for x in failed], [high] * len(failed), marker="x", color="tab:red",
                           label=f"failed ({len(failed)})")  # fmt: skip
            bottom.legend(loc="upper left", fontsize=8)
        bottom.set_yscale("log")
        bottom.set_ylabel("TTFT (ms; orange: SLO missed)")
        rate = bottom.twinx()
        rate.plot([t for t, _ in rec.schedule], [v for _, v in rec.schedule], color="black", alpha=0.3)
        rate.set_ylabel("offered (req/s)")
        rate.set_ylim(bottom=0)
        bottom.grid(True, which="both", alpha=0.3)
    axes[-1][0].set_xlabel("seconds from the arm's start")
    path = folder / PLOT
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]
