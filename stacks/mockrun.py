"""Runs the whole program for a `Pulumi.<stack>.yaml` under Pulumi mocks: no CLI, no cloud, no network.

Records every registered resource with its inputs, parent, dependencies and options, in update mode
(mocked cloud-computed outputs) or preview mode (those outputs unknown, as on a first `pulumi preview`).
The tests and the offline plan both use it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from functools import partial
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import settings as pulumi_settings

from stacks import loader
from stacks.stackfile import OFFLINE_PROJECT, REPO, stack_config

PROJECT_NUMBER = "123456789012"  # what getProject answers under the mocks


@dataclass
class Recorded:
    type: str
    name: str
    urn: str
    custom: bool
    inputs: dict[str, Any]
    parent: str
    provider: str
    dependencies: list[str]
    ignore_changes: list[str]
    delete_before_replace: bool
    protect: bool
    retain_on_delete: bool


@dataclass
class MockRun:
    stack: str
    preview: bool
    resources: list[Recorded] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    unknown_outputs: set[str] = field(default_factory=set)  # not known until the cloud answers
    registered_outputs: set[str] = field(default_factory=set)  # URNs that called register_outputs

    def stack_output(self) -> dict[str, Any]:
        """The outputs as `pulumi stack output --json` shows them: the engine exports no top-level output
        whose value is None."""
        return {k: v for k, v in self.outputs.items() if v is not None}

    def of_type(self, type_: str) -> list[Recorded]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Recorded:
        found = [r for r in self.of_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected one {type_} {name or ''}, found {[r.name for r in found]}")
        return found[0]

    def by_urn(self, urn: str) -> Recorded:
        return next(r for r in self.resources if r.urn == urn)

    def ancestors(self, resource: Recorded) -> list[Recorded]:
        chain, urn = [], resource.parent
        urns = {r.urn: r for r in self.resources}
        while urn in urns:
            chain.append(urns[urn])
            urn = urns[urn].parent
        return chain

    def depends_on(self, resource: Recorded, other: Recorded) -> bool:
        """True when `resource` (or a component above it) waits for `other` or a component holding it."""
        holders = {other.urn} | {a.urn for a in self.ancestors(other)}
        return any(
            holders & set(r.dependencies) or any(self._contains(d, other) for d in r.dependencies)
            for r in [resource, *self.ancestors(resource)]
        )

    def _contains(self, component_urn: str, other: Recorded) -> bool:
        return any(a.urn == component_urn for a in self.ancestors(other))


def _computed_outputs(args: pulumi_mocks.MockResourceArgs, project: str) -> dict[str, Any]:
    """What the cloud would fill in after create, for the types whose outputs the program reads."""
    name = args.inputs.get("name", args.name)
    if args.typ == "gcp:container/cluster:Cluster":
        return {
            "endpoint": "203.0.113.10",
            "masterAuth": {"clusterCaCertificate": "TU9DSy1DQQ=="},
            "selfLink": f"https://container.googleapis.com/v1/projects/{project}/zones/x/clusters/{name}",
        }
    if args.typ == "gcp:serviceaccount/account:Account":
        return {"email": f"{args.inputs['accountId']}@{project}.iam.gserviceaccount.com"}
    if args.typ.startswith("gcp:compute/"):
        return {"selfLink": f"https://www.googleapis.com/compute/v1/projects/{project}/x/{name}"}
    if args.typ == "gcp:storage/bucket:Bucket":
        return {"url": f"gs://{name}"}
    if args.typ == "gcp:projects/serviceIdentity:ServiceIdentity":
        # A service agent: service-PROJECT_NUMBER@gcp-sa-SERVICE.iam.gserviceaccount.com (the getProject number below).
        email = f"service-{PROJECT_NUMBER}@gcp-sa-{args.inputs['service'].split('.')[0]}.iam.gserviceaccount.com"
        return {"email": email, "member": f"serviceAccount:{email}"}
    return {}


class _Mocks(pulumi.runtime.Mocks):
    def __init__(self, preview: bool, project: str):
        self.preview = preview
        self.project = project

    def new_resource(self, args: pulumi_mocks.MockResourceArgs):
        state = dict(args.inputs)
        if not self.preview:
            state.update(_computed_outputs(args, self.project))
            if args.typ.startswith("gcp:"):
                state.setdefault("name", args.name)
        return f"{args.name}-id", state

    def call(self, args: pulumi_mocks.MockCallArgs):
        if args.token == "gcp:organizations/getProject:getProject":
            return {"number": PROJECT_NUMBER, "projectId": self.project}
        return {}


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """Records every registration. Pulumi calls the monitor from its executor's worker threads, and
    its MockMonitor gives each such thread an event loop that nothing ever closes: at interpreter exit
    those loops are collected after their sockets, and `BaseEventLoop.__del__` then prints a
    traceback (about one run in ten). This monitor makes those loops itself and closes them at the
    end of the run (`close_thread_loops`)."""

    def __init__(self, mocks: _Mocks, run: MockRun):
        super().__init__(mocks)
        self.run = run
        self._local = threading.local()
        self._loops: list[asyncio.AbstractEventLoop] = []
        self._lock = threading.Lock()

    def _ensure_thread_loop(self) -> None:
        if getattr(self._local, "loop", None) is None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)  # MockMonitor finds it instead of making its own
            self._local.loop = loop
            with self._lock:
                self._loops.append(loop)

    def close_thread_loops(self) -> None:
        """Close the worker threads' loops (after the executor that ran those threads has shut down)."""
        with self._lock:
            loops, self._loops = self._loops, []
        for loop in loops:
            loop.close()

    def Invoke(self, request):
        self._ensure_thread_loop()
        return super().Invoke(request)

    def ReadResource(self, request):
        self._ensure_thread_loop()
        return super().ReadResource(request)

    def RegisterResource(self, request):
        self._ensure_thread_loop()
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.run.resources.append(
                Recorded(
                    type=request.type,
                    name=request.name,
                    urn=response.urn,
                    custom=request.custom,
                    inputs=pulumi.runtime.rpc.deserialize_properties(request.object),
                    parent=request.parent,
                    provider=request.provider,
                    dependencies=list(request.dependencies),
                    ignore_changes=list(request.ignoreChanges),
                    delete_before_replace=request.deleteBeforeReplace,
                    protect=request.protect,
                    retain_on_delete=request.retainOnDelete,
                )
            )
        return response

    def RegisterResourceOutputs(self, request):
        self.run.registered_outputs.add(request.urn)
        return super().RegisterResourceOutputs(request)


def run_stack(
    stack: str,
    *,
    preview: bool = False,
    overrides: dict[str, Any] | None = None,
    secrets: dict[str, str] | None = None,
    directory: Path = REPO,
) -> MockRun:
    """Run the program for one stack file. `overrides` replaces config keys ("gke-ml-labs:zone": ...)."""
    from stacks.program import build

    config, secret_keys = stack_config(stack, directory)
    config.setdefault("gcp:project", OFFLINE_PROJECT)
    for key, value in (overrides or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value if isinstance(value, str) else json.dumps(value)
    for key, value in (secrets or {}).items():
        config[key], secret_keys = value, [*secret_keys, key]

    def program() -> dict[str, Any]:
        cfg, stack_secrets = loader.load()
        return build(cfg, stack_secrets)

    return run_program(program, stack=stack, preview=preview, config=config, secret_keys=secret_keys)


def run_program(
    program: Callable[[], dict[str, Any]],
    *,
    stack: str,
    preview: bool = False,
    config: dict[str, str] | None = None,
    secret_keys: list[str] | None = None,
) -> MockRun:
    """Run `program` (it registers resources and returns the outputs to export) under the mocks, with
    `config` as the engine would pass it; a component's tests run it alone this way."""
    config = config or {}
    run = MockRun(stack=stack, preview=preview)
    # Each run gets its own event loop and its own Stack root (set_mocks reuses an existing root,
    # whose futures belong to the loop of an earlier run; a test's asyncio.run() leaves no loop).
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    pulumi_settings.ROOT.set(None)
    mocks = _Mocks(preview, config.get("gcp:project", OFFLINE_PROJECT))
    monitor = _RecordingMonitor(mocks, run)
    pulumi.runtime.set_mocks(mocks, project=loader.PROJECT, stack=stack, preview=preview, monitor=monitor)
    pulumi.runtime.set_all_config(config, secret_keys or [])

    @pulumi.runtime.test
    def run_under_mocks():
        exported = program()
        run.unknown_outputs.update(exported)
        return pulumi.Output.all(*(pulumi.Output.from_input(v).apply(partial(_known, k)) for k, v in exported.items()))

    def _known(key: str, value: Any) -> None:
        run.unknown_outputs.discard(key)
        run.outputs[key] = value

    try:
        run_under_mocks()
    finally:
        # Join the executor's threads first: only then are their loops idle and safe to close.
        loop.run_until_complete(loop.shutdown_default_executor())
        asyncio.set_event_loop(None)
        loop.close()
        monitor.close_thread_loops()
    return run
