"""Kubernetes pod-spec building blocks that the platform (components/) and the measurement kit
(benchmarks/) share: the settings that make a pod meet the *restricted* Pod Security Standard
(`security`), built once, and the one list of workloads that cannot and why (`security.WAIVERS`).

This package imports nothing else of the project, so any layer may depend on it.
"""
