"""Results on disk: one folder per run, result.json with a schema version, save/load round trip; the meta
every result carries, with what really ran (its evidence, read by benchmarks.kube.evidence)."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchmarks.harness.errors import HarnessError

RESULT_FILE = "result.json"
_VERSION = "0.1.0"

R = TypeVar("R", bound=BaseModel)
# What meta.evidence says where no cluster was read, and for a run against the simulator.
UNKNOWN = "not known"
SIMULATOR = "simulator"


class Evidence(BaseModel):
    """The keys of `meta.evidence`. `image_digests`: each image as asked (its tag) -> the imageID the
    node pulled (`status.containerStatuses[].imageID`). `spot`: "spot" or "on-demand"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gke_version: str
    node_image: str
    driver_version: str
    cuda_version: str
    image_digests: dict[str, str] | str
    machine_type: str
    zone: str
    spot: str
    config_sha256: str
    make_cost: str
    first_time_problems: list[str] | str

    @classmethod
    def offline(cls, why: str = UNKNOWN) -> Evidence:
        """Every field `why`: "simulator" for a simulated run, "not known" where no cluster was read."""
        return cls(**{name: why for name in cls.model_fields})


class Simulation(BaseModel):
    """`meta.simulation`, only for a cluster that simulates some of itself (kwok's nodes, the local control
    plane): what of the run was real and what simulated, in the cluster's own words and its nodes'."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    real: list[str]
    simulated: list[str]


class RunMeta(BaseModel):
    """What every lab's result records about the run itself."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lab: str
    target: str
    model: str
    started_at: datetime
    finished_at: datetime
    client_host_cpus: int
    tool_version: str
    command: list[str]
    server_versions: dict[str, str] = {}
    errors: list[str] = []
    # What really ran (GKE, driver, CUDA, digests, node, what failed first time); a result written
    # before the field existed reads as "not known".
    evidence: Evidence = Evidence.offline()
    # What was real and what simulated, for a cluster that simulates part of itself (kwok); absent from the
    # file of a run on GKE, which is all real.
    simulation: Simulation | None = Field(None, exclude_if=lambda v: v is None)


def tool_version() -> str:
    """The kit's version, with the git commit when run from a checkout."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        sha = ""
    return f"{_VERSION}+g{sha}" if sha else _VERSION


def client_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def new_run_folder(out: Path, lab: str, started_at: datetime) -> Path:
    """out/<lab>-<UTC stamp>/, with a numeric suffix if a run in the same minute exists."""
    base = out / f"{lab}-{started_at.strftime('%Y%m%dT%H%MZ')}"
    folder, n = base, 1
    while folder.exists():
        n += 1
        folder = base.with_name(f"{base.name}-{n}")
    try:
        folder.mkdir(parents=True)
    except OSError as exc:
        raise HarnessError(f"cannot create the results folder {folder}: {exc}") from exc
    return folder


def save_result(result: BaseModel, folder: Path) -> Path:
    path = folder / RESULT_FILE
    path.write_text(result.model_dump_json(indent=2) + "\n")
    return path


def load_result(model: type[R], path: Path) -> R:
    """A saved result (a result.json or the folder holding it) as `model`."""
    if path.is_dir():
        path = path / RESULT_FILE
    try:
        return model.model_validate_json(path.read_text())
    except OSError as exc:
        raise HarnessError(f"cannot read {path}: {exc}") from exc
    except ValidationError as exc:
        raise HarnessError(f"{path} is not a {model.__name__} (schema changed?): {exc}") from exc
