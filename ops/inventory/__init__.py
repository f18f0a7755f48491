"""Everything of gke-ml-labs left in a project, read from the Google APIs (never from Pulumi state, which a
failed destroy can leave wrong), in every zone and region, each priced at list price from facts/prices.py
or said to have no price there. Read-only calls only.

What is ours, by one rule (`Ownership`):
- it carries the label app=gke-ml-labs (every stack sets it: stacks.config.LabConfig.billing_labels);
- its name is one of ours: `gml-<stack>...` (components.naming) or `gke-gml-<stack>-...` (GKE's names for the
  node VMs, boot disks and firewall rules of our clusters);
- GKE tied it to one of our clusters without our label: a PVC disk's `goog-k8s-cluster-name`, or a load
  balancer GKE made for a LoadBalancer Service (kubernetes/cloud-provider-gcp's gce_loadbalancer_naming.go):
  the forwarding rule, target pool, address and health check named after the Service's load balancer
  (`a<uid>`), whose firewall rule `k8s-fw-<that name>` is on our network or whose pool holds our nodes; the
  health check `k8s-<cluster id>-node` whose firewall rule `k8s-<cluster id>-node-http-hc` is on our network.
  Their description is JSON naming the Service (`kubernetes.io/service-name`), which the line quotes.

The kinds listed are those any lab's plan can create (tests/test_ops_inventory.py derives them from every
stack's plan and fails on a Google resource type without a lister here) and those GKE makes for them.
"""

from ops.inventory.listing import LISTERS, NOT_LISTED, PLANNED, Incomplete
from ops.inventory.ours import KINDS, Billable, Ownership, count_by_kind, leftovers, plural

__all__ = ["KINDS", "LISTERS", "NOT_LISTED", "PLANNED", "Billable", "Incomplete", "Ownership", "count_by_kind",
           "leftovers", "plural"]
