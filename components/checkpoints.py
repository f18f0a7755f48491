"""Checkpoints for g8's preemptible job: a GCS bucket deleted with the stack, written by a Kubernetes
ServiceAccount through Workload Identity (components.workload_identity: a GCP service account with
objectAdmin on that bucket only, no keys anywhere). On an existing cluster the bucket is the user's own
and only the namespace and the ServiceAccount are made.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import k8s_objects
from components.buckets import unless_own
from components.namespaces import namespace
from components.naming import StackId, k8s_labels, resource_name
from components.workload_identity import BucketIdentity, BucketIdentityArgs


@dataclass(frozen=True)
class CheckpointsArgs:
    stack_id: StackId
    project: str
    region: str  # the bucket's location
    billing_labels: dict[str, str]
    namespace: str  # created here; the job runs in it
    service_account: str  # the Kubernetes ServiceAccount that may write the bucket
    delete_after_days: int  # objects older than this are deleted
    # The GKE cluster, whose creation makes the Workload Identity pool exist; None when it already does.
    cluster: pulumi.Resource | None = None
    # A bucket of the user's own (cluster target existing): nothing of Google is created.
    bucket: str | None = None


def bucket_name(stack_id: StackId, project: str) -> str:
    # Bucket names are global: the project id makes this one unique to the user.
    return resource_name(stack_id, f"ckpt-{project}")[:63].rstrip("-")


def account_id(stack_id: StackId) -> str:
    return resource_name(stack_id, "ckpt")[:30].rstrip("-")


class Checkpoints(pulumi.ComponentResource):
    def __init__(self, name: str, args: CheckpointsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:checkpoints:Checkpoints", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.bucket, self.bucket_name = unless_own(
            args.bucket,
            f"{name}-bucket",
            project=args.project,
            location=args.region,
            labels=args.billing_labels,
            name=bucket_name(args.stack_id, args.project),
            delete_after_days=args.delete_after_days,
            opts=child,
        )
        self.namespace = k8s_objects.create(
            f"{name}-ns", namespace(args.stack_id, args.namespace, "checkpoints", "restricted"), child
        )
        # objectAdmin on this bucket only, through Workload Identity: no key exists anywhere.
        self.identity = BucketIdentity(
            f"{name}-identity",
            BucketIdentityArgs(
                project=args.project,
                account_id=account_id(args.stack_id),
                bucket=self.bucket_name,
                role="roles/storage.objectAdmin",
                namespace=args.namespace,
                service_account=args.service_account,
                labels=k8s_labels(args.stack_id, "checkpoints"),
                cluster=args.cluster,
                after=[self.namespace],
                google_account=args.bucket is None,
            ),
            opts=child,
        )
        self.register_outputs({"bucket": self.bucket_name})
