"""cert-manager's Helm values: KServe's webhooks get their serving certificates from it."""

from __future__ import annotations

from typing import Any

from components.cluster import POOL_LABEL

NAMESPACE = "cert-manager"
_SYSTEM = {POOL_LABEL: "system"}


def values() -> dict[str, Any]:
    """Keys of the pinned chart (v1.21.1), checked against its values.yaml and values.schema.json."""
    return {
        # The chart owns the CRDs, so they are installed (and upgraded) with the release.
        "crds": {"enabled": True},
        # Controllers on the system pool: nothing here may keep a GPU node alive.
        "nodeSelector": _SYSTEM,
        "webhook": {"nodeSelector": _SYSTEM},
        "cainjector": {"nodeSelector": _SYSTEM},
        "startupapicheck": {"nodeSelector": _SYSTEM},
    }
