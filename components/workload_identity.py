"""A Kubernetes ServiceAccount that acts as a GCP service account holding one role on one bucket,
through Workload Identity: no key exists anywhere. On a bucket of the user's own (cluster target
existing) only the ServiceAccount is made: its owner grants the ServiceAccount's own principal the role
(Workload Identity Federation for GKE), and nothing of Google is created."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp

from components import k8s_objects

WI_ANNOTATION = "iam.gke.io/gcp-service-account"


def service_account(
    name: str, namespace: str, gcp_email: pulumi.Input[str] | None, labels: dict[str, str]
) -> dict[str, Any]:
    """The ServiceAccount, acting as `gcp_email` (None: as its own principal)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if gcp_email is not None:
        metadata["annotations"] = {WI_ANNOTATION: gcp_email}
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata}



def wi_member(project: str, namespace: str, name: str) -> str:
    return f"serviceAccount:{project}.svc.id.goog[{namespace}/{name}]"


@dataclass(frozen=True)
class BucketIdentityArgs:
    project: str
    account_id: str  # the GCP service account id (6-30 characters)
    bucket: pulumi.Input[str]
    role: str  # on the bucket only, e.g. roles/storage.objectViewer
    namespace: str
    service_account: str
    labels: dict[str, str]
    # The Workload Identity pool exists only once the cluster does ("Identity Pool does not exist"):
    # the GKE cluster, or None when it already exists.
    cluster: pulumi.Resource | None = None
    # What the ServiceAccount needs first, e.g. its Namespace.
    after: list[pulumi.Resource] = field(default_factory=list)
    # False: the bucket is the user's own; only the ServiceAccount is made (see the module's doc).
    google_account: bool = True


class BucketIdentity(pulumi.ComponentResource):
    def __init__(self, name: str, args: BucketIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:workload_identity:BucketIdentity", name, None, opts)
        email = self._google_account(name, args) if args.google_account else None
        self.service_account = k8s_objects.create(
            f"{name}-ksa",
            service_account(args.service_account, args.namespace, email, args.labels),
            pulumi.ResourceOptions(parent=self, depends_on=list(args.after)),
        )
        self.register_outputs({"email": email} if email is not None else {})

    def _google_account(self, name: str, args: BucketIdentityArgs) -> pulumi.Output[str]:
        """The Google service account with the role on the bucket, which the ServiceAccount may act as."""
        child = pulumi.ResourceOptions(parent=self)
        self.gcp_account = gcp.serviceaccount.Account(
            f"{name}-gsa",
            project=args.project,
            account_id=args.account_id,
            display_name=f"{args.namespace}/{args.service_account} (Workload Identity)",
            opts=child,
        )
        self.bucket_role = gcp.storage.BucketIAMMember(
            f"{name}-bucket-role",
            bucket=args.bucket,
            role=args.role,
            member=self.gcp_account.email.apply(lambda e: f"serviceAccount:{e}"),
            opts=child,
        )
        self.binding = gcp.serviceaccount.IAMMember(
            f"{name}-wi",
            service_account_id=self.gcp_account.name,
            role="roles/iam.workloadIdentityUser",
            member=wi_member(args.project, args.namespace, args.service_account),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[args.cluster] if args.cluster is not None else []),
        )
        return self.gcp_account.email
