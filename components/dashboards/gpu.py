"""The GPU dashboard: DCGM utilisation, SM and DRAM activity, framebuffer and power, per node and pod.

Metric and label names are those of the pinned dcgm-exporter (4.5.3-4.8.2, its counter lists are
locked in tests/upstream.lock.tsv): series carry `gpu`, `UUID`, `modelName`, the node name in
`Hostname` (renamed `hostname` in exporter 4.6, which the GPU Operator's pin already uses) and, with
the exporter's Kubernetes mapping (always on in its chart), `namespace`, `pod` and `container` of
the pod holding the GPU. Those last labels only survive scraping if the ServiceMonitor keeps them
(`serviceMonitor.honorLabels: true` in the chart); otherwise Prometheus renames them `exported_*`.
"""

from __future__ import annotations

from components.dashboards.builder import Panel, Query, Row, dashboard, query_variable

UID = "gke-ml-labs-gpu"

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# Not enabled in either counters list of the pinned exporter (default-counters.csv and
# dcp-metrics-included.csv both carry it commented out): the exporter needs a custom list
# (chart value `customMetrics`) that enables it, or this panel stays empty.
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
DRAM_ACTIVE = "DCGM_FI_PROF_DRAM_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
POWER = "DCGM_FI_DEV_POWER_USAGE"
# Every DCGM field the dashboard reads; the exporter's counters list must enable them all.
DCGM_METRICS = (GPU_UTIL, SM_ACTIVE, DRAM_ACTIVE, FB_USED, FB_FREE, POWER)
# Those the pinned exporter's counters lists leave commented out: enable them through `customMetrics`.
DCGM_OFF_BY_DEFAULT = (SM_ACTIVE,)

HOST_LABELS = ("Hostname", "hostname")  # exporter < 4.6 and >= 4.6
_POD_FILTER = 'namespace=~"$namespace",pod=~"$pod",pod!=""'  # pod="" is a GPU no pod holds


def dcgm(metric: str, pod_filter: str = "") -> str:
    """`metric` on the selected nodes, with the node name in a `node` label for either exporter version."""
    extra = f",{pod_filter}" if pod_filter else ""
    selected = " or ".join(f'{metric}{{{label}=~"$node"{extra}}}' for label in HOST_LABELS)
    expr = f"({selected})"
    for label in HOST_LABELS:
        # label_replace leaves a series alone where the source label is absent.
        expr = f'label_replace({expr}, "node", "$1", "{label}", "(.+)")'
    return expr


def _per_gpu(metric: str) -> str:
    # A time-shared GPU is reported once per pod holding it, with the same device value: max, not sum.
    return f"max by (node, gpu) ({dcgm(metric)})"


def _per_pod(metric: str) -> str:
    return f"max by (namespace, pod) ({dcgm(metric, _POD_FILTER)})"


_GPU_LEGEND = "{{node}} GPU {{gpu}}"
_POD_LEGEND = "{{namespace}}/{{pod}}"
_SHARED_NOTE = " A pod on a time-shared GPU sees the whole device's value."


def gpu_dashboard() -> dict:
    per_node = Row(
        "Per node and GPU",
        (
            Panel(
                "GPU utilisation",
                "percent",
                "Share of time a kernel was running (DCGM_FI_DEV_GPU_UTIL). 100% at batch 1 is normal: "
                "read SM and DRAM activity to tell compute-bound from bandwidth-bound.",
                (Query(_per_gpu(GPU_UTIL), _GPU_LEGEND),),
            ),
            Panel(
                "SM active",
                "percentunit",
                "Fraction of cycles with at least one warp on an SM (DCGM_FI_PROF_SM_ACTIVE).",
                (Query(_per_gpu(SM_ACTIVE), _GPU_LEGEND),),
            ),
            Panel(
                "DRAM active",
                "percentunit",
                "Fraction of cycles the memory interface is busy (DCGM_FI_PROF_DRAM_ACTIVE): "
                "near 1 means bandwidth-bound, as LLM decode usually is.",
                (Query(_per_gpu(DRAM_ACTIVE), _GPU_LEGEND),),
            ),
            Panel(
                "Framebuffer",
                "mbytes",
                "GPU memory used and free (MiB).",
                (
                    Query(_per_gpu(FB_USED), "used " + _GPU_LEGEND),
                    Query(_per_gpu(FB_FREE), "free " + _GPU_LEGEND),
                ),
            ),
            Panel("Power", "watt", "Board power draw.", (Query(_per_gpu(POWER), _GPU_LEGEND),)),
        ),
    )
    per_pod = Row(
        "Per pod",
        (
            Panel("GPU utilisation by pod", "percent", "Kernel-active time." + _SHARED_NOTE,
                  (Query(_per_pod(GPU_UTIL), _POD_LEGEND),)),
            Panel("SM active by pod", "percentunit", "SM activity." + _SHARED_NOTE,
                  (Query(_per_pod(SM_ACTIVE), _POD_LEGEND),)),
            Panel("DRAM active by pod", "percentunit", "Memory-interface activity." + _SHARED_NOTE,
                  (Query(_per_pod(DRAM_ACTIVE), _POD_LEGEND),)),
            Panel("Framebuffer used by pod", "mbytes", "GPU memory used (MiB)." + _SHARED_NOTE,
                  (Query(_per_pod(FB_USED), _POD_LEGEND),)),
        ),
    )
    variables = [
        # One variable for both spellings of the node label: the regex takes whichever is present.
        query_variable(
            "node",
            "Node",
            f"query_result(count by ({', '.join(HOST_LABELS)}) ({GPU_UTIL}))",
            regex='/[Hh]ostname="([^"]+)"/',
        ),
        query_variable("namespace", "Namespace", f"label_values({GPU_UTIL}, namespace)"),
        query_variable("pod", "Pod", f'label_values({GPU_UTIL}{{namespace=~"$namespace"}}, pod)'),
    ]
    return dashboard(
        UID,
        "GPU (DCGM)",
        "NVIDIA GPU activity from dcgm-exporter, per node/GPU and per pod holding a GPU.",
        variables,
        [per_node, per_pod],
    )
