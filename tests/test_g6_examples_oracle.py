"""The shipped g6 examples are what the virtual-clock oracle fed the same plans gives (python -m
benchmarks.g6.agreement, as `make g6-agreement` runs it): each run's headline figure over the oracle's for
its seed within the host's measured band, every search's answer within its tolerance. A real-time example that fails
here was measured on a machine too busy for the simulated L4, or by code that no longer gives its plans:
regenerate it with its make target. The replays take the examples' own length on the engine (minutes):
`make test-agreement`."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.g6.agreement import checks, replayed

pytestmark = pytest.mark.agreement
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


# The one known disagreement, kept visible rather than banded away: in the sweep's closed loop of equal
# requests the oracle's 32 clients stay in lockstep (32 prompts prefilled in one step, which stalls every decode
# at once), while a real-time run's jitter staggers them, so its ITL p99 at max-num-seqs 32, c=32 reads
# 0.68-0.98 of the oracle's, under the host band's floor. Open-loop curves by default (issue 36) remove the
# lockstep; then this test fails until the entry goes.
KNOWN = {"g6-sim": {"max-num-seqs 32 c=32 itl_p99_ms"}}


@pytest.mark.parametrize("folder", ["g6-sim", "g6-kv-sim", "g6-quant-sim", "g6-prefix-sim", "g6-saturation-sim"])
def test_a_shipped_example_agrees_with_the_oracle(folder, tmp_path):
    shipped, oracle = replayed(EXAMPLES / folder, tmp_path)
    found = checks(shipped, oracle)
    held = [c for c in found if c.agrees is not None]
    assert len(held) >= 4, found  # the headline figures are all there to hold
    assert {c.figure for c in held if not c.agrees} == KNOWN.get(folder, set())
