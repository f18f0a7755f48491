"""Bad platform-feature config fails before any resource exists, naming the keys and what is allowed."""

from __future__ import annotations

import pytest

from stacks import mockrun
from stacks.loader import ConfigError
from stacks.mockrun import run_stack

K = "gke-ml-labs"
NVIDIA_DRIVER = {f"{K}:gpu_driver_version": "INSTALLATION_DISABLED"}

BAD = [
    ("g2", {f"{K}:gpu_sharing": {"replicas": 1}}, "gke-ml-labs:gpu_sharing.replicas: Input should be greater than or equal to 2"),
    ("g2", {f"{K}:gpu_sharing": {"replicas": 64}}, "gke-ml-labs:gpu_sharing.replicas: Input should be less than or equal to 48"),
    ("g2", {f"{K}:gpu_sharing": {"mode": ["gke", "nvidia"]}}, "gke-ml-labs:gpu_sharing.mode: Input should be 'gke' or 'nvidia'"),
    # NVIDIA mode with GKE's own driver install still on: both would manage the GPU stack.
    ("g2", {f"{K}:gpu_sharing": {"mode": "nvidia"}}, "GKE's driver install and the NVIDIA GPU Operator exclude each other"),
    # GKE mode with the driver install off: nothing would ever install a driver.
    ("g2", NVIDIA_DRIVER, "gpu_driver_version INSTALLATION_DISABLED leaves GPU nodes without a driver"),
    ("g1", NVIDIA_DRIVER, "unless gke-ml-labs:gpu_sharing is enabled with mode 'nvidia'"),
    ("g2", {f"{K}:gpu_sharing": {"sharing": "time"}}, "gke-ml-labs:gpu_sharing.sharing: unknown key"),
    # Pulumi.g3.yaml: jobs of 3 workers, one shared GPU each; quota 6; one L4 time-shared x6.
    (
        "g3",
        {f"{K}:kueue": {"quota_gpus": 9}, f"{K}:gpu_sharing": {"enabled": True, "replicas": 8}},
        "gke-ml-labs:kueue.quota_gpus 9 admits three jobs of gke-ml-labs:kueue.workers 3 (one shared GPU each): the "
        "lab needs two admitted and the rest waiting, allowed: 6 to 8",
    ),
    (
        "g3",
        {f"{K}:kueue": {"quota_gpus": 5}},
        "gke-ml-labs:kueue.quota_gpus 5 cannot admit two jobs of gke-ml-labs:kueue.workers 3 x 1 GPU: allowed >= 6",
    ),
    (
        "g3",
        {f"{K}:kueue": {"quota_memory_gib": 1}},
        "gke-ml-labs:kueue.quota_memory_gib 1 cannot admit two jobs of gke-ml-labs:kueue.workers 3 x "
        "gke-ml-labs:kueue.worker_memory_gib 0.25: allowed >= 1.5",
    ),
    # The pool must hold the two jobs the quota admits: gpu_max_nodes x GPUs per node x replicas.
    (
        "g3",
        {f"{K}:gpu_sharing": {"enabled": True, "replicas": 4}},
        "gke-ml-labs:kueue.quota_gpus 6 admits 2 jobs of 3 workers (6 shared GPUs), but the GPU pool offers at most 4 "
        "(gpu_max_nodes 1 x 1 GPU(s) per node x 4 sharing replica(s)): admitted jobs would not all schedule",
    ),
    ("g3", {f"{K}:gpu_sharing": {"enabled": False}}, "(6 shared GPUs), but the GPU pool offers at most 1"),
    # ... and not all three, or without Kueue nothing would contend.
    (
        "g3",
        {f"{K}:gpu_sharing": {"enabled": True, "replicas": 9}},
        "gke-ml-labs:gpu_sharing.replicas and gke-ml-labs:gpu_max_nodes: the GPU pool offers at most 9 (gpu_max_nodes 1 "
        "x 1 GPU(s) per node x 9 sharing replica(s)), enough for all 3 jobs of gke-ml-labs:kueue.workers 3 (9)",
    ),
    # The one-pod job shape of earlier versions is refused by name.
    ("g3", {f"{K}:kueue": {"job_gpus": 1}}, "gke-ml-labs:kueue.job_gpus: unknown key"),
    ("g4", {f"{K}:training_operator": {"workers": 3}}, "3 workers x 1 GPU(s) = 3, but the GPU pool offers at most 2"),
    ("g4", {f"{K}:training_operator": {"clean_pod_policy": "Always"}}, "Input should be 'None', 'Running' or 'All'"),
    # A TrainJob has no cleanPodPolicy: asking for one on Trainer v2 would be silently ignored.
    (
        "g4",
        {f"{K}:training_operator": {"clean_pod_policy": "All"}},
        "gke-ml-labs:training_operator.clean_pod_policy 'All' applies to api v1 only: a TrainJob has no "
        "cleanPodPolicy (its pods stay until the TrainJob is deleted): remove it, or set training_operator.api: v1",
    ),
    ("g4", {f"{K}:training_operator": {"api": "v2"}}, "training_operator.api: Input should be 'trainer-v2' or 'v1'"),
    ("g8", {f"{K}:checkpoints": {"delete_after_days": 0}}, "gke-ml-labs:checkpoints.delete_after_days: Input should be greater"),
    ("g1", {f"{K}:observability": {"retention": "2 days"}}, "gke-ml-labs:observability.retention: String should match"),
    ("g1", {f"{K}:tenancy": {"enabled": True}}, "gke-ml-labs:tenancy.tenants is empty"),
    (
        "g1",
        {f"{K}:tenancy": {"enabled": True, "tenants": [{"name": "monitoring", "group": "a@example.com"}]}},
        "gke-ml-labs:tenancy.tenants[0].name 'monitoring' is a namespace the platform uses",
    ),
    (
        "g1",
        {f"{K}:tenancy": {"enabled": True, "tenants": [{"name": "a", "group": "a@x.io"}, {"name": "a", "group": "b@x.io"}]}},
        "names a appear more than once",
    ),
    (
        "g1",
        {f"{K}:tenancy": {"enabled": True, "tenants": [{"name": "a", "group": "team a"}]}},
        "gke-ml-labs:tenancy.tenants[0].group: 'team a' is not a Google group email",
    ),
    (
        "g1",
        {f"{K}:tenancy": {"enabled": True, "tenants": [{"name": "a", "group": "a@x.io", "gpus": 2}]}},
        "gke-ml-labs:tenancy.tenants[0].gpus 2 is above what the GPU pool offers at most 1",
    ),
    (
        "g3",
        {f"{K}:training_operator": {"enabled": True, "namespace": "batch-jobs"}},
        "lab namespaces batch-jobs are used twice",
    ),
]


@pytest.mark.parametrize("stack,overrides,message", BAD, ids=[f"{s}:{m[:50]}" for s, _, m in BAD])
def test_bad_config_fails_with_a_clear_message_and_creates_nothing(stack, overrides, message, monkeypatch):
    runs: list[mockrun.MockRun] = []

    class Recording(mockrun.MockRun):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            runs.append(self)

    monkeypatch.setattr(mockrun, "MockRun", Recording)
    with pytest.raises(ConfigError) as info:
        run_stack(stack, overrides=overrides)
    text = str(info.value)
    assert text.startswith(f"Pulumi.{stack}.yaml: ") and "nothing was created" in text
    assert message in text
    assert runs and runs[-1].resources == []


def test_api_v1_keeps_clean_pod_policy():
    run = run_stack("g4", overrides={f"{K}:training_operator": {"api": "v1", "clean_pod_policy": "All"}})
    assert run.outputs["benchmark"]["training"]["clean_pod_policy"] == "All"


@pytest.mark.parametrize("stack", ["g1", "g2", "g3", "g4", "g8"])
def test_each_lab_file_is_valid_as_shipped(stack):
    # The positive control of the table above: the same harness, no override, resources registered.
    assert run_stack(stack).resources
