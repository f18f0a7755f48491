"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok, started in that order, each waited for, all stopped together.

    with ControlPlane(folder, built, lab_config) as cluster:
        cluster.kubeconfig  # the admin kubeconfig

Every process listens on 127.0.0.1 at a port chosen free, dies with the process that started it
(PR_SET_PDEATHSIG through util-linux's setpriv, so not even a killed supervisor leaves one behind), and is stopped on the way out
of the `with` block whatever ended it. A component that fails to come up is reported with the
reason its health check gave and the tail of its log.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from facts.simulation import REAL, SIMULATED, STATEMENT_NAME, STATEMENT_NAMESPACE
from localcluster import certs, images, nodes, realnode
from localcluster.build import MODULES, Built
from stacks.config import LabConfig

LOOPBACK = "127.0.0.1"
CONTEXT = "gke-ml-labs-local"
START_TIMEOUT_S = 180.0  # the API server's first start on a busy 2-core machine takes about a minute
STOP_GRACE_S = 10.0
LOG_TAIL_LINES = 25
# Each component is exec'd by setpriv, which sets PR_SET_PDEATHSIG first: the kernel kills it when the
# supervisor dies. Not a preexec_fn: that forks the whole Python process and runs its atfork handlers,
# and gRPC's (the Pulumi Automation API's, in the tests) aborted a child that way before it could exec.
DIE_WITH_PARENT = ("setpriv", "--pdeathsig", "KILL")

Say = Callable[[str], None]


class ControlPlaneError(Exception):
    """The control plane did not come up: which component, why, and the tail of its log."""


def free_ports(count: int) -> list[int]:
    """Ports free on loopback now: all held open together so no two are the same."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((LOOPBACK, 0))
        return [s.getsockname()[1] for s in sockets]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else ["(no log)"]
    return "\n".join(f"    {line}" for line in text[-lines:])


@dataclass
class Component:
    name: str
    command: list[str]
    log: Path
    process: subprocess.Popen | None = None
    env: dict[str, str] = field(default_factory=dict)  # added to the supervisor's environment

    def start(self) -> None:
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [*DIE_WITH_PARENT, *self.command], stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, **self.env} if self.env else None,
            )

    def exited(self) -> int | None:
        return self.process.poll() if self.process else None

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def declare(client: httpx.Client, lines: dict[str, str | None]) -> None:
    """Merge `lines` (`real.<part>` or `simulated.<part>` -> what it is; None removes one) into the
    cluster's statement of what is real and what simulated (facts.simulation), which reports quote."""
    path = f"/api/v1/namespaces/{STATEMENT_NAMESPACE}/configmaps"
    answer = client.patch(f"{path}/{STATEMENT_NAME}", json={"data": lines},
                          headers={"Content-Type": "application/merge-patch+json"})  # fmt: skip
    if answer.status_code == 404:
        # The API server makes kube-public itself, moments after it is ready: make sure it is there.
        client.post("/api/v1/namespaces", json={"metadata": {"name": STATEMENT_NAMESPACE}})
        kept = {k: v for k, v in lines.items() if v is not None}
        answer = client.post(path, json={"metadata": {"name": STATEMENT_NAME}, "data": kept})
    if answer.status_code not in (200, 201):
        raise ControlPlaneError(f"the cluster's statement {STATEMENT_NAMESPACE}/{STATEMENT_NAME} refused: "
                           f"{answer.status_code} {answer.text}")  # fmt: skip


def realnode_labels(lab: LabConfig) -> dict[str, str]:
    """The labels the real node registers with: those of the GPU pool's node kwok would play, less the ones
    the kubelet sets itself."""
    node = next((n for n in nodes.lab_nodes(lab, 0) if n["metadata"]["name"] == nodes.REAL_NODE_NAME), None)
    if node is None:
        raise ControlPlaneError(f"lab {lab.stack} has no GPU pool node ({nodes.REAL_NODE_NAME}) for the real node to be")
    own = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch")
    return {k: v for k, v in node["metadata"]["labels"].items() if k not in own}


def _kubeconfig(server: str, ca: Path, cert: Path, key: Path) -> dict[str, Any]:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": CONTEXT, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
        "current-context": CONTEXT,
    }


@dataclass
class ControlPlane:
    """The local cluster in `folder`: the admin kubeconfig at its top, everything else (certificates,
    etcd's data, logs, the components' kubeconfigs) under `state/`, made fresh at each start."""

    folder: Path
    built: Built
    lab: LabConfig
    say: Say = print
    job_seconds: float = nodes.DEFAULT_JOB_S  # how long kwok lets a Job's pod run
    # A real node (localcluster.realnode) as the GPU pool's first node, where pods execute; kwok the rest.
    real_node: bool = False
    # The real node as the whole GPU pool: every GPU the pool could hold on it, no kwok GPU node (a fleet of
    # GPU pods that all execute, on a machine that can run one node).
    whole_gpu_pool: bool = False
    components: list[Component] = field(default_factory=list)
    server: str = ""
    node: realnode.RealNode | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.folder / "kubeconfig"

    @property
    def state(self) -> Path:
        return self.folder / "state"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -------------------------------------------------------------------------------- start

    def start(self) -> None:
        shutil.rmtree(self.state, ignore_errors=True)
        self.kubeconfig.unlink(missing_ok=True)
        self.logs.mkdir(parents=True)
        pki = certs.generate(self.state / "pki")
        etcd_client, etcd_peer, apiserver, kcm, scheduler = free_ports(5)
        self.server = f"https://{LOOPBACK}:{apiserver}"
        self._start_etcd(etcd_client, etcd_peer)
        self._start_apiserver(pki, apiserver, etcd_client)
        kubeconfigs = self._write_kubeconfigs(pki)
        self._start_controllers(pki, kubeconfigs, kcm, scheduler)
        if self.real_node:
            self._start_real_node(pki, kubeconfigs)
        self._start_kwok(kubeconfigs["kwok"])

    def _launch(self, name: str, *args: str) -> Component:
        return self.start_process(name, [str(self.built.binary(name)), *args])

    def start_process(self, name: str, command: list[str], env: dict[str, str] | None = None) -> Component:
        """A process of the cluster's (a component, or one the lab needs beside it), stopped with it."""
        component = Component(name, command, self.logs / f"{name}.log", env=env or {})
        self.say(f"starting {name}")
        component.start()
        self.components.append(component)
        return component

    def _start_real_node(self, pki: certs.Pki, kubeconfigs: dict[str, Path]) -> None:
        self.node = realnode.RealNode(
            self.state / "node", self.built, self.server, pki, realnode_labels(self.lab),
            realnode.Addresses.of(self.lab.subnet_cidr, self.lab.pods_cidr, self.lab.services_cidr),
            kubeconfigs, say=self.say, launch=self.start_process,
            gpus_per_node=self.lab.pool_capacity.per_node, pool_nodes=self.lab.gpu_max_nodes if self.whole_gpu_pool else 1,
            images=images.for_lab(self.lab),
        )  # fmt: skip
        self.node.start()

    def _wait(self, component: Component, check: Callable[[], str | None], what: str) -> None:
        """Poll `check` (None when healthy, else the reason) until healthy, the process exits or time runs out."""
        deadline = time.monotonic() + START_TIMEOUT_S
        reason = "no answer yet"
        while time.monotonic() < deadline:
            code = component.exited()
            if code is not None:
                raise ControlPlaneError(
                    f"{component.name} exited with code {code} before {what}; last lines of {component.log}:\n"
                    + log_tail(component.log)
                )
            try:
                answer = check()
            except (httpx.HTTPError, OSError) as e:
                answer = f"{type(e).__name__}: {e}"
            if answer is None:
                self.say(f"  {component.name}: {what}")
                return
            reason = answer
            time.sleep(0.5)
        raise ControlPlaneError(
            f"{component.name} not {what} after {START_TIMEOUT_S:.0f} s: {reason}; last lines of {component.log}:\n"
            + log_tail(component.log)
        )

    def _start_etcd(self, client: int, peer: int) -> None:
        client_url, peer_url = f"http://{LOOPBACK}:{client}", f"http://{LOOPBACK}:{peer}"
        etcd = self._launch(
            "etcd",
            "--name=local",
            f"--data-dir={self.state / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=local={peer_url}",
            # A throwaway store: its durability costs fsyncs a test never needs.
            "--unsafe-no-fsync",
        )

        def healthy() -> str | None:
            body = httpx.get(f"{client_url}/health", timeout=2).json()
            return None if body.get("health") == "true" else json.dumps(body)

        self._wait(etcd, healthy, "healthy")

    def admin_client(self, pki: certs.Pki, timeout_s: float = 5) -> httpx.Client:
        context = ssl.create_default_context(cafile=str(pki.ca))
        context.load_cert_chain(str(pki.cert(certs.ADMIN.file)), str(pki.key(certs.ADMIN.file)))
        return httpx.Client(base_url=self.server, verify=context, timeout=timeout_s)

    def _start_apiserver(self, pki: certs.Pki, port: int, etcd_client: int) -> None:
        apiserver = self._launch(
            "kube-apiserver",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--etcd-servers=http://{LOOPBACK}:{etcd_client}",
            f"--tls-cert-file={pki.cert('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca}",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={self.lab.services_cidr}",
            "--authorization-mode=Node,RBAC",
            # As GKE's: privileged pods pass validation (the DCGM exporter is one), Pod Security decides.
            "--allow-privileged=true",
            # The nodes' one address (loopback, kwok's server): never a host name to look up.
            "--kubelet-preferred-address-types=InternalIP",
            # GKE's admission set beyond the defaults (Pod Security, quotas, webhooks are on by default).
            "--enable-admission-plugins=NodeRestriction",
            # Its identity towards a real node's kubelet (logs, exec, port-forward), which authorises it.
            f"--kubelet-client-certificate={pki.cert(certs.KUBELET_CLIENT.file)}",
            f"--kubelet-client-key={pki.key(certs.KUBELET_CLIENT.file)}",
            f"--cert-dir={self.state / 'apiserver'}",
            # The aggregation layer (an APIService served by another server: KEDA's external metrics), as
            # kubeadm and GKE set it up; the API server dials the APIService's endpoint, not its ClusterIP.
            f"--requestheader-client-ca-file={pki.ca}",
            f"--requestheader-allowed-names={certs.FRONT_PROXY.user}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.cert(certs.FRONT_PROXY.file)}",
            f"--proxy-client-key-file={pki.key(certs.FRONT_PROXY.file)}",
            "--enable-aggregator-routing=true",
        )
        with self.admin_client(pki) as client:

            def ready() -> str | None:
                answer = client.get("/readyz", params={"verbose": "true"})
                if answer.status_code != 200:
                    failing = [ln for ln in answer.text.splitlines() if "[-]" in ln]
                    return f"/readyz {answer.status_code}: {'; '.join(failing) or answer.text.strip()}"
                live = client.get("/livez", params={"verbose": "true"})
                return None if live.status_code == 200 else f"/livez {live.status_code}: {live.text.strip()}"

            self._wait(apiserver, ready, "ready (/readyz and /livez)")

    def _write_kubeconfigs(self, pki: certs.Pki) -> dict[str, Path]:
        paths = {}
        for identity in certs.CLIENTS:
            path = self.state / "kubeconfigs" / f"{identity.file}.yaml"
            path.parent.mkdir(exist_ok=True)
            config = _kubeconfig(self.server, pki.ca, pki.cert(identity.file), pki.key(identity.file))
            path.write_text(yaml.safe_dump(config))
            path.chmod(0o600)
            paths[identity.file] = path
        shutil.copyfile(paths[certs.ADMIN.file], self.kubeconfig)
        self.kubeconfig.chmod(0o600)
        return paths

    def _start_controllers(self, pki: certs.Pki, kubeconfigs: dict[str, Path], kcm_port: int, scheduler_port: int) -> None:
        def delegated(identity: certs.Identity) -> list[str]:
            path = kubeconfigs[identity.file]
            return [f"--kubeconfig={path}", f"--authentication-kubeconfig={path}", f"--authorization-kubeconfig={path}"]

        kcm = self._launch(
            "kube-controller-manager",
            *delegated(certs.CONTROLLER_MANAGER),
            f"--bind-address={LOOPBACK}",
            f"--secure-port={kcm_port}",
            f"--cert-dir={self.state / 'kube-controller-manager'}",
            f"--service-account-private-key-file={pki.service_account_key}",
            f"--root-ca-file={pki.ca}",
            f"--cluster-signing-cert-file={pki.ca}",
            f"--cluster-signing-key-file={pki.key('ca')}",
            "--use-service-account-credentials=true",
            "--leader-elect=false",
            f"--cluster-name=gml-{self.lab.stack}",
        )
        scheduler = self._launch(
            "kube-scheduler",
            *delegated(certs.SCHEDULER),
            f"--bind-address={LOOPBACK}",
            f"--secure-port={scheduler_port}",
            f"--cert-dir={self.state / 'kube-scheduler'}",
            "--leader-elect=false",
        )
        for component, port in ((kcm, kcm_port), (scheduler, scheduler_port)):

            def healthy(port: int = port) -> str | None:
                # Their serving certificates are self-signed at start; /healthz needs no identity.
                answer = httpx.get(f"https://{LOOPBACK}:{port}/healthz", verify=False, timeout=2)
                return None if answer.status_code == 200 else f"/healthz {answer.status_code}: {answer.text.strip()}"

            self._wait(component, healthy, "healthy (/healthz)")

    def _start_kwok(self, kubeconfig: Path) -> None:
        config = self.state / "kwok.yaml"
        config.write_text(yaml.safe_dump_all(nodes.stages(self.job_seconds)))
        (self.kubelet_port,) = free_ports(1)
        self._launch(
            "kwok", f"--kubeconfig={kubeconfig}", f"--config={config}", *nodes.kwok_flags(self.lab.pods_cidr),
            f"--server-address={nodes.KUBELET_ADDRESS}:{self.kubelet_port}",
        )
        self.shape(self.lab)

    def shape(self, lab: LabConfig) -> None:
        """Make the simulated nodes the lab's: those of another shape go, the lab's come and can take pods."""
        kwok = next(c for c in self.components if c.name == "kwok")
        wanted = {n["metadata"]["name"]: n for n in nodes.lab_nodes(lab, self.kubelet_port)}
        real = wanted.pop(nodes.REAL_NODE_NAME, None) if self.node else None
        if self.node and self.whole_gpu_pool:
            wanted = {name: n for name, n in wanted.items() if not nodes.in_gpu_pool(n)}
        with self.admin_client(certs.Pki(self.state / "pki")) as client:
            for node in client.get("/api/v1/nodes").json()["items"]:
                if node["metadata"].get("annotations", {}).items() >= nodes.KWOK_ANNOTATION.items():
                    client.delete(f"/api/v1/nodes/{node['metadata']['name']}").raise_for_status()
            for name, node in wanted.items():
                answer = client.post("/api/v1/nodes", json=node)
                if answer.status_code != 201:
                    raise ControlPlaneError(f"node {name} refused: {answer.status_code} {answer.text}")

            declared = list(wanted.values()) + ([real] if real else [])

            def all_schedulable() -> str | None:
                listed = client.get("/api/v1/nodes").json()["items"]
                return "; ".join(nodes.not_schedulable(declared, listed)) or None

            self._wait(kwok, all_schedulable, f"{len(declared)} Ready, schedulable nodes ({', '.join(sorted(n['metadata']['name'] for n in declared))})")
            kube, kwok_version = MODULES["kube"].versions(), MODULES["kwok"].versions()["sigs.k8s.io/kwok"]
            simulated = nodes.simulated(list(wanted.values()), kwok_version, self.job_seconds)
            declare(client, {
                f"{REAL}kubernetes": f"kube-apiserver, kube-controller-manager and kube-scheduler {kube['k8s.io/kubernetes']} "
                f"(k8s.io/kubernetes), etcd {kube['go.etcd.io/etcd/server/v3']}: every API answer, admission (RBAC, Pod "
                "Security, ResourceQuota, LimitRange, CEL rules, webhooks), scheduling, and the built-in controllers "
                "(Job, pod garbage collector, node lifecycle, garbage collector)",
                **{f"{SIMULATED}{part}": line for part, line in simulated.items()},
                **(self.node.statement() if self.node else {}),
            })  # fmt: skip
        self.lab = lab

    # -------------------------------------------------------------------------------- stop

    def stop(self) -> None:
        """Stop every component, the last started first; waits for each to exit. A real node goes whole:
        every process in its namespaces, its namespaces, their mounts and devices, then its cgroups."""
        if self.node:
            self.node.stop()
        while self.components:
            component = self.components.pop()
            component.stop()
