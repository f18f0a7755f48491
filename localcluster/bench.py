"""A lab's benchmark, unchanged, against the local control plane: `make g3-local OUT=results`.

    python -m localcluster bench --lab g3 --out results --job-seconds 20 -- --work-seconds 20

A control plane shaped like the lab's pools with the lab's controllers beside it; the lab's Kubernetes
half applied by the real Pulumi engine, as a user on their own cluster applies it (`cluster: existing`
on the local kubeconfig, the charts' locked CRDs); the stack's outputs saved as `pulumi stack output
--json --show-secrets` saves them; then `python -m benchmarks LAB --outputs FILE --out OUT` with the
options after `--`, exactly as docs/existing-cluster.md runs it; then `pulumi destroy` and the cluster
stopped, whatever ended the run. Nodes and pods are kwok's (no container runs, and a Job's pod
Succeeds `--job-seconds` after it starts), but with `--real-node` the GPU pool's first node, whose pods
execute (localcluster.realnode); the report says which parts were real and which simulated, from the
cluster's own statement (facts.simulation).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pulumi.automation.errors import CommandError

from localcluster import certs, gcs, keda, prometheus, realnode
from localcluster.build import REPO, BuildError, ensure
from localcluster.controllers import ControllerError, LabControllers, beside, needed
from localcluster.controlplane import CONTEXT, ControlPlaneError, ControlPlane
from localcluster.engine import stack
from localcluster.images import ImageError
from localcluster.realnode import NodeError
from stacks.cluster_config import GpuNodes
from stacks.config import LabConfig
from stacks.kube_target import SPOT_LABEL
from stacks.loader import PROJECT
from stacks.stackfile import existing_keys, load_config

FOLDER = REPO / ".cache" / "bench"
MODULES = ("kube", "kwok", "pulumi", "pulumi-kubernetes")
CONTROLLERS_TIMEOUT_S = 240.0


# Labs whose benchmark sends its load from a Job on the system pool, which is kwok's here (only the GPU pool's
# node is real): with --real-node the load goes from this host through the Service of this endpoint instead.
LOAD_FROM_HOST = {"g6": "vllm"}
# Labs whose benchmark keeps checkpoints in Cloud Storage and preempts the GPU node under them: with --real-node,
# a bucket of this name (unless cluster.bucket is set) in an emulator on this host (localcluster.gcs), and the
# preemption is the real node's power-off through its logind (the kubelet's graceful shutdown, as on a Spot VM).
PREEMPTED_WITH_BUCKET = {"g8": "local-checkpoints"}


class BenchError(Exception):
    """The local run could not be set up (the lab's `pulumi up`, a controller that never got ready)."""


@dataclass(frozen=True)
class LocalRun:
    """How a local run departs from the lab's stack file, each said in its report's command line."""

    changes: dict[str, Any] = field(default_factory=dict)  # config keys set (--set)
    whole_gpu_pool: bool = False  # the real node holds every GPU of the pool (a fleet that executes)
    # The benchmark on this host, through the Service of the lab's endpoint of this name: the load Job would
    # land on kwok's system nodes, which run nothing.
    client_on_host: str | None = None


def _program() -> None:
    # What the language host would run: the project's own entry point.
    runpy.run_path(str(REPO / "__main__.py"), run_name="__main__")


def stack_file(lab: str, kubeconfig: Path, changes: dict[str, Any] | None = None) -> dict:
    """The lab's stack file on the local cluster, its charts replaced by their locked CRDs (no network);
    `changes` set as `pulumi config set [--path]` would (a key, or a field of an object key)."""
    cluster = {"target": "existing", "kubeconfig": str(kubeconfig), "context": CONTEXT, "charts": "upstream-crds"}
    keys = existing_keys(lab, cluster)
    for key, value in (changes or {}).items():
        keys[key] = {**(keys.get(key) or {}), **value} if isinstance(value, dict) else value
    return {"config": {f"{PROJECT}:{k}": v for k, v in keys.items()}}


def settings(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` or `KEY.FIELD=VALUE` pairs (VALUE read as YAML: 2, true, [1, 2]) as config changes."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise BenchError(f"--set {pair!r}: expected KEY=VALUE or KEY.FIELD=VALUE")
        value = yaml.safe_load(text)
        if "." in key:
            top, field = key.split(".", 1)
            out.setdefault(top, {})[field] = value
        else:
            out[key] = value
    return out


def service_url(plane: ControlPlane, outputs: dict[str, Any], name: str) -> str:
    """The root URL of the lab's endpoint `name` at its Service's ClusterIP, which this host routes to the
    real node (where kube-proxy takes it to a pod)."""
    ep = outputs["endpoints"][name]
    with plane.admin_client(certs.Pki(plane.state / "pki")) as client:
        ip = client.get(f"/api/v1/namespaces/{ep['namespace']}/services/{ep['service']}").json()["spec"]["clusterIP"]
    return f"http://{ip}:{ep['port']}"


def _preempted_with_bucket(lab: str, cfg: LabConfig, changes: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The emulated bucket's name and the stack file's changes for a lab of PREEMPTED_WITH_BUCKET: its checkpoints
    in that bucket, and its GPU nodes selected as Spot nodes, as a user with Spot GPU nodes of their own writes it
    (docs/existing-cluster.md); the local GPU nodes carry GKE's Spot label when the lab's pool is Spot."""
    if lab not in PREEMPTED_WITH_BUCKET:
        return None, changes
    cluster = dict(changes.get("cluster") or {})
    cluster.setdefault("bucket", PREEMPTED_WITH_BUCKET[lab])
    if cfg.gpu_spot:
        cluster.setdefault("gpu_nodes", {"node_selector": {**GpuNodes().node_selector, SPOT_LABEL: "true"}})
    return cluster["bucket"], {**changes, "cluster": cluster}


def _await_controllers(controllers: LabControllers, names: list[str]) -> None:
    deadline = time.monotonic() + CONTROLLERS_TIMEOUT_S
    while sorted(controllers.ready) != sorted(names):
        if time.monotonic() > deadline:
            raise BenchError(f"controllers {', '.join(names)} not ready in {CONTROLLERS_TIMEOUT_S:.0f} s (ready: "
                             f"{', '.join(sorted(controllers.ready)) or 'none'}); logs under {controllers.folder}")  # fmt: skip
        time.sleep(0.5)


def run(lab: str, out: Path, job_seconds: float, benchmark_args: list[str], folder: Path = FOLDER,
        real_node: bool = False, local: LocalRun = LocalRun()) -> int:  # fmt: skip
    """The benchmark's exit status (0 all checks passed, 1 a check failed, 2 the run could not be made)."""
    # The cluster's shape is the lab's GKE config; `cluster` (target existing, its bucket) is the stack file's alone.
    shaping = {k: v for k, v in local.changes.items() if k != "cluster"}
    cfg = load_config(lab, changes={k: v for k, v in shaping.items() if isinstance(v, dict)},
                      overrides={k: v for k, v in shaping.items() if not isinstance(v, dict)})  # fmt: skip
    wanted = needed(cfg)
    bucket, stack_changes = _preempted_with_bucket(lab, cfg, local.changes) if real_node else (None, local.changes)
    on_node = real_node and cfg.autoscaling.enabled
    built = ensure(MODULES + (realnode.BUILD_MODULES if real_node else ()) + tuple(c.module for c in wanted)
                   + (("keda",) if on_node else ()) + (("gcs",) if bucket else ()))  # fmt: skip
    # The CLI finds the provider as an ambient plugin on PATH.
    os.environ["PATH"] = built.path + os.pathsep + os.environ["PATH"]
    os.environ.pop("PULUMI_IGNORE_AMBIENT_PLUGINS", None)
    work = folder / lab
    shutil.rmtree(work, ignore_errors=True)
    (work / "stack").mkdir(parents=True)
    with ControlPlane(work / "cluster", built, cfg, job_seconds=job_seconds, real_node=real_node,
                      whole_gpu_pool=local.whole_gpu_pool) as plane, \
            beside(plane, built) as controllers, contextlib.ExitStack() as beside_node:  # fmt: skip
        (work / "stack" / f"Pulumi.{lab}.yaml").write_text(yaml.safe_dump(stack_file(lab, plane.kubeconfig, stack_changes)))
        lab_stack = stack(lab, PROJECT, _program, work / "stack")
        try:
            lab_stack.up(on_output=print, color="never")
            _await_controllers(controllers, [c.name for c in wanted])
            # What the lab's charts would run and the local cluster does not: Prometheus and KEDA on the node;
            # they outlive the lab's `pulumi destroy` (KEDA removes its finalizers from what it scaled).
            prometheus_url = beside_node.enter_context(prometheus.serving(plane)) if on_node else None
            if on_node:
                beside_node.enter_context(keda.serving(plane, built))
            values = {k: v.value for k, v in lab_stack.outputs().items()}
            outputs = work / "stack" / "outputs.json"  # holds the admin kubeconfig: the owner's alone
            outputs.touch(mode=0o600)
            outputs.write_text(json.dumps(values, indent=2))
            through = []
            if local.client_on_host:
                through = ["--target", service_url(plane, values, local.client_on_host)]
                through += ["--prometheus", prometheus_url] if prometheus_url else []
            if bucket and plane.node:
                through += ["--storage-emulator", beside_node.enter_context(gcs.serving(plane, built, bucket)),
                            "--preempt-command", shlex.join(plane.node.power_off_command(REPO))]  # fmt: skip
            # Relative to the checkout, where it runs, as a user would type them into the recorded command.
            command = [sys.executable, "-m", "benchmarks", lab, "--outputs", os.path.relpath(outputs, REPO),
                       "--out", os.path.relpath(out, REPO), *through, *benchmark_args]  # fmt: skip
            print(f"bench: {' '.join(command[1:])}", flush=True)
            return subprocess.call(command, cwd=REPO)
        finally:
            lab_stack.destroy(on_output=print, color="never")


def main(lab: str, out: Path, job_seconds: float, benchmark_args: list[str], real_node: bool = False,
         local: LocalRun = LocalRun()) -> int:  # fmt: skip
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # through every `finally`: destroy, then the cluster stops

    signal.signal(signal.SIGTERM, stop)
    try:
        return run(lab, out.resolve(), job_seconds, benchmark_args, real_node=real_node, local=local)
    except CommandError as e:  # the lab's pulumi up: the provider quotes the API server's message
        lines = [ln.strip() for ln in str(e).splitlines() if "error" in ln.lower()]
        print(f"error: pulumi up -s {lab} on the local cluster failed:\n" + "\n".join(lines[-20:]), file=sys.stderr)
    except (BenchError, BuildError, ControlPlaneError, ControllerError, NodeError, ImageError) as e:
        print(f"error: {e}", file=sys.stderr)
    return 2
