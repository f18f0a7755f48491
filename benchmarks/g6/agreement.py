"""`python -m benchmarks.g6.agreement FOLDER...`: does a saved --sim run agree with the virtual-clock oracle?

Each folder's command runs again with --virtual (benchmarks.g6.virtual): the same parameters and seeds, so
the same plans, replayed on the simulator's engine with no host in them. Every headline figure of the
saved run is then held against the oracle's: the two runs of one seed share their plan, so the seed's
variation is no excuse, and each run's figure over the oracle's for that seed must lie in the band the host
adds to a real-time run at x1 (benchmarks.g6.oracle.HOST_BANDS: measured over 12 seeds on this project's shared
2-core machine, docs/testing.md, "The virtual-clock oracle"). Which figures are held is each experiment's own
(benchmarks.g6.experiment: `held`); a folder of which none is held is refused, never passed. A rerun interval never passes a figure: it says how far
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

from pydantic import BaseModel

from benchmarks.errors import BenchmarkError
from benchmarks.g6.cli import parse
from benchmarks.g6.config import G6Params
from benchmarks.g6.experiments.table import EXPERIMENTS
from benchmarks.g6.oracle import Check
from benchmarks.g6.result import G6Point
from benchmarks.g6.run import execute
from benchmarks.harness import load_result
from benchmarks.harness.markdown import table

VERDICTS = {True: "yes", False: "**no**", None: "not held (no measured band)"}


class AgreementError(BenchmarkError):
    """A folder the check cannot replay; the message says why."""


def checks(shipped: object, oracle: object) -> list[Check]:
    """Every figure of `shipped` its experiment holds against the oracle's rerun of it."""
    experiment = EXPERIMENTS[shipped.params.experiment]  # type: ignore[attr-defined]
    return experiment.held(shipped, oracle)


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


# What ties a run to the stack or server it ran against; a stand-in run's replay drops them for --sim.
_SERVER_FLAGS = ("--out", "--outputs", "--target", "--stack", "--prometheus")


def _without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    out = list(argv)
    for flag in flags:
        if flag in out:
            del out[out.index(flag) : out.index(flag) + 2]
    return out


def replayed(folder: Path, out: Path) -> tuple[object, object]:
    """(the saved result, the oracle's) of one folder: its command again with --virtual. A run on the local
    cluster (its result carries the cluster's statement: no image is pulled there, so its vLLM was the
    simulator's stand-in) is replayed as the --sim run of the same model, server settings and plans."""
    try:
        data = json.loads((folder / "result.json").read_text())
    except (OSError, ValueError) as exc:
        raise AgreementError(f"{folder}: cannot read result.json: {exc}") from None
    params = G6Params.model_validate(data["params"])
    stand_in = params.target_kind != "sim" and bool(data["meta"].get("simulation"))
    if (params.target_kind != "sim" and not stand_in) or params.experiment not in EXPERIMENTS:
        raise AgreementError(f"{folder}: a {params.experiment} run against {params.target_kind}: only --sim runs "
                             "and runs on the local cluster's vLLM stand-in have an oracle")  # fmt: skip
    model = EXPERIMENTS[params.experiment].result_model
    shipped = load_result(model, folder)
    argv = _without(data["meta"]["command"][4:], _SERVER_FLAGS if stand_in else ("--out",))  # after `python -m benchmarks g6`
    if stand_in:  # the server's settings as the stack's outputs gave them
        argv += ["--sim", "--model", params.model, "--max-num-seqs", ",".join(map(str, params.max_num_seqs)),
                 "--gpu", str(params.gpu), "--gpu-memory-utilization", f"{params.gpu_memory_utilization:g}",
                 "--scrape-interval", f"{params.scrape_interval_s:g}"]
        argv += ["--max-model-len", str(params.max_model_len)] if params.max_model_len else []
        argv += ["--quantization", params.quantization] if params.quantization else []
    argv += ["--virtual", "--quiet", "--out", str(out)]
    with contextlib.redirect_stdout(io.StringIO()):  # the oracle's run prints its folder: a temporary one
        rc = execute(parse(argv), argv)
    if rc not in (0, 1):
        raise AgreementError(f"{folder}: the oracle's run of its command failed")
    (done,) = out.iterdir()
    oracle = load_result(model, done)
    server = ("virtual", "target_kind", "target", "stack", "client", "prometheus")
    replay = oracle.params.model_copy(update={k: getattr(params, k) for k in server})  # type: ignore[attr-defined]
    if replay != params:
        differ = ", ".join(k for k in G6Params.model_fields if getattr(replay, k) != getattr(params, k))
        raise AgreementError(f"{folder}: its command no longer gives the parameters it ran with ({differ}): regenerate it")
    return shipped, oracle


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.g6.agreement", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("folders", nargs="+", type=Path, help="results folders of --sim runs (examples/g6-*-sim), or "
                        "of runs on the local cluster's vLLM stand-in (make lab-local LAB=g6)")
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
