"""The shipped g6 examples are what the virtual-clock oracle fed the same plans gives (python -m
benchmarks.g6.agreement, as `make g6-agreement` runs it): every headline figure inside its rerun interval
or the host's measured band, every search's answer within its tolerance. A real-time example that fails
here was measured on a machine too busy for the simulated L4, or by code that no longer gives its plans:
regenerate it with its make target. The replays take the examples' own length on the engine (minutes):
`make test-agreement`."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.g6.agreement import checks, replayed

pytestmark = pytest.mark.agreement
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("folder", ["g6-sim", "g6-kv-sim", "g6-quant-sim", "g6-prefix-sim", "g6-saturation-sim"])
def test_a_shipped_example_agrees_with_the_oracle(folder, tmp_path):
    shipped, oracle = replayed(EXAMPLES / folder, tmp_path)
    found = checks(shipped, oracle)
    held = [c for c in found if c.agrees is not None]
    assert len(held) >= 4, found  # the headline figures are all there to hold
    assert [c for c in held if not c.agrees] == []
