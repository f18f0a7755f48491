"""An Artifact Registry remote repository that caches Docker Hub in the cluster's region, and what the
node identity needs to stream images from it: the vLLM image then comes from Artifact Registry, where
GKE's image streaming reads it.

GKE's image-streaming page (cloud.google.com/kubernetes-engine/docs/how-to/image-streaming, Requirements,
read 2026-12-03): the Container File System API must be enabled, the node pool's gcfs_config on, and the
images stored in Artifact Registry (standard or remote repositories) or in public Docker Hub
repositories; other registries (quay.io, nvcr.io, ghcr.io) are pulled whole. We stream through our own
remote repository rather than from Docker Hub directly: the repository sits in the nodes' region, and
its copy serves every later node without another Docker Hub pull. A node pool whose service account is
not the default one needs the Service Usage Consumer role in the project that hosts the image, or GKE
silently falls back to a plain pull (the cold-start experiment says when it did). Its roles: GKE's
default-node role carries autoscaling.sites.writeMetrics, logging.logEntries.create and the
monitoring.metricDescriptors / timeSeries create and list permissions, not serviceusage.services.use
(IAM's predefined roles, roles/container.defaultNodeServiceAccount), which
roles/serviceusage.serviceUsageConsumer grants.

A remote repository pulls from Docker Hub anonymously unless it is given credentials, so Docker Hub's
rate limit on anonymous pulls applies to every cache miss (a first pull, a new tag). `DockerHubLogin`
hands it a Docker Hub user and a Secret Manager secret version holding that user's access token
(`upstream_credentials`, as `gcloud artifacts repositories create --remote-username
--remote-password-secret-version` does); Artifact Registry's service agent reads the secret.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

DOCKER_HUB = "docker.io/"
# What a node streaming images needs besides read access to the repository (see the module docstring).
SERVICE_USAGE_CONSUMER = "roles/serviceusage.serviceUsageConsumer"
SECRET_VERSION = re.compile(r"^projects/(?P<project>[^/]+)/secrets/(?P<secret>[^/]+)/versions/[^/]+$")


@dataclass(frozen=True)
class DockerHubLogin:
    """A Docker Hub user for the remote repository's pulls (Docker Hub counts them against that user)."""

    username: str
    # projects/PROJECT/secrets/SECRET/versions/VERSION: the access token, kept in Secret Manager.
    password_secret_version: str

    def secret(self) -> tuple[str, str]:
        """(project, secret id) of the version."""
        m = SECRET_VERSION.match(self.password_secret_version)
        if m is None:
            raise ValueError(f"{self.password_secret_version!r} is not projects/PROJECT/secrets/SECRET/versions/VERSION")
        return m["project"], m["secret"]


@dataclass(frozen=True)
class ImageCacheArgs:
    project: str
    region: str  # the cluster's: a regional repository next to the nodes
    repository_id: str
    labels: dict[str, str]
    # Who pulls: the node service account (the kubelet pulls as the node, not as the pod).
    reader_email: pulumi.Input[str]
    login: DockerHubLogin | None = None  # None: anonymous pulls from Docker Hub


def cached_image(args: ImageCacheArgs, image: str) -> str:
    """The reference through the cache of a Docker Hub image (docker.io/vllm/vllm-openai:TAG)."""
    if not image.startswith(DOCKER_HUB):
        raise ValueError(f"{image} is not on Docker Hub ({DOCKER_HUB}...): the cache only proxies Docker Hub")
    return f"{args.region}-docker.pkg.dev/{args.project}/{args.repository_id}/{image.removeprefix(DOCKER_HUB)}"


class ImageCache(pulumi.ComponentResource):
    def __init__(self, name: str, args: ImageCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:serving:ImageCache", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        node = pulumi.Output.from_input(args.reader_email).apply(lambda e: f"serviceAccount:{e}")
        credentials, before = None, []
        if args.login is not None:
            secret_project, secret_id = args.login.secret()
            # Artifact Registry reads the token as its service agent, which exists once the API made it.
            agent = gcp.projects.ServiceIdentity(
                f"{name}-registry-agent", project=args.project, service="artifactregistry.googleapis.com", opts=child
            )
            self.secret_reader = gcp.secretmanager.SecretIamMember(
                f"{name}-token-reader",
                project=secret_project,
                secret_id=secret_id,
                role="roles/secretmanager.secretAccessor",
                member=agent.member,
                opts=child,
            )
            before = [self.secret_reader]  # the repository checks its upstream credentials when created
            credentials = gcp.artifactregistry.RepositoryRemoteRepositoryConfigUpstreamCredentialsArgs(
                username_password_credentials=gcp.artifactregistry.RepositoryRemoteRepositoryConfigUpstreamCredentialsUsernamePasswordCredentialsArgs(
                    username=args.login.username, password_secret_version=args.login.password_secret_version
                )
            )  # fmt: skip
        self.repository = gcp.artifactregistry.Repository(
            f"{name}-repo",
            project=args.project,
            location=args.region,
            repository_id=args.repository_id,
            format="DOCKER",
            mode="REMOTE_REPOSITORY",
            description="Pull-through cache of Docker Hub for the GPU nodes (image streaming)",
            remote_repository_config=gcp.artifactregistry.RepositoryRemoteRepositoryConfigArgs(
                docker_repository=gcp.artifactregistry.RepositoryRemoteRepositoryConfigDockerRepositoryArgs(
                    public_repository="DOCKER_HUB"
                ),
                upstream_credentials=credentials,
            ),
            labels=args.labels,
            opts=pulumi.ResourceOptions(parent=self, depends_on=before),
        )
        self.reader = gcp.artifactregistry.RepositoryIamMember(
            f"{name}-node-reader",
            project=args.project,
            location=args.region,
            repository=self.repository.repository_id,
            role="roles/artifactregistry.reader",
            member=node,
            opts=child,
        )
        self.service_usage = gcp.projects.IAMMember(
            f"{name}-node-service-usage", project=args.project, role=SERVICE_USAGE_CONSUMER, member=node, opts=child
        )
        # What a pod streaming from the cache must wait for.
        self.grants: list[pulumi.Resource] = [self.reader, self.service_usage]
        self.register_outputs({"repository": self.repository.name})
