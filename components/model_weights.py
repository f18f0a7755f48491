"""Model weights in a Cloud Storage bucket that vLLM reads through the Cloud Storage FUSE CSI driver,
instead of downloading them from Hugging Face on every cold start. A one-time Job on the system pool
fills the bucket from Hugging Face; each pod reaches the bucket as its own Kubernetes service account
through Workload Identity (the copy may write, the server only read). No key exists anywhere.

GKE injects the FUSE sidecar into a pod annotated `gke-gcsfuse/volumes: "true"` whose volume uses
the driver `gcsfuse.csi.storage.gke.io` (an ephemeral inline CSI volume; the restricted Pod Security
Standard allows csi volumes); the cluster needs the GcsFuseCsiDriver add-on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi

from components import k8s_objects, versions
from components.buckets import lab_bucket
from components.naming import StackId, k8s_labels, resource_name
from components.workload_identity import BucketIdentity, BucketIdentityArgs
from podspec.security import TMP, restricted

MOUNT = "/weights"
VOLUME = "weights"
CSI_DRIVER = "gcsfuse.csi.storage.gke.io"
SIDECAR_ANNOTATION = {"gke-gcsfuse/volumes": "true"}
READER_SA, WRITER_SA = "vllm-weights-reader", "vllm-weights-writer"
COPY_JOB = "vllm-weights-copy"
# The bucket's lifecycle rule: a lab stack lives days; a year bounds what a forgotten bucket costs.
RETENTION_DAYS = 365
# The files vLLM loads: config, tokenizer, safetensors (no .bin/.pt duplicates, no README images).
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]
COPY_TIMEOUT_S = 1800  # `pulumi up` waits for the copy: ~3 GB from Hugging Face takes minutes


def bucket_name(stack_id: StackId, project: str) -> str:
    # Bucket names are global: the project id (globally unique) keeps ours from colliding.
    return f"{resource_name(stack_id)}-{project}-weights"[:63].rstrip("-")


def model_dir(model: str) -> str:
    """Where the model's files sit in the mounted bucket (its Hugging Face id as the folder)."""
    return f"{MOUNT}/{model}"


def fuse_volume(bucket: pulumi.Input[str], read_only: bool) -> dict[str, Any]:
    # implicit-dirs: folders that exist only as object prefixes (how the copy writes them) are listed.
    return {"name": VOLUME, "csi": {"driver": CSI_DRIVER, "readOnly": read_only,
                                    "volumeAttributes": {"bucketName": bucket, "mountOptions": "implicit-dirs"}}}  # fmt: skip


def mount(read_only: bool) -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": MOUNT, "readOnly": read_only}


@dataclass(frozen=True)
class ModelWeightsArgs:
    stack_id: StackId
    project: str
    region: str
    namespace: str
    model: str  # Hugging Face id
    billing_labels: dict[str, str]
    system_node_selector: dict[str, str]  # the copy runs on the system pool, never on a GPU node
    hf_secret: str | None = None  # the Secret holding a Hugging Face token (gated models), if any
    hf_secret_key: str = "token"
    cluster: pulumi.Resource | None = None  # makes the Workload Identity pool exist
    after: list[pulumi.Resource] = field(default_factory=list)  # the namespace (and the token Secret)


def copy_job(a: ModelWeightsArgs, bucket: pulumi.Input[str]) -> dict[str, Any]:
    """The one-time Job: huggingface_hub's snapshot_download into the bucket, mounted read-write."""
    program = (f"from huggingface_hub import snapshot_download; snapshot_download(repo_id={a.model!r}, "
               f"local_dir={model_dir(a.model)!r}, allow_patterns={ALLOW_PATTERNS!r})")  # fmt: skip
    deps = f"{TMP.path}/deps"
    script = (f"set -e; pip install --quiet --no-cache-dir --disable-pip-version-check --target {deps} "
              f"{versions.WEIGHTS_HF_HUB}; PYTHONPATH={deps} python -c \"{program}\"")  # fmt: skip
    env = [{"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"}]
    if a.hf_secret is not None:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": a.hf_secret, "key": a.hf_secret_key}}})
    spec = restricted({
        "serviceAccountName": WRITER_SA,
        "nodeSelector": a.system_node_selector,
        "restartPolicy": "Never",
        "containers": [{
            "name": "copy", "image": versions.PIPELINE_PYTHON_IMAGE, "command": ["sh", "-c", script], "env": env,
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "2Gi"}},
            "volumeMounts": [mount(read_only=False)],
        }],
        "volumes": [fuse_volume(bucket, read_only=False)],
    })  # fmt: skip
    labels = k8s_labels(a.stack_id, "llm-weights")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": COPY_JOB, "namespace": a.namespace, "labels": labels,
                     "annotations": {"pulumi.com/timeoutSeconds": str(COPY_TIMEOUT_S)}},
        "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": labels, "annotations": SIDECAR_ANNOTATION},
                                                 "spec": spec}},
    }  # fmt: skip


class ModelWeights(pulumi.ComponentResource):
    """The bucket, the two identities and the copy; `done` is what a server reading them waits for."""

    def __init__(self, name: str, args: ModelWeightsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:serving:ModelWeights", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.bucket_name = bucket_name(args.stack_id, args.project)
        self.bucket = lab_bucket(
            f"{name}-bucket", project=args.project, location=args.region, labels=args.billing_labels,
            name=self.bucket_name, delete_after_days=RETENTION_DAYS, opts=child,
        )  # fmt: skip

        def identity(suffix: str, ksa: str, role: str) -> BucketIdentity:
            return BucketIdentity(
                f"{name}-{suffix}",
                BucketIdentityArgs(
                    project=args.project, account_id=f"{resource_name(args.stack_id)}-w{suffix}"[:30].rstrip("-"),
                    bucket=self.bucket.name, role=role, namespace=args.namespace, service_account=ksa,
                    labels=k8s_labels(args.stack_id, "llm-weights"), cluster=args.cluster, after=list(args.after),
                ),
                opts=child,
            )  # fmt: skip

        self.writer = identity("writer", WRITER_SA, "roles/storage.objectAdmin")
        self.reader = identity("reader", READER_SA, "roles/storage.objectViewer")
        # `pulumi up` waits for the Job to complete, so the server that depends on it finds the weights.
        self.copy = k8s_objects.create(
            f"{name}-copy", copy_job(args, self.bucket_name),
            pulumi.ResourceOptions(parent=self, depends_on=[*args.after, self.writer]),
        )  # fmt: skip
        self.done: list[pulumi.Resource] = [self.copy, self.reader]
        self.register_outputs({"bucket": self.bucket.name})
