"""Machine shapes the labs run on."""

from __future__ import annotations

# L4 GPUs per G2 machine type (FACTS.md; Compute Engine accelerator-optimized machine table).
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
