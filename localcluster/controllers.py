"""The lab's own controllers beside the local control plane: the Kueue, JobSet and Kubeflow Trainer v2
controller managers built from localcluster/gomod/, run as processes against its API server.

On a real cluster each runs as a pod behind a Service, and the API server reaches its webhooks through
that Service with a certificate the controller makes for itself. Here there is no pod network: each
serves its webhooks on a loopback port with a certificate the local CA signs, and its webhook
configurations, read from the controller's own source at the pinned version (the files its release
manifests are built from), are written with `url: https://127.0.0.1:PORT/PATH` and that CA's bundle in
place of the Service reference. Each runs with a Configuration of its own API, leader election off
(one replica) and its own certificate management off; Kueue's is the lab's own
(`components.kueue.manager_config`) with only those fields changed. Everything else, every controller
and webhook, is the real one.

A controller starts once the API server serves its CRDs (the lab's `pulumi up` applies them) and is
stopped, its webhook configurations deleted first so no request is refused for want of it, on exit.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from components.kueue import manager_config
from components.gpu_pool import GpuPlacement
from stacks.compose_platform import kueue_args
from stacks.config import LabConfig

LOOPBACK = "127.0.0.1"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0

Say = Callable[[str], None]


class ControllerError(Exception):
    """A controller could not be started or did not become ready: names it and points at its log."""


@dataclass(frozen=True)
class Ports:
    webhook: int
    health: int
    extra: int  # Kueue's visibility server, Trainer's runtime status server


@dataclass(frozen=True)
class Controller:
    name: str
    module: str  # its build module, localcluster/gomod/<module>
    binary: str
    source: str  # the Go module it is built from: its webhook manifests are read from its source
    webhooks: str  # the generated webhook configurations inside that source
    api_group: str  # served once its CRDs are applied: the controller starts then
    api_version: str
    namespace: str

    def source_dir(self, gomod: Path) -> Path:
        """The controller's source at the version its build module pins, in Go's module cache."""
        found = _go_json(["list", "-m", "-json", self.source], gomod / self.module)
        if not found.get("Dir"):
            raise ControllerError(f"{self.source} is not in Go's module cache: run `python -m localcluster.build`")
        return Path(found["Dir"])


KUEUE = Controller(
    "kueue", "kueue", "kueue", "sigs.k8s.io/kueue", "config/components/webhook/manifests.yaml",
    "kueue.x-k8s.io", "v1beta2", "kueue-system",
)  # fmt: skip
JOBSET = Controller(
    "jobset", "jobset", "jobset", "sigs.k8s.io/jobset", "config/components/webhook/manifests.yaml",
    "jobset.x-k8s.io", "v1alpha2", "jobset-system",
)  # fmt: skip
TRAINER = Controller(
    "trainer", "trainer", "trainer-controller-manager", "github.com/kubeflow/trainer/v2",
    "manifests/base/webhook/manifests.yaml", "trainer.kubeflow.org", "v1alpha1", "kubeflow-system",
)  # fmt: skip
CONTROLLERS = {c.name: c for c in (KUEUE, JOBSET, TRAINER)}


def _go_json(args: list[str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(["go", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ControllerError(f"go {' '.join(args)} in {cwd}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def needed(cfg: LabConfig) -> list[Controller]:
    """The controllers the lab turns on, in start order: JobSet first (Kueue and Trainer drive JobSets)."""
    out = []
    trainer = cfg.training_operator.enabled and cfg.training_operator.api == "trainer-v2"
    if cfg.kueue.enabled or trainer:
        out.append(JOBSET)
    if cfg.kueue.enabled:
        out.append(KUEUE)
    if trainer:
        out.append(TRAINER)
    return out


# ------------------------------------------------------------------------------------ configurations


def _manager_fields(ports: Ports) -> dict[str, Any]:
    """The controller-runtime fields every Configuration shares: loopback probes, no metrics server
    (no Prometheus scrapes it here), one replica."""
    return {
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{ports.health}"},
        "metrics": {"bindAddress": "0"},
        "leaderElection": {"leaderElect": False},
    }


def kueue_configuration(cfg: LabConfig, ports: Ports, cert_dir: Path) -> dict[str, Any]:
    """The lab's own Kueue Configuration, served on loopback with our certificate."""
    config = yaml.safe_load(manager_config(kueue_args(cfg, GpuPlacement())))
    config.update(_manager_fields(ports))
    config["namespace"] = KUEUE.namespace
    config["webhook"] = {"port": ports.webhook, "host": LOOPBACK, "certDir": str(cert_dir)}
    config["internalCertManagement"] = {"enable": False}
    config["visibilityServer"] = {"bindAddress": LOOPBACK, "bindPort": ports.extra}
    return config


def jobset_configuration(ports: Ports, cert_dir: Path) -> dict[str, Any]:
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        **_manager_fields(ports),
        "webhook": {"port": ports.webhook, "host": LOOPBACK, "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": False},
    }


def trainer_configuration(ports: Ports) -> dict[str, Any]:
    """Trainer's Configuration has no certDir: its webhook server reads controller-runtime's default,
    `$TMPDIR/k8s-webhook-server/serving-certs`, so the process gets a TMPDIR of its own."""
    return {
        "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
        "kind": "Configuration",
        **_manager_fields(ports),
        "webhook": {"port": ports.webhook, "host": LOOPBACK},
        "certManagement": {"enable": False},
        "statusServer": {"port": ports.extra},
    }


def configuration(controller: Controller, cfg: LabConfig, ports: Ports, cert_dir: Path) -> dict[str, Any]:
    if controller is KUEUE:
        return kueue_configuration(cfg, ports, cert_dir)
    if controller is JOBSET:
        return jobset_configuration(ports, cert_dir)
    return trainer_configuration(ports)


# ------------------------------------------------------------------------------------------ webhooks


def loopback_webhooks(manifests: str, prefix: str, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The controller's webhook configurations with each Service reference replaced by a loopback URL
    to the same path, and our CA's bundle; names prefixed as its release manifests prefix them."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        doc = json.loads(json.dumps(doc))  # a deep copy, plain types
        doc["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}", "labels": {"gke-ml-labs/local": "true"}}
        for hook in doc.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service")
            if not service:
                raise ControllerError(f"webhook {hook.get('name')} of {prefix} has no service reference to replace")
            hook["clientConfig"] = {
                "url": f"https://{LOOPBACK}:{port}{service.get('path', '/')}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
        out.append(doc)
    return out


# ------------------------------------------------------------------------------------------ processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Running:
    controller: Controller
    process: subprocess.Popen
    ports: Ports
    log: Path
    webhooks: list[dict[str, Any]]


class Kube:
    """The few API calls this module makes, through the official client (admin kubeconfig)."""

    def __init__(self, kubeconfig: Path):
        from kubernetes import client, config

        self._api = config.new_client_from_config(str(kubeconfig))
        self._client = client

    def serves(self, group: str, version: str) -> bool:
        try:
            self._api.call_api(f"/apis/{group}/{version}", "GET", auth_settings=["BearerToken"],
                               _preload_content=False, _return_http_data_only=True)  # fmt: skip
            return True
        except self._client.ApiException:
            return False

    def ensure_namespace(self, name: str) -> None:
        core = self._client.CoreV1Api(self._api)
        try:
            core.create_namespace({"metadata": {"name": name}})
        except self._client.ApiException as e:
            if e.status != 409:
                raise

    def apply_webhooks(self, docs: list[dict[str, Any]]) -> None:
        api = self._client.AdmissionregistrationV1Api(self._api)
        for doc in docs:
            create = (api.create_mutating_webhook_configuration if doc["kind"] == "MutatingWebhookConfiguration"
                      else api.create_validating_webhook_configuration)  # fmt: skip
            create({**doc, "apiVersion": "admissionregistration.k8s.io/v1"})

    def delete_webhooks(self, docs: list[dict[str, Any]]) -> None:
        api = self._client.AdmissionregistrationV1Api(self._api)
        for doc in docs:
            delete = (api.delete_mutating_webhook_configuration if doc["kind"] == "MutatingWebhookConfiguration"
                      else api.delete_validating_webhook_configuration)  # fmt: skip
            try:
                delete(doc["metadata"]["name"])
            except self._client.ApiException as e:
                if e.status != 404:
                    raise


def _wait(what: str, ok: Callable[[], bool], timeout_s: float, process: subprocess.Popen | None, log: Path | None) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        if process is not None and process.poll() is not None:
            raise ControllerError(f"{what}: the process exited with status {process.returncode}; log: {log}")
        if time.monotonic() > deadline:
            raise ControllerError(f"{what}: not done after {timeout_s:.0f} s" + (f"; log: {log}" if log else ""))
        time.sleep(0.5)


def start(controller: Controller, cfg: LabConfig, binary: Path, gomod: Path, kube: Kube, kubeconfig: Path,
          folder: Path, ca_bundle: bytes, serving: tuple[Path, Path], say: Say = print,
          crd_timeout_s: float = READY_TIMEOUT_S) -> Running:  # fmt: skip
    """Start one controller once its CRDs are served; return when it is ready and its webhooks are
    registered. `serving` is the (certificate, key) pair for 127.0.0.1 that the local CA signed."""
    home = folder / controller.name
    cert_dir = home / "k8s-webhook-server" / "serving-certs"  # controller-runtime's default under TMPDIR
    cert_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(serving[0], cert_dir / "tls.crt")
    shutil.copyfile(serving[1], cert_dir / "tls.key")
    ports = Ports(free_port(), free_port(), free_port())
    config_file = home / "config.yaml"
    config_file.write_text(yaml.safe_dump(configuration(controller, cfg, ports, cert_dir), sort_keys=False))
    manifests = (controller.source_dir(gomod) / controller.webhooks).read_text()
    webhooks = loopback_webhooks(manifests, controller.name, ports.webhook, ca_bundle)

    say(f"{controller.name}: waiting for its CRDs ({controller.api_group}/{controller.api_version})")
    _wait(f"{controller.name}: CRDs served", lambda: kube.serves(controller.api_group, controller.api_version),
          crd_timeout_s, None, None)  # fmt: skip
    kube.ensure_namespace(controller.namespace)
    log = home / "controller.log"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "TMPDIR": str(home)}
    with log.open("w") as out:
        process = subprocess.Popen([str(binary), f"--config={config_file}"], env=env, stdout=out,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    running = Running(controller, process, ports, log, webhooks)
    try:
        _wait(f"{controller.name}: ready", lambda: _ready(ports.health), READY_TIMEOUT_S, process, log)
        kube.apply_webhooks(webhooks)
    except BaseException:
        stop(running, kube, say)
        raise
    say(f"{controller.name}: ready (pid {process.pid}, webhooks on {LOOPBACK}:{ports.webhook}, log {log})")
    return running


def stop(running: Running, kube: Kube | None, say: Say = print) -> None:
    """Webhook configurations first (no request refused for a webhook that is gone), then the process."""
    if kube is not None:
        try:
            kube.delete_webhooks(running.webhooks)
        except Exception as e:  # the API server may already be gone: the process must still stop
            say(f"{running.controller.name}: webhook configurations not deleted: {e}")
    process = running.process
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    say(f"{running.controller.name}: stopped")


@contextmanager
def running(controllers: list[Controller], **kwargs: Any) -> Iterator[list[Running]]:
    """`start` each in order; stop them all, newest first, however the block ends."""
    kube: Kube = kwargs["kube"]
    say: Say = kwargs.get("say", print)
    binaries: Callable[[Controller], Path] = kwargs.pop("binaries")
    started: list[Running] = []
    with ExitStack() as stack:
        for c in controllers:
            r = start(c, binary=binaries(c), **kwargs)
            started.append(r)
            stack.callback(stop, r, kube, say)
        yield started
