"""Stack outputs: from `pulumi stack output` or a saved JSON file, checked against the contract the program
writes (stacks/outputs.py: a key renamed there fails here, naming it), and the parts benchmarks read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from benchmarks.harness.errors import HarnessError
from benchmarks.harness.pulumi import PulumiStack
from stacks.outputs import Endpoint, StackOutputs

M = TypeVar("M", bound=BaseModel)


def read_outputs(stack: str | None = None, outputs_file: Path | None = None) -> dict[str, Any]:
    """Outputs of `stack` (via the pulumi CLI) or of a file saved from it, once they fit the contract."""
    where = f"{outputs_file}" if outputs_file is not None else f"stack {stack}"
    if outputs_file is not None:
        try:
            data = json.loads(outputs_file.read_text())
        except (OSError, ValueError) as exc:
            raise HarnessError(f"cannot read stack outputs from {outputs_file}: {exc}") from exc
        if not isinstance(data, dict):
            raise HarnessError(f"{outputs_file}: stack outputs must be a JSON object, got {type(data).__name__}")
    elif stack is None:
        raise HarnessError("give --stack STACK or --outputs FILE to read stack outputs")
    else:
        data = PulumiStack(stack).outputs()
    try:
        StackOutputs.model_validate(data)
    except ValidationError as exc:
        raise HarnessError(f"{where}: the stack outputs do not fit the contract this kit reads (stacks/outputs.py; "
                           f"a stack deployed by another version of the project?): {problems(exc, 'outputs')}") from None
    return data


def section(outputs: dict[str, Any], key: str, model: type[M], lab: str) -> M:
    """outputs[key] parsed as `model`, with an error naming the key and what the lab needs."""
    if key not in outputs:
        raise HarnessError(
            f"stack outputs lack `{key}`, which lab {lab} needs; present: {sorted(outputs)}. "
            f"Is this the {lab} stack, and has `pulumi up` finished?"
        )
    try:
        return model.model_validate(outputs[key])
    except ValidationError as exc:
        raise HarnessError(f"stack outputs `{key}` do not fit lab {lab}: {problems(exc, key)}") from None


def endpoint(outputs: dict[str, Any], name: str, lab: str) -> Endpoint:
    endpoints = outputs.get("endpoints")
    if not isinstance(endpoints, dict) or name not in endpoints:
        known = sorted(endpoints) if isinstance(endpoints, dict) else []
        raise HarnessError(f"stack outputs have no endpoints.{name}, which lab {lab} needs; endpoints: {known}")
    try:
        return Endpoint.model_validate(endpoints[name])
    except ValidationError as exc:
        raise HarnessError(f"stack outputs endpoints.{name} do not fit lab {lab}: {problems(exc, f'endpoints.{name}')}") from None


def problems(exc: ValidationError, where: str) -> str:
    """A validation error on one line: each bad key under `where` and what was wrong with it."""
    return "; ".join(f"{'.'.join([where, *map(str, e['loc'])])}: {e['msg']}" for e in exc.errors())
