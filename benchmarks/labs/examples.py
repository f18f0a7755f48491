"""Regenerate examples/<lab>/ (result.json, report.md, plots) from the run fixtures in
tests/data/labs/<lab>/recording.json: what a user gets from `python -m benchmarks <lab>`. A variant
(examples/g5-triton/, examples/g4-v1/) is the same lab's benchmark on another configuration of its stack.

The fixtures hold API objects, events and logs in exactly the shapes the APIs return, but they were
built for the tests, not recorded on a cluster: their timings are plausible, not measured. Each
example says so in its `source` line; replace a fixture with a real recording.json from a results
folder to get a measured example. Those in RECORDED are real runs: their recording.json lies beside
their report (examples/<name>/, as the run wrote its results folder), and each says what recorded it.

    python -m benchmarks.labs.examples [--out examples] [lab ...]
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from benchmarks.kube.record import load_recording
from benchmarks.labs.report import write_results

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "data" / "labs"
LABS = ("g1", "g2", "g3", "g4", "g5", "g7", "g8")
# Further examples of a lab on another configuration: example name -> the lab whose benchmark wrote it.
VARIANTS = {"g5-triton": "g5", "g4-v1": "g4", "g3-local": "g3", "g3-real-node": "g3", "g4-real-node": "g4",
            "g8-real-node": "g8"}
# Examples measured from a real run's recording.json, and what ran it.
RECORDED = {
    "g3-local": "recording of `make g3-local`: the real kube-scheduler, Kueue and JobSet on kwok's simulated nodes "
    "and pods (see What was real and what was simulated)",
    "g3-real-node": "recording of `make lab-local LAB=g3`: the real kube-scheduler, Kueue and JobSet, the workers' "
    "barrier run by a real kubelet on the GPU pool's real node (see What was real and what was simulated)",
    "g4-real-node": "recording of `make lab-local LAB=g4`: the real Trainer and JobSet controllers, both ranks run by a "
    "real kubelet in the PyTorch stand-in on the GPU pool's real node (see What was real and what was simulated)",
    "g8-real-node": "recording of `make lab-local LAB=g8`: the trainer run by a real kubelet in the PyTorch stand-in on "
    "the GPU pool's real node, preempted through that kubelet's graceful shutdown, its checkpoints in fake-gcs-server "
    "(see What was real and what was simulated)",
}


def recording_of(name: str) -> Path:
    """The recording an example is rendered from: a real run's beside its report, else the fixture."""
    return (REPO / "examples" if name in RECORDED else FIXTURES) / name / "recording.json"


def available() -> list[str]:
    return [name for name in (*LABS, *VARIANTS) if recording_of(name).exists()]


def lab_of(name: str) -> str:
    """The lab module behind an example name (a lab, or one of its VARIANTS)."""
    return VARIANTS.get(name, name)


def render_example(name: str, out: Path) -> Path:
    module = importlib.import_module(f"benchmarks.labs.{lab_of(name)}")
    recording = recording_of(name)
    shown = recording.relative_to(REPO)
    made = f"illustrative fixture {shown} (real API shapes, constructed timings: not measured on a cluster)"
    result = module.measure(load_recording(recording), source=f"{RECORDED[name]}, {shown}" if name in RECORDED else made)
    return write_results(out / name, None, result, module)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.labs.examples", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=REPO / "examples")
    p.add_argument("labs", nargs="*", help=f"examples to render (default: every one with a fixture: {', '.join(available())})")
    args = p.parse_args(argv)
    for name in args.labs or available():
        print(f"{name}: {render_example(name, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
