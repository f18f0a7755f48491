"""What the requests of a g6 run looked like: as asked (lengths, EOS) and as the server counted them."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.g6.config import G6Params
from benchmarks.harness.markdown import table
from benchmarks.loadgen import PointStats
from benchmarks.loadgen.stats import TokenSummary

# The simulator's stand-in for a model emitting EOS (benchmarks.sim.engine.Scheduler.new_request).
SIM_EOS = "uniform between 1 (or min_tokens) and the request's max_tokens, seeded per request"


def asked_text(p: G6Params) -> str:
    """The request shape as the run asked for it, for a report's "What was run"."""
    prompt = p.input_len.describe() + (" words (one per token on the simulator; a real tokenizer and the chat "
                                       "template count otherwise)" if p.api == "chat" else " token ids")  # fmt: skip
    if p.eos:
        stop = f"stopping at EOS under a cap (max_tokens) of {p.output_len.describe()}"
        if p.target_kind == "sim":
            stop += f"; the simulator stops each request at a length {SIM_EOS}"
    else:
        stop = f"exactly {p.output_len.describe()} output tokens (`ignore_eos`, `min_tokens`)"
    drawn = "" if p.input_len.fixed and p.output_len.fixed else f"; lengths drawn per request with seed {p.seed}"
    return f"prompts of {prompt}, {stop}{drawn}"


def _cell(s: TokenSummary | None) -> str | None:
    return None if s is None else f"{s.mean:,.1f} / {s.p50:,.0f} / {s.p99:,.0f}"


def realised_section(labelled: Sequence[tuple[str, PointStats]]) -> str:
    """Per point, the tokens each request really had, from the server's usage."""
    rows = [
        [label, p.input_len.describe(), _cell(p.realised.input_tokens if p.realised else None),
         p.output_len.describe() + (" (cap, EOS)" if p.eos else ""), _cell(p.realised.output_tokens if p.realised else None)]
        for label, p in labelled
    ]  # fmt: skip
    return (
        "## Lengths sent and received\n\n"
        + table(["point", "prompt asked", "prompt tokens mean / p50 / p99", "output asked",
                 "output tokens mean / p50 / p99"], rows)  # fmt: skip
        + "\nCounted per completed request from the server's `usage` (prompt_tokens, completion_tokens): "
        "TPOT and tokens/s use these counts, not the lengths asked for.\n"
    )
