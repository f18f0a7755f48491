"""`python -m benchmarks.g6.agreement FOLDER...`: does a saved --sim run agree with the virtual-clock oracle?

Each folder's command runs again with --virtual (benchmarks.g6.virtual): the same parameters and seeds, so
the same plans, replayed on the simulator's engine with no host in them. Every headline figure of the
saved run is then held against the oracle's: the two runs of one seed share their plan, so the seed's
variation is no excuse, and each run's figure over the oracle's for that seed must lie in the band the host
adds to a real-time run at x1 (HOST_BANDS: measured over 12 seeds on this project's shared 2-core machine,
docs/testing.md, "The virtual-clock oracle"). A rerun interval never passes a figure: it says how far
another set of seeds would move it, not how far this host moved it. A search's answer (the saturation rate,
the kv batch) agrees when the oracle's is within the search's own tolerance. A figure with no measured band
(TTFT p99, the prefix hit rate) is shown, not held. A real-time run on a machine too busy for the simulated
L4 disagrees here: its figures are the machine's. Prints one table per folder; exit 1 when any figure
disagrees.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel

from benchmarks.errors import BenchmarkError
from benchmarks.g6.cli import parse
from benchmarks.g6.config import G6Params
from benchmarks.g6.experiments.kv import KvResult
from benchmarks.g6.experiments.prefix import PrefixResult
from benchmarks.g6.experiments.quant import QuantResult
from benchmarks.g6.experiments.saturation import SaturationResult
from benchmarks.g6.experiments.table import EXPERIMENTS
from benchmarks.g6.result import Figures, G6Point, G6Result
from benchmarks.g6.run import execute
from benchmarks.harness import load_result
from benchmarks.harness.markdown import table
from benchmarks.loadgen.reruns import Rerun

FIGURES = ("output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")
# Real-time / oracle at x1, the closed-loop and open-loop points' bands together (docs/testing.md). TTFT p99
# over a few dozen requests is their slowest, set by one stall of the host: no band, its interval only.
# The prefix A/B's TTFT p50 saved: 1.024-1.070 over 12 seeds (4 beside two busy processes), the host adding
# a little more to the uncached arm's longer prefill than to the cached one's.
HOST_BANDS = {"output_tokens_per_s": (0.93, 1.02), "served": (0.93, 1.02), "ttft_p50_ms": (0.5, 1.45),
              "itl_p50_ms": (0.97, 1.10), "itl_p99_ms": (0.97, 4.0), "e2e_p50_ms": (0.96, 1.06),
              "ttft_p50_saved_ms": (0.98, 1.12)}  # fmt: skip


class Check(NamedTuple):
    """One figure: the saved run's, the oracle's, and whether they agree within the stated tolerance (None: a
    figure with no measured host band, which nothing holds)."""

    figure: str
    shipped: str
    oracle: str
    agrees: bool | None


VERDICTS = {True: "yes", False: "**no**", None: "not held (no measured band)"}


class AgreementError(BenchmarkError):
    """A folder the check cannot replay; the message says why."""


def _ratios(shipped: Rerun, oracle: Rerun) -> list[float] | None:
    """Each run's figure over the oracle's for the same seed (the runs in the same order), or the means' ratio
    when the runs do not pair; None when the oracle's figure is zero."""
    if len(shipped.values) == len(oracle.values) and all(shipped.values) and all(oracle.values):
        return [a / b for a, b in zip(shipped.values, oracle.values)]
    return [shipped.mean / oracle.mean] if oracle.mean else None


def _figure(name: str, shipped: Rerun | None, oracle: Rerun | None, band: tuple[float, float] | None = None) -> Iterator[Check]:
    if shipped is None or oracle is None:
        return
    ratios = _ratios(shipped, oracle)
    spread = "" if not ratios else f"x{min(ratios):.3f}" + (f"-{max(ratios):.3f}" if len(ratios) > 1 else "")
    said = f"{oracle.mean:,.2f}" + (f" ({spread}" + (f", band {band[0]:g}-{band[1]:g})" if band else ")") if spread else "")
    interval = "one run" if shipped.lo is None or shipped.hi is None else f"{shipped.lo:,.2f}–{shipped.hi:,.2f}"
    agrees = None
    if band is not None:
        agrees = bool(ratios) and all(band[0] <= r <= band[1] for r in ratios or ())
    yield Check(name, f"{shipped.mean:,.2f} ({interval})", said, agrees)


def _figures(label: str, shipped: Figures, oracle: Figures) -> Iterator[Check]:
    for name in FIGURES:
        yield from _figure(f"{label} {name}", getattr(shipped, name), getattr(oracle, name), HOST_BANDS.get(name))


def _search(name: str, shipped: float | None, oracle: float | None, tolerance: float) -> Iterator[Check]:
    if shipped is None and oracle is None:
        return
    agrees = shipped is not None and oracle is not None and abs(oracle - shipped) <= tolerance * shipped
    yield Check(name, f"{shipped} (the search's tolerance {tolerance:.0%})", f"{oracle}", agrees)


def checks(shipped: object, oracle: object) -> list[Check]:
    """Every headline figure of `shipped` against the oracle's rerun of it."""
    out: list[Check] = []
    if isinstance(shipped, G6Result) and isinstance(oracle, G6Result):
        theirs = {(f.max_num_seqs, f.concurrency, f.rate): f for f in oracle.across}
        for f in shipped.across:
            if (o := theirs.get((f.max_num_seqs, f.concurrency, f.rate))) is not None:
                load = f"c={f.concurrency}" if f.concurrency is not None else f"{f.rate:g}/s"
                out += _figures(f"max-num-seqs {f.max_num_seqs} {load}", f, o)
    elif isinstance(shipped, QuantResult) and isinstance(oracle, QuantResult):
        for v, w in zip(shipped.variants, oracle.variants):
            theirs = {f.concurrency: f for f in w.across}
            for f in v.across:
                if (o := theirs.get(f.concurrency)) is not None:
                    out += _figures(f"{v.variant} c={f.concurrency}", f, o)
    elif isinstance(shipped, PrefixResult) and isinstance(oracle, PrefixResult):
        for a in shipped.arms:
            b = None if a.prefix_caching is None else oracle.arm(a.prefix_caching)
            if b is not None:
                name = f"caching {'on' if a.prefix_caching else 'off'}"
                out += _figures(name, a.figures, b.figures)
                out += _figure(f"{name} hit rate", a.prefix_cache_hit_rate, b.prefix_cache_hit_rate)
        out += _figure("TTFT p50 saved ms", shipped.ttft_p50_saved_ms, oracle.ttft_p50_saved_ms,
                       HOST_BANDS["ttft_p50_saved_ms"])  # fmt: skip
    elif isinstance(shipped, SaturationResult) and isinstance(oracle, SaturationResult):
        out += _search("saturation rate (offered req/s)", shipped.saturation_rate, oracle.saturation_rate,
                       shipped.saturation.tolerance)  # fmt: skip
        theirs = {(p.stage, p.rate): p for p in oracle.points}
        for p in shipped.points:
            if (o := theirs.get((p.stage, p.rate))) is not None:
                for name in ("served", "output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms"):
                    out += _figure(f"{p.stage} {p.rate:g} req/s {name}", getattr(p, name), getattr(o, name),
                                   HOST_BANDS.get(name))  # fmt: skip
    elif isinstance(shipped, KvResult) and isinstance(oracle, KvResult):
        theirs = {x.context_len: x for x in oracle.lengths}
        for x in shipped.lengths:
            if (o := theirs.get(x.context_len)) is None:
                continue
            tolerance = max(1, round(shipped.kv.tolerance * x.predicted_max_batch)) / max(1, x.measured_max_batch or 1)
            out += _search(f"L={x.context_len} largest batch", x.measured_max_batch, o.measured_max_batch, tolerance)
            if x.measured_max_batch == o.measured_max_batch:
                out += _figure(f"L={x.context_len} output tok/s", x.output_tokens_per_s, o.output_tokens_per_s,
                               HOST_BANDS["output_tokens_per_s"])  # fmt: skip
            for b, c in zip(x.baselines, o.baselines):
                out += _figure(f"L={x.context_len} {b.reserves} baseline output tok/s", b.output_tokens_per_s,
                               c.output_tokens_per_s, HOST_BANDS["output_tokens_per_s"])  # fmt: skip
    return out


def points(result: object) -> Iterator[G6Point]:
    """Every measured point of a saved result, however its experiment nests them."""
    if isinstance(result, G6Point):
        yield result
    elif isinstance(result, BaseModel):
        for name in type(result).model_fields:
            yield from points(getattr(result, name))
    elif isinstance(result, list):
        for item in result:
            yield from points(item)


def slowed(result: object) -> list[str]:
    """The runs whose simulator the host slowed (benchmarks.metrics.model.HOST_SLOWED_SHARE), for the table's
    reader: their tails are this machine's, and a disagreement there is the host's."""
    return [f"{'c=' + str(p.concurrency) if p.concurrency is not None else f'{p.rate:g}/s'} seed {p.seed} "
            f"({p.server.late_step_share:.1%} of steps late)"
            for p in points(result) if p.host_slowed and p.server is not None]  # fmt: skip


def replayed(folder: Path, out: Path) -> tuple[object, object]:
    """(the saved result, the oracle's) of one folder: its command again with --virtual."""
    try:
        data = json.loads((folder / "result.json").read_text())
    except (OSError, ValueError) as exc:
        raise AgreementError(f"{folder}: cannot read result.json: {exc}") from None
    params = G6Params.model_validate(data["params"])
    if params.target_kind != "sim" or params.experiment not in EXPERIMENTS:
        raise AgreementError(f"{folder}: a {params.experiment} run against {params.target_kind}: only --sim runs "
                             "have an oracle")  # fmt: skip
    model = EXPERIMENTS[params.experiment].result_model
    shipped = load_result(model, folder)
    argv = list(data["meta"]["command"][4:])  # after `python -m benchmarks g6`
    if "--out" in argv:
        del argv[argv.index("--out") : argv.index("--out") + 2]
    argv += ["--virtual", "--quiet", "--out", str(out)]
    with contextlib.redirect_stdout(io.StringIO()):  # the oracle's run prints its folder: a temporary one
        rc = execute(parse(argv), argv)
    if rc not in (0, 1):
        raise AgreementError(f"{folder}: the oracle's run of its command failed")
    (done,) = out.iterdir()
    oracle = load_result(model, done)
    if oracle.params.model_copy(update={"virtual": params.virtual}) != params:  # type: ignore[attr-defined]
        raise AgreementError(f"{folder}: its command no longer gives the parameters it ran with: regenerate it")
    return shipped, oracle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.g6.agreement", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("folders", nargs="+", type=Path, help="results folders of --sim runs (examples/g6-*-sim)")
    args = parser.parse_args(argv)
    disagree = 0
    for folder in args.folders:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                shipped, oracle = replayed(folder, Path(tmp))
            except BenchmarkError as exc:
                print(f"g6 agreement: {exc}", file=sys.stderr)
                return 2
        found = checks(shipped, oracle)
        held = [c for c in found if c.agrees is not None]
        if not held:  # nothing held is nothing agreeing: an experiment this check does not know yet
            print(f"g6 agreement: {folder}: no figure of its {shipped.params.experiment} run is held against the "  # type: ignore[attr-defined]
                  "oracle", file=sys.stderr)  # fmt: skip
            return 2
        bad = [c for c in held if not c.agrees]
        disagree += len(bad)
        print(f"## {folder}: {len(held) - len(bad)} of {len(held)} held figures agree with the oracle "
              f"({len(found) - len(held)} shown, not held)\n")
        if shipped.params.virtual:  # type: ignore[attr-defined]
            print("A --virtual run: the oracle's own answer, replayed again (what it checks is that today's code gives it).\n")
        print(table(["figure", "this run (95% rerun interval)", "oracle (each run / its seed's, host band)", "agrees"],
                    [[c.figure, c.shipped, c.oracle, VERDICTS[c.agrees]] for c in found]))  # fmt: skip
        if marked := slowed(shipped):
            print(f"\nHost-slowed runs (the host delivered more than 1% of the simulator's steps late; their tails "
                  f"are this machine's): {'; '.join(marked)}.")  # fmt: skip
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
