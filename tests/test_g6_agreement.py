"""Each g6 experiment run on the real-time simulator through the real client agrees with the virtual-clock
oracle fed the same plans (python -m benchmarks.g6.agreement: the same command with --virtual, the same
seeds): the search's answer within its tolerance, each run's figure over the oracle's for its seed within
the host's measured band.

The runs are shaped so that this machine's CPUs cannot be what they measure: a few hundred tokens a second
on the wire (the real-time simulator keeps its timeline through wake-ups up to 50 ms late, not through a
host too busy to run it), so what they measure is the simulated L4 the oracle replays. Minutes of real
time: `make test-agreement`, its own target (not in .ci/run: docs/testing.md says why).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.g6 import main
from benchmarks.g6.agreement import checks, replayed
from benchmarks.g6.experiments.kv import KvResult
from benchmarks.g6.experiments.prefix import PrefixResult
from benchmarks.g6.experiments.saturation import SaturationResult
from benchmarks.harness import load_result

pytestmark = pytest.mark.agreement
QWEN_05 = "Qwen/Qwen2.5-0.5B-Instruct"
QWEN_15 = "Qwen/Qwen2.5-1.5B-Instruct"


def _agrees(argv: list[str], tmp_path: Path) -> tuple[object, object]:
    out = tmp_path / "real"
    assert main([*argv, "--quiet", "--out", str(out)]) in (0, 1)
    (folder,) = out.iterdir()
    (tmp_path / "oracle").mkdir()
    shipped, oracle = replayed(folder, tmp_path / "oracle")
    found = checks(shipped, oracle)
    assert found and [c for c in found if c.agrees is False] == []
    return shipped, oracle


def test_a_saturation_search_agrees_with_the_oracle(tmp_path):
    """Two sequences at a time (max-num-seqs 2) of 16 output tokens: about 9 requests/s of the simulated L4,
    140 tokens/s. The same seeds give both the same Poisson arrivals, so only the host differs."""
    shipped, oracle = _agrees(["--sim", "--experiment", "saturation", "--model", QWEN_15, "--max-num-seqs", "2",
                               "--input-len", "32", "--output-len", "16", "--start-rate", "6", "--point-seconds", "6",
                               "--hold-seconds", "6", "--repeats", "2"], tmp_path)  # fmt: skip
    assert isinstance(shipped, SaturationResult) and isinstance(oracle, SaturationResult)
    assert shipped.saturation_rate is not None and shipped.first_failing_rate is not None


def test_a_kv_search_agrees_with_the_oracle(tmp_path):
    """A pool of about 4,600 tokens (utilisation 0.2, max-model-len 1,024): about a dozen sequences of 512
    tokens, run at half the GPU's speed so the closed loop stays a few hundred tokens a second."""
    shipped, _ = _agrees(["--sim", "--experiment", "kv", "--model", QWEN_15, "--gpu-memory-utilization", "0.2",
                          "--max-model-len", "1024", "--context-len", "512", "--speedup", "0.5", "--repeats", "2"],
                         tmp_path)  # fmt: skip
    assert isinstance(shipped, KvResult) and shipped.lengths[0].measured_max_batch


def test_a_prefix_ab_agrees_with_the_oracle(tmp_path):
    """1,024-token prefixes in two groups at 4 requests/s: the hit rate and both arms' latencies."""
    shipped, _ = _agrees(["--sim", "--experiment", "prefix", "--model", QWEN_05, "--prefix-len", "1024",
                          "--prefix-groups", "2", "--rate", "4", "--requests", "24", "--input-len", "64",
                          "--output-len", "16", "--repeats", "2"], tmp_path)  # fmt: skip
    assert isinstance(shipped, PrefixResult) and shipped.arm(True).prefix_cache_hit_rate.mean > 0.5
