"""KEDA on the real node for a lab with autoscaling on: its operator and its metrics API server, built from
KEDA's module at the version components/versions.py pins (localcluster/gomod/keda), serving the ScaledObjects
the lab's `pulumi up` made, so the HPA in the real kube-controller-manager scales the lab's Deployment.

On GKE both run as pods of KEDA's chart in `keda`; locally the chart's CRDs are applied without its workloads
(`charts: upstream-crds`), and both run as processes in the real node's network namespace (as pods with
hostNetwork on it would), acting with the admin's identity. Each piece is KEDA's own: the operator reads
Prometheus at the trigger's `serverAddress` (the in-cluster name resolves to the node's stand-in Service
address, as cluster DNS resolves it for a pod: see localcluster.prometheus), keeps the HPA it owns, and hands
the metric to the metrics server over its mutual-TLS gRPC; the metrics server is the aggregated API
`v1beta1.external.metrics.k8s.io` the HPA reads through the API server's aggregation layer (an APIService, a
Service and its endpoint at the node's address). The pair both authenticate with is the cluster CA's, made as
KEDA's own certificate manager makes it (one pair for the operator and the metrics server's Service names).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from components.keda import NAMESPACE
from components.observability import PROMETHEUS
from facts.simulation import REAL
from localcluster import certs
from localcluster.build import MODULES
from localcluster.controlplane import ControlPlane, ControlPlaneError, Component, declare, log_tail

OPERATOR, METRICS_SERVER = "keda-operator", "keda-operator-metrics-apiserver"  # the chart's Service names
# The metrics server's Service lives in a namespace of the local cluster's own: the lab's `pulumi destroy`
# deletes the chart's namespace while KEDA still runs (it removes its finalizers), and an APIService whose
# Service is gone turns discovery stale, which stops every namespace deletion of that destroy.
SERVICE_NAMESPACE = "gml-local-keda"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
GRPC_PORT = 9666  # KEDA's default metrics service port
HEALTH_PORT = 8081
METRICS_PORT, ADAPTER_METRICS_PORT = 8082, 8080  # each one's own /metrics, inside the node's network
SECURE_PORT = 6443
START_TIMEOUT_S = 120.0
LOCAL_LABEL = {"gke-ml-labs/local": "true"}


def version() -> str:
    return MODULES["keda"].versions()["github.com/kedacore/keda/v2"]


def _env(kubeconfig: str) -> dict[str, str]:
    # Every namespace watched; KEDA's own objects in its namespace, as its chart sets them.
    return {"WATCH_NAMESPACE": "", "POD_NAMESPACE": NAMESPACE, "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE,
            "KUBECONFIG": kubeconfig}  # fmt: skip


def _wait(what: str, component: Component, check: Any) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    reason = "no answer yet"
    while time.monotonic() < deadline:
        if component.exited() is not None:
            break
        try:
            reason = check()
        except httpx.HTTPError as e:
            reason = f"{type(e).__name__}: {e}"
        if reason is None:
            return
        time.sleep(0.5)
    raise ControlPlaneError(f"{what} not ready ({reason}); last lines of {component.log}:\n{log_tail(component.log)}")


def _objects(address: str, ca: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The chart's APIService for external metrics, its Service, and that Service's one endpoint: the metrics
    server at the node's address (the API server dials the endpoint: --enable-aggregator-routing)."""
    ns = SERVICE_NAMESPACE
    meta = {"name": METRICS_SERVER, "namespace": ns, "labels": LOCAL_LABEL}
    port = {"name": "https", "port": SECURE_PORT, "protocol": "TCP"}
    return [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": LOCAL_LABEL}}),
        (f"/api/v1/namespaces/{ns}/services", {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"ports": [{"name": "https", "port": 443, "targetPort": SECURE_PORT, "protocol": "TCP"}]}}),
        (f"/api/v1/namespaces/{ns}/endpoints", {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta,
         "subsets": [{"addresses": [{"ip": address}], "ports": [port]}]}),
        ("/apis/apiregistration.k8s.io/v1/apiservices", {
            "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": API_SERVICE, "labels": LOCAL_LABEL},
            "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                     "versionPriority": 100, "caBundle": base64.b64encode(ca).decode(),
                     "service": {"namespace": ns, "name": METRICS_SERVER, "port": 443}}}),
    ]  # fmt: skip


def _available(client: httpx.Client) -> str | None:
    status = client.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{API_SERVICE}").json().get("status") or {}
    available = next((c for c in status.get("conditions") or [] if c.get("type") == "Available"), {})
    return None if available.get("status") == "True" else f"APIService {available.get('reason')}: {available.get('message')}"


@contextmanager
def serving(plane: ControlPlane, keda_binaries: Any) -> Iterator[None]:
    """KEDA's operator and metrics server on the real node, the external metrics API registered; all of it
    gone on exit (the APIService first, so no request meets a server that is not there)."""
    node = plane.node
    if node is None:
        raise ControlPlaneError("KEDA runs on the real node: start the cluster with real_node")
    pki = certs.Pki(plane.state / "pki")
    home = plane.state / "keda"
    certs_dir = home / "certs"
    certs_dir.mkdir(parents=True, exist_ok=True)
    address = node.addresses.node
    names = [f"{METRICS_SERVER}.{SERVICE_NAMESPACE}.svc", f"{OPERATOR}.{NAMESPACE}.svc"]
    certs.issue_pair(pki, "keda", [*names, *(f"{n}.cluster.local" for n in names)], ["127.0.0.1", address])
    (certs_dir / "ca.crt").write_bytes(pki.ca.read_bytes())
    (certs_dir / "tls.crt").write_bytes(pki.cert("keda").read_bytes())
    (certs_dir / "tls.key").write_bytes(pki.key("keda").read_bytes())
    kubeconfig = str(plane.kubeconfig)
    env = _env(kubeconfig)
    # The trigger's serverAddress names Prometheus in cluster DNS; a pod on the node would resolve it to the
    # Service, whose endpoint is the node's address.
    prometheus = f"{PROMETHEUS['service']}.{PROMETHEUS['namespace']}.svc"
    hosts = {prometheus: address, f"{prometheus}.cluster.local": address}
    operator = plane.start_process("keda-operator", node.in_node_network("keda-operator", [
        str(keda_binaries.binary("keda")), "--leader-elect=false", f"--cert-dir={certs_dir}",
        "--enable-cert-rotation=false", f"--health-probe-bind-address={address}:{HEALTH_PORT}",
        f"--metrics-bind-address=127.0.0.1:{METRICS_PORT}", f"--metrics-service-bind-address=127.0.0.1:{GRPC_PORT}",
        "--zap-log-level=info"], hosts), env)  # fmt: skip
    made: list[str] = []
    adapter = None
    with plane.admin_client(pki, timeout_s=30) as client:
        try:
            _wait("KEDA's operator (/readyz)", operator,
                  lambda: None if httpx.get(f"http://{address}:{HEALTH_PORT}/readyz", timeout=2).status_code == 200 else "/readyz")
            adapter = plane.start_process("keda-metrics-server", node.in_node_network("keda-metrics-server", [
                str(keda_binaries.binary("keda-adapter")), f"--secure-port={SECURE_PORT}", f"--bind-address={address}",
                f"--cert-dir={certs_dir}", f"--tls-cert-file={certs_dir / 'tls.crt'}",
                f"--tls-private-key-file={certs_dir / 'tls.key'}", f"--metrics-service-address=127.0.0.1:{GRPC_PORT}",
                f"--port={ADAPTER_METRICS_PORT}", f"--kubeconfig={kubeconfig}", f"--lister-kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}", f"--authorization-kubeconfig={kubeconfig}"]), env)  # fmt: skip
            for path, body in _objects(address, pki.ca.read_bytes()):
                answer = client.post(path, json=body)
                if answer.status_code not in (201, 409):
                    raise ControlPlaneError(f"{body['kind']} {body['metadata']['name']} refused: {answer.status_code} {answer.text}")
                if answer.status_code == 201:
                    made.append(f"{path}/{body['metadata']['name']}")
            _wait("KEDA's metrics server (APIService Available)", adapter, lambda: _available(client))
            declare(client, {f"{REAL}keda": f"KEDA {version()} operator and metrics server (github.com/kedacore/keda/v2), "
                             f"processes on {node.name}'s network; the HPA acting on their metric is "
                             "kube-controller-manager's"})  # fmt: skip
            plane.say(f"keda: operator and metrics server ready; {API_SERVICE} Available")
            yield
        finally:
            for path in reversed(made):
                client.delete(path)
            if made:
                declare(client, {f"{REAL}keda": None})
            for component in (adapter, operator):
                if component is not None:
                    component.stop()
