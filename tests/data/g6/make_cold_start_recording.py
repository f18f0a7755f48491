"""Writes cold-start-recording.json and g6-outputs.json beside this file: a g6 cold-start run as
`python -m benchmarks g6 --stack g6 --experiment cold-start --settings
as-configured,image-streaming,gcs-weights,warm-pool --repeats 3` would record it, built for the tests
and the example (examples/g6-cold-start/), NOT recorded on a cluster.

    python tests/data/g6/make_cold_start_recording.py
    python -m benchmarks g6 --outputs tests/data/g6/g6-outputs.json --experiment cold-start \\
        --recording tests/data/g6/cold-start-recording.json --out /tmp/cold && cp /tmp/cold/g6-cold-start-*/* examples/g6-cold-start/

Shapes come from tests/cold_start_fixtures.py (API objects, events and vLLM v0.11.2's log as they are
written). Timings are constructed: from zero as that module describes, the repeats a few seconds
apart (a slower node, a slower pull), the third from-zero repeat a spot stock-out; image streaming
with a whole pull first (the cache fetching the image from Docker Hub), then pulls of seconds (the image
streamed from the Artifact Registry cache); weights from the bucket
with no download and a slower load (read through GCS FUSE); the warm pool on a node that holds the image.
The outputs are those Pulumi.g6.yaml exports (the program under mocks), without the kubeconfig.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))
from benchmarks.g6.experiments.cold_start import SETTINGS, ColdStartRecord, ColdStartRecording  # noqa: E402
from benchmarks.kube.record import public_outputs  # noqa: E402
from stacks.mockrun import OFFLINE_PROJECT, run_stack  # noqa: E402
from tests import cold_start_fixtures as fx  # noqa: E402

SOURCE = ("illustrative fixture tests/data/g6/cold-start-recording.json (real API shapes, constructed timings: "
          "not measured on a cluster)")  # fmt: skip
CACHED = f"us-central1-docker.pkg.dev/{OFFLINE_PROJECT}/gml-g6-dockerhub/vllm/vllm-openai:v0.11.2"


def record(case: dict, setting: str, repeat: int, tail_s: float | None) -> ColdStartRecord:
    return ColdStartRecord(setting=setting, settings=SETTINGS[setting].changes(), repeat=repeat,
                           warm_pool=setting == "warm-pool", tail_s=tail_s, sent=case["sent"],
                           first_token=case["first_token"], pod=case["pod"], node=case["node"], events=case["events"],
                           log=case["log"], error=None if case["first_token"] else "no answer within 1800s")  # fmt: skip


def build() -> ColdStartRecording:
    t = fx.T
    fuse = {k: v if v < t["downloaded"] else round(v - 32.0 + 19.0, 1) for k, v in t.items()}  # no download, a slower load
    records = [
        record(fx.from_zero(), "as-configured", 0, 583.0),
        record(fx.from_zero(fx.later(fx.later(t, "node_ready", 9.0), "pulled", 12.0)), "as-configured", 1, 571.0),
        record(fx.stock_out(), "as-configured", 2, 590.0),
        # The first pull through the cache is a whole one (Docker Hub to Artifact Registry), then it streams.
        record(fx.from_zero(t, CACHED), "image-streaming", 0, 577.0),
        record(fx.from_zero(fx.pull_in(t, 3.1), CACHED), "image-streaming", 1, 575.0),
        record(fx.from_zero(fx.pull_in(fx.later(t, "node_ready", 6.0), 2.6), CACHED), "image-streaming", 2, 580.0),
        record(fx.from_zero(fuse, download=False), "gcs-weights", 0, 586.0),
        record(fx.image_present(), "warm-pool", 0, None),
    ]
    return ColdStartRecording(source=SOURCE, records=records)


if __name__ == "__main__":
    (HERE / "cold-start-recording.json").write_text(build().model_dump_json(indent=1) + "\n")
    (HERE / "g6-outputs.json").write_text(json.dumps(public_outputs(run_stack("g6").stack_output()), indent=1) + "\n")
    print(f"wrote {HERE / 'cold-start-recording.json'} and {HERE / 'g6-outputs.json'}")
