"""Lab g6's Markdown report, a pure function of a saved result."""

from __future__ import annotations

from benchmarks.g6.config import G6Params
from benchmarks.g6.plots import PLOTS
from benchmarks.g6.price import Run, cheapest, slo_text
from benchmarks.g6.result import Figures, G6Point, G6Result, GpuPrice
from benchmarks.g6.shape import asked_text, realised_section
from benchmarks.harness import RunMeta
from benchmarks.harness.markdown import num, table
from benchmarks.kube.evidence import markdown as evidence_section
from benchmarks.kube.evidence import simulation_markdown
from benchmarks.kube.phases_report import waited_first
from benchmarks.loadgen import Summary
from benchmarks.loadgen.reruns import Rerun
from benchmarks.loadgen.stats import P99_MIN_SAMPLES, Interval
from benchmarks.metrics.model import HOST_SLOWED_SHARE

# A closed-loop point holding fewer counted requests in flight than this share of what the server
# could run at once (its concurrency, capped by max-num-seqs) was measured at a lower load than its label.
HELD_SHARE = 0.9
THIN = "†"  # marks a p99 resting on fewer than P99_MIN_SAMPLES samples


def with_interval(value: float, ci: Interval | None, digits: int = 1) -> str:
    return f"{value:,.{digits}f}" + ("" if ci is None else f" ({ci[0]:,.{digits}f}–{ci[1]:,.{digits}f})")


def rerun_cell(r: Rerun | None, digits: int = 1, percent: bool = False) -> str | None:
    """"mean (lo–hi)" of a figure across repeats: its 95% rerun interval; the figure alone from one run."""
    if r is None:
        return None
    k = 100.0 if percent else 1.0
    unit = "%" if percent else ""
    mean = f"{r.mean * k:,.{digits}f}{unit}"
    if r.lo is None or r.hi is None:
        return mean  # one run: the note under the table says there is no interval
    return f"{mean} ({r.lo * k:,.{digits}f}–{r.hi * k:,.{digits}f}{unit})"


def rerun_note(runs: int, what: str = "point") -> str:
    """What the across-repeats figures are, for under their table."""
    if runs < 2:
        return (f"Each {what} ran once: there is no interval across reruns (`--repeats N` runs it N times, each "
                "with its own seed); the brackets further down are within-run bootstrap intervals, which a rerun's "
                "figures fall outside far more often than 5% of the time.\n")  # fmt: skip
    return (f"Each figure is the mean of the {what}'s {runs} runs, each with its own seed (its own prompts, lengths and "
            f"arrivals); the brackets are the 95% interval a rerun's mean of {runs} falls in (mean ± t·s·√(2/{runs}), "
            "Student's t), which holds the seeds and this machine's jitter between runs. Brackets in the per-run "
            "tables below are within-run bootstrap intervals and say nothing of a rerun.\n")  # fmt: skip


def latency_pair(s: Summary | None) -> str | None:
    """"p50 (95% interval) / p99 (95% interval)" of a latency summary, for a table cell; a p99 of fewer
    than P99_MIN_SAMPLES samples marked THIN."""
    if s is None:
        return None
    return f"{with_interval(s.p50, s.ci95['p50'])} / {with_interval(s.p99, s.ci95['p99'])}" + (THIN if s.p99_thin else "")


def host_flags(p: G6Point) -> str:
    """" **client-bound**" and " **host-slowed** (n% of steps late)": what marks a point this machine may
    have shaped, after its client-lag cell."""
    flags = " **client-bound**" if p.client_bound else ""
    if p.host_slowed and p.server is not None:
        flags += f" **host-slowed** ({p.server.late_step_share:.1%} of steps late)"
    return flags


def throughput_cell(p: G6Point, digits: int = 1) -> str:
    """Output tokens/s and its 95% interval, for a table cell."""
    return with_interval(p.output_tokens_per_s, p.output_tokens_per_s_ci95, digits)


def below_load(p: G6Point) -> bool:
    """A closed-loop point whose counted requests held under HELD_SHARE of the load the server could run."""
    if p.concurrency is None:
        return False
    return p.in_flight_mean < HELD_SHARE * min(p.concurrency, p.max_num_seqs or p.concurrency)


def in_flight_cell(p: G6Point) -> str:
    return f"{p.in_flight_mean:.1f}" + (" **below load**" if below_load(p) else "")


def load_label(p: G6Point) -> str:
    return f"c={p.concurrency}" if p.concurrency is not None else f"{p.rate:g}/s"


def bucket_cell(bucket: tuple[float, float | None] | None) -> str | None:
    """A histogram bucket as the range it is: "(100, 250]", or "> 2,500" for the +Inf bucket."""
    if bucket is None:
        return None
    return f"> {bucket[0]:,.0f}" if bucket[1] is None else f"({bucket[0]:,.0f}, {bucket[1]:,.0f}]"


def reading_notes(p: G6Params) -> str:
    """What every g6 table's figures are: the time scale, the intervals, the marks."""
    return (
        f"Times and rates are {p.time_scale}. Brackets are within-run bootstrap 95% intervals (seeded; over "
        "requests, a request's chunk gaps resampled together; a rate's over ten slices of its window): they show "
        f"the spread inside this one run, not where a rerun would land (the answer's intervals do); {THIN} marks a "
        f"p99 of fewer than {P99_MIN_SAMPLES} samples, which is close to the maximum. A point **below load** "
        f"held fewer than {HELD_SHARE:.0%} of min(concurrency, max-num-seqs) counted requests in flight: "
        "it was measured at a lower load than its label.\n"
    )


def client_text(meta: RunMeta, points: list[G6Point]) -> str:
    """Where the load generator ran, from what each point's runner reported."""
    places = list(dict.fromkeys(p.client for p in points if p.client is not None))
    if not places:
        return f"{meta.client_host_cpus} CPUs"
    counts = sorted({c.workers for c in places})
    span = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    pythons = ", ".join(sorted({c.python for c in places}))
    workers = f"{span} worker process(es) (one per CPU, at most one per concurrent request) on Python {pythons}"
    if places[0].where == "in-cluster":
        nodes = ", ".join(dict.fromkeys(f"`{c.node}` ({c.machine_type or 'machine type unknown'})" for c in places))
        return (f"in the cluster, a Job per point next to the server, on node {nodes}, {workers} "
                f"(started from a machine with {meta.client_host_cpus} CPUs)")  # fmt: skip
    hosts = ", ".join(dict.fromkeys(f"`{c.host}`, {c.cpus} CPUs" for c in places))
    loads = sorted(p.client.load_avg for p in points if p.client is not None and p.client.load_avg is not None)
    shared = (f"; its load average {loads[0]:.1f}–{loads[-1]:.1f} as the points ended (runnable processes: "
              "above its CPUs, the client and a simulator on it wait for them)" if loads else "")  # fmt: skip
    return f"this machine ({hosts}), {workers}{shared}"


def target_text(p: G6Params) -> str:
    return {
        "sim": f"the simulated vLLM backend ({p.gpu}, speedup x{p.speedup:g})" + (
            ", every point replayed on its virtual clock (--virtual: no load sent, no host in the figures)"
            if p.virtual else ""),
        "url": f"the server at {p.target}",
        "stack": f"stack `{p.stack}` at {p.target}",
    }[p.target_kind]


def context_lines(m: RunMeta, p: G6Params, points: list[G6Point]) -> list[str]:
    """The "What was run" bullets every g6 report shares: command, limits, metrics, client, server."""
    lines = [
        f"- Command: `{' '.join(m.command)}`",
        f"- Timeouts: connect {p.timeouts.connect_s:g} s, first token {p.timeouts.first_token_s:g} s, "
        f"total {p.timeouts.total_s:g} s",
        f"- SLOs: goodput {p.slo.model_dump(exclude_none=True) or 'none'}; cheapest setting within {slo_text(p)}",
        f"- Server metrics: direct /metrics scrapes every {p.scrape_interval_s:g} s"
        + (f"; GPU (DCGM) series from Prometheus at {p.prometheus}" if p.prometheus else ""),
        f"- Client: {client_text(m, points)}; benchmarks {m.tool_version}",
        f"- Server versions: {', '.join(f'{k} {v}' for k, v in m.server_versions.items()) or 'not reported'}",
    ]
    if p.speedup != 1.0:
        lines.append(
            f"- **Every time and rate is GPU time.** The simulator runs x{p.speedup:g} faster than the GPU; its "
            f"timings were multiplied by {p.speedup:g} (rates divided) once, where the results were made, so "
            "latencies, throughputs, SLO judgements, the roofline and prices are all on the GPU's scale. The "
            f"client's own lag is its own and is not scaled: against the real GPU it weighs {p.speedup:g}x less."
        )
    return lines


def price_cell(p: G6Point) -> str | None:
    """The GPU node's spot price per million output tokens, for a table cell."""
    return None if p.usd_per_million_output_tokens is None else num(p.usd_per_million_output_tokens.gpu_node_spot, 3)


def _price_table(runs: list[Run]) -> str:
    rows = [
        [run.label, num(tp.gpu_node_spot, 3), num(tp.gpu_node_on_demand, 3), num(tp.cluster_spot, 3),
         num(tp.cluster_on_demand, 3), num(tp.giq_convention, 3)]
        for run in runs if (tp := run.point.usd_per_million_output_tokens) is not None
    ]  # fmt: skip
    return table(
        ["point", "GPU node spot", "GPU node on-demand", "whole cluster, GPU spot", "whole cluster, GPU on-demand",
         "GIQ convention (GPU node spot, output + input/4 tokens)"],
        rows,
    )


def cost_sections(runs: list[Run], params: G6Params, price: GpuPrice | None, cost: str | None,
                  passing: set[str] | None = None) -> str:  # fmt: skip
    """## What serving costs (the prices per run on every basis and the cheapest setting within the
    SLOs, among the `passing` settings when given) and ## Cost (what the stack costs per hour, and what this
    session cost)."""
    if price is None:
        out = "## What serving costs\n\nNo GPU price: the run has no stack and no stack file to price (a server given by URL).\n"
    else:
        out = (
            f"## What serving costs\n\nUSD per million output tokens at list prices: {price.describe()}; each "
            f"hourly price over the output tokens an hour at the point's output tokens/s ({params.time_scale}). "
            "The whole cluster adds what runs beside the GPU node. GKE Inference Quickstart's convention "
            "divides the GPU node's spot price by output tokens plus a quarter of the input tokens (its "
            "default output-to-input cost ratio of 4), so it reads lower than ours for the same point.\n\n"
            + _price_table(runs) + "\n" + cheapest(runs, params, passing) + "\n" + DUTY
        )
    if cost:
        out += f"\n## Cost\n\n{cost.replace('### ', '')}"
    return out


# The prices above are the node's hourly price over the tokens of an hour at full load; a user's bill is not.
DUTY = (
    "Every price per token here assumes the GPU node serves at the point's throughput for every hour it bills "
    "(100% duty). It bills for as long as it is up: the g6 stack's from `make up` until `make down` (or until "
    "the idle guard scales the server away), each autoscaled replica's from its node's start to its removal. "
    "Divide by the share of that time it serves at this rate: a node busy a quarter of the time it is up pays "
    "four times these prices per token.\n"
)


def errors_section(errors: list[str]) -> str:
    if not errors:
        return "## Errors\n\nNone.\n"
    return "## Errors\n\n" + "\n".join(f"- {e}" for e in errors) + "\n"


def title(heading: str, m: RunMeta, p: G6Params) -> str:
    """A report's first lines: what it answers, the model, the server and when; on a cluster that simulates
    part of itself (the local one), what was real and what simulated, before any figure."""
    return (f"# Lab g6: {heading}\n\nModel `{p.model}` served by {target_text(p)}; {m.started_at.isoformat()} to "
            f"{m.finished_at.isoformat()}.\n" + (f"\n{simulation_markdown(m.simulation)}" if m.simulation else ""))  # fmt: skip


def _header(r: G6Result) -> str:
    m, p = r.meta, r.params
    load = f"concurrency {p.concurrency} (closed loop)" if p.concurrency else f"Poisson rates {p.rate} req/s (open loop)"
    lines = [
        evidence_section(m.evidence),
        "## What was run",
        "",
        f"- Grid: max-num-seqs {[x for x in p.max_num_seqs]} x {load}"
        + (f", every point {p.repeats} times (interleaved)" if p.repeats > 1 else ""),
        f"- Requests: {p.requests if p.requests is not None else 'max(64, 8 x concurrency)'} counted per point after a warm-up of "
        f"{p.warmup if p.warmup is not None else 'one request per worker (or one second of arrivals)'}, "
        f"{asked_text(p)}, "
        f"`/v1/{'chat/completions' if p.api == 'chat' else 'completions'}` streaming"
        + (f"; each point bounded to {p.duration_s:g} s" if p.duration_s else ""),
        *context_lines(m, p, r.points),
    ]
    return "\n".join(lines) + "\n"


def _sizing(r: G6Result) -> str:
    if not r.sizing:
        return f"## Sizing\n\nNo sizing: {r.sizing_gap or 'the model or GPU is not in the catalogue'}.\n"
    rows = [
        [s.max_num_seqs, f"{s.weight_bytes / 2**30:.2f}", f"{s.kv_bytes_per_token:,}", f"{s.kv_cache_tokens:,}",
         f"{s.max_concurrency:.1f}", s.max_model_len]
        for s in r.sizing
    ]  # fmt: skip
    return "## Sizing (what vLLM allocates at start-up)\n\n" + table(
        ["max-num-seqs", "weights (GiB)", "KV bytes/token", "KV cache tokens", "max concurrency at max len", "max len"],
        rows,
    )


def _runs(r: G6Result) -> list[Run]:
    """Each run under its setting (the server's max-num-seqs and the load), for the cost section."""
    return [Run(f"max-num-seqs {p.max_num_seqs} {load_label(p)}", p.repeat if r.params.repeats > 1 else None, p)
            for p in r.points]  # fmt: skip


def _run_label(r: G6Result, p: G6Point) -> str:
    return load_label(p) + (f" (run {p.repeat + 1})" if r.params.repeats > 1 else "")


def _thin(r: G6Result, f: Figures, summary: str) -> str:
    """THIN when a run of this point has a p99 of fewer than P99_MIN_SAMPLES samples of `summary`."""
    runs = [p for p in r.points if (p.max_num_seqs, p.concurrency, p.rate) == (f.max_num_seqs, f.concurrency, f.rate)]
    return THIN if any((s := getattr(p, summary)) is not None and s.p99_thin for p in runs) else ""


def _answer(r: G6Result) -> str:
    """## The answer: each point over its runs (--repeats), with the interval a rerun falls in."""
    rows = [
        [f.max_num_seqs, f"c={f.concurrency}" if f.concurrency is not None else f"{f.rate:g}/s", f.runs,
         rerun_cell(f.output_tokens_per_s, 0), rerun_cell(f.requests_per_s, 2), rerun_cell(f.ttft_p50_ms),
         (rerun_cell(f.ttft_p99_ms) or "") + _thin(r, f, "ttft_ms"), rerun_cell(f.itl_p50_ms, 2),
         (rerun_cell(f.itl_p99_ms, 2) or "") + _thin(r, f, "itl_ms"),
         rerun_cell(f.usd_per_million_output_tokens, 3), rerun_cell(f.prefix_cache_hit_rate, 1, percent=True)]
        for f in r.across
    ]  # fmt: skip
    runs = max((f.runs for f in r.across), default=1)
    thin = any(THIN in str(cell) for row in rows for cell in row)
    return (
        f"## The answer: every point over its {runs} run{'s' if runs != 1 else ''}\n\n"
        + table(["max-num-seqs", "load", "runs", "output tok/s", "req/s", "TTFT p50 ms", "TTFT p99 ms", "ITL p50 ms",
                 "ITL p99 ms", "$ per M output tokens (GPU node spot)", "prefix-cache hits"], rows)  # fmt: skip
        + (f"\n{THIN} a run of the point has fewer than {P99_MIN_SAMPLES} samples behind its p99 (requests for TTFT, "
           "tokens for ITL): that p99 is near the run's maximum, not a tail estimate; send more requests "
           "(`--requests`) for one.\n" if thin else "")
        + f"\n{rerun_note(runs)}\nTimes and rates are {r.params.time_scale}. Prefix-cache hits are the server's own "
        "counters over each point: every point sends prompts of its own, so a share above 1% would mean it did not "
        "(Errors lists any).\n"
    )


def _points(r: G6Result) -> str:
    rows = []
    for p in r.points:
        lag = p.client_lag_ms
        rows.append([
            p.max_num_seqs, _run_label(r, p), in_flight_cell(p), p.completed, p.failed,
            latency_pair(p.ttft_ms), latency_pair(p.itl_ms), latency_pair(p.tpot_ms), latency_pair(p.e2e_ms),
            throughput_cell(p), with_interval(p.requests_per_s, p.requests_per_s_ci95, 2),
            None if p.goodput is None else num(p.goodput.requests_per_s, 2),
            None if lag is None else f"{lag.mean:.2f} / {lag.p99:.2f}" + host_flags(p),
            price_cell(p),
        ])  # fmt: skip
    client = table(
        ["max-num-seqs", "load", "in flight (mean)", "ok", "failed", "TTFT p50/p99 ms", "ITL p50/p99 ms",
         "TPOT p50/p99 ms", "E2E p50/p99 ms", "output tok/s", "req/s", "goodput req/s",
         "client lag mean/p99 ms (client clock)", "$ per M output tokens (GPU node spot)"],
        rows,
    )  # fmt: skip
    rows = []
    for p in r.points:
        s = p.server
        rows.append([
            p.max_num_seqs, _run_label(r, p), num(p.observed_batch),
            None if s is None or s.running is None else f"{s.running.mean:.1f} / {s.running.max:.0f}",
            None if s is None or s.waiting is None else f"{s.waiting.mean:.1f} / {s.waiting.max:.0f}",
            None if s is None or s.kv_cache_usage is None else f"{s.kv_cache_usage.max:.0%}",
            None if s is None else num(s.preemptions, 0),
            None if s is None else bucket_cell(s.ttft_p50_bucket_ms), None if s is None else bucket_cell(s.ttft_p99_bucket_ms),
            None if s is None or s.gpu_util is None else f"{s.gpu_util.mean:.0f}%",
            None if s is None or s.sm_active is None else f"{s.sm_active.mean:.2f}",
            None if s is None or s.dram_active is None else f"{s.dram_active.mean:.2f}",
            p.bound, None if p.roofline_share is None else f"{p.roofline_share:.0%}",
        ])  # fmt: skip
    server = table(
        ["max-num-seqs", "load", "decode batch (client)", "running mean/max", "waiting mean/max", "KV peak", "preemptions",
         "server TTFT p50 bucket ms", "server TTFT p99 bucket ms", "GPU util", "SM active", "DRAM active", "bound",
         "of roofline"],
        rows,
    )  # fmt: skip
    note = (
        "\nEvery figure of a point is of its counted requests over one window (their first token to their "
        "last end; the warm-up before it counts for nothing), so output tok/s = req/s x "
        + (f"{r.params.output_len.describe()} tokens" if r.params.output_len.fixed and not r.params.eos
           else "the output tokens each request really had (Lengths sent and received)")
        + ". The decode batch is the client's time-averaged count of requests "
        "between first token and end (Little's law on its own timings); the server's gauges are sampled "
        "once per scrape inside the same window. vLLM's TTFT histogram knows a quantile only to its bucket: "
        "the server TTFT columns are the bucket (lower, upper] that holds it, not an estimate inside it. "
        "GPU util, SM active and DRAM active are DCGM's fields (on the simulator: its model of them).\n\n"
    )
    reasons = "\n".join(f"- max-num-seqs {p.max_num_seqs}, {_run_label(r, p)}: **{p.bound}**: {p.bound_reason}" for p in r.points)
    return (
        "## Client-side figures per point\n\n" + client + "\n" + reading_notes(r.params)
        + "\nTTFT and E2E are measured from each request's *scheduled* send time (no coordinated "
        "omission). ITL is the gap between streamed content chunks; a chunk may carry several tokens, "
        "so TPOT = (E2E - TTFT) / (output tokens - 1) uses the server's token counts. Client lag is "
        "actual minus scheduled send time (the body reaching the socket); a point is **client-bound** "
        f"when its p99 exceeds {r.params.max_client_lag_ms:g} ms or 5% of its TTFT p50, whichever is "
        "larger: then the client, not the server, shaped its latencies.\n\n"
        "## Server-side figures per point\n\n" + server + note + reasons + "\n"
    )  # fmt: skip


def _meaning(r: G6Result) -> str:
    lines = ["## What the numbers mean", ""]
    lines.append(
        "Decode is memory-bandwidth-bound: every step streams all weights plus each sequence's KV cache "
        "from GPU memory, so one stream's tokens/s is near the roofline's bandwidth / bytes-per-step, and "
        "adding sequences to the batch adds throughput almost for free until the KV reads or the compute "
        "catch up. 'of roofline' is the measured output tokens/s over the roofline's tokens/s at the "
        "observed batch (prefill and scheduling overheads keep it below 100%)."
    )
    lines.append("")
    single = [p for p in r.points if p.concurrency == 1 and p.tpot_ms is not None and p.roofline_tokens_per_s]
    for p in single:
        per_stream = 1000.0 / p.tpot_ms.mean
        lines.append(
            f"- At concurrency 1 (max-num-seqs {p.max_num_seqs}) one stream decoded {per_stream:,.0f} tokens/s "
            f"against a roofline of {p.roofline_tokens_per_s:,.0f} tokens/s for batch "
            f"{max(1, round(p.observed_batch or 1))}: {p.roofline_share:.0%} of it."
        )
    capped = [p for p in r.points if p.bound in ("kv-cache", "max-num-seqs")]
    for p in capped:
        lines.append(f"- {load_label(p)} at max-num-seqs {p.max_num_seqs} was capped by **{p.bound}** ({p.bound_reason}); "
                     "requests beyond the cap wait in the queue, which shows as TTFT, not as ITL.")  # fmt: skip
    clients = [p for p in r.points if p.client_bound]
    if clients:
        lines.append(
            f"- {len(clients)} point(s) were client-bound (lag p99 over the limit above): "
            "their latencies include the load generator's own queueing; run the client on a bigger machine "
            "or in-cluster before reading them as the server's."
        )
    slowed = [p for p in r.points if p.host_slowed]
    if slowed:
        lines.append(
            f"- {len(slowed)} point(s) were host-slowed: more than {HOST_SLOWED_SHARE:.0%} of the simulator's "
            "engine steps delivered their tokens late (the host, not the simulated GPU, timed them), so their "
            "ITL and TTFT tails are this machine's; rerun on a quiet machine before reading them as the GPU's."
        )
    return "\n".join(lines) + "\n"


def render_report(result: G6Result) -> str:
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    labelled = [(f"max-num-seqs {p.max_num_seqs} {_run_label(result, p)}", p) for p in result.points]
    sections = [title("LLM serving, TTFT against throughput", result.meta, result.params), _answer(result),
                _header(result), _sizing(result), _points(result), realised_section(labelled), _meaning(result),
                cost_sections(_runs(result), result.params, result.gpu_price, result.cost), errors_section(result.meta.errors),
                plots]  # fmt: skip
    return waited_first("\n".join(section for section in sections if section), result.waited)
