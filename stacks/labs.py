"""What each lab is for and what it turns on.

A lab's defaults are merged under the stack file: `Pulumi.g6.yaml` may say only `lab: g6` and still
get vLLM, while anything the file sets wins. One place to read a lab's whole story.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Lab:
    name: str
    title: str
    measures: str
    turns_on: dict[str, Any] = field(default_factory=dict)


LABS: dict[str, Lab] = {
    lab.name: lab
    for lab in (
        Lab("dev", "Baseline cluster", "the GPU pool scales from zero and back"),
        Lab(
            "g1",
            "GPU scheduling and DCGM",
            "nvidia.com/gpu allocatable; untolerated pods never land on GPU nodes; DCGM series present",
            {"observability": {"enabled": True}, "cost_exporter": {"enabled": True}},
        ),
        Lab(
            "g2",
            "GPU time-slicing",
            "how many replicas share one L4; per-pod latency as 1..N pods contend",
            {"observability": {"enabled": True}, "cost_exporter": {"enabled": True}, "gpu_sharing": {"enabled": True}},
        ),
        Lab(
            "g3",
            "Gang scheduling: Kueue against the default scheduler",
            "three multi-worker jobs over quota: with Kueue two admitted whole, one waits with no pod; without it, "
            "partial placement and idle GPUs (or a deadlock)",
            # Two whole jobs of 3 workers (one shared GPU each) share one L4 through time-sharing.
            {
                "observability": {"enabled": True},
                "cost_exporter": {"enabled": True},
                "kueue": {"enabled": True},
                "gpu_sharing": {"enabled": True, "replicas": 6},
            },
        ),
        Lab(
            "g4",
            "Kubeflow Trainer v2 (TrainJob, torch-distributed runtime)",
            "rendezvous of two nodes; pods kept on completion, removed with the TrainJob (one node: a demo, not "
            "distributed training)",
            {"training_operator": {"enabled": True}, "gpu_sharing": {"enabled": True, "replicas": 2}},
        ),
        Lab(
            "g5",
            "KServe in Knative mode",
            "replicas following a request-rate ramp (sklearn on CPU or Triton on the L4); cold start from zero;"
            " canary traffic split measured from responses",
            {"kserve": {"enabled": True}, "idle_guard": {"enabled": True}},
        ),
        Lab(
            "g6",
            "vLLM on the L4",
            "TTFT against throughput over max-num-seqs x concurrency, against the bandwidth roofline; the KV cache"
            " as the limit on batch size (PagedAttention); what quantization buys and costs; the request rate it holds"
            " within SLOs; what prefix caching saves; the cold start from zero phase by phase, and what image"
            " streaming, weights in a bucket and a warm pool buy",
            {
                "observability": {"enabled": True},
                "cost_exporter": {"enabled": True},
                "vllm": {"enabled": True},
                "idle_guard": {"enabled": True},
            },
        ),
        Lab(
            "g7",
            "Argo Workflows: train, register, deploy",
            "the artefact flows between steps; what a failed step does to the DAG",
            {"kserve": {"enabled": True}, "argo": {"enabled": True}},
        ),
        Lab(
            "g8",
            "DCGM and spot preemption with checkpoints",
            "GPU utilisation as a number; progress lost with and without checkpointing",
            {"observability": {"enabled": True}, "cost_exporter": {"enabled": True}, "checkpoints": {"enabled": True}},
        ),
    )
}


def with_lab_defaults(raw: dict[str, Any]) -> dict[str, Any]:
    """The stack file's keys laid over its lab's defaults (object keys merged one level deep)."""
    lab = LABS.get(raw.get("lab"))  # an unknown lab is reported by the model, with the allowed names
    if lab is None:
        return dict(raw)
    merged: dict[str, Any] = {k: dict(v) for k, v in lab.turns_on.items()}
    for key, value in raw.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged
