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


# vCPUs and memory (GiB: Compute Engine's "GB" of machine memory is 2^30 bytes) per machine type, from
# Compute Engine's machine tables: the accelerator-optimized family's G2 series (cloud.google.com/
# compute/docs/accelerator-optimized-machines) and the general-purpose E2 standard shapes, 4 GB per vCPU.
MACHINE_SHAPES: dict[str, tuple[int, int]] = {
    "g2-standard-4": (4, 16),
    "g2-standard-8": (8, 32),
    "g2-standard-12": (12, 48),
    "g2-standard-16": (16, 64),
    "g2-standard-24": (24, 96),
    "g2-standard-32": (32, 128),
    "g2-standard-48": (48, 192),
    "g2-standard-96": (96, 384),
    "e2-standard-2": (2, 8),
    "e2-standard-4": (4, 16),
    "e2-standard-8": (8, 32),
}

# What GKE reserves on a Standard node for the kubelet, the runtime and the OS (cloud.google.com/
# kubernetes-engine/docs/concepts/plan-node-sizes, "Memory and CPU reservations"), as (size of the
# tier, share reserved). Memory tiers in GiB, CPU tiers in cores; the last tier takes the rest.
GKE_MEMORY_RESERVED: tuple[tuple[float, float], ...] = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02))
GKE_CPU_RESERVED: tuple[tuple[float, float], ...] = ((1, 0.06), (1, 0.01), (2, 0.005), (float("inf"), 0.0025))
GKE_EVICTION_THRESHOLD_MIB = 100  # the kubelet's hard eviction threshold, also taken from allocatable memory
