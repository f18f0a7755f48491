"""The NVIDIA driver branch GKE installs on COS GPU nodes for each `gpu_driver_version`, as read from
public reports (GKE's own version-to-driver table could not be read from here).

Only the lower bound matters to the config check: which images a node can run.

Sources:
- DEFAULT 535: rapidsai/deployment#656 (2026-02-04), Google's COS installer at its default installs
  535.274.02.
- LATEST 580: rapidsai/deployment#659 (2026-02-05), GKE's LATEST installs a driver above 580.65; a public
  GKE L4 lab (ai.wmx.dev/benchmarks, 2026) ran on 580.126.20. Older GKE versions installed less with
  LATEST: 575.57.08 on 1.33.2-gke.1111000 (vllm-project/vllm#21979, 2025-07); COS once labelled
  570.133.20 LATEST (cos/overlays/board-overlays af3ca4ea, scripts/gpu_driver_versions).
Not found: the first GKE version whose LATEST is R580. So the check refuses DEFAULT only; it cannot
refuse a release channel or a minimum GKE version from this table.
"""

from __future__ import annotations

# The oldest branch each setting is known to install on the GKE versions current in 2026.
DRIVER_BRANCH = {"DEFAULT": 535, "LATEST": 580}
