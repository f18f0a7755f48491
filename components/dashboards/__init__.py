"""Grafana dashboards as code: one module per dashboard, each a function returning the JSON model.

`all_dashboards()` gives them keyed by file name, ready to be put in ConfigMaps labelled
`grafana_dashboard: "1"` for Grafana's dashboard sidecar.
"""

from __future__ import annotations

from components.dashboards.cost import cost_dashboard
from components.dashboards.gpu import gpu_dashboard
from components.dashboards.kueue import kueue_dashboard
from components.dashboards.serving import serving_dashboard

__all__ = ["all_dashboards", "cost_dashboard", "gpu_dashboard", "kueue_dashboard", "serving_dashboard"]


def all_dashboards() -> dict[str, dict]:
    """File name (`<uid>.json`) -> dashboard JSON model, for every dashboard."""
    models = (gpu_dashboard(), kueue_dashboard(), serving_dashboard(), cost_dashboard())
    return {f"{d['uid']}.json": d for d in models}
