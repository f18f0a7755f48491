"""The cost dashboard: what the lab spends per hour now (per namespace, pod and node, and the part
of each node no pod asks for), beside GPU utilisation, so idle GPU spend is visible at a glance.

Metrics are the cost exporter's (components/scripts/cost_exporter.py), all in USD per hour.
"""

from __future__ import annotations

from components.dashboards.builder import Panel, Query, Row, dashboard, query_variable
from components.dashboards.gpu import GPU_UTIL, dcgm

UID = "gke-ml-labs-cost"

NODE_COST = "gke_ml_labs_node_cost_usd_per_hour"
NODE_IDLE = "gke_ml_labs_node_idle_cost_usd_per_hour"
POD_COST = "gke_ml_labs_pod_cost_usd_per_hour"
NAMESPACE_COST = "gke_ml_labs_namespace_cost_usd_per_hour"
UNPRICED = "gke_ml_labs_unpriced_nodes"
# Every metric the dashboard reads; the exporter's tests check it emits each of them.
COST_METRICS = (NODE_COST, NODE_IDLE, POD_COST, NAMESPACE_COST, UNPRICED)


def cost_dashboard() -> dict:
    now = Row(
        "Spend now",
        (
            Panel(
                "Cluster cost per hour",
                "currencyUSD",
                "List price of every node now; the idle part is what no pod requests.",
                (
                    Query(f"sum({NODE_COST})", "all nodes"),
                    Query(f"sum({NODE_IDLE})", "not requested by any pod"),
                ),
            ),
            Panel(
                "Cost per namespace",
                "currencyUSD",
                "Sum of the pods' shares of their nodes (GPU, CPU, memory requested), per hour.",
                (Query(f'sum by (namespace) ({NAMESPACE_COST}{{namespace=~"$namespace"}})', "{{namespace}}"),),
            ),
            Panel(
                "Node cost and idle part",
                "currencyUSD",
                "Per node: its price per hour and the part no pod requests.",
                (
                    Query(f'sum by (node, machine_type) ({NODE_COST}{{node=~"$node"}})', "{{node}} ({{machine_type}})"),
                    Query(f'sum by (node) ({NODE_IDLE}{{node=~"$node"}})', "idle {{node}}"),
                ),
            ),
            Panel(
                "Spent over the time range",
                "currencyUSD",
                "Average hourly cost over the dashboard's range times its length in hours.",
                (Query(f"sum(avg_over_time({NODE_COST}[$__range])) * $__range_s / 3600", "cluster"),),
            ),
        ),
    )
    gpus = Row(
        "GPU spend beside GPU use",
        (
            Panel(
                "GPU utilisation",
                "percent",
                "DCGM kernel-active time per GPU: a GPU node that costs money at 0% is idle spend.",
                (Query(f"max by (node, gpu) ({dcgm(GPU_UTIL)})", "{{node}} GPU {{gpu}}"),),
            ),
            Panel(
                "GPU cost per pod",
                "currencyUSD",
                "Each pod's share of its node's GPU price per hour.",
                (
                    Query(
                        f'sum by (namespace, pod) ({POD_COST}{{resource="gpu",namespace=~"$namespace",node=~"$node"}})',
                        "{{namespace}}/{{pod}}",
                    ),
                ),
            ),
            Panel(
                "Top pods by cost",
                "currencyUSD",
                "The 10 most expensive pods per hour (GPU, CPU and memory shares).",
                (Query(f'topk(10, sum by (namespace, pod) ({POD_COST}{{namespace=~"$namespace"}}))', "{{namespace}}/{{pod}}"),),
            ),
            Panel(
                "Nodes without a price",
                "short",
                "Nodes whose machine type is not in facts/prices.py: their cost is missing above.",
                (Query(f"max({UNPRICED})", "unpriced nodes"),),
            ),
        ),
    )
    variables = [
        query_variable("node", "Node", f"label_values({NODE_COST}, node)"),
        query_variable("namespace", "Namespace", f"label_values({NAMESPACE_COST}, namespace)"),
    ]
    return dashboard(UID, "Cost (list price)", "What the lab costs per hour now, and where it goes.", variables, [now, gpus])
