"""make test-cluster: the local control plane and the real Pulumi engine (see conftest.py)."""
