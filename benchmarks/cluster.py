"""The thin cluster layer of the lab benchmarks: the only module that talks to a live cluster.

`KubeCluster` wraps the `kubernetes` client (kubeconfig from the stack outputs; GKE's kubeconfig
authenticates through the `gke-gcloud-auth-plugin` exec plugin). `RunScope` labels every object a
run creates with the run id and deletes everything carrying that label when the run ends, however
it ends (error, timeout, Ctrl-C, SIGTERM). `wait_until` polls with a deadline and shows progress.
Everything that turns API objects into numbers lives in pure functions elsewhere.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import yaml

from benchmarks.errors import BenchmarkError
from benchmarks.harness.answers import body_text
from benchmarks.harness.signals import shielded, sigterm_raises
from facts.gke_auth import ADC_FLAG, ADC_LOGIN_HINT, AUTH_PLUGIN, GCLOUD_LOGIN_HINT, INSTALL_HINT

RUN_LABEL = "gke-ml-labs/benchmark-run"
LAB_LABEL = "gke-ml-labs/lab"

T = TypeVar("T")


class KubeApiError(BenchmarkError):
    """The cluster could not be reached or refused an operation; says which and why."""


class Gone(KubeApiError):
    """The object is not there (HTTP 404): deleted since it was listed, as a finished pod may be at once."""


class WaitTimeout(KubeApiError):
    """A wait ran past its deadline; the message says what was awaited and what was last seen."""


class Cluster(Protocol):
    """What the lab benchmarks need from a cluster (the real one, or a test double)."""

    def create(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]: ...

    def delete_labelled(self, api_version: str, kind: str, namespace: str | None, label_selector: str) -> None: ...

    def patch(self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...

    def pod_log(self, namespace: str, name: str, container: str | None = None) -> str: ...

    def follow_log(self, namespace: str, name: str, container: str | None = None) -> Iterator[str]: ...

    def service_get(self, namespace: str, service: str, port: int, path: str, params: dict[str, str]) -> str: ...

    def service_post(
        self, namespace: str, service: str, port: int, path: str, body: dict[str, Any], timeout_s: float
    ) -> str: ...

    def pod_get(self, namespace: str, pod: str, port: int, path: str) -> str: ...

    def server_version(self) -> dict[str, Any]: ...


class KubeCluster:
    """`Cluster` over the official client's dynamic API (any kind, CRs included, one code path)."""

    def __init__(self, api_client: Any, request_timeout_s: float = 60.0):
        from kubernetes import dynamic

        self._api_client = api_client
        # Every call is bounded: without it a connection that hangs (control plane upgrade, network
        # drop) blocks forever, past every wait_until deadline, and cleanup never starts.
        self._timeout = request_timeout_s
        try:
            self._dyn = dynamic.DynamicClient(api_client)
        except Exception as e:  # discovery is the first call that reaches the API server
            raise KubeApiError(f"cannot reach the cluster's API server: {brief(e)}") from e

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | dict[str, Any], request_timeout_s: float = 60.0) -> KubeCluster:
        """Build from the stack output `kubeconfig` (YAML/JSON text or already parsed)."""
        from kubernetes import config

        if kubeconfig == "[secret]":  # what `pulumi stack output --json` prints for a secret it does not show
            raise KubeApiError(
                "stack output 'kubeconfig' is masked as [secret]: save the outputs with "
                "`pulumi stack output --json --show-secrets -s STACK > FILE`"
            )
        parsed = yaml.safe_load(kubeconfig) if isinstance(kubeconfig, str) else kubeconfig
        if not isinstance(parsed, dict) or "clusters" not in parsed:
            raise KubeApiError("stack output 'kubeconfig' is not a kubeconfig (no 'clusters' key)")
        if AUTH_PLUGIN in yaml.safe_dump(parsed) and shutil.which(AUTH_PLUGIN) is None:
            raise KubeApiError(
                f"the kubeconfig authenticates with {AUTH_PLUGIN}, which is not on PATH: install it with "
                f"`{INSTALL_HINT}` and log in with "
                "`gcloud auth application-default login` (the plugin uses Application Default Credentials)"
            )
        exec_plugin = _exec_plugin(parsed)
        if exec_plugin is not None:
            check_exec_plugin(exec_plugin)
        with _quiet_client_logging():
            return cls(config.new_client_from_config_dict(parsed, persist_config=False), request_timeout_s)

    def _resource(self, api_version: str, kind: str) -> Any:
        try:
            return self._dyn.resources.get(api_version=api_version, kind=kind)
        except Exception as e:
            raise KubeApiError(
                f"the cluster does not serve {kind} ({api_version}): is the lab's component installed? ({brief(e)})"
            ) from e

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        res = self._resource(obj["apiVersion"], obj["kind"])
        ns = obj["metadata"].get("namespace") if res.namespaced else None
        try:
            return self._dyn.create(res, body=obj, namespace=ns, _request_timeout=self._timeout).to_dict()
        except Exception as e:
            raise KubeApiError(f"creating {obj['kind']} {ns}/{obj['metadata']['name']} failed: {brief(e)}") from e

    def list(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        res = self._resource(api_version, kind)
        try:
            out = self._dyn.get(
                res, namespace=namespace if res.namespaced else None, label_selector=label_selector,
                _request_timeout=self._timeout,
            )
        except Exception as e:  # e.g. 403: the lab's error path (and its partial recording) must see it
            raise KubeApiError(f"listing {kind} in {namespace or 'all namespaces'} failed: {brief(e)}") from e
        return out.to_dict().get("items", [])

    def delete_labelled(self, api_version: str, kind: str, namespace: str | None, label_selector: str) -> None:
        res = self._resource(api_version, kind)
        # Background propagation: a Job's pods go with it, and the call does not block on them.
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        ns = namespace if res.namespaced else None
        if "deletecollection" in (res.verbs or []):
            self._dyn.delete(res, namespace=ns, label_selector=label_selector, body=body, _request_timeout=self._timeout)
            return
        # Some kinds serve no collection delete (Namespaces): one by one, as kubectl does.
        for obj in self.list(api_version, kind, ns, label_selector):
            name = obj["metadata"]["name"]
            self._dyn.delete(res, name=name, namespace=ns, body=body, _request_timeout=self._timeout)

    def patch(self, api_version: str, kind: str, namespace: str | None, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386: null deletes a field) of one object."""
        res = self._resource(api_version, kind)
        ns = namespace if res.namespaced else None
        try:
            return self._dyn.patch(
                res, body=patch, name=name, namespace=ns, content_type="application/merge-patch+json",
                _request_timeout=self._timeout,
            ).to_dict()
        except Exception as e:
            raise KubeApiError(f"patching {kind} {ns}/{name} failed: {e}") from e

    def pod_log(self, namespace: str, name: str, container: str | None = None) -> str:
        """The pod's log; a pod with several containers (KServe's queue-proxy, Argo's wait) needs
        `container`: the API server answers 400 without it (kubectl's default-container is client-side)."""
        from kubernetes import client

        try:
            return client.CoreV1Api(self._api_client).read_namespaced_pod_log(
                name, namespace, container=container, _request_timeout=self._timeout
            )
        except Exception as e:
            kind = Gone if getattr(e, "status", None) == 404 else KubeApiError
            raise kind(f"reading the log of pod {namespace}/{name} failed: {brief(e)}") from e

    def follow_log(self, namespace: str, name: str, container: str | None = None) -> Iterator[str]:
        """The pod's log line by line as it is written, until the container ends (`kubectl logs -f`).

        The read timeout applies between chunks: a writer that says nothing for that long (the g6
        load generator prints at least every few seconds) counts as a dead connection."""
        from kubernetes import client

        try:
            resp = client.CoreV1Api(self._api_client).read_namespaced_pod_log(
                name, namespace, container=container, follow=True, _preload_content=False,
                _request_timeout=self._timeout,
            )  # fmt: skip
        except Exception as e:
            raise KubeApiError(f"following the log of pod {namespace}/{name} failed: {brief(e)}") from e
        tail = b""
        try:
            # read1: whatever has arrived, without waiting for a full buffer (a quiet log stays open).
            while chunk := resp.read1(65536):
                lines = (tail + chunk).split(b"\n")
                tail = lines.pop()
                for line in lines:
                    yield line.decode(errors="replace")
            if tail:
                yield tail.decode(errors="replace")
        except Exception as e:  # urllib3's read timeout or a dropped connection, mid-stream
            raise KubeApiError(f"the log stream of pod {namespace}/{name} broke: {brief(e)}") from e
        finally:
            resp.release_conn()

    def service_get(self, namespace: str, service: str, port: int, path: str, params: dict[str, str]) -> str:
        """GET through the API server's service proxy: reaches ClusterIP services with no port-forward."""
        return self._proxy("GET", _service_proxy(namespace, service, port, path),
                           f"service {namespace}/{service}:{port}", path, params)

    def service_post(
        self, namespace: str, service: str, port: int, path: str, body: dict[str, Any], timeout_s: float
    ) -> str:
        """POST a JSON body through the API server's service proxy, within `timeout_s`."""
        return self._proxy("POST", _service_proxy(namespace, service, port, path),
                           f"service {namespace}/{service}:{port}", path, {}, body, timeout_s)

    def pod_get(self, namespace: str, pod: str, port: int, path: str) -> str:
        """GET through the API server's pod proxy: one pod's own endpoint (e.g. a model server's metrics)."""
        return self._proxy("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/{path.lstrip('/')}",
                           f"pod {namespace}/{pod}:{port}", path, {})

    def _proxy(
        self, method: str, resource_path: str, where: str, path: str, params: dict[str, str],
        body: dict[str, Any] | None = None, timeout_s: float | None = None,
    ) -> str:  # fmt: skip
        headers = {"Content-Type": "application/json"} if body is not None else None
        request = self._api_client.param_serialize(
            method=method, resource_path=resource_path, query_params=list(params.items()), header_params=headers,
            body=body, auth_settings=["BearerToken"],
        )  # fmt: skip
        try:
            response = self._api_client.call_api(*request, _request_timeout=timeout_s or self._timeout)
            response.read()
        except Exception as e:
            raise KubeApiError(f"{method} {path} on {where} failed: {brief(e)}") from e
        text = response.data.decode(errors="replace")
        # call_api does not raise on an error status: the proxy's 503 (no ready endpoints) or 404 (no
        # such service or pod) would otherwise reach the caller as if the service had answered.
        if not 200 <= response.status <= 299:
            raise KubeApiError(f"{method} {path} on {where} answered HTTP {response.status}: {body_text(text)}")
        return text

    def server_version(self) -> dict[str, Any]:
        """GET /version as the server wrote it (camelCase), which discovery has already fetched."""
        return dict(self._dyn.version["kubernetes"])


def _service_proxy(namespace: str, service: str, port: int, path: str) -> str:
    return f"/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{path.lstrip('/')}"


def brief(error: Exception) -> str:
    """One line for an error of the kubernetes client: its ApiException text spans status, reason,
    every response header and the body; the status, reason and the API's own message say it all."""
    status = getattr(error, "status", None)
    if status is None:
        lines = [line for line in str(error).splitlines() if line.strip()]
        return lines[0] if lines else type(error).__name__
    body = getattr(error, "body", None)
    try:
        message = json.loads(body).get("message") if body else None
    except (ValueError, TypeError, AttributeError):
        message = None
    return f"HTTP {status} {getattr(error, 'reason', '') or ''}".rstrip() + (f": {message}" if message else "")


def _exec_plugin(kubeconfig: dict[str, Any]) -> dict[str, Any] | None:
    """The exec credential plugin of the kubeconfig's current user, if it has one."""
    contexts = {c.get("name"): c.get("context") or {} for c in kubeconfig.get("contexts") or []}
    users = {u.get("name"): u.get("user") or {} for u in kubeconfig.get("users") or []}
    context = contexts.get(kubeconfig.get("current-context")) or next(iter(contexts.values()), {})
    return (users.get(context.get("user")) or {}).get("exec")


def check_exec_plugin(plugin: dict[str, Any], timeout_s: float = 60.0) -> None:
    """Run the credential plugin once, as the client would, and turn a failure into one line.

    The client itself reports a failing plugin through the root logger (the plugin's whole stderr,
    a dozen lines from gcloud) and then goes on without a token; the run would stop later at a 401."""
    command = [plugin["command"], *(plugin.get("args") or [])]
    env = {**os.environ, **{e["name"]: e["value"] for e in plugin.get("env") or []}}
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": plugin.get("apiVersion"), "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    try:
        done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KubeApiError(f"the kubeconfig's credential plugin {command[0]} could not run: {e}") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        # gcloud's own diagnosis is the line with "ERROR: (gcloud...."; the plugin wraps it in its log line.
        reason = next((line[line.index("ERROR:"):] for line in lines if "ERROR:" in line), lines[0] if lines else "")
        raise KubeApiError(
            f"{os.path.basename(command[0])} could not get a token (exit {done.returncode}): {reason[:300]} "
            f"{ADC_LOGIN_HINT if ADC_FLAG in command else GCLOUD_LOGIN_HINT}, then run again."
        )


@contextmanager
def _quiet_client_logging() -> Iterator[None]:
    """The kubernetes client logs credential problems with logging.error on the root logger, which
    prints them when nothing else handles logging; a failure surfaces as one KubeApiError instead."""
    root = logging.getLogger()
    handler = logging.NullHandler()
    added = not root.handlers
    if added:
        root.addHandler(handler)
    try:
        yield
    finally:
        if added:
            root.removeHandler(handler)


def with_labels(obj: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    """Add `labels` to the object and to every pod template inside it (Job, PyTorchJob, ...), in place,
    so the pods that controllers create carry the run label too and are swept with it."""
    meta = obj.setdefault("metadata", {})
    meta["labels"] = {**meta.get("labels", {}), **labels}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            template = node.get("template")
            if isinstance(template, dict) and "spec" in template:
                tmeta = template.setdefault("metadata", {})
                tmeta["labels"] = {**tmeta.get("labels", {}), **labels}
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(obj.get("spec"))
    return obj


def run_selector(run_id: str) -> str:
    return f"{RUN_LABEL}={run_id}"


def new_run_id(lab: str) -> str:
    """Short, label-safe and unique enough: lab, UTC time, 4 random hex digits."""
    return f"{lab}-{datetime.now(UTC):%m%d%H%M}-{secrets.token_hex(2)}"


def run_labels(run_id: str, lab: str) -> dict[str, str]:
    """The labels on every object a run creates (RunScope deletes by the first)."""
    return {RUN_LABEL: run_id, LAB_LABEL: lab, "app.kubernetes.io/component": "benchmark"}


class RunScope:
    """Creates a run's objects with its labels; on exit deletes every object kind it created, by label.

    Use as a context manager. Cleanup runs on normal exit, on any exception, on Ctrl-C and on SIGTERM
    (turned into `Interrupted`). Cleanup errors are reported through `log` and never hide the error
    that ended the run. Pods are always swept too: Jobs and controllers create them from templates
    that carry the run label.
    """

    def __init__(self, cluster: Cluster, run_id: str, lab: str, log: Callable[[str], None] = print):
        self.cluster = cluster
        self.run_id = run_id
        self.lab = lab
        self.log = log
        self._created: list[tuple[str, str, str | None]] = []  # (apiVersion, kind, namespace), in order

    @property
    def labels(self) -> dict[str, str]:
        return run_labels(self.run_id, self.lab)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        with_labels(obj, self.labels)
        key = (obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"))
        if key not in self._created:
            self._created.append(key)  # recorded before the call: a half-done create is swept too
        return self.cluster.create(obj)

    def __enter__(self) -> RunScope:
        self._sigterm = sigterm_raises()
        self._sigterm.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.cleanup()
        finally:
            self._sigterm.__exit__(None, None, None)

    def cleanup(self) -> None:
        """Delete everything this run labelled, newest kind first; never raises."""
        selector = run_selector(self.run_id)
        namespaces = {ns for _, _, ns in self._created if ns}
        targets = list(reversed(self._created)) + [("v1", "Pod", ns) for ns in sorted(namespaces)]
        # A second Ctrl-C or SIGTERM (a CI runner's stop) during cleanup must not leave a GPU busy:
        # neither stops it.
        with shielded(lambda name: self.log(f"cleanup: {name} received; deleting what the run created first")):
            for api_version, kind, ns in targets:
                try:
                    self.cluster.delete_labelled(api_version, kind, ns, selector)
                    self.log(f"cleanup: deleted {kind} labelled {selector}" + (f" in {ns}" if ns else ""))
                except Exception as e:  # report and go on: the next kind may still hold a GPU
                    self.log(f"cleanup: FAILED to delete {kind} labelled {selector} in {ns}: {e}")


def wait_until(
    what: str,
    poll: Callable[[], T],
    done: Callable[[T], bool],
    timeout_s: float,
    interval_s: float = 5.0,
    progress: Callable[[str], None] = print,
    describe: Callable[[T], str] = lambda v: "",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Poll until `done(value)`; print progress each poll; raise WaitTimeout after `timeout_s`."""
    start = clock()
    while True:
        value = poll()
        elapsed = clock() - start
        if done(value):
            progress(f"{what}: done after {elapsed:.0f}s")
            return value
        if elapsed >= timeout_s:
            raise WaitTimeout(f"{what}: not done after {timeout_s:.0f}s; last seen: {describe(value) or 'nothing'}")
        progress(f"{what}: waiting ({elapsed:.0f}s of {timeout_s:.0f}s) {describe(value)}")
        sleep(interval_s)

