"""The idle guard: a CronJob (on the system pool) that scales to zero or deletes this project's GPU
workloads once they are older than the TTL, with the least RBAC that allows it. The script is
components/scripts/idle_guard.py, mounted from a ConfigMap into a pinned python image."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import k8s_objects
from components.in_cluster_script import APP_DIR, package_items, rbac, script_files
from components.namespaces import namespace
from components.naming import StackId, k8s_labels
from components.versions import SCRIPTS_PYTHON_IMAGE
from podspec.security import restricted

NAMESPACE = "idle-guard"
NAME = "idle-guard"
COMPONENT = "idle-guard"

# Exactly what the guard does: list the workloads and their pods, scale Deployments and StatefulSets
# through their scale subresource, delete Jobs. Nothing else (no get/update/create, no Secrets).
RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["list"]},
    {"apiGroups": ["apps"], "resources": ["deployments/scale", "statefulsets/scale"], "verbs": ["patch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["list", "delete"]},
]
# With KEDA (the `autoscaling` feature): find the ScaledObject scaling a Deployment, and pause it at zero.
KEDA_RULES = [{"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["list", "patch"]}]


@dataclass(frozen=True)
class IdleGuardArgs:
    stack_id: StackId
    ttl_minutes: int  # a GPU workload older than this is scaled to zero or deleted
    schedule: str  # cron schedule of the guard
    system_node_selector: dict[str, str]  # where the guard runs (never a GPU node)
    dry_run: bool = False  # log what would be stopped, stop nothing
    keda: bool = False  # KEDA scales some Deployments: pause their ScaledObjects too


def scripts_config_map(stack_id: StackId) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{NAME}-scripts", "namespace": NAMESPACE, "labels": k8s_labels(stack_id, COMPONENT)},
        "data": script_files("kube_api.py", "idle_guard.py"),
    }


def pod_spec(guard: IdleGuardArgs) -> dict:
    """The guard's pod: restricted, and the one pod here with a token (it lists and scales workloads)."""
    return restricted(
        {
            "serviceAccountName": NAME,
            "restartPolicy": "Never",
            # System nodes, no GPU toleration: the guard must never keep a GPU node alive.
            "nodeSelector": guard.system_node_selector,
            "containers": [
                {
                    "name": NAME,
                    "image": SCRIPTS_PYTHON_IMAGE,
                    "command": ["python", "-m", "components.scripts.idle_guard"],
                    "workingDir": APP_DIR,
                    "env": [
                        {"name": "PYTHONPATH", "value": APP_DIR},
                        {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                        {"name": "TTL_MINUTES", "value": str(guard.ttl_minutes)},
                        {"name": "DRY_RUN", "value": str(guard.dry_run).lower()},
                        {"name": "KEDA", "value": str(guard.keda).lower()},
                    ],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "250m", "memory": "128Mi"}},
                    "volumeMounts": [{"name": "scripts", "mountPath": APP_DIR, "readOnly": True}],
                }
            ],
            "volumes": [
                {
                    "name": "scripts",
                    "configMap": {"name": f"{NAME}-scripts", "items": package_items("kube_api.py", "idle_guard.py")},
                }
            ],
        },
        calls_api=True,
    )


def cron_job(guard: IdleGuardArgs) -> dict:
    labels = k8s_labels(guard.stack_id, COMPONENT)
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "schedule": guard.schedule,
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": 300,
                    "ttlSecondsAfterFinished": 3600,
                    "template": {"metadata": {"labels": labels}, "spec": pod_spec(guard)},
                }
            },
        },
    }


def objects(args: IdleGuardArgs) -> list[dict]:
    """Every object of the guard, in creation order."""
    return [
        namespace(args.stack_id, NAMESPACE, COMPONENT, "restricted"),
        *rbac(args.stack_id, NAME, NAMESPACE, RULES + (KEDA_RULES if args.keda else []), COMPONENT),
        scripts_config_map(args.stack_id),
        cron_job(args),
    ]


class IdleGuard(pulumi.ComponentResource):
    def __init__(self, name: str, args: IdleGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gke-ml-labs:idle_guard:IdleGuard", name, None, opts)
        ns, *rest = objects(args)
        self.namespace = k8s_objects.create(f"{name}-ns", ns, pulumi.ResourceOptions(parent=self))
        after_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        self.objects = [k8s_objects.create(f"{obj['metadata']['name']}-{obj['kind'].lower()}", obj, after_ns) for obj in rest]
        self.register_outputs({"namespace": NAMESPACE, "ttl_minutes": args.ttl_minutes})
