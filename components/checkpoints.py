"""Checkpoints for g8's preemptible job: a GCS bucket deleted with the stack, written by a Kubernetes
ServiceAccount through Workload Identity (components.workload_identity: a GCP service account with
objectAdmin on that bucket only, no keys anywhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_gcp as gcp

from components import k8s_objects
from components.namespaces import namespace
from components.naming import k8s_labels, resource_name
from components.workload_identity import BucketIdentity, BucketIdentityArgs
from stacks.config import LabConfig


def bucket_name(cfg: LabConfig) -> str:
    # Bucket names are global: the project id makes this one unique to the user.
    return resource_name(cfg, f"ckpt-{cfg.project}")[:63].rstrip("-")


def account_id(cfg: LabConfig) -> str:
    return resource_name(cfg, "ckpt")[:30].rstrip("-")


def checkpoint_summary(cfg: LabConfig, bucket: pulumi.Input[str]) -> dict[str, Any]:
    c = cfg.checkpoints
    return {
        "bucket": bucket,
        "namespace": c.namespace,
        "service_account": c.service_account,
        "interval_s": c.interval_s,
        "delete_after_days": c.delete_after_days,
    }


@dataclass(frozen=True)
class CheckpointsArgs:
    cfg: LabConfig
    # The GKE cluster: its creation makes the workload identity pool the IAM binding names exist.
    cluster: pulumi.Resource


class Checkpoints(pulumi.ComponentResource):
    def __init__(self, name: str, args: CheckpointsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:checkpoints:Checkpoints", name, None, opts)
        cfg = args.cfg
        c = cfg.checkpoints
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = gcp.storage.Bucket(
            f"{name}-bucket",
            name=bucket_name(cfg),
            project=cfg.project,
            location=cfg.region,
            labels=cfg.billing_labels,
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            # `pulumi destroy` removes the bucket with its objects, and nothing lingers in soft-delete.
            force_destroy=True,
            soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(retention_duration_seconds=0),
            lifecycle_rules=[
                gcp.storage.BucketLifecycleRuleArgs(
                    action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                    condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=c.delete_after_days),
                )
            ],
            opts=child,
        )
        self.namespace = k8s_objects.create(f"{name}-ns", namespace(cfg, c.namespace, "checkpoints"), child)
        # objectAdmin on this bucket only, through Workload Identity: no key exists anywhere.
        self.identity = BucketIdentity(
            f"{name}-identity",
            BucketIdentityArgs(
                project=cfg.project,
                account_id=account_id(cfg),
                bucket=self.bucket.name,
                role="roles/storage.objectAdmin",
                namespace=c.namespace,
                service_account=c.service_account,
                labels=k8s_labels(cfg, "checkpoints"),
                cluster=args.cluster,
                after=[self.namespace],
            ),
            opts=child,
        )
        self.register_outputs({"bucket": self.bucket.name})
