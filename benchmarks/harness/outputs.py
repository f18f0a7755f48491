"""Stack outputs: from `pulumi stack output` or a saved JSON file, and the parts benchmarks read.

Only the keys benchmarks need are modelled; the full contract is what stacks/program.py builds. Unknown
top-level keys are ignored on purpose (the contract grows lab by lab), but each modelled section
forbids unknown keys, so a misspelt field fails loudly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from benchmarks.harness.errors import HarnessError
from benchmarks.harness.pulumi import PulumiStack

M = TypeVar("M", bound=BaseModel)


class Endpoint(BaseModel):
    """outputs.endpoints[name]: a ClusterIP service.

    Unknown keys are ignored: an endpoint may carry more for other readers (KServe's route host).
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    namespace: str
    service: str
    port: int
    path: str = "/"
    protocol: str = Field("http", description="what the service speaks: http, https, openai, ...")

    def server_url(self) -> str:
        """The server's root URL from inside the cluster (the benchmark's client should run there)."""
        scheme = "https" if self.protocol == "https" else "http"  # openai is HTTP underneath
        return f"{scheme}://{self.service}.{self.namespace}.svc.cluster.local:{self.port}"

    def in_cluster_url(self) -> str:
        """The server's URL including the endpoint's path."""
        return self.server_url() + self.path.rstrip("/")


class PrometheusRef(BaseModel):
    """outputs.prometheus: where the stack's Prometheus listens."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    namespace: str
    service: str
    port: int

    def in_cluster_url(self) -> str:
        return f"http://{self.service}.{self.namespace}.svc.cluster.local:{self.port}"


def read_outputs(stack: str | None = None, outputs_file: Path | None = None) -> dict[str, Any]:
    """Outputs of `stack` (via the pulumi CLI) or of a file saved from it."""
    if outputs_file is not None:
        try:
            data = json.loads(outputs_file.read_text())
        except (OSError, ValueError) as exc:
            raise HarnessError(f"cannot read stack outputs from {outputs_file}: {exc}") from exc
        if not isinstance(data, dict):
            raise HarnessError(f"{outputs_file}: stack outputs must be a JSON object, got {type(data).__name__}")
        return data
    if stack is None:
        raise HarnessError("give --stack STACK or --outputs FILE to read stack outputs")
    return PulumiStack(stack).outputs()


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
