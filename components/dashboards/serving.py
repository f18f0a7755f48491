"""The serving dashboard: vLLM latency (TTFT, ITL, end to end), throughput, load and KV cache.

Metric names are those of vLLM's OpenAI server (vllm/v1/metrics/loggers.py).
Counters are exposed with a `_total` suffix; every series carries `model_name`. Pod and namespace
come from the scrape target (ServiceMonitor or PodMonitoring).
"""

from __future__ import annotations

from components.dashboards.builder import Panel, Query, Row, dashboard, query_variable, quantiles

UID = "gke-ml-labs-serving"

TTFT = "vllm:time_to_first_token_seconds"  # histogram
ITL = "vllm:inter_token_latency_seconds"  # histogram
E2E = "vllm:e2e_request_latency_seconds"  # histogram
QUEUE_TIME = "vllm:request_queue_time_seconds"  # histogram
GENERATION_TOKENS = "vllm:generation_tokens_total"  # counter
PROMPT_TOKENS = "vllm:prompt_tokens_total"  # counter
RUNNING = "vllm:num_requests_running"  # gauge
WAITING = "vllm:num_requests_waiting"  # gauge
KV_CACHE = "vllm:kv_cache_usage_perc"  # gauge, 1 = full
PREEMPTIONS = "vllm:num_preemptions_total"  # counter
VLLM_METRICS = (TTFT, ITL, E2E, QUEUE_TIME, GENERATION_TOKENS, PROMPT_TOKENS, RUNNING, WAITING, KV_CACHE, PREEMPTIONS)

_SELECTED = 'namespace=~"$namespace",model_name=~"$model"'


def _sum(metric: str) -> str:
    return f"sum by (model_name) ({metric}{{{_SELECTED}}})"


def _rate(metric: str) -> str:
    return f"sum by (model_name) (rate({metric}{{{_SELECTED}}}[$__rate_interval]))"


def serving_dashboard() -> dict:
    latency = Row(
        "Latency (server side)",
        (
            Panel("Time to first token", "s", "TTFT p50 and p99, from vLLM's own histogram.",
                  quantiles(TTFT, _SELECTED, "model_name")),
            Panel("Inter-token latency", "s", "Time between output tokens of a request, p50 and p99.",
                  quantiles(ITL, _SELECTED, "model_name")),
            Panel("End-to-end latency", "s", "Request latency from arrival to last token, p50 and p99.",
                  quantiles(E2E, _SELECTED, "model_name")),
            Panel("Queue time", "s", "Time requests wait before they are scheduled, p50 and p99.",
                  quantiles(QUEUE_TIME, _SELECTED, "model_name")),
        ),
    )
    load = Row(
        "Throughput and load",
        (
            Panel(
                "Tokens per second",
                "short",
                "Output (generated) and prompt tokens processed per second.",
                (
                    Query(_rate(GENERATION_TOKENS), "output {{model_name}}"),
                    Query(_rate(PROMPT_TOKENS), "prompt {{model_name}}"),
                ),
            ),
            Panel(
                "Requests running and waiting",
                "short",
                "Requests in the running batch and in the waiting queue (capped by --max-num-seqs).",
                (Query(_sum(RUNNING), "running {{model_name}}"), Query(_sum(WAITING), "waiting {{model_name}}")),
            ),
            Panel(
                "KV cache usage",
                "percentunit",
                "Share of the paged KV cache in use, per server pod; near 1, requests get preempted.",
                (Query(f"max by (model_name, pod) ({KV_CACHE}{{{_SELECTED}}})", "{{model_name}} {{pod}}"),),
            ),
            Panel(
                "Preemptions",
                "short",
                "Requests preempted in each interval because the KV cache ran out.",
                (
                    Query(
                        f"sum by (model_name) (increase({PREEMPTIONS}{{{_SELECTED}}}[$__rate_interval]))",
                        "{{model_name}}",
                    ),
                ),
            ),
        ),
    )
    variables = [
        query_variable("namespace", "Namespace", f"label_values({RUNNING}, namespace)"),
        query_variable("model", "Model", f'label_values({RUNNING}{{namespace=~"$namespace"}}, model_name)'),
    ]
    return dashboard(
        UID,
        "Serving (vLLM)",
        "vLLM server metrics: latency percentiles, token throughput, batch and queue, KV cache.",
        variables,
        [latency, load],
    )
