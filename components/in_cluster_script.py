"""How a Python script of components/scripts/ runs in the cluster: its files in a ConfigMap, laid
out as the `components.scripts` package under APP_DIR (so it imports its helpers exactly as in this
repository, where the tests import it), and a service account whose ClusterRole is all it may do."""

from __future__ import annotations

from pathlib import Path

from components.naming import StackId, k8s_labels

SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
APP_DIR = "/app"


def script_files(*names: str) -> dict[str, str]:
    """ConfigMap data: the scripts and an empty __init__.py for their package layout."""
    return {"__init__.py": "", **{name: (SCRIPTS_DIR / name).read_text() for name in names}}


def package_items(*names: str) -> list[dict[str, str]]:
    """Volume items that lay the ConfigMap out as components/scripts/ under the mount point."""
    return [
        {"key": "__init__.py", "path": "components/__init__.py"},
        {"key": "__init__.py", "path": "components/scripts/__init__.py"},
        *({"key": name, "path": f"components/scripts/{name}"} for name in names),
    ]


def rbac(stack_id: StackId, name: str, ns: str, rules: list[dict], component: str) -> list[dict]:
    """ServiceAccount, ClusterRole with `rules` and its binding: the pod's whole authority."""
    labels = k8s_labels(stack_id, component)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns, "labels": labels}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"gke-ml-labs-{name}", "labels": labels},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"gke-ml-labs-{name}", "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"gke-ml-labs-{name}"},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        },
    ]
