"""The lab's own controllers beside the local control plane: the Kueue, JobSet and Kubeflow Trainer v2
controller managers built from localcluster/gomod/, run as processes against its API server.

On a real cluster each runs as a pod behind a Service, and the API server reaches its webhooks through
that Service. Here there is no pod network: each serves its webhooks on a loopback port, and its
webhook configurations, read from the controller's own source at the pinned version (the files its
release manifests are built from), are written with `url: https://127.0.0.1:PORT/PATH` and the CA
bundle of its serving certificate in place of the Service reference. That certificate is the local
CA's for 127.0.0.1 (localcluster.certs), except Kueue's (see KUEUE). Each runs with a Configuration of
its own API, leader election off (one replica); Kueue's is the lab's own
(`components.kueue.manager_config`) with only the local fields changed. Every controller and webhook
is the real one; they act with the admin's identity.

A controller starts once the lab's `pulumi up` has applied its CRDs (the project pins only those it
uses; the others its manager watches come from its own source, as its chart would install them) and is
stopped, its webhook configurations deleted first so no request is refused for want of it, when the
lab's `pulumi destroy` removes them, and on exit.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from components.kueue import manager_config
from facts.simulation import REAL
from localcluster import certs, nodes
from localcluster.build import GOMOD, MODULES, Built
from localcluster.controlplane import LOOPBACK, ControlPlaneError, Component, ControlPlane, declare, free_ports, log_tail
from stacks.compose_platform import kueue_args
from stacks.config import LabConfig

READY_TIMEOUT_S = 120.0
API_TIMEOUT_S = 60.0
KUEUE_SERVICE, KUEUE_SECRET = "kueue-webhook-service", "kueue-webhook-server-cert"  # Kueue's defaults

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
    crds: str  # the folder of its CRDs inside that source
    api_group: str
    namespace: str
    trigger: str  # the CRD whose presence says the lab has this chart on (the stand-in applies it)
    # CRDs whose versions its webhook server converts (its chart's CRDs name the webhook; the pinned
    # CRD bases do not), and whether it must manage its own certificate (see KUEUE).
    conversion: tuple[str, ...] = ()
    own_certificate: bool = False
    # Files of its source whose objects its chart applies once it runs (Trainer's post-install hook Job
    # applies the built-in runtimes the values enable): applied once its webhooks are registered.
    installs: tuple[str, ...] = ()

    def source_dir(self, gomod: Path) -> Path:
        """The controller's source at the version its build module pins, in Go's module cache."""
        found = _go_json(["list", "-m", "-json", self.source], gomod / self.module)
        if not found.get("Dir"):
            raise ControllerError(f"{self.source} is not in Go's module cache: run `python -m localcluster.build`")
        return Path(found["Dir"])


KUEUE = Controller(
    "kueue", "kueue", "kueue", "sigs.k8s.io/kueue", "config/components/webhook/manifests.yaml",
    "config/components/crd/bases", "kueue.x-k8s.io", "kueue-system", "clusterqueues.kueue.x-k8s.io",
    # The CRDs of charts/kueue/templates/crd/ with a conversion webhook (v1beta1 <-> v1beta2).
    conversion=tuple(f"{p}.kueue.x-k8s.io" for p in ("clusterqueues", "cohorts", "localqueues", "multikueueclusters", "workloads")),
    # With its certificate management off, Kueue 0.19.2 reads a metrics certificate from the fixed path
    # /etc/kueue/metrics/certs (cmd/kueue/main.go) and exits without one: it keeps it on, with a Secret
    # we make that its rotator (cert-controller) keeps, a pair that serves 127.0.0.1 too.
    own_certificate=True,
)  # fmt: skip
JOBSET = Controller(
    "jobset", "jobset", "jobset", "sigs.k8s.io/jobset", "config/components/webhook/manifests.yaml",
    "config/components/crd/bases", "jobset.x-k8s.io", "jobset-system", "jobsets.jobset.x-k8s.io",
)  # fmt: skip
TRAINER = Controller(
    "trainer", "trainer", "trainer-controller-manager", "github.com/kubeflow/trainer/v2",
    "manifests/base/webhook/manifests.yaml", "manifests/base/crds", "trainer.kubeflow.org", "kubeflow-system",
    "trainjobs.trainer.kubeflow.org",
    # The one runtime components.training_operator enables (runtimes.torchDistributed), its plain manifest
    # (the chart's files/runtimes/ copy is the same object templated with labels).
    installs=("manifests/base/runtimes/torch_distributed.yaml",),
)  # fmt: skip
CONTROLLERS = {c.name: c for c in (JOBSET, KUEUE, TRAINER)}  # start order: the job kinds Kueue manages first


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
    """The lab's own Kueue Configuration, served on loopback, with the certificate of its Secret."""
    config = yaml.safe_load(manager_config(kueue_args(cfg, nodes.PLACEMENT)))
    config.update(_manager_fields(ports))
    config["namespace"] = KUEUE.namespace
    config["webhook"] = {"port": ports.webhook, "host": LOOPBACK, "certDir": str(cert_dir)}
    config["internalCertManagement"] = {
        "enable": True, "webhookServiceName": KUEUE_SERVICE, "webhookSecretName": KUEUE_SECRET,
    }  # fmt: skip
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


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def source_crds(controller: Controller, source: Path) -> dict[str, dict[str, Any]]:
    """Every CRD the controller's manager watches, by name, from its source at the pinned version."""
    folder = source / controller.crds
    crds = {doc["metadata"]["name"]: doc for f in sorted(folder.glob(f"{controller.api_group}_*.yaml"))
            if (doc := yaml.safe_load(f.read_text()))}  # fmt: skip
    if controller.trigger not in crds:
        raise ControllerError(f"{controller.trigger} is not among the CRDs in {folder}")
    return crds


def established(client: httpx.Client, crds: list[str]) -> bool:
    for name in crds:
        answer = client.get(f"{CRDS}/{name}")
        if answer.status_code != 200 or (answer.json().get("metadata") or {}).get("deletionTimestamp"):
            return False
        conditions = (answer.json().get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return False
    return True


def _webhook_path(doc: dict[str, Any]) -> str:
    plural = "mutatingwebhookconfigurations" if doc["kind"] == "MutatingWebhookConfiguration" else "validatingwebhookconfigurations"
    return f"/apis/admissionregistration.k8s.io/v1/{plural}"


@dataclass
class Running:
    controller: Controller
    component: Component
    webhooks: list[dict[str, Any]]
    added_crds: list[str]  # those it needs that the lab did not apply: we applied them, we remove them


@dataclass
class LabControllers:
    """Runs the lab's controllers beside the control plane, as their charts would: each started once its
    trigger CRD is established (the lab's `pulumi up` applies it with the others the project pins), the
    rest of the CRDs its manager watches applied first from its own source; stopped, with those CRDs,
    when the trigger goes (the lab's `pulumi destroy`) and on exit; restarted if it dies, as its
    Deployment would be. A thread of the supervisor polls once a second."""

    controllers: list[Controller]
    lab: Callable[[], LabConfig]  # the lab the cluster is shaped for now: Kueue's Configuration is its own
    binary: Callable[[str], Path]
    gomod: Path
    folder: Path  # each controller's configuration, certificates and log under folder/<name>/
    kubeconfig: Path  # the admin's: the controllers act with its rights (no RBAC of their own here)
    client: httpx.Client  # the admin's, to the API server; closed on exit
    ca_bundle: bytes
    serving: tuple[Path, Path]  # the local CA's serving pair for 127.0.0.1 (certs "webhooks")
    say: Say = print
    poll_s: float = 1.0
    running: dict[str, Running] = field(default_factory=dict)
    ready: set[str] = field(default_factory=set)  # running, webhooks registered

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lab-controllers", daemon=True)
        self._sources = {c.name: c.source_dir(self.gomod) for c in self.controllers}

    def __enter__(self) -> LabControllers:
        if self.controllers:
            self.say(f"lab controllers ({', '.join(c.name for c in self.controllers)}) start once their CRDs are applied")
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            for name in reversed(list(self.running)):
                self._stop_one(name)
        self.client.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            for controller in self.controllers:
                try:
                    self._reconcile(controller)
                except Exception as e:  # one bad poll (the API server restarting) must not end the loop
                    self.say(f"{controller.name}: {e}")

    def _reconcile(self, controller: Controller) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            current = self.running.get(controller.name)
            on = established(self.client, [controller.trigger])
            if current and not on:
                self.say(f"{controller.name}: {controller.trigger} is gone; stopping it")
                self._stop_one(controller.name, remove_crds=True)
            elif current and current.component.exited() is not None:
                self.say(f"{controller.name}: exited with code {current.component.exited()}; restarting it. Its log:\n"
                         + log_tail(current.component.log))  # fmt: skip
                self._stop_one(controller.name)
                self._start_one(controller, current.added_crds)
            elif on and not current:
                self._start_one(controller, self._apply_missing_crds(controller))

    def _apply_missing_crds(self, controller: Controller) -> list[str]:
        """Apply the CRDs its manager watches that the cluster lacks (the project pins only those it uses)."""
        added = []
        for name, crd in source_crds(controller, self._sources[controller.name]).items():
            if self.client.get(f"{CRDS}/{name}").status_code == 404:
                answer = self.client.post(CRDS, json=crd)
                if answer.status_code != 201:
                    raise ControllerError(f"CRD {name} refused: {answer.status_code} {answer.text}")
                added.append(name)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not established(self.client, added):
            if time.monotonic() > deadline:
                raise ControllerError(f"{controller.name}: CRDs {', '.join(added)} not established in time")
            time.sleep(0.2)
        if added:
            self.say(f"{controller.name}: applied {len(added)} more CRDs from its source ({', '.join(added)})")
        return added

    def _start_one(self, controller: Controller, added_crds: list[str]) -> None:
        home = self.folder / controller.name
        cert_dir = home / "k8s-webhook-server" / "serving-certs"  # controller-runtime's default under TMPDIR
        cert_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.serving[0], cert_dir / "tls.crt")
        shutil.copyfile(self.serving[1], cert_dir / "tls.key")
        ports = Ports(*free_ports(3))
        config_file = home / "config.yaml"
        config_file.write_text(yaml.safe_dump(configuration(controller, self.lab(), ports, cert_dir), sort_keys=False))
        answer = self.client.post("/api/v1/namespaces", json={"metadata": {"name": controller.namespace}})
        if answer.status_code not in (201, 409):
            raise ControllerError(f"namespace {controller.namespace} refused: {answer.status_code} {answer.text}")
        ca_bundle = self._own_certificate(controller, cert_dir) if controller.own_certificate else self.ca_bundle
        for crd in controller.conversion:
            self._converted_by(crd, ports.webhook, ca_bundle)
        manifests = (self._sources[controller.name] / controller.webhooks).read_text()
        webhooks = loopback_webhooks(manifests, controller.name, ports.webhook, ca_bundle)
        component = Component(
            controller.name,
            [str(self.binary(controller.binary)), f"--config={config_file}", f"--kubeconfig={self.kubeconfig}"],
            home / "controller.log",
            env={"TMPDIR": str(home)},
        )
        self.say(f"{controller.name}: {controller.trigger} is established; starting it")
        component.start()
        running = Running(controller, component, webhooks, added_crds)
        self.running[controller.name] = running
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _ready(ports.health):
            if component.exited() is not None or time.monotonic() > deadline:
                why = f"exited with code {component.exited()}" if component.exited() is not None else "not ready in time"
                self._stop_one(controller.name, remove_crds=True)
                raise ControllerError(f"{controller.name} {why}; last lines of {component.log}:\n{log_tail(component.log)}")
            time.sleep(0.5)
        for doc in webhooks:
            answer = self.client.post(_webhook_path(doc), json={"apiVersion": "admissionregistration.k8s.io/v1", **doc})
            if answer.status_code != 201:
                self._stop_one(controller.name, remove_crds=True)
                raise ControllerError(f"{doc['kind']} {doc['metadata']['name']} refused: {answer.status_code} {answer.text}")
        for path in controller.installs:
            self._install(controller, path)
        version = MODULES[controller.module].versions()[controller.source]
        declare(self.client, {f"{REAL}{controller.name}": f"{controller.name} {version} controller manager "
                              f"({controller.source}), a process beside the API server, its webhooks on loopback"})  # fmt: skip
        self.ready.add(controller.name)
        self.say(f"{controller.name}: ready, webhooks on {LOOPBACK}:{ports.webhook} (log {component.log})")

    def _install(self, controller: Controller, path: str) -> None:
        """The objects of a file of its source created (kept if there already), their collections found by
        discovery as any client finds them."""
        for doc in yaml.safe_load_all((self._sources[controller.name] / path).read_text()):
            group_version, kind, name = doc["apiVersion"], doc["kind"], doc["metadata"]["name"]
            resources = self.client.get(f"/apis/{group_version}").json()["resources"]
            plural = next(r["name"] for r in resources if r["kind"] == kind and "/" not in r["name"])
            answer = self.client.post(f"/apis/{group_version}/{plural}", json=doc)
            if answer.status_code not in (201, 409):
                raise ControllerError(f"{controller.name}: {kind} {name} from {path} refused: {answer.status_code} {answer.text}")
            self.say(f"{controller.name}: {kind} {name} applied from its source ({path}), as its chart's hook would")

    def _own_certificate(self, controller: Controller, cert_dir: Path) -> bytes:
        """The Secret its certificate rotator reads (replaced), with a pair for its Service and 127.0.0.1,
        and that pair in its certificate folder, as the kubelet mounts the Secret there in its pod; returns
        the Secret's CA, which the API server is to trust."""
        data = certs.rotator_secret(f"{controller.name}-ca", f"{KUEUE_SERVICE}.{controller.namespace}.svc")
        for name in ("tls.crt", "tls.key"):
            (cert_dir / name).write_bytes(data[name])
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": KUEUE_SECRET, "namespace": controller.namespace},
                  "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}  # fmt: skip
        path = f"/api/v1/namespaces/{controller.namespace}/secrets"
        self.client.delete(f"{path}/{KUEUE_SECRET}")
        answer = self.client.post(path, json=secret)
        if answer.status_code != 201:
            raise ControllerError(f"Secret {KUEUE_SECRET} refused: {answer.status_code} {answer.text}")
        return data["ca.crt"]

    def _converted_by(self, crd: str, port: int, ca_bundle: bytes) -> None:
        """The CRD's versions converted by the controller's webhook on loopback, as its chart's CRD says."""
        conversion = {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
            "url": f"https://{LOOPBACK}:{port}/convert", "caBundle": base64.b64encode(ca_bundle).decode()}}}  # fmt: skip
        answer = self.client.patch(f"{CRDS}/{crd}", json={"spec": {"conversion": conversion}},
                                   headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
        if answer.status_code != 200:
            raise ControllerError(f"CRD {crd}: conversion webhook refused: {answer.status_code} {answer.text}")

    def _stop_one(self, name: str, remove_crds: bool = False) -> None:
        """Its webhook configurations first, so no request is refused for want of it; then the process;
        then, when the lab turned it off, the CRDs we applied for it."""
        running = self.running.pop(name)
        self.ready.discard(name)
        try:
            declare(self.client, {f"{REAL}{name}": None})
        except (httpx.HTTPError, ControlPlaneError) as e:  # the API server may be gone already: the process must still stop
            self.say(f"{name}: not removed from the cluster's statement: {e}")
        for doc in running.webhooks:
            try:
                self.client.delete(f"{_webhook_path(doc)}/{doc['metadata']['name']}")
            except httpx.HTTPError as e:
                self.say(f"{name}: {doc['kind']} {doc['metadata']['name']} not deleted: {e}")
        running.component.stop()
        if remove_crds:
            for crd in running.added_crds:
                self.client.delete(f"{CRDS}/{crd}")
        self.say(f"{name}: stopped")


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://{LOOPBACK}:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def beside(cluster: ControlPlane, built: Built, say: Say = print) -> LabControllers:
    """The controllers `built` holds, for a started control plane, with its admin identity and CA: each
    runs while its CRDs are there, that is while the lab the cluster is shaped for has its chart on."""
    pki = certs.Pki(cluster.state / "pki")
    return LabControllers(
        controllers=[c for c in CONTROLLERS.values() if c.module in built.folders],
        lab=lambda: cluster.lab,
        binary=built.binary,
        gomod=GOMOD,
        folder=cluster.state / "controllers",
        kubeconfig=cluster.kubeconfig,
        # Applying CRDs and webhook calls take seconds on a busy 2-core machine.
        client=cluster.admin_client(pki, timeout_s=API_TIMEOUT_S),
        ca_bundle=pki.ca.read_bytes(),
        serving=(pki.cert(certs.WEBHOOKS), pki.key(certs.WEBHOOKS)),
        say=say,
    )
