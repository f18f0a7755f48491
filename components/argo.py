"""Argo Workflows for g7: controller and server (ClusterIP, client auth), a GCS artefact repository
reached through Workload Identity, and the train -> register -> deploy WorkflowTemplate with a
service account that may do exactly what its steps do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import json

import pulumi

from components import k8s_objects, kserve, versions
from components.buckets import unless_own
from components.helm_release import ChartSource, HelmRelease, HelmReleaseArgs
from components.namespaces import namespace
from components.naming import StackId, k8s_labels, resource_name
from components.workload_identity import BucketIdentity, BucketIdentityArgs
from podspec.security import Scratch, container_security_context, hardened_container, pod_security_context

RELEASE = "argo-workflows"
SERVER_SERVICE = f"{RELEASE}-server"
SERVER_PORT = 2746
WORKFLOW_SA = "workflow-runner"
MODEL_SA = "model-reader"
STEPS = Path(__file__).resolve().parent / "pipeline_steps"
# A step's writable place (its root filesystem is read-only): its pip packages, the model artefact
# and the output parameter, which Argo collects from there. scikit-learn and its numpy and scipy take
# about 300 MB installed, twice that while pip unpacks them.
STEP_TMP = Scratch("tmp", "/tmp", "2Gi")
DEPS_DIR = f"{STEP_TMP.path}/deps"
MODEL_DIR = f"{STEP_TMP.path}/model"
STORAGE_URI_FILE = f"{STEP_TMP.path}/storage_uri"
# The workflow's pods run as the user of Argo's executor image (argoexec), as Argo's "Workflow Pod
# Security Context" docs advise: its init and wait containers and the step then own the same files
# (the input artefact the init container writes, the outputs the wait container reads).
ARGO_EXECUTOR_UID = 8737

# What the workflow's pods do with the Kubernetes API, and nothing more: the deploy step gets,
# creates or patches its InferenceService; Argo's executor (emissary) reports each step's outputs
# through WorkflowTaskResults.
WORKFLOW_RULES = [
    {"apiGroups": ["serving.kserve.io"], "resources": ["inferenceservices"], "verbs": ["create", "get", "patch"]},
    {"apiGroups": ["argoproj.io"], "resources": ["workflowtaskresults"], "verbs": ["create", "patch"]},
]
FAIL_STEP_OPTIONS = ["none", "train", "register", "deploy"]


@dataclass(frozen=True)
class ArgoWorkflowsArgs:
    stack_id: StackId
    project: str
    region: str  # the artefact bucket's location
    billing_labels: dict[str, str]
    namespace: str  # controller and server
    workflow_namespace: str  # where the workflows run
    template_name: str  # of the WorkflowTemplate
    model_name: str  # the InferenceService the deploy step creates
    fail_step: str  # default of the workflow parameter that makes one step exit non-zero (FAIL_STEP_OPTIONS)
    retry_limit: int  # retryStrategy of each step
    retry_policy: str
    artifact_retention_days: int  # bucket objects are deleted after this
    system_node_selector: dict[str, str]  # controller, server and the steps (none needs a GPU)
    # The GKE cluster, whose creation makes the Workload Identity pool exist; None when it already does.
    cluster: pulumi.Resource | None = None
    # KServe, which serves the InferenceServices the deploy step creates; None when it already runs.
    kserve: pulumi.Resource | None = None
    # A bucket of the user's own (cluster target existing): no bucket, Google service account or IAM
    # is created, and its owner grants the two ServiceAccounts their roles (components.workload_identity).
    bucket: str | None = None
    charts: ChartSource = "install"


def bucket_name(stack_id: StackId, project: str) -> str:
    # Bucket names are global: the project id (globally unique) keeps ours from colliding.
    return f"{resource_name(stack_id)}-{project}-artifacts"[:63].rstrip("-")


def account_id(stack_id: StackId, suffix: str) -> str:
    return f"{resource_name(stack_id)}-{suffix}"[:30].rstrip("-")


def values(bucket: str, system_node_selector: dict[str, str]) -> dict[str, Any]:
    """Chart values: nothing exposed, client auth only, artefacts in our bucket without any key."""
    system = system_node_selector
    return {
        "fullnameOverride": RELEASE,
        "crds": {"upgradeJob": {"nodeSelector": system}},
        # The chart's containers already run non-root, without escalation or capabilities; with the
        # runtime's seccomp profile on their pods they meet restricted, as the argo namespace enforces.
        "controller": {"nodeSelector": system, "podSecurityContext": pod_security_context(user=None)},
        "server": {
            "serviceType": "ClusterIP",
            # "client": every request carries the caller's own Kubernetes token; "server" would let
            # anyone who reaches the port act as the server's service account.
            "authModes": ["client"],
            "nodeSelector": system,
            "podSecurityContext": pod_security_context(user=None),
        },
        # The init and wait containers Argo adds to every step: restricted under the workflow's pod
        # settings (workflow_template). Their root filesystem stays writable: the wait container
        # writes under /tmp while it saves outputs (read-only root is ours, not restricted's, to ask).
        "executor": {"securityContext": container_security_context(read_only_root=False)},
        # We create the workflow's ServiceAccount and its narrower Role ourselves.
        "workflow": {"serviceAccount": {"create": False}, "rbac": {"create": False}},
        # No serviceAccountKeySecret: the executor authenticates as the pod's Workload Identity.
        "artifactRepository": {"gcs": {"bucket": bucket}},
    }


def workflow_role(a: ArgoWorkflowsArgs) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": WORKFLOW_SA,
            "namespace": a.workflow_namespace,
            "labels": k8s_labels(a.stack_id, "pipeline"),
        },
        "rules": WORKFLOW_RULES,
    }


def workflow_role_binding(a: ArgoWorkflowsArgs) -> dict[str, Any]:
    ns = a.workflow_namespace
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": WORKFLOW_SA, "namespace": ns, "labels": k8s_labels(a.stack_id, "pipeline")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": WORKFLOW_SA},
        "subjects": [{"kind": "ServiceAccount", "name": WORKFLOW_SA, "namespace": ns}],
    }


def _step(a: ArgoWorkflowsArgs, name: str, packages: list[str], env: dict[str, str], **extra: Any) -> dict[str, Any]:
    """One Python step: install its pinned packages into /tmp (the image's site-packages belong to root
    and its root filesystem is read-only), then run its program from pipeline_steps/."""
    program = (STEPS / f"{name}.py").read_text()
    install = f"pip install --quiet --no-cache-dir --disable-pip-version-check --target {DEPS_DIR} {' '.join(packages)}"
    source = f"set -e\n{install}\npython - <<'STEP'\n{program}STEP\n"
    script = {
        "image": versions.PIPELINE_PYTHON_IMAGE,
        "command": ["sh"],
        "source": source,
        "env": [
            {"name": "FAIL_STEP", "value": "{{workflow.parameters.fail_step}}"},
            {"name": "PYTHONPATH", "value": DEPS_DIR},
            *({"name": k, "value": v} for k, v in env.items()),
        ],
        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "name": name,
        "retryStrategy": {"limit": a.retry_limit, "retryPolicy": a.retry_policy},
        "nodeSelector": a.system_node_selector,
        "script": hardened_container(script, scratch=(STEP_TMP,), home=STEP_TMP.path),
        **extra,
    }


def deploy_predictor() -> dict[str, Any]:
    """The predictor the deploy step puts in its InferenceService (the step adds the storageUri):
    restricted like every predictor (components.kserve.predictor), reading the bucket as MODEL_SA."""
    return kserve.predictor(
        {
            "serviceAccountName": MODEL_SA,
            "minReplicas": 0,
            # Small requests: the predictor shares the CPU system pool with the controllers.
            "model": {"modelFormat": {"name": "sklearn"}, "resources": kserve.CPU_PREDICTOR_RESOURCES},
        }
    )


def workflow_template(a: ArgoWorkflowsArgs, bucket: str) -> dict[str, Any]:
    """train -> register -> deploy; `fail_step` names the step that exits non-zero (none by default)."""
    model_artifact = [{"name": "model", "path": MODEL_DIR}]
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {
            "name": a.template_name,
            "namespace": a.workflow_namespace,
            "labels": k8s_labels(a.stack_id, "pipeline"),
        },
        "spec": {
            "serviceAccountName": WORKFLOW_SA,
            # Every step's pod: restricted (the steps' containers: _step; Argo's: values()).
            "securityContext": pod_security_context(ARGO_EXECUTOR_UID),
            "volumes": [STEP_TMP.volume()],
            "entrypoint": "pipeline",
            "arguments": {
                "parameters": [
                    {"name": "fail_step", "value": a.fail_step, "enum": FAIL_STEP_OPTIONS},
                ]
            },
            "templates": [
                {
                    "name": "pipeline",
                    "dag": {
                        "tasks": [
                            {"name": "train", "template": "train"},
                            {
                                "name": "register",
                                "template": "register",
                                "dependencies": ["train"],
                                "arguments": {
                                    "artifacts": [{"name": "model", "from": "{{tasks.train.outputs.artifacts.model}}"}]
                                },
                            },
                            {
                                "name": "deploy",
                                "template": "deploy",
                                "dependencies": ["register"],
                                "arguments": {
                                    "parameters": [
                                        {
                                            "name": "storage_uri",
                                            "value": "{{tasks.register.outputs.parameters.storage_uri}}",
                                        }
                                    ]
                                },
                            },
                        ]
                    },
                },
                _step(
                    a,
                    "train",
                    [versions.PIPELINE_SKLEARN],
                    {"MODEL_DIR": MODEL_DIR},
                    # The model directory goes to the artefact repository (our bucket) between steps.
                    outputs={"artifacts": model_artifact},
                ),
                _step(
                    a,
                    "register",
                    [versions.PIPELINE_GCS],
                    {
                        "MODEL_DIR": MODEL_DIR,
                        "BUCKET": bucket,
                        "MODEL_NAME": a.model_name,
                        "WORKFLOW_NAME": "{{workflow.name}}",
                        "STORAGE_URI_FILE": STORAGE_URI_FILE,
                    },
                    inputs={"artifacts": model_artifact},
                    outputs={"parameters": [{"name": "storage_uri", "valueFrom": {"path": STORAGE_URI_FILE}}]},
                ),
                _step(
                    a,
                    "deploy",
                    [versions.PIPELINE_KUBERNETES],
                    {
                        "MODEL_NAME": a.model_name,
                        "NAMESPACE": a.workflow_namespace,
                        "PREDICTOR": json.dumps(deploy_predictor(), sort_keys=True),
                        "STORAGE_URI": "{{inputs.parameters.storage_uri}}",
                    },
                    inputs={"parameters": [{"name": "storage_uri"}]},
                ),
            ],
        },
    }


def endpoint(a: ArgoWorkflowsArgs) -> dict[str, Any]:
    return {"namespace": a.namespace, "service": SERVER_SERVICE, "port": SERVER_PORT, "path": "/", "protocol": "http"}


def benchmark(a: ArgoWorkflowsArgs, bucket: pulumi.Input[str]) -> dict[str, Any]:
    return {
        "workflow_template": a.template_name,
        "workflow_namespace": a.workflow_namespace,
        "bucket": bucket,
        "model_name": a.model_name,
        "fail_step": a.fail_step,
        "fail_step_options": FAIL_STEP_OPTIONS,
        "retry": {"limit": a.retry_limit, "policy": a.retry_policy},
    }


class ArgoWorkflows(pulumi.ComponentResource):
    def __init__(self, name: str, args: ArgoWorkflowsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:argo:ArgoWorkflows", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        labels = k8s_labels(args.stack_id, "pipeline")
        kserve = [args.kserve] if args.kserve is not None else []
        bucket = args.bucket or bucket_name(args.stack_id, args.project)
        self.bucket, self.bucket_name = unless_own(
            args.bucket,
            f"{name}-artifacts",
            project=args.project,
            location=args.region,
            labels=args.billing_labels,
            name=bucket,
            delete_after_days=args.artifact_retention_days,
            opts=child,
        )
        self.release = HelmRelease(
            RELEASE,
            HelmReleaseArgs(
                chart=versions.ARGO_WORKFLOWS,
                namespace=args.namespace,
                values=values(bucket, args.system_node_selector),
                labels=labels,
                # Controller, server and the CRD job meet restricted with the pod settings values() adds.
                pod_security="restricted",
                source=args.charts,
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.bucket] if self.bucket is not None else []),
        )
        # The deploy step creates InferenceServices Pulumi does not manage, and the benchmark's Workflows
        # and their pods live here too. Waiting for KServe and Argo here makes destroy delete this
        # namespace while both controllers still run and clear their finalizers; otherwise the
        # namespace would hang in Terminating.
        self.namespace = k8s_objects.create(
            f"{name}-workflows-ns",
            # Restricted: the steps (workflow_template), Argo's executor containers (values) and the
            # predictor pods of the InferenceService the deploy step creates all meet it.
            namespace(args.stack_id, args.workflow_namespace, "pipeline", "restricted"),
            pulumi.ResourceOptions(parent=self, depends_on=[*kserve, self.release]),
        )

        def identity(suffix: str, ksa: str, role: str) -> BucketIdentity:
            return BucketIdentity(
                f"{name}-{suffix}",
                BucketIdentityArgs(
                    project=args.project,
                    account_id=account_id(args.stack_id, suffix),
                    bucket=self.bucket_name,
                    role=role,
                    namespace=args.workflow_namespace,
                    service_account=ksa,
                    labels=labels,
                    cluster=args.cluster,
                    after=[self.namespace],
                    google_account=args.bucket is None,
                ),
                opts=child,
            )

        # The workflow writes artefacts and the registry entry; the model server only reads them.
        self.workflow_identity = identity("wf", WORKFLOW_SA, "roles/storage.objectAdmin")
        self.model_identity = identity("model", MODEL_SA, "roles/storage.objectViewer")
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        self.role = k8s_objects.create(f"{name}-role", workflow_role(args), in_ns)
        self.role_binding = k8s_objects.create(f"{name}-rolebinding", workflow_role_binding(args), in_ns)
        self.template = k8s_objects.create(
            f"{name}-template",
            workflow_template(args, bucket),
            pulumi.ResourceOptions(parent=self, depends_on=[self.release, self.namespace, *kserve]),
        )
        self.register_outputs({"bucket": self.bucket_name})
