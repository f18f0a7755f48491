"""The agreement check can fail: a shipped result held against itself agrees figure by figure (the same
seeds, the same plans, no host between them: every ratio 1), and the same result with one figure doctored
by what a host could not add disagrees on that figure and on no other. Fast (no replay): make test."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.g6.agreement import checks, slowed
from benchmarks.g6.oracle import HOST_BANDS
from benchmarks.g6.result import G6Result
from benchmarks.harness import load_result
from benchmarks.loadgen.reruns import rerun

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "g6-sim"
POINT = (32, 8)  # max-num-seqs, concurrency


def doctored(result: G6Result, figure: str, factor: float, runs: slice = slice(None)) -> G6Result:
    """`result` with one figure of one point multiplied by `factor` in the runs `runs` selects."""
    across = []
    for f in result.across:
        if (f.max_num_seqs, f.concurrency) == POINT:
            values = list(getattr(f, figure).values)
            values[runs] = [v * factor for v in values[runs]]
            f = f.model_copy(update={figure: rerun(values)})
        across.append(f)
    return result.model_copy(update={"across": across})


@pytest.fixture(scope="module")
def shipped() -> G6Result:
    return load_result(G6Result, EXAMPLE)


def verdicts(shipped: G6Result, oracle: G6Result) -> dict[str, bool | None]:
    return {c.figure: c.agrees for c in checks(shipped, oracle)}


def test_a_result_agrees_with_itself_and_holds_only_figures_with_a_measured_band(shipped):
    found = verdicts(shipped, shipped)
    assert found and all(v is True for k, v in found.items() if not k.endswith("ttft_p99_ms"))
    # TTFT p99 has no measured host band: shown, never passed by its rerun interval.
    assert {v for k, v in found.items() if k.endswith("ttft_p99_ms")} == {None}


@pytest.mark.parametrize(
    ("figure", "factor"),
    [
        ("itl_p99_ms", 3 * HOST_BANDS["itl_p99_ms"][1] / 2),  # a tail six times the oracle's
        ("itl_p50_ms", 1.2),
        ("output_tokens_per_s", 1.1),  # a host cannot make the simulated L4 faster
        ("output_tokens_per_s", 0.85),
        ("ttft_p50_ms", 2.0),
    ],
)
def test_a_doctored_figure_disagrees_and_nothing_else_does(shipped, figure, factor):
    found = verdicts(doctored(shipped, figure, factor), shipped)
    wrong = {k for k, v in found.items() if v is False}
    assert wrong == {f"max-num-seqs {POINT[0]} c={POINT[1]} {figure}"}


def test_one_doctored_run_among_three_is_caught_though_the_mean_hides_it(shipped):
    # One run of three 30% slower moves the mean 10%: held run by run (the runs pair by seed), it is caught.
    found = verdicts(doctored(shipped, "itl_p50_ms", 1.3, slice(0, 1)), shipped)
    assert found[f"max-num-seqs {POINT[0]} c={POINT[1]} itl_p50_ms"] is False
    # The rerun interval of the doctored figure still holds the oracle's mean: an interval would have passed it.
    point = next(f for f in doctored(shipped, "itl_p50_ms", 1.3, slice(0, 1)).across if (f.max_num_seqs, f.concurrency) == POINT)
    oracle = next(f for f in shipped.across if (f.max_num_seqs, f.concurrency) == POINT)
    assert point.itl_p50_ms.contains(oracle.itl_p50_ms.mean)



def test_a_run_whose_simulator_the_host_slowed_is_named_and_no_other(shipped):
    """The shipped points carry no step counters (made before them): none is named. One point whose server
    counted 200 steps, 3 of them late (1.5%, over the 1% limit), is named with its load, seed and share; one
    with 2 of 200 late (1%, at the limit) is not."""
    assert slowed(shipped) == []
    points = list(shipped.points)
    late, edge = points[0], points[1]
    points[0] = late.model_copy(update={"server": late.server.model_copy(update={"sim_steps": 200.0, "sim_steps_late": 3.0})})
    points[1] = edge.model_copy(update={"server": edge.server.model_copy(update={"sim_steps": 200.0, "sim_steps_late": 2.0})})
    assert slowed(shipped.model_copy(update={"points": points})) == [f"c={late.concurrency} seed {late.seed} (1.5% of steps late)"]
