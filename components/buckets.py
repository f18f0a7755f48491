"""A lab's GCS bucket: private, labelled for billing, emptied by a lifecycle rule and deleted with the
stack (no soft-delete retention), so nothing outlives `pulumi destroy` or keeps costing. On an existing
cluster a feature uses the user's own bucket instead, and none is created (`unless_own`)."""

from __future__ import annotations

import pulumi
import pulumi_gcp as gcp


def lab_bucket(
    resource: str,
    *,
    project: str,
    location: str,
    labels: dict[str, str],
    name: str,
    delete_after_days: int,
    opts: pulumi.ResourceOptions,
) -> gcp.storage.Bucket:
    return gcp.storage.Bucket(
        resource,
        name=name,
        project=project,
        location=location,
        labels=labels,
        uniform_bucket_level_access=True,
        public_access_prevention="enforced",
        force_destroy=True,  # `pulumi destroy` removes the bucket with its objects
        soft_delete_policy=gcp.storage.BucketSoftDeletePolicyArgs(retention_duration_seconds=0),
        lifecycle_rules=[
            gcp.storage.BucketLifecycleRuleArgs(
                action=gcp.storage.BucketLifecycleRuleActionArgs(type="Delete"),
                condition=gcp.storage.BucketLifecycleRuleConditionArgs(age=delete_after_days),
            )
        ],
        opts=opts,
    )


def unless_own(own: str | None, resource: str, **bucket) -> tuple[gcp.storage.Bucket | None, pulumi.Input[str]]:
    """The lab's bucket (lab_bucket's arguments) and its name; given the user's own bucket, none and that name."""
    if own is not None:
        return None, own
    created = lab_bucket(resource, **bucket)
    return created, created.name
