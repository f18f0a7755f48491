"""Machine shapes the labs run on."""

from __future__ import annotations

# L4 GPUs per G2 machine type (Compute Engine's accelerator-optimized machine table, cloud.google.com/compute/docs/gpus).
G2_L4_COUNT: dict[str, int] = {
    "g2-standard-4": 1,
    "g2-standard-8": 1,
    "g2-standard-12": 1,
    "g2-standard-16": 1,
    "g2-standard-24": 2,
    "g2-standard-32": 1,
    "g2-standard-48": 4,
    "g2-standard-96": 8,
}

# Machine types the system pool may use (controllers, Prometheus, Grafana): E2 standard shapes,
# 4 GiB per vCPU. e2-standard-4 fits the heaviest lab (g5); each is priced in facts/prices.py.
SYSTEM_MACHINE_TYPES: tuple[str, ...] = ("e2-standard-2", "e2-standard-4", "e2-standard-8")
