"""The settings that shorten a g6 cold start, planned under mocks and checked against the installed
pulumi-gcp (the Args classes refuse an unknown field) and the Kubernetes schema: image streaming
(the Artifact Registry remote repository of Docker Hub, the GPU pool's gcfs_config), weights from a
bucket (the GCS FUSE add-on, volume, copy Job and Workload Identity binding), each priced; the
defaults unchanged."""

from __future__ import annotations

import pod_security
import pytest
import schemas

from components import model_weights, versions, vllm
from components.cluster import SYSTEM_NODE_SELECTOR
from components.gpu_pool import POOL_PLACEMENT
from stacks.compose_serving import vllm_args
from stacks.config import LabConfig
from stacks.cost_estimate import estimate
from stacks.mockrun import OFFLINE_PROJECT, run_stack
from stacks.stackfile import load_config

G6_VLLM = load_config("g6").vllm.model_dump(exclude={"enabled"}, exclude_defaults=True)
REPO = "gcp:artifactregistry/repository:Repository"
NODE_POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
JOB = "kubernetes:batch/v1:Job"


def _g6(**vllm_keys):
    return run_stack("g6", overrides={"gke-ml-labs:vllm": {**G6_VLLM, **vllm_keys}})


@pytest.fixture(scope="module")
def default():
    return run_stack("g6")


@pytest.fixture(scope="module")
def streaming():
    return _g6(image_streaming=True)


@pytest.fixture(scope="module")
def gcs():
    return _g6(weights="gcs")


def _vllm_pod(run) -> dict:
    return run.one(DEPLOYMENT, "vllm-deployment").inputs["spec"]["template"]


def test_the_defaults_are_unchanged(default):
    assert not default.of_type(REPO) and not default.of_type(JOB)
    assert "gcfsConfig" not in default.one(NODE_POOL, "gpu-pool").inputs["nodeConfig"]
    assert "addonsConfig" not in default.one(CLUSTER).inputs
    pod = _vllm_pod(default)
    assert pod["spec"]["containers"][0]["image"] == versions.VLLM_IMAGE
    assert "annotations" not in pod["metadata"] and "serviceAccountName" not in pod["spec"]
    assert default.outputs["benchmark"]["image_streaming"] is False and default.outputs["benchmark"]["weights"] == "huggingface"


def test_image_streaming_pulls_the_vllm_image_through_a_remote_repository_of_docker_hub(streaming):
    repo = streaming.one(REPO).inputs
    assert (repo["mode"], repo["format"], repo["location"]) == ("REMOTE_REPOSITORY", "DOCKER", "us-central1")
    assert repo["remoteRepositoryConfig"] == {"dockerRepository": {"publicRepository": "DOCKER_HUB"}}
    reader = streaming.one("gcp:artifactregistry/repositoryIamMember:RepositoryIamMember")
    assert reader.inputs["role"] == "roles/artifactregistry.reader"
    assert reader.inputs["member"] == f"serviceAccount:gml-g6-nodes@{OFFLINE_PROJECT}.iam.gserviceaccount.com"
    assert streaming.one(NODE_POOL, "gpu-pool").inputs["nodeConfig"]["gcfsConfig"] == {"enabled": True}
    assert "gcfsConfig" not in streaming.one(NODE_POOL, "gke-system").inputs["nodeConfig"]
    # docker.io/vllm/vllm-openai:TAG, the same image, from the cache in the cluster's region.
    image = _vllm_pod(streaming)["spec"]["containers"][0]["image"]
    assert image == f"us-central1-docker.pkg.dev/{OFFLINE_PROJECT}/gml-g6-dockerhub/vllm/vllm-openai:" + versions.VLLM_IMAGE.rsplit(":")[-1]
    assert streaming.depends_on(streaming.one(DEPLOYMENT, "vllm-deployment"), reader)  # never before it may pull
    services = {r.inputs["service"] for r in streaming.of_type("gcp:projects/service:Service")}
    assert {"containerfilesystem.googleapis.com", "artifactregistry.googleapis.com"} <= services


def test_weights_from_a_bucket_are_mounted_read_only_through_gcs_fuse_as_the_readers_workload_identity(gcs):
    assert gcs.one(CLUSTER).inputs["addonsConfig"] == {"gcsFuseCsiDriverConfig": {"enabled": True}}
    bucket = gcs.one("gcp:storage/bucket:Bucket", "vllm-weights-bucket").inputs["name"]
    pod = _vllm_pod(gcs)
    assert pod["metadata"]["annotations"] == {"gke-gcsfuse/volumes": "true"}
    spec = pod["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == model_weights.VOLUME)
    assert volume["csi"] == {"driver": "gcsfuse.csi.storage.gke.io", "readOnly": True,
                             "volumeAttributes": {"bucketName": bucket, "mountOptions": "implicit-dirs"}}  # fmt: skip
    main = spec["containers"][0]
    assert {"name": "weights", "mountPath": "/weights", "readOnly": True} in main["volumeMounts"]
    model = load_config("g6").vllm.model
    assert main["args"][:2] == [f"--model=/weights/{model}", f"--served-model-name={model}"]
    # The pod's service account is the one whose Workload Identity may read the bucket, and only read it.
    ksa = spec["serviceAccountName"]
    binding = next(r for r in gcs.of_type("gcp:serviceaccount/iAMMember:IAMMember") if f"/{ksa}]" in r.inputs["member"])
    assert binding.inputs == {"member": f"serviceAccount:{OFFLINE_PROJECT}.svc.id.goog[llm/{ksa}]",
                              "role": "roles/iam.workloadIdentityUser", "serviceAccountId": binding.inputs["serviceAccountId"]}  # fmt: skip
    roles = {r.inputs["member"].split("@")[0].removeprefix("serviceAccount:"): r.inputs["role"]
             for r in gcs.of_type("gcp:storage/bucketIAMMember:BucketIAMMember") if r.inputs["bucket"] == bucket}  # fmt: skip
    assert roles == {"gml-g6-wreader": "roles/storage.objectViewer", "gml-g6-wwriter": "roles/storage.objectAdmin"}
    assert gcs.depends_on(binding, gcs.one(CLUSTER))  # the identity pool exists only with the cluster
    # The server starts only once the copy Job has filled the bucket.
    assert gcs.depends_on(gcs.one(DEPLOYMENT, "vllm-deployment"), gcs.one(JOB, "vllm-weights-copy"))
    assert "storage.googleapis.com" in {r.inputs["service"] for r in gcs.of_type("gcp:projects/service:Service")}


def _cfg(**vllm_keys) -> LabConfig:
    return LabConfig(lab="g6", stack="g6", project="proj-1", vllm={"enabled": True, **vllm_keys})


def test_the_gcs_objects_are_valid_kubernetes_and_meet_restricted():
    cfg = _cfg(weights="gcs")
    args = vllm_args(cfg, POOL_PLACEMENT, system_node_selector=SYSTEM_NODE_SELECTOR)
    deployment = vllm.deployment(args, with_token=True)
    weights = model_weights.ModelWeightsArgs(stack_id=args.stack_id, project="proj-1", region="us-central1",
                                             namespace="llm", model=cfg.vllm.model, billing_labels={},
                                             system_node_selector={"gke-ml-labs/pool": "system"}, hf_secret="hf-token")  # fmt: skip
    job = model_weights.copy_job(weights, model_weights.bucket_name(args.stack_id, "proj-1"))
    for obj in (deployment, job):
        schemas.validate_core(obj)
    (pod,) = [pod for _, pod in pod_security.pod_specs(deployment)]
    # Restricted; its one finding is the CPU limit it goes without on purpose (podspec.security.WAIVERS).
    assert pod_security.level(pod_security.findings(pod)) == "restricted"
    assert [f.rule for f in pod_security.findings(pod)] == ["cpu-limit"]
    assert [pod_security.findings(pod) for _, pod in pod_security.pod_specs(job)] == [[]]
    copy = job["spec"]["template"]["spec"]
    assert copy["nodeSelector"] == {"gke-ml-labs/pool": "system"} and copy["serviceAccountName"] == model_weights.WRITER_SA
    assert versions.WEIGHTS_HF_HUB in copy["containers"][0]["command"][2]
    assert {"name": "weights", "mountPath": "/weights", "readOnly": False} in copy["containers"][0]["volumeMounts"]


def test_each_setting_is_priced_in_the_estimate():
    base = estimate(_cfg())
    gcs = estimate(_cfg(weights="gcs"))
    (bucket,) = [line for line in gcs.base if line.item.startswith("weights bucket")]
    # Qwen2.5-1.5B: 1,543,714,304 parameters x 2 bytes = 2.875 GiB at $0.02/GiB-month (0.000027397/GiB-h x 730).
    assert bucket.unit_per_hour == pytest.approx(2.875 * 0.02 / 730, rel=1e-2)
    assert gcs.per_hour_gpu_at_zero == pytest.approx(base.per_hour_gpu_at_zero + bucket.unit_per_hour)
    streaming = estimate(_cfg(image_streaming=True))
    assert any("$0.10/GB-month beyond the first 0.5 GB" in n for n in streaming.notes)
    warm = estimate(LabConfig(lab="g6", stack="g6", project="proj-1", vllm={"enabled": True}, gpu_min_nodes=1))
    assert warm.per_hour_gpu_at_zero == pytest.approx(base.per_hour_gpu_at_zero + warm.gpu_node.unit_per_hour)
    assert any(f"${warm.gpu_node.unit_per_hour * 730:,.0f}/month" in n for n in warm.notes)


def test_a_misspelt_setting_is_refused():
    with pytest.raises(ValueError, match="weights"):
        _cfg(weights="s3")
