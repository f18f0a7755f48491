"""A Kubernetes ServiceAccount that acts as a GCP service account holding one role on one bucket,
through Workload Identity: no key exists anywhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_gcp as gcp

from components import k8s_objects

WI_ANNOTATION = "iam.gke.io/gcp-service-account"


def service_account(name: str, namespace: str, gcp_email: pulumi.Input[str], labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": {WI_ANNOTATION: gcp_email},
        },
    }


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


class BucketIdentity(pulumi.ComponentResource):
    def __init__(self, name: str, args: BucketIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:workload_identity:BucketIdentity", name, None, opts)
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
        self.service_account = k8s_objects.create(
            f"{name}-ksa",
            service_account(args.service_account, args.namespace, self.gcp_account.email, args.labels),
            pulumi.ResourceOptions(parent=self, depends_on=list(args.after)),
        )
        self.register_outputs({"email": self.gcp_account.email})
