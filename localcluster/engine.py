"""The real Pulumi engine for the cluster tests and `make g3-local`: the CLI built from Go modules (on
PATH), a file:// backend in a temporary folder, passphrase secrets, and the Kubernetes provider found
on PATH as an ambient plugin.

The program runs inline through the Automation API: the Python language host, pulumi-language-python,
cannot be built here (the Go module proxy does not serve its module,
github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3, at any version), so the SDK's own
language server runs the program in this process and the CLI connects to it (`pulumi up --client`).
The engine, the provider and the SDK are the real ones."""

from __future__ import annotations

from pathlib import Path

from pulumi import automation as auto

PASSPHRASE = "local-cluster"  # encrypts the throwaway stacks' secrets


def stack(name: str, project: str, program: auto.PulumiFn, state: Path) -> auto.Stack:
    """A fresh stack of an inline program, its state and plugins kept under `state`."""
    backend = f"file://{state / 'backend'}"
    (state / "backend").mkdir(parents=True, exist_ok=True)
    options = auto.LocalWorkspaceOptions(
        work_dir=str(state),
        pulumi_home=str(state / "home"),
        env_vars={"PULUMI_CONFIG_PASSPHRASE": PASSPHRASE, "PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_BACKEND_URL": backend},
        project_settings=auto.ProjectSettings(name=project, runtime="python", backend=auto.ProjectBackend(url=backend)),
        secrets_provider="passphrase",
    )
    return auto.create_or_select_stack(stack_name=name, project_name=project, program=program, opts=options)
