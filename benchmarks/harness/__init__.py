"""Shared harness of the lab benchmarks: stack outputs (their models are the contract's, stacks/outputs.py),
pulumi calls, results folders, progress, reports."""

from benchmarks.harness.errors import HarnessError
from benchmarks.harness.outputs import endpoint, read_outputs, section
from benchmarks.harness.progress import RunProgress
from benchmarks.harness.pulumi import PulumiStack
from benchmarks.harness.results import RunMeta, load_result, new_run_folder, save_result, tool_version
from stacks.outputs import Endpoint, ServiceRef

__all__ = [
    "Endpoint",
    "HarnessError",
    "PulumiStack",
    "RunMeta",
    "RunProgress",
    "ServiceRef",
    "endpoint",
    "load_result",
    "new_run_folder",
    "read_outputs",
    "save_result",
    "section",
    "tool_version",
]
