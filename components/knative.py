"""Knative Serving (core, with its CRDs) and Kourier as its networking layer: what KServe's Knative
mode runs on.

Installed from the release manifests (no chart exists) with `yaml.v2.ConfigFile`, in order core ->
Kourier. serving-core.yaml already carries every CRD of serving-crds.yaml (both are built from
config/core/ by Knative's hack/generate-yamls.sh), and pulumi-kubernetes (>= 4.29) refuses to create an
object that already exists, so applying both files would fail on the second copy of each CRD; within
one ConfigFile the provider orders CRDs before the objects of their kinds.

Our settings go into the manifests' own objects through a `transforms` callback (unlike
`transformations` it reaches the children of a packaged component such as ConfigFile v2,
pulumi-kubernetes#3047) rather than ConfigMapPatch:
- the ConfigMaps exist with our data from their first apply, so controllers start configured and
  no second field manager ever fights the ConfigFile over them on later `up`s;
- the Kourier gateway Service is created as ClusterIP. Kourier has no config key for its Service
  type (config-kourier has none; its README edits the Service), and a patch applied after the
  manifest would let GCP create a public load balancer for a while first;
- the activator's and webhook's PodDisruptionBudgets allow one eviction (PDB_PATCH);
- the activator's terminationGracePeriodSeconds is raised with max-revision-timeout-seconds, as
  Knative's own config-defaults asks ("If this value is increased, the activator's
  terminationGracePeriodSeconds should also be increased"; 600 in 1.21.1's activator.yaml): a request
  held through a GPU cold start is not cut when the activator pod is drained.

Offline (`cluster.charts: upstream-crds`) neither manifest is applied and nothing stands in: no resource
of ours is of a Knative kind (KServe's InferenceService needs only KServe's CRD), and the upstream lock
holds no file of Knative 1.21.1.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import versions
from components.helm_release import ChartSource

SERVING_NAMESPACE = "knative-serving"
KOURIER_NAMESPACE = "kourier-system"
KOURIER_GATEWAY = "kourier"  # the gateway Service; kourier-internal serves cluster-local routes
KOURIER_INGRESS_CLASS = "kourier.ingress.networking.knative.dev"
# Knative Serving 1.21.1 ships these PDBs with `minAvailable: 80%` over the single replica its HPAs
# start with (config/core/deployments/{activator,webhook}-hpa.yaml): 80% of one rounds up to one, so
# no eviction is ever allowed, the cluster autoscaler can never drain their node (a second system
# node stays up, and is billed) and node upgrades stall. One pod at a time may go: while the activator
# restarts on another node, requests to a revision scaled to zero wait or fail, which a lab accepts.
DISRUPTION_BUDGETS = ("activator-pdb", "webhook-pdb")
PDB_PATCH = {"maxUnavailable": 1}
ACTIVATOR = "activator"


@dataclass(frozen=True)
class KnativeArgs:
    domain: str
    progress_deadline_min: int
    request_timeout_s: int
    scale_to_zero_grace_s: int
    charts: ChartSource = "install"


def config_maps(args: KnativeArgs) -> dict[str, dict[str, str]]:
    """Data we set in Knative's ConfigMaps (namespace knative-serving), by ConfigMap name."""
    timeout = str(args.request_timeout_s)
    return {
        # A revision whose pods wait for a GPU node from zero must not be marked failed before the
        # node is ready (Knative's default deadline is 600s).
        "config-deployment": {
            "progress-deadline": f"{args.progress_deadline_min}m",
            # Knative resolves image tags to digests by asking the registry; nvcr.io (Triton) wants
            # credentials for that, so its tags are used as they are. The first three are Knative's
            # default list (pkg/deployment/config.go), which this key replaces.
            "registries-skipping-tag-resolving": "kind.local,ko.local,dev.local,nvcr.io",
        },
        "config-autoscaler": {
            "enable-scale-to-zero": "true",
            "scale-to-zero-grace-period": f"{args.scale_to_zero_grace_s}s",
        },
        # A request that wakes a revision from zero is held by the activator until a pod is ready:
        # allow the cold start of a GPU node (the default ceiling is 600s).
        "config-defaults": {"revision-timeout-seconds": timeout, "max-revision-timeout-seconds": timeout},
        "config-network": {"ingress-class": KOURIER_INGRESS_CLASS},
        "config-domain": {args.domain: ""},
        # GPU predictors need a node selector and the GPU toleration in their pod spec, and every
        # predictor carries pod-level security settings (components.kserve.predictor): Knative
        # rejects all three unless these flags are on.
        "config-features": {
            "kubernetes.podspec-nodeselector": "enabled",
            "kubernetes.podspec-tolerations": "enabled",
            "kubernetes.podspec-securitycontext": "enabled",
        },
    }


def patch_object(obj: dict[str, Any], settings: dict[str, dict[str, str]]) -> dict[str, Any] | None:
    """The manifest object with our settings applied, or None when we leave it as it is."""
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if kind == "ConfigMap" and namespace == SERVING_NAMESPACE and name in settings:
        patched = copy.deepcopy(obj)
        patched["data"] = {**(obj.get("data") or {}), **settings[name]}
        return patched
    if kind == "Service" and namespace == KOURIER_NAMESPACE and name == KOURIER_GATEWAY:
        patched = copy.deepcopy(obj)
        patched["spec"] = {**(obj.get("spec") or {}), "type": "ClusterIP"}
        return patched
    if kind == "Deployment" and namespace == SERVING_NAMESPACE and name == ACTIVATOR:
        patched = copy.deepcopy(obj)
        pod = patched.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
        longest = int(settings["config-defaults"]["max-revision-timeout-seconds"])
        pod["terminationGracePeriodSeconds"] = max(int(pod.get("terminationGracePeriodSeconds") or 0), longest)
        return patched
    if kind == "PodDisruptionBudget" and namespace == SERVING_NAMESPACE and name in DISRUPTION_BUDGETS:
        patched = copy.deepcopy(obj)
        # A PDB takes minAvailable or maxUnavailable, never both.
        spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "minAvailable"}
        patched["spec"] = {**spec, **PDB_PATCH}
        return patched
    return None


def manifest_transform(settings: dict[str, dict[str, str]]):
    kinds = {
        "kubernetes:core/v1:ConfigMap": "ConfigMap",
        "kubernetes:core/v1:Service": "Service",
        "kubernetes:policy/v1:PodDisruptionBudget": "PodDisruptionBudget",
        "kubernetes:apps/v1:Deployment": "Deployment",
    }

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        kind = kinds.get(args.type_)
        if kind is None:
            return None
        # The engine may or may not hand apiVersion/kind over among the props: give back what came in.
        had_kind = "kind" in args.props
        patched = patch_object({**args.props, "kind": kind}, settings)
        if patched is None:
            return None
        if not had_kind:
            patched.pop("kind")
        return pulumi.ResourceTransformResult(props=patched, opts=args.opts)

    return transform


class KnativeServing(pulumi.ComponentResource):
    def __init__(self, name: str, args: KnativeArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:knative:KnativeServing", name, None, opts)
        installed = args.charts == "install"
        if installed:
            self._apply(name, config_maps(args))
        self.gateway = {"namespace": KOURIER_NAMESPACE, "service": KOURIER_GATEWAY, "port": 80}
        # The namespaces the manifests make (none offline).
        self.namespaces = [SERVING_NAMESPACE, KOURIER_NAMESPACE] if installed else []
        self.register_outputs({"version": versions.KNATIVE_SERVING_VERSION})

    def _apply(self, name: str, settings: dict[str, dict[str, str]]) -> None:
        self.core = k8s.yaml.v2.ConfigFile(
            f"{name}-core",
            file=versions.KNATIVE_SERVING_CORE,
            opts=pulumi.ResourceOptions(parent=self, transforms=[manifest_transform(settings)]),
        )
        # Kourier's controller reads config-network from knative-serving: after core.
        self.kourier = k8s.yaml.v2.ConfigFile(
            f"{name}-kourier",
            file=versions.KOURIER,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.core], transforms=[manifest_transform(settings)]),
        )
