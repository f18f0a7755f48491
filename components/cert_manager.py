"""cert-manager's Helm values: KServe's webhooks get their serving certificates from it."""

from __future__ import annotations

from typing import Any

NAMESPACE = "cert-manager"


def values(system_node_selector: dict[str, str]) -> dict[str, Any]:
    """Keys of the pinned chart (v1.21.1), checked against its values.yaml and values.schema.json."""
    system = system_node_selector
    return {
        # The chart owns the CRDs, so they are installed (and upgraded) with the release.
        "crds": {"enabled": True},
        # Controllers on the system nodes: nothing here may keep a GPU node alive.
        "nodeSelector": system,
        "webhook": {"nodeSelector": system},
        "cainjector": {"nodeSelector": system},
        "startupapicheck": {"nodeSelector": system},
    }
