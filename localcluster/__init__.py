"""A real Kubernetes control plane on this machine, for the lab's Kubernetes half: built from Go
modules (localcluster.build), started and shaped like a lab's node pools (python -m localcluster)."""
