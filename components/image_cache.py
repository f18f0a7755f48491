"""An Artifact Registry remote repository that caches Docker Hub in the cluster's region, and the
node identity's read access to it: the vLLM image then comes from Artifact Registry, which is what
GKE's image streaming needs to stream it.

GKE's image-streaming page (cloud.google.com/kubernetes-engine/docs/how-to/image-streaming, read
2026-12-01): the Container File System API must be enabled and the node pool's gcfs_config on, and
the images must be stored in Artifact Registry; an image from any other registry (Docker Hub, quay.io,
nvcr.io) is pulled whole, as without it. Whether streaming took effect shows in the cold-start
experiment's "image pulled" phase (seconds instead of minutes).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

DOCKER_HUB = "docker.io/"


@dataclass(frozen=True)
class ImageCacheArgs:
    project: str
    region: str  # the cluster's: a regional repository next to the nodes
    repository_id: str
    labels: dict[str, str]
    # Who pulls: the node service account (the kubelet pulls as the node, not as the pod).
    reader_email: pulumi.Input[str]


def cached_image(args: ImageCacheArgs, image: str) -> str:
    """The reference through the cache of a Docker Hub image (docker.io/vllm/vllm-openai:TAG)."""
    if not image.startswith(DOCKER_HUB):
        raise ValueError(f"{image} is not on Docker Hub ({DOCKER_HUB}...): the cache only proxies Docker Hub")
    return f"{args.region}-docker.pkg.dev/{args.project}/{args.repository_id}/{image.removeprefix(DOCKER_HUB)}"


class ImageCache(pulumi.ComponentResource):
    def __init__(self, name: str, args: ImageCacheArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:serving:ImageCache", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
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
            ),
            labels=args.labels,
            opts=child,
        )
        self.reader = gcp.artifactregistry.RepositoryIamMember(
            f"{name}-node-reader",
            project=args.project,
            location=args.region,
            repository=self.repository.repository_id,
            role="roles/artifactregistry.reader",
            member=pulumi.Output.from_input(args.reader_email).apply(lambda e: f"serviceAccount:{e}"),
            opts=child,
        )
        self.register_outputs({"repository": self.repository.name})
