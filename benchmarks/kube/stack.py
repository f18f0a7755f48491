"""What a lab benchmark reads from the stack outputs, checked before anything is created.

The outputs contract is DESIGN.md's; each lab declares the `benchmark` keys it needs as a small
model, and a stack that lacks them (wrong stack, component switched off) fails here with a message
naming the missing keys and the command that builds the right stack.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from benchmarks.harness.outputs import problems
from benchmarks.kube.errors import LabError

P = TypeVar("P", bound="LabParams")


class LabParams(BaseModel):
    """Base of each lab's view of `outputs.benchmark`.

    Extra keys are ignored on purpose: the benchmark block is shared with dashboards and other
    readers, so a key added for them must not break this benchmark.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")


def require_lab(outputs: dict[str, Any], lab: str) -> None:
    got = outputs.get("lab")
    if got != lab:
        raise LabError(
            f"the stack outputs are from lab {got!r}, but the {lab} benchmark needs a stack built with "
            f"`lab: {lab}`: run `pulumi up -s {lab}`, then `python -m benchmarks {lab} --stack {lab}`"
        )


def lab_params(outputs: dict[str, Any], lab: str, model: type[P], section: str | None = None) -> P:
    """The lab's `outputs.benchmark` block (or its `section`, as the platform features nest theirs)
    as `model`, or a LabError naming each missing/bad key."""
    require_lab(outputs, lab)
    raw = outputs.get("benchmark") or {}
    where = "benchmark" + (f".{section}" if section else "")
    if section:
        raw = raw.get(section) or {}
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise LabError(
            f"stack outputs lack what the {lab} benchmark needs ({problems(e, where)}); is the lab's component "
            f"enabled in Pulumi.{lab}.yaml and has `pulumi up -s {lab}` finished?"
        ) from None


def require_output(outputs: dict[str, Any], key: str, lab: str) -> Any:
    """A top-level output the lab needs (e.g. `prometheus`, `artifact_bucket`), or a LabError."""
    value = outputs.get(key)
    if not value:
        raise LabError(f"stack output {key!r} is empty: the {lab} benchmark needs it (is its component enabled?)")
    return value


def gpu_placement(outputs: dict[str, Any]) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The GPU pool's node selector and tolerations, as the stack exported them (an existing cluster's
    GPU nodes may carry no taint: no toleration then)."""
    pool = outputs.get("gpu_pool") or {}
    selector, tolerations = pool.get("node_selector"), pool.get("tolerations")
    if not selector or tolerations is None:
        raise LabError("stack output gpu_pool lacks node_selector/tolerations: the stack is older than this benchmark")
    return dict(selector), [dict(t) for t in tolerations]


def system_selector(outputs: dict[str, Any]) -> dict[str, str]:
    """The node selector of the CPU system pool, where benchmark clients run, as the stack exported it
    ({} on an existing cluster that runs them on any untainted node)."""
    selector = (outputs.get("system_pool") or {}).get("node_selector")
    if selector is None:
        raise LabError("stack output system_pool lacks node_selector: the stack is older than this benchmark")
    return dict(selector)
