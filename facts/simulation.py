"""How a cluster says which of its parts are simulated, for every report's "what was real and what was
simulated".

kwok marks a node it simulates with the annotation `kwok.x-k8s.io/node: fake` (kwok's documentation,
"Manage nodes", read 2026-12-03: the annotation its `--manage-nodes-with-annotation-selector` selects).
The project's local control plane (localcluster) also states what it runs, one line per part, in the
ConfigMap `kube-public/gke-ml-labs-local-cluster`: keys `real.<part>` and `simulated.<part>`. A GKE
cluster has neither.
"""

from __future__ import annotations

KWOK_NODE_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
STATEMENT_NAMESPACE = "kube-public"  # readable by every authenticated user, as cluster-info is
STATEMENT_NAME = "gke-ml-labs-local-cluster"
REAL, SIMULATED = "real.", "simulated."
