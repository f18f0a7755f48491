"""Prometheus on the real node for a lab with observability on: Debian's Prometheus server scraping what the
lab's ServiceMonitors select, as the Prometheus operator's generated configuration would, and a Service under
the chart's name so clients find it where the lab's outputs say.

On GKE the kube-prometheus-stack chart runs the Prometheus operator, which turns each ServiceMonitor into a
scrape job over Kubernetes service discovery; locally the chart's CRDs are applied without its workloads
(the lab's `charts: upstream-crds`). Here the server is real (Debian's `prometheus`, installed as .ci/run
installs it: scraping, storage, PromQL) and two parts are ours: the operator's (one job per ServiceMonitor
endpoint) and the discovery, which Debian builds Prometheus without: a thread lists the Endpoints of the
Services each ServiceMonitor selects and writes their ready addresses, with the target labels the operator
sets (namespace, service, pod, endpoint, job) that queries such as KEDA's trigger filter on, to the file the
job reads (file_sd_configs). It runs in the real node's network namespace (where it reaches the pods),
listening on the node's address; the Service `<release>-prometheus` in `monitoring` points there, so a client
in the node's network (KEDA's operator) or on this host (the benchmark) reaches it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml

from components.observability import PROMETHEUS
from facts.simulation import REAL
from localcluster import certs
from localcluster.controlplane import ControlPlane, ControlPlaneError, declare, log_tail

PORT = PROMETHEUS["port"]
SERVICE_MONITORS = "/apis/monitoring.coreos.com/v1/servicemonitors"
START_TIMEOUT_S = 60.0
DISCOVERY_S = 2.0  # how often the targets are listed (Kubernetes discovery watches; this polls)
LOCAL_LABEL = {"gke-ml-labs/local": "true"}


def scrape_config(monitor: dict[str, Any], targets: Path) -> list[dict[str, Any]]:
    """The scrape jobs the Prometheus operator makes of one ServiceMonitor, one per endpoint, each reading
    its targets from a file under `targets` (`discovered` writes it)."""
    meta, spec = monitor["metadata"], monitor["spec"]
    if (spec.get("selector") or {}).get("matchExpressions"):
        raise ControlPlaneError(f"ServiceMonitor {meta['namespace']}/{meta['name']}: matchExpressions are not translated")
    return [{
        "job_name": _job(monitor, i),
        "scrape_interval": endpoint.get("interval", "30s"),
        "metrics_path": endpoint.get("path", "/metrics"),
        "file_sd_configs": [{"files": [str(targets / f"{_file(monitor, i)}.json")], "refresh_interval": "5s"}],
    } for i, endpoint in enumerate(spec.get("endpoints") or [])]  # fmt: skip


def _job(monitor: dict[str, Any], i: int) -> str:
    return f"serviceMonitor/{monitor['metadata']['namespace']}/{monitor['metadata']['name']}/{i}"


def _file(monitor: dict[str, Any], i: int) -> str:
    return _job(monitor, i).replace("/", "_")


def discovered(monitor: dict[str, Any], services: list[dict[str, Any]], endpoints: list[dict[str, Any]]) -> dict[str, list]:
    """Each job's target groups (file_sd's format) as Kubernetes service discovery and the operator's
    relabelling make them: the ready addresses of the selected Services' ports of the endpoint's name."""
    spec = monitor["spec"]
    names = set((spec.get("namespaceSelector") or {}).get("matchNames") or [monitor["metadata"]["namespace"]])
    wanted = ((spec.get("selector") or {}).get("matchLabels") or {}).items()
    chosen = {(s["metadata"]["namespace"], s["metadata"]["name"]) for s in services
              if s["metadata"]["namespace"] in names and (s["metadata"].get("labels") or {}).items() >= wanted}  # fmt: skip
    out = {}
    for i, endpoint in enumerate(spec.get("endpoints") or []):
        groups = []
        for e in endpoints:
            ns, service = e["metadata"]["namespace"], e["metadata"]["name"]
            if (ns, service) not in chosen:
                continue
            for subset in e.get("subsets") or []:
                ports = [p["port"] for p in subset.get("ports") or [] if p.get("name") == endpoint["port"]]
                for address in subset.get("addresses") or []:  # ready ones only (notReadyAddresses apart)
                    pod = (address.get("targetRef") or {}).get("name")
                    labels = {"namespace": ns, "service": service, "job": service, "endpoint": endpoint["port"],
                              **({"pod": pod} if pod else {})}  # fmt: skip
                    groups += [{"targets": [f"{address['ip']}:{port}"], "labels": labels} for port in ports]
        out[_file(monitor, i)] = groups
    return out


def version() -> str:
    done = subprocess.run(["prometheus", "--version"], capture_output=True, text=True, check=False)
    return (done.stdout or done.stderr).splitlines()[0] if done.returncode == 0 else "unknown"


@contextmanager
def serving(plane: ControlPlane) -> Iterator[str]:
    """Prometheus on the real node, scraping the lab's ServiceMonitors as they are now (their targets found
    every DISCOVERY_S); its URL from this host. Stopped, with its Service, on exit."""
    node = plane.node
    if node is None:
        raise ControlPlaneError("Prometheus runs on the real node: start the cluster with real_node")
    if shutil.which("prometheus") is None:
        raise ControlPlaneError("prometheus is not on PATH: install Debian's package (apt-get install prometheus)")
    pki = certs.Pki(plane.state / "pki")
    home = plane.state / "prometheus"
    targets = home / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    address = node.addresses.node
    stop = threading.Event()
    with plane.admin_client(pki, timeout_s=30) as client:
        monitors = client.get(SERVICE_MONITORS).json().get("items") or []
        jobs = [job for m in monitors for job in scrape_config(m, targets)]
        config = home / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"scrape_interval": "15s"}, "scrape_configs": jobs}, sort_keys=False))

        def discover() -> None:
            services = client.get("/api/v1/services").json().get("items") or []
            endpoints = client.get("/api/v1/endpoints").json().get("items") or []
            for monitor in monitors:
                for name, groups in discovered(monitor, services, endpoints).items():
                    partial = targets / f"{name}.json.partial"
                    partial.write_text(json.dumps(groups))
                    partial.replace(targets / f"{name}.json")  # atomic: Prometheus never reads half a file

        def loop() -> None:
            while not stop.wait(DISCOVERY_S):
                try:
                    discover()
                except httpx.HTTPError as e:  # one failed listing is a late update, not the end of scraping
                    plane.say(f"prometheus: discovery: {e}")

        discover()
        command = ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={home / 'data'}",
                   f"--web.listen-address={address}:{PORT}", "--log.level=warn"]  # fmt: skip
        component = plane.start_process("prometheus", node.in_node_network("prometheus", command))
        thread = threading.Thread(target=loop, name="prometheus-discovery", daemon=True)
        thread.start()
        made: list[str] = []  # what it created (a namespace the lab made stays)
        try:
            url = f"http://{address}:{PORT}"
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _ready(url):
                if component.exited() is not None or time.monotonic() > deadline:
                    raise ControlPlaneError(f"prometheus did not start; last lines of {component.log}:\n{log_tail(component.log)}")
                time.sleep(0.5)
            for path, body in _service(address):
                answer = client.post(path, json=body)
                if answer.status_code not in (201, 409):
                    raise ControlPlaneError(f"{body['kind']} {body['metadata']['name']} refused: {answer.status_code} {answer.text}")
                if answer.status_code == 201:
                    made.append(f"{path}/{body['metadata']['name']}")
            declare(client, {f"{REAL}prometheus": f"{version()} (Debian's package) on {node.name}'s network, {len(jobs)} "
                             "scrape job(s) made of the lab's ServiceMonitors as the Prometheus operator makes them; "
                             "their targets listed from the API by the local cluster (Debian builds Prometheus "
                             "without Kubernetes discovery)"})  # fmt: skip
            plane.say(f"prometheus: {url}, {len(jobs)} scrape job(s) from {len(monitors)} ServiceMonitor(s)")
            yield url
        finally:
            stop.set()
            thread.join()
            for path in reversed(made):
                client.delete(path)
            declare(client, {f"{REAL}prometheus": None})
            component.stop()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _service(address: str) -> list[tuple[str, dict[str, Any]]]:
    """The chart's Service name for Prometheus, its one endpoint the node's address (kube-controller-manager
    mirrors the Endpoints into an EndpointSlice)."""
    ns, name = PROMETHEUS["namespace"], PROMETHEUS["service"]
    meta = {"name": name, "namespace": ns, "labels": LOCAL_LABEL}
    port = {"name": "http-web", "port": PORT, "protocol": "TCP"}
    return [
        ("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        (f"/api/v1/namespaces/{ns}/services",
         {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {"ports": [{**port, "targetPort": PORT}]}}),
        (f"/api/v1/namespaces/{ns}/endpoints",
         {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta,
          "subsets": [{"addresses": [{"ip": address}], "ports": [port]}]}),
    ]  # fmt: skip

