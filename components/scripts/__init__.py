"""Scripts that run inside the cluster (mounted from ConfigMaps into a pinned python image, with
this package layout, so they import each other the same way here and there). Standard library
only, except the cost exporter's prometheus_client (installed at container start, pinned)."""
