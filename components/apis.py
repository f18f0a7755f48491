"""The Google APIs a stack needs, enabled and left enabled on destroy (other things in the project may use them)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp


@dataclass(frozen=True)
class ProjectApisArgs:
    project: str
    services: list[str]


class ProjectApis(pulumi.ComponentResource):
    def __init__(self, name: str, args: ProjectApisArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:platform:ProjectApis", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.services = [
            gcp.projects.Service(
                f"{name}-{service.split('.')[0]}",
                project=args.project,
                service=service,
                disable_on_destroy=False,
                disable_dependent_services=False,
                opts=child,
            )
            for service in sorted(set(args.services))
        ]
        self.register_outputs({"services": [s.service for s in self.services]})
