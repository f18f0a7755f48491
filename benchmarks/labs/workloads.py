"""The labs' workload scripts (benchmarks/labs/scripts/, each run alone in a pod from a ConfigMap) and how a
PyTorch pod of the labs is sized."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.kube.objects import config_map

SCRIPTS = Path(__file__).resolve().parent / "scripts"
# A PyTorch pod (CUDA context, cuBLAS/cuDNN loaded: 1-2 GiB of host memory): small requests, since up
# to five share one 4-vCPU, 16 GB node when the GPU is time-shared, and a memory limit well above use.
PYTORCH_REQUESTS = {"cpu": "250m", "memory": "512Mi"}
PYTORCH_MEMORY_LIMIT = "4Gi"


def script_text(name: str) -> str:
    return (SCRIPTS / name).read_text()


def scripts_config_map(name: str, namespace: str, scripts: list[str]) -> dict[str, Any]:
    """A ConfigMap holding the named scripts from benchmarks/labs/scripts/ (key = file name)."""
    return config_map(name, namespace, {s: script_text(s) for s in scripts})
