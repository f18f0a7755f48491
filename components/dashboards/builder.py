"""Small builders for Grafana dashboard JSON: variables, time-series panels, rows and the layout.

Every dashboard module describes its content with these and nothing else, so ids, grid positions,
the datasource wiring and the common look are decided here once.
"""

from __future__ import annotations

from dataclasses import dataclass

TAGS = ["gke-ml-labs"]
# Panels and queries name the datasource through this variable, so the dashboards work with
# whatever Prometheus datasource Grafana has (kube-prometheus-stack provisions one).
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# A Grafana JSON model schema version that current Grafana releases load without migration.
SCHEMA_VERSION = 39
PANEL_WIDTH, PANEL_HEIGHT, GRID_WIDTH = 12, 8, 24


@dataclass(frozen=True)
class Query:
    """One PromQL expression and the legend of the series it returns."""

    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    """A time-series panel: a title, a unit (Grafana unit id), a short description and its queries."""

    title: str
    unit: str
    description: str
    queries: tuple[Query, ...]


@dataclass(frozen=True)
class Row:
    """A titled row of panels, laid out two per line."""

    title: str
    panels: tuple[Panel, ...]


def datasource_variable() -> dict:
    return {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "regex": "",
        "options": [],
    }


def query_variable(name: str, label: str, query: str, *, regex: str = "") -> dict:
    """A multi-valued variable filled from Prometheus (`label_values(...)` or `query_result(...)`).

    "All" is `.*`, so a selector `label=~"$name"` then matches everything, series without the label too.
    """
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": query,
        "definition": query,
        "regex": regex,
        "refresh": 2,  # on time-range change: pods and nodes come and go
        "sort": 1,
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {},
        "hide": 0,
        "options": [],
    }


def _timeseries(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": PANEL_HEIGHT, "w": PANEL_WIDTH, "x": x, "y": y},
        "fieldConfig": {
            "defaults": {"unit": panel.unit, "min": 0, "custom": {"lineWidth": 1, "fillOpacity": 10}},
            "overrides": [],
        },
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {
                "refId": chr(ord("A") + index),
                "datasource": DATASOURCE,
                "expr": query.expr,
                "legendFormat": query.legend,
                "range": True,
            }
            for index, query in enumerate(panel.queries)
        ],
    }


def dashboard(uid: str, title: str, description: str, variables: list[dict], rows: list[Row]) -> dict:
    """The dashboard JSON model, with panel ids and grid positions assigned in reading order."""
    panels: list[dict] = []
    y = 0
    for row in rows:
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": row.title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for index, panel in enumerate(row.panels):
            x = (index % 2) * PANEL_WIDTH
            panels.append(_timeseries(panel, len(panels) + 1, x, y + (index // 2) * PANEL_HEIGHT))
        y += -(-len(row.panels) // 2) * PANEL_HEIGHT
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": list(TAGS),
        "timezone": "browser",
        "editable": True,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "annotations": {"list": []},
        "templating": {"list": [datasource_variable(), *variables]},
        "panels": panels,
    }


QUANTILES = (0.5, 0.99)


def quantiles(metric: str, selector: str, by: str) -> tuple[Query, ...]:
    """p50 and p99 of the Prometheus histogram `metric`, per label `by`, over the rate interval."""
    return tuple(
        Query(
            f"histogram_quantile({q}, sum by (le, {by}) (rate({metric}_bucket{{{selector}}}[$__rate_interval])))",
            f"p{round(q * 100)} {{{{{by}}}}}",
        )
        for q in QUANTILES
    )
