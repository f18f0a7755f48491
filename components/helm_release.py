"""One Helm release of a pinned chart into its own namespace: the single component every chart uses.

`helm.v3.Release` (not `helm.v4.Chart`) because it waits until the release's workloads are ready,
so custom resources that depend on it are created only once their CRDs and webhooks serve.

With source `upstream-crds` (no network: `cluster.charts`) the chart is not installed: the CRDs of its
pinned version from the upstream lock stand in for it (components.upstream_crds), so what depends on
the release still waits for the CRDs it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from components.upstream_crds import UpstreamCrds
from components.versions import Chart
from podspec.security import PodSecurityLevel, pod_security_labels

# install: charts and manifests from their repositories; upstream-crds: their locked CRDs instead.
ChartSource = Literal["install", "upstream-crds"]


@dataclass(frozen=True)
class HelmReleaseArgs:
    chart: Chart
    namespace: str
    values: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    create_namespace: bool = True
    # What the namespace it creates enforces: the strictest Pod Security level every pod of the chart
    # (with our values) meets. Required when it creates one.
    pod_security: PodSecurityLevel | None = None
    # Minutes, not seconds: a first install pulls images onto a node the autoscaler may still be adding.
    timeout_s: int = 900
    skip_crds: bool = False
    source: ChartSource = "install"
    # The lock folders of the CRDs of the subcharts these values install (a dependency's, as Trainer's
    # JobSet), which with source `upstream-crds` stand in for them beside the chart's own.
    subchart_crds: tuple[str, ...] = ()


class HelmRelease(pulumi.ComponentResource):
    def __init__(self, name: str, args: HelmReleaseArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:platform:HelmRelease", name, None, opts)
        depends: list[pulumi.Resource] = []
        if args.create_namespace:
            if args.pod_security is None:
                raise ValueError(f"HelmRelease {name}: creating namespace {args.namespace} needs its pod_security level")
            self.namespace = k8s.core.v1.Namespace(
                f"{name}-ns",
                metadata=k8s.meta.v1.ObjectMetaArgs(
                    name=args.namespace, labels={**args.labels, **pod_security_labels(args.pod_security)}
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            depends.append(self.namespace)
        if args.source == "upstream-crds":
            # CRDs are cluster-scoped: they need nothing first, not even the namespace.
            crds = args.chart.crds + args.subchart_crds
            self.release: pulumi.Resource = UpstreamCrds(f"{name}-crds", crds, opts=pulumi.ResourceOptions(parent=self))
            self.register_outputs({})
        else:
            release = self._release(name, args, depends)
            self.release = release
            self.register_outputs({"status": release.status})

    def _release(self, name: str, args: HelmReleaseArgs, depends: list[pulumi.Resource]) -> k8s.helm.v3.Release:
        chart = args.chart
        return k8s.helm.v3.Release(
            name,
            name=name,
            chart=f"{chart.repo}/{chart.name}" if chart.is_oci else chart.name,
            repository_opts=None if chart.is_oci else k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
            version=chart.version,
            namespace=args.namespace,
            values=args.values,
            skip_crds=args.skip_crds,
            timeout=args.timeout_s,
            # A failed first install is rolled back rather than left half-applied.
            atomic=True,
            cleanup_on_fail=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=depends),
        )
