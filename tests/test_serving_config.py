"""Serving config (labs g5-g7): defaults that fit one L4, and bad setups refused before anything exists."""

from __future__ import annotations

import pytest

from stacks.config import LabConfig
from stacks.loader import ConfigError
from stacks.mockrun import run_stack
from stacks.serving_features import SKLEARN_IRIS_V1, SKLEARN_IRIS_V2, gpu_demand

K = "gke-ml-labs"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
ON = {"enabled": True}  # a stack file's key replaces the whole object
TWO_L4 = {f"{K}:gpu_max_nodes": 2}


def lab(**keys) -> LabConfig:
    return LabConfig(lab="g5", stack="t", project="p", **keys)


# (stack, overrides, text the error must contain: the key and what is allowed)
BAD = [
    ("g6", {f"{K}:vllm": {"quantization": "int3"}}, "vllm.quantization: Input should be 'awq', 'awq_marlin'"),
    (
        "g6",
        {f"{K}:vllm": {"max_model_len": 65536}},
        "vllm.max_model_len 65536 is above Qwen/Qwen2.5-1.5B-Instruct's max_position_embeddings (32768), "
        "allowed: 128..32768",
    ),
    (
        "g6",
        {f"{K}:vllm": {"model": "microsoft/Phi-3-mini-4k-instruct", "max_model_len": 8192}},
        "max_position_embeddings (4096)",
    ),
    ("g6", {f"{K}:vllm": {"model": "acme/unknown-7b"}}, "set gke-ml-labs:vllm.max_position_embeddings"),
    ("g6", {f"{K}:vllm": {"dtype": "float32"}}, "vllm.dtype: Input should be 'auto', 'bfloat16' or 'float16'"),
    ("g6", {f"{K}:vllm": {"gpu_memory_utilization": 0.99}}, "vllm.gpu_memory_utilization: Input should be less"),
    ("g6", {f"{K}:vllm": {"max_num_seq": 8}}, "did you mean 'max_num_seqs'?"),
    ("g5", {f"{K}:kserve": {"canary_traffic_percent": 101}}, "kserve.canary_traffic_percent: Input should be less"),
    ("g5", {f"{K}:kserve": {"canary_traffic_percent": -1}}, "kserve.canary_traffic_percent: Input should be greater"),
    ("g5", {f"{K}:kserve": {"canary": "v3"}}, "kserve.canary 'v3' is not one of kserve.versions (v1, v2)"),
    ("g5", {f"{K}:kserve": {"canary": "v1"}}, "kserve.canary 'v1' equals kserve.serving"),
    # Two GPU revisions (a canary or a rollout) of up to 4 replicas each on one L4 shared 6 ways.
    (
        "g5",
        {f"{K}:kserve": {"gpu": True, "max_replicas": 4}},
        "kserve.max_replicas: the serving GPU demand (kserve 8 = 8, counting a GPU predictor as 2 revisions x "
        "max_replicas 4 x 1 GPU since two revisions run during a canary or rollout) exceeds what the pool can hold: "
        "6 nvidia.com/gpu (gpu_max_nodes 1 x 1 GPU(s) per node x 6 sharing replica(s)), so lower "
        "kserve.max_replicas to 3",
    ),
    # Triton always takes a GPU: the same rule, and no sklearn-only hint.
    ("g5", {f"{K}:kserve": {"runtime": "triton", "max_replicas": 5}}, "lower kserve.max_replicas to 3, raise"),
    ("g5", {f"{K}:gpu_sharing": None, f"{K}:kserve": {"runtime": "triton"}}, "1 sharing replica(s)), so raise"),
    ("g5", {f"{K}:kserve": {"scale_metric": "cpu"}}, "kserve.scale_metric: Input should be 'concurrency' or 'rps'"),
    ("g5", {f"{K}:kserve": {"runtime": "tensorrt"}}, "kserve.runtime: Input should be 'sklearn' or 'triton'"),
    ("g5", {f"{K}:kserve": {"runtime": "triton", "model_format": "xgboost"}},
     "kserve.model_format does not apply to kserve.runtime triton"),
    ("g5", {f"{K}:kserve": {"scale_target": 0}}, "kserve.scale_target: Input should be greater than or equal to 1"),
    ("g7", {f"{K}:kserve": {"enabled": False}}, "argo is enabled but gke-ml-labs:kserve is not"),
    # The pinned image is CUDA 13 (driver 580+); GKE's DEFAULT driver is R535.
    (
        "g6",
        {f"{K}:gpu_driver_version": "DEFAULT"},
        "gke-ml-labs:vllm.cuda '13' runs vLLM v0.34.0 on CUDA 13, which needs NVIDIA driver 580+, but "
        "gke-ml-labs:gpu_driver_version DEFAULT installs R535: set gpu_driver_version: LATEST, or vllm.cuda: '12'",
    ),
    # NVIDIA GPU Operator mode: Google's COS installer chooses the driver, under its own key.
    (
        "g6",
        {f"{K}:gpu_driver_version": "INSTALLATION_DISABLED",
         f"{K}:gpu_sharing": {"enabled": True, "mode": "nvidia", "nvidia_driver": "DEFAULT"}},
        "but gke-ml-labs:gpu_sharing.nvidia_driver DEFAULT installs R535: set gpu_sharing.nvidia_driver: LATEST",
    ),
    ("g6", {f"{K}:vllm": {"cuda": "12.4"}}, "vllm.cuda: Input should be '13' or '12'"),
    # Autoscaling (g6 with a pool of 2 L4s, as Pulumi.g6.yaml's header says).
    ("g6", {**TWO_L4, f"{K}:autoscaling": {**ON, "target": 0}}, "autoscaling.target: Input should be greater than 0"),
    (
        "g6",
        {**TWO_L4, f"{K}:autoscaling": {**ON, "max_replicas": 3}},
        "gke-ml-labs:autoscaling.max_replicas 3 is above the L4s the GPU pool can hold: 2 (gpu_max_nodes 2 x 1 per "
        "node, which your L4 quota must cover), and each vLLM replica takes a whole GPU: lower max_replicas to 2 or "
        "raise gke-ml-labs:gpu_max_nodes within the quota",
    ),
    # Time-sharing offers more nvidia.com/gpu, but no more L4s to hold a vLLM replica each.
    ("g6", {f"{K}:autoscaling": ON, f"{K}:gpu_sharing": {"enabled": True}}, "max_replicas 2 is above "
     "the L4s the GPU pool can hold: 1 (gpu_max_nodes 1 x 1 per node"),
    ("g6", {**TWO_L4, f"{K}:autoscaling": {**ON, "min_replicas": 2, "max_replicas": 1}},
     "gke-ml-labs:autoscaling.min_replicas (2) is above max_replicas (1)"),
    ("g6", {**TWO_L4, f"{K}:autoscaling": {**ON, "min_replicas": 0}}, "autoscaling.min_replicas 0: vLLM's queue exists "
     "only inside a running server"),
    ("g6", {**TWO_L4, f"{K}:autoscaling": {**ON, "metric": "gpu_cache_usage_perc"}},
     "autoscaling.metric: Input should be 'num_requests_waiting' or 'num_requests_running'"),
    ("g6", {f"{K}:autoscaling": {**ON, "max_replicas": 1}, f"{K}:observability": {"enabled": False}, f"{K}:cost_exporter": {"enabled": False}},
     "gke-ml-labs:autoscaling.enabled: scales the vLLM server on its own /metrics, read from the in-cluster "
     "Prometheus, so it needs gke-ml-labs:observability.enabled"),
    ("g5", {f"{K}:autoscaling": {"enabled": True}}, "so it needs gke-ml-labs:vllm.enabled and"),
]


@pytest.mark.parametrize("stack,overrides,message", BAD, ids=[m[:40] for _, _, m in BAD])
def test_bad_serving_config_fails_clearly_and_creates_nothing(stack, overrides, message, monkeypatch):
    created = []
    monkeypatch.setattr("stacks.cloud.ProjectApis", lambda *a, **k: created.append(a))
    with pytest.raises(ConfigError) as info:
        run_stack(stack, overrides=overrides)
    text = str(info.value)
    assert text.startswith(f"Pulumi.{stack}.yaml: ") and "nothing was created" in text
    assert message in text
    assert not created


def test_gpu_predictors_fit_once_the_pool_can_hold_two_revisions():
    shared = lab(kserve={"enabled": True, "gpu": True}, gpu_sharing={"enabled": True, "replicas": 2})
    assert gpu_demand(shared.kserve, shared.vllm) == {"kserve": 2}
    two_nodes = lab(kserve={"enabled": True, "gpu": True}, gpu_max_nodes=2)
    assert gpu_demand(two_nodes.kserve, two_nodes.vllm) == {"kserve": 2}
    with pytest.raises(ValueError, match=r"kserve 4 = 4"):
        lab(kserve={"enabled": True, "gpu": True, "max_replicas": 2}, gpu_max_nodes=2)


def test_vllm_and_gpu_predictors_add_up_against_the_pool():
    over = r"kserve 2 \+ vllm 1 = 3, .* exceeds what the pool can hold: 2 nvidia.com/gpu"
    with pytest.raises(ValueError, match=over):
        lab(kserve={"enabled": True, "gpu": True}, vllm={"enabled": True}, gpu_max_nodes=2)
    fits = lab(kserve={"enabled": True, "gpu": True}, vllm={"enabled": True}, gpu_max_nodes=3)
    assert gpu_demand(fits.kserve, fits.vllm) == {"kserve": 2, "vllm": 1}


def test_default_lab_configs_fit_one_l4():
    for name in ("g5", "g6", "g7"):
        cfg = LabConfig.model_validate(
            {"lab": name, "stack": name, "project": "p", "kserve": {"enabled": True}, "vllm": {"enabled": name == "g6"}}
        )
        assert sum(gpu_demand(cfg.kserve, cfg.vllm).values()) <= cfg.max_gpus == 1


def test_canary_serves_the_new_version_beside_the_rolled_out_one():
    plain = lab(kserve={"enabled": True})
    assert plain.kserve.storage_uri() == SKLEARN_IRIS_V1
    canary = lab(kserve={"enabled": True, "canary": "v2", "canary_traffic_percent": 25})
    assert canary.kserve.storage_uri() == SKLEARN_IRIS_V2


def test_a_model_outside_the_catalogue_is_checked_against_the_given_limit():
    ok = lab(vllm={"enabled": True, "model": "acme/tiny", "max_position_embeddings": 2048, "max_model_len": 2048})
    assert ok.vllm.context_limit() == 2048
    with pytest.raises(ValueError, match="above acme/tiny's max_position_embeddings"):
        lab(vllm={"enabled": True, "model": "acme/tiny", "max_position_embeddings": 2048, "max_model_len": 4096})


def test_the_runtime_brings_its_own_model_gpu_and_timeouts_unless_the_stack_file_says_otherwise():
    triton = lab(kserve={"enabled": True, "runtime": "triton"}, gpu_sharing={"enabled": True, "replicas": 2}).kserve
    assert (triton.name, triton.served_model(), triton.gpu) == ("cifar10", "cifar10", True)
    assert triton.storage_uri() == "gs://kfserving-examples/models/torchscript"
    assert triton.versions["v2"] == "gs://kfserving-examples/models/torchscript/cifar10"
    # A GPU node from zero (up to ~15 min) plus a multi-GB image: more than sklearn's 20 min.
    assert (triton.progress_deadline_min, triton.request_timeout_s) == (30, 1800)
    sklearn = lab(kserve={"enabled": True}).kserve
    assert (sklearn.name, sklearn.served_model(), sklearn.gpu, sklearn.progress_deadline_min) == ("iris", "iris", False, 20)
    # What the stack file sets wins over the runtime's defaults.
    mine = lab(kserve={"enabled": True, "runtime": "triton", "name": "net", "gpu": False, "progress_deadline_min": 45,
                       "versions": {"v1": "gs://b/repo"}}).kserve
    assert (mine.name, mine.gpu, mine.progress_deadline_min, mine.storage_uri()) == ("net", False, 45, "gs://b/repo")
    with pytest.raises(ValueError, match="kserve.triton_model does not apply to kserve.runtime sklearn"):
        lab(kserve={"enabled": True, "triton_model": "resnet"})


def test_the_cuda_12_image_serves_where_gke_installs_its_default_driver():
    run = run_stack("g6", overrides={f"{K}:gpu_driver_version": "DEFAULT", f"{K}:vllm": {"cuda": "12"}})
    (server,) = run.one(DEPLOYMENT, "vllm-deployment").inputs["spec"]["template"]["spec"]["containers"]
    assert server["image"] == "docker.io/vllm/vllm-openai:v0.34.0-cu129"
    assert run.outputs["versions"]["vllm"] == "v0.34.0-cu129"
    assert run.outputs["benchmark"]["image"] == server["image"]
