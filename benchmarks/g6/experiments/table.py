"""Every g6 experiment, by the name --experiment takes: adding one is a module (benchmarks.g6.experiment's
seam) and a row here."""

from __future__ import annotations

from typing import Any

from benchmarks.g6.experiment import Experiment
from benchmarks.g6.experiments.autoscale_command import Autoscale
from benchmarks.g6.experiments.cold_start_command import ColdStart
from benchmarks.g6.experiments.kv_command import Kv
from benchmarks.g6.experiments.prefix_command import Prefix
from benchmarks.g6.experiments.quant_command import Quant
from benchmarks.g6.experiments.saturation_command import Saturation
from benchmarks.g6.experiments.sweep_command import Sweep

EXPERIMENTS: dict[str, Experiment[Any, Any]] = {
    e.name: e for e in (Sweep(), Kv(), Quant(), ColdStart(), Saturation(), Prefix(), Autoscale())
}
