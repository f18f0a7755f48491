"""The Kueue dashboard: pending and admitted workloads, quota use against nominal quota, admission wait.

Metric and label names are those of Kueue v0.19.2 (pkg/metrics/metrics.go at tag v0.19.2 of
kubernetes-sigs/kueue). Kueue's metrics are scraped only if the chart's `enablePrometheus` is on.
"""

from __future__ import annotations

from components.dashboards.builder import Panel, Query, Row, dashboard, query_variable, quantiles

UID = "gke-ml-labs-kueue"

PENDING = "kueue_pending_workloads"  # gauge: cluster_queue, status (active | inadmissible)
ADMITTED_ACTIVE = "kueue_admitted_active_workloads"  # gauge: cluster_queue
ADMITTED_TOTAL = "kueue_admitted_workloads_total"  # counter: cluster_queue, priority_class
EVICTED_TOTAL = "kueue_evicted_workloads_total"  # counter: cluster_queue, reason, underlying_cause
USAGE = "kueue_cluster_queue_resource_usage"  # gauge: cohort, cluster_queue, flavor, resource
NOMINAL = "kueue_cluster_queue_nominal_quota"  # gauge: cohort, cluster_queue, flavor, resource
ADMISSION_WAIT = "kueue_admission_wait_time_seconds"  # histogram: cluster_queue, priority_class
KUEUE_METRICS = (PENDING, ADMITTED_ACTIVE, ADMITTED_TOTAL, EVICTED_TOTAL, USAGE, NOMINAL, ADMISSION_WAIT)

# With several Kueue replicas every one reports (replica_role leader, follower or standalone);
# followers' copies would double the sums.
_QUEUES = 'cluster_queue=~"$cluster_queue",replica_role!="follower"'
_RESOURCES = _QUEUES + ',resource=~"$resource"'


def _per_resource(metric: str) -> str:
    return f"sum by (cluster_queue, flavor, resource) ({metric}{{{_RESOURCES}}})"


def kueue_dashboard() -> dict:
    workloads = Row(
        "Workloads",
        (
            Panel(
                "Pending workloads",
                "short",
                "Workloads waiting per ClusterQueue: active (in the queue) or inadmissible (a failed "
                "attempt, retried when conditions change).",
                (Query(f"sum by (cluster_queue, status) ({PENDING}{{{_QUEUES}}})", "{{cluster_queue}} {{status}}"),),
            ),
            Panel(
                "Admitted workloads",
                "short",
                "Admitted workloads still running, per ClusterQueue.",
                (Query(f"sum by (cluster_queue) ({ADMITTED_ACTIVE}{{{_QUEUES}}})", "{{cluster_queue}}"),),
            ),
            Panel(
                "Admissions and evictions",
                "short",
                "Workloads admitted and evicted in each interval; evictions by reason (Preempted, "
                "PodsReadyTimeout, ...).",
                (
                    Query(
                        f"sum by (cluster_queue) (increase({ADMITTED_TOTAL}{{{_QUEUES}}}[$__rate_interval]))",
                        "admitted {{cluster_queue}}",
                    ),
                    Query(
                        f"sum by (cluster_queue, reason) (increase({EVICTED_TOTAL}{{{_QUEUES}}}[$__rate_interval]))",
                        "evicted {{cluster_queue}} {{reason}}",
                    ),
                ),
            ),
            Panel(
                "Admission wait time",
                "s",
                "Time from creation (or requeue) to admission, p50 and p99 per ClusterQueue.",
                quantiles(ADMISSION_WAIT, _QUEUES, "cluster_queue"),
            ),
        ),
    )
    quota = Row(
        "Quota",
        (
            Panel(
                "Quota used / nominal",
                "percentunit",
                "Usage as a fraction of nominal quota per flavor and resource; above 1 means borrowing.",
                (
                    Query(
                        f"{_per_resource(USAGE)} / {_per_resource(NOMINAL)}",
                        "{{cluster_queue}} {{resource}} ({{flavor}})",
                    ),
                ),
            ),
            Panel(
                "Quota used and nominal",
                "short",
                "Absolute usage and nominal quota per flavor and resource (CPU in cores, memory in bytes, "
                "GPUs in devices): pick one resource to compare like with like.",
                (
                    Query(_per_resource(USAGE), "used {{cluster_queue}} {{resource}}"),
                    Query(_per_resource(NOMINAL), "nominal {{cluster_queue}} {{resource}}"),
                ),
            ),
        ),
    )
    variables = [
        query_variable("cluster_queue", "ClusterQueue", f"label_values({NOMINAL}, cluster_queue)"),
        query_variable("resource", "Resource", f"label_values({NOMINAL}, resource)"),
    ]
    return dashboard(
        UID,
        "Kueue",
        "Kueue admission: what waits, what runs, how much of the quota it uses and how long admission takes.",
        variables,
        [workloads, quota],
    )
