"""A Cloud Storage bucket for the local cluster: fake-gcs-server, built from its Go module (localcluster/gomod/gcs),
serving the JSON API (objects' media download and upload, as g8's trainer uses them) over plain HTTP, with the
lab's bucket made in it. Pods reach it where they would reach Cloud Storage: outside the node, at the host's end of
the node's link (an address of the cluster's own), through STORAGE_EMULATOR_HOST, the variable Google's client
libraries honour. Its objects are on this host's disk, so they outlive the node's power-off as a bucket does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from facts.simulation import SIMULATED
from localcluster.build import MODULES, Built
from localcluster.controlplane import ControlPlane, ControlPlaneError, declare, free_ports, log_tail
from localcluster import certs

START_TIMEOUT_S = 60.0


@contextmanager
def serving(plane: ControlPlane, built: Built, bucket: str) -> Iterator[str]:
    """The emulator's URL (for STORAGE_EMULATOR_HOST) with `bucket` in it; stopped with the cluster."""
    if plane.node is None:
        raise ControlPlaneError("the bucket's emulator serves the real node's pods: start the cluster with real_node")
    address, (port,) = plane.node.addresses.host, free_ports(1)
    url = f"http://{address}:{port}"
    server = plane.start_process("fake-gcs-server", [
        str(built.binary("fake-gcs-server")), "-scheme", "http", f"-host={address}", f"-port={port}",
        "-backend=filesystem", f"-filesystem-root={plane.state / 'gcs'}", f"-external-url={url}", "-log-level=warn",
    ])  # fmt: skip
    deadline, reason = time.monotonic() + START_TIMEOUT_S, "no answer yet"
    while True:
        if server.exited() is not None:
            raise ControlPlaneError(f"fake-gcs-server exited with code {server.exited()}:\n" + log_tail(server.log))
        try:
            made = httpx.post(f"{url}/storage/v1/b", json={"name": bucket}, timeout=2)
            if made.status_code in (200, 409):
                break
            reason = f"{made.status_code} {made.text[:200]}"
        except httpx.HTTPError as e:
            reason = f"{type(e).__name__}: {e}"
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"fake-gcs-server not serving after {START_TIMEOUT_S:.0f} s: {reason}")
        time.sleep(0.3)
    with plane.admin_client(certs.Pki(plane.state / "pki")) as client:
        declare(client, {f"{SIMULATED}bucket": f"gs://{bucket} is fake-gcs-server {version()} on this host at {url} "
                         "(the pods' STORAGE_EMULATOR_HOST, no credentials), not Cloud Storage"})  # fmt: skip
    try:
        yield url
    finally:
        server.stop()


def version() -> str:
    return MODULES["gcs"].versions()["github.com/fsouza/fake-gcs-server"]
