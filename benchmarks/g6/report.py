"""Lab g6's Markdown report, a pure function of a saved result."""

from __future__ import annotations

from benchmarks.g6.config import G6Params
from benchmarks.g6.plots import PLOTS
from benchmarks.g6.price import cheapest, slo_text
from benchmarks.g6.result import G6Point, G6Result, GpuPrice
from benchmarks.g6.shape import asked_text, realised_section
from benchmarks.harness import RunMeta
from benchmarks.harness.markdown import num, table
from benchmarks.loadgen import Summary


def latency_pair(s: Summary | None) -> str | None:
    """"p50 / p99" of a latency summary, for a table cell."""
    return None if s is None else f"{s.p50:.1f} / {s.p99:.1f}"


def load_label(p: G6Point) -> str:
    return f"c={p.concurrency}" if p.concurrency is not None else f"{p.rate:g}/s"


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
    return f"this machine ({hosts}), {workers}"


def target_text(p: G6Params) -> str:
    return {
        "sim": f"the simulated vLLM backend ({p.gpu}, speedup x{p.speedup:g})",
        "url": f"the server at {p.target}",
        "stack": f"stack `{p.stack}` at {p.target}",
    }[p.target_kind]


def context_lines(m: RunMeta, p: G6Params, points: list[G6Point]) -> list[str]:
    """The "What was run" bullets every g6 report shares: command, limits, metrics, client, server."""
    lines = [
        f"- Command: `{' '.join(m.command)}`",
        f"- Timeouts: connect {p.timeouts.connect_s:g} s, first token {p.timeouts.first_token_s:g} s, "
        f"total {p.timeouts.total_s:g} s",
        f"- SLOs: goodput {p.slo.model_dump(exclude_none=True) or 'none'}; cheapest point within {slo_text(p)}",
        f"- Server metrics: direct /metrics scrapes every {p.scrape_interval_s:g} s"
        + (f"; GPU (DCGM) series from Prometheus at {p.prometheus}" if p.prometheus else ""),
        f"- Client: {client_text(m, points)}; benchmarks {m.tool_version}",
        f"- Server versions: {', '.join(f'{k} {v}' for k, v in m.server_versions.items()) or 'not reported'}",
    ]
    if p.speedup != 1.0:
        lines.append(
            f"- **Simulated time runs x{p.speedup:g} faster than the GPU would.** The GPU would show "
            f"latencies {p.speedup:g}x these and throughputs 1/{p.speedup:g} of them; the roofline is scaled "
            "the same way, so shares and bound labels are comparable, and prices are for the GPU's "
            "throughput. The client's own overhead is not scaled: it weighs more here than it would "
            "against the real GPU."
        )
    return lines


def price_cell(p: G6Point) -> str | None:
    return num(p.usd_per_million_output_tokens, 3)


def cost_sections(points: list[tuple[str, G6Point]], params: G6Params, price: GpuPrice | None, cost: str | None) -> str:
    """## What serving costs (the price per point's basis and the cheapest point within the SLOs) and
    ## Cost (what the stack costs per hour)."""
    basis = (
        f"Prices per million output tokens are {price.describe()}, over each point's output tokens/s on the GPU."
        if price is not None
        else "No GPU price: the run has no stack and no stack file to price (a server given by URL)."
    )
    out = "## What serving costs\n\n" + basis + "\n\n" + cheapest(points, params)
    if cost:
        out += f"\n## Cost\n\n{cost.replace('### ', '')}"
    return out


def errors_section(errors: list[str]) -> str:
    if not errors:
        return "## Errors\n\nNone.\n"
    return "## Errors\n\n" + "\n".join(f"- {e}" for e in errors) + "\n"


def _header(r: G6Result) -> str:
    m, p = r.meta, r.params
    load = f"concurrency {p.concurrency} (closed loop)" if p.concurrency else f"Poisson rates {p.rate} req/s (open loop)"
    lines = [
        "# Lab g6: LLM serving, TTFT against throughput",
        "",
        f"Model `{p.model}` served by {target_text(p)}; {m.started_at.isoformat()} to {m.finished_at.isoformat()}.",
        "",
        "## What was run",
        "",
        f"- Grid: max-num-seqs {[x for x in p.max_num_seqs]} x {load}",
        f"- Requests: {p.requests} counted per point after a warm-up of "
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


def _points(r: G6Result) -> str:
    rows = []
    for p in r.points:
        lag = p.client_lag_ms
        rows.append([
            p.max_num_seqs, load_label(p), p.completed, p.failed,
            latency_pair(p.ttft_ms), latency_pair(p.itl_ms), latency_pair(p.tpot_ms), latency_pair(p.e2e_ms),
            num(p.output_tokens_per_s), num(p.requests_per_s, 2),
            None if p.goodput is None else num(p.goodput.requests_per_s, 2),
            None if lag is None else f"{lag.mean:.2f} / {lag.p99:.2f}" + (" **client-bound**" if p.client_bound else ""),
            price_cell(p),
        ])  # fmt: skip
    client = table(
        ["max-num-seqs", "load", "ok", "failed", "TTFT p50/p99 ms", "ITL p50/p99 ms", "TPOT p50/p99 ms",
         "E2E p50/p99 ms", "output tok/s", "req/s", "goodput req/s", "client lag mean/p99 ms", "$ per M output tokens"],
        rows,
    )  # fmt: skip
    rows = []
    for p in r.points:
        s = p.server
        rows.append([
            p.max_num_seqs, load_label(p), num(p.observed_batch),
            None if s is None or s.running is None else f"{s.running.mean:.1f} / {s.running.max:.0f}",
            None if s is None or s.waiting is None else f"{s.waiting.mean:.1f} / {s.waiting.max:.0f}",
            None if s is None or s.kv_cache_usage is None else f"{s.kv_cache_usage.max:.0%}",
            None if s is None else num(s.preemptions, 0),
            None if s is None else num(s.ttft_p50_ms), None if s is None else num(s.ttft_p99_ms),
            None if s is None or s.sm_active is None else f"{s.sm_active.mean:.2f}",
            None if s is None or s.dram_active is None else f"{s.dram_active.mean:.2f}",
            p.bound, None if p.roofline_share is None else f"{p.roofline_share:.0%}",
        ])  # fmt: skip
    server = table(
        ["max-num-seqs", "load", "decode batch (client)", "running mean/max", "waiting mean/max", "KV peak", "preemptions",
         "server TTFT p50 ms", "server TTFT p99 ms", "SM active", "DRAM active", "bound", "of roofline"],
        rows,
    )  # fmt: skip
    note = (
        "\nThe decode batch is the client's time-averaged count of requests between first token and "
        "end (Little's law on its own timings); the server's running gauge is sampled once per scrape.\n\n"
    )
    reasons = "\n".join(f"- max-num-seqs {p.max_num_seqs}, {load_label(p)}: **{p.bound}**: {p.bound_reason}" for p in r.points)
    return (
        "## Client-side figures per point\n\n" + client
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
    return "\n".join(lines) + "\n"


def render_report(result: G6Result) -> str:
    plots = "## Plots\n\n" + "\n".join(f"![{name}]({name})" for name in PLOTS) + "\n"
    labelled = [(f"max-num-seqs {p.max_num_seqs} {load_label(p)}", p) for p in result.points]
    return "\n".join(
        [_header(result), _sizing(result), _points(result), realised_section(labelled), _meaning(result),
         cost_sections(labelled, result.params, result.gpu_price, result.cost), errors_section(result.meta.errors), plots]
    )  # fmt: skip
