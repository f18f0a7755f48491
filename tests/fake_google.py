"""A local HTTP server on loopback that answers like the Google REST APIs the operator commands
call (Cloud Resource Manager, Service Usage, Compute, Container, Cloud Storage, BigQuery, Artifact
Registry, Filestore, IAM, Cloud Billing), with the response shapes of Google's API references (the
discovery documents of google-api-python-client 2.202.0: compute v1 revision 20261106, and so on):
list pages with `nextPageToken` (Compute's aggregated lists one scope per page, so every caller must
follow the token), each Compute and Storage page with its `kind`, a `filter` on labels honoured as
Compute honours it, errors as {"error": {code, message, status, details}}, a 401 for an expired token.
It also answers like the Compute Engine metadata server (GCE_METADATA_HOST), the Application
Default Credentials of a VM: a service-account token.

`GoogleState.faults` makes it answer as a broken or busy Google does, at the calls whose path holds a
given text: an empty body, cut-off JSON, a JSON array, a page of the wrong shape, a page token repeated
forever, 403, 429, 500, 503, or no answer before the client's timeout.
Tests set its state and read the calls it saw."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from ops.gcp import DEFAULT_BASE_URLS, ENDPOINT_ENV_PREFIX, TOKEN_ENV, GcpClient, endpoint_overrides

VALID_TOKEN = "ya29.valid-token"
EXPIRED_TOKEN = "ya29.expired-token"


def google_error(code: int, status: str, message: str, reason: str | None = None) -> dict:
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "googleapis.com"}] if reason else []
    return {"error": {"code": code, "message": message, "status": status, "details": details}}


FAULTS = ("empty body", "cut-off JSON", "JSON array", "wrong shape", "repeated page token", "403", "429", "500",
          "503", "timeout")  # fmt: skip
# Also "endless pages" (a new nextPageToken on every page, for the client's bound on pages) and
# "unreachable" (an aggregated list naming a zone it could not reach).
TIMEOUT_DELAY_S = 2.0  # how long a "timeout" fault keeps the caller waiting; tests give the client less


@dataclass
class Fault:
    """Answer the calls whose path holds `where` this way (`times` of them; None: every one)."""

    where: str
    mode: str
    times: int | None = None
    exact: bool = False  # the path is `where` itself, not one holding it
    retry_after: str | None = None  # a Retry-After header with a 429 or 503
    hits: int = 0


# The field holding a list answer's items, per API (the first path segment) and, for Artifact Registry, the call.
_ITEMS = {"compute": "items", "storage": "items", "container": "clusters", "file": "instances", "iam": "accounts",
          "serviceusage": "services"}  # fmt: skip


@dataclass
class GoogleState:
    project: str = "lab-project"
    project_number: str = "123456789012"
    enabled_services: list[str] = field(default_factory=list)
    region_quotas: dict[str, list[dict]] = field(default_factory=dict)  # region -> quotas[]
    zone_accelerators: dict[str, list[str]] = field(default_factory=dict)  # zone -> accelerator names
    instances: dict[str, list[dict]] = field(default_factory=dict)  # zone -> instances
    disks: dict[str, list[dict]] = field(default_factory=dict)  # zone -> disks
    addresses: dict[str, list[dict]] = field(default_factory=dict)  # region, or "global" -> addresses
    forwarding_rules: dict[str, list[dict]] = field(default_factory=dict)  # region, or "global" -> rules
    clusters: list[dict] = field(default_factory=list)  # GKE clusters, any location
    missing_zones: list[str] = field(default_factory=list)  # zones clusters.list could not reach
    buckets: list[dict] = field(default_factory=list)
    hmac_keys: list[dict] = field(default_factory=list)  # HMAC key metadata of the project
    disabled: set[str] = field(default_factory=set)  # first path segments ("storage", ...) of APIs turned off
    objects: dict[str, list[dict]] = field(default_factory=dict)  # bucket -> objects (+ "content" for media)
    bigquery_responses: list[dict] = field(default_factory=list)  # answered in order
    project_quotas: list[dict] = field(default_factory=list)  # compute projects.get quotas (GPUS_ALL_REGIONS, ...)
    billing: dict | None = None  # cloudbilling projects.getBillingInfo; None: a project without a billing account
    target_pools: dict[str, list[dict]] = field(default_factory=dict)  # region -> target pools
    subnetworks: dict[str, list[dict]] = field(default_factory=dict)  # region -> subnetworks
    health_checks: dict[str, list[dict]] = field(default_factory=dict)  # region, or "global" -> health checks
    http_health_checks: list[dict] = field(default_factory=list)  # the legacy global kind
    firewalls: list[dict] = field(default_factory=list)
    networks: list[dict] = field(default_factory=list)
    service_accounts: list[dict] = field(default_factory=list)
    ar_locations: list[str] = field(default_factory=lambda: ["europe-west4", "us", "us-central1"])
    repositories: dict[str, list[dict]] = field(default_factory=dict)  # location -> repositories
    filestore: list[dict] = field(default_factory=list)  # instances, any location
    filestore_unreachable: list[str] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    calls: list[tuple[str, str, dict, Any]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    state: GoogleState

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, code: int, body: dict | list | str | bytes, headers: dict[str, str] | None = None) -> None:
        data = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.state.calls.append((method, url.path, query, body))
        if url.path.startswith("/computeMetadata/v1/"):
            return self._metadata(url.path.removeprefix("/computeMetadata/v1/"))
        token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if token != VALID_TOKEN:
            # What Google answers for an expired or revoked OAuth token.
            return self._send(401, google_error(
                401, "UNAUTHENTICATED",
                "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
                "or other valid authentication credential.", "ACCESS_TOKEN_EXPIRED"))
        fault = next((f for f in self.state.faults if (url.path == f.where if f.exact else f.where in url.path)
                      and (f.times is None or f.hits < f.times)), None)  # fmt: skip
        if fault is not None:
            fault.hits += 1
            if self._fault(fault, method, url.path, query, body):
                return
        code, answer = self._route(method, url.path.split("/"), query, body)  # path still %-encoded
        self._send(code, answer)

    def _fault(self, fault: Fault, method: str, path: str, query: dict, body: Any) -> bool:
        """Answer as `fault` says; False where the answer is the real one, corrupted afterwards."""
        mode = fault.mode
        if mode == "timeout":
            time.sleep(TIMEOUT_DELAY_S)
        errors = {"403": (403, "PERMISSION_DENIED", "The caller does not have permission"),
                  "429": (429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Read requests' and limit "
                          "'Read requests per minute'"),
                  "500": (500, "INTERNAL", "Internal error encountered."),
                  "503": (503, "UNAVAILABLE", "The service is currently unavailable.")}  # fmt: skip
        if mode in errors:
            code, status, message = errors[mode]
            headers = {"Retry-After": fault.retry_after} if fault.retry_after else None
            self._send(code, google_error(code, status, message), headers)
            return True
        if mode in ("empty body", "cut-off JSON", "JSON array"):
            self._send(200, {"empty body": b"", "cut-off JSON": b'{"items": {"zones/us-cen', "JSON array": [1, 2]}[mode])
            return True
        if mode in ("repeated page token", "endless pages"):
            query = {k: v for k, v in query.items() if k != "pageToken"}  # the fault's own tokens: page one again
        code, answer = self._route(method, path.split("/"), query, body)
        if mode == "wrong shape":  # every list, object and flag of the answer, and its list of items, now [1, 2]
            segment = path.split("/")[1]
            key = path.rsplit("/", 1)[-1] if segment == "artifactregistry" else _ITEMS.get(segment, "items")
            answer = {**{k: [1, 2] if isinstance(v, (list, dict, bool)) else v for k, v in answer.items()}, key: [1, 2]}
        elif mode == "repeated page token":
            answer = {**answer, "nextPageToken": "same-token"}
        elif mode == "endless pages":
            answer = {**answer, "nextPageToken": f"page-{fault.hits}"}
        elif mode == "unreachable":  # an aggregated list with returnPartialSuccess's gap
            answer = {**answer, "unreachables": ["zones/us-central1-b"]}
        self._send(code, answer)
        return True

    def _metadata(self, path: str) -> None:
        # The metadata server refuses a request without this header (documented, and what it checks).
        if self.headers.get("Metadata-Flavor") != "Google":
            return self._send(403, "Missing required header: Metadata-Flavor")
        if path == "project/project-id":
            return self._send(200, self.state.project)
        if path == "instance/service-accounts/default/token":
            return self._send(200, {"access_token": VALID_TOKEN, "expires_in": 3599, "token_type": "Bearer"})
        return self._send(404, "Not Found")

    def _route(self, method: str, parts: list[str], query: dict, body: Any) -> tuple[int, dict]:
        s = self.state
        p = "/".join(parts)
        project_prefix = f"projects/{s.project}"
        if p == f"/crm/v1/{project_prefix}":
            return 200, {"projectNumber": s.project_number, "projectId": s.project, "lifecycleState": "ACTIVE",
                         "name": s.project, "createTime": "2026-01-05T10:00:00.000Z"}
        if parts[1] in s.disabled:
            # What Google answers for a call to an API the project has not enabled.
            return 403, google_error(
                403, "PERMISSION_DENIED", f"{parts[1]}.googleapis.com API has not been used in project "
                f"{s.project_number} before or it is disabled.", "SERVICE_DISABLED")
        if parts[1:4] == ["storage", "v1", "b"]:
            return self._storage(parts[4:], query)
        if p == f"/storage/v1/{project_prefix}/hmacKeys":
            return 200, _page("storage#hmacKeysMetadata", s.hmac_keys, query)
        if p.startswith("/crm/v1/projects/") or (project_prefix not in p):
            return 403, google_error(403, "PERMISSION_DENIED", "The caller does not have permission")
        if p == f"/serviceusage/v1/{project_prefix}/services":
            services = [
                {"name": f"projects/{s.project_number}/services/{name}", "config": {"name": name, "title": name},
                 "state": "ENABLED", "parent": f"projects/{s.project_number}"}
                for name in s.enabled_services
            ]
            # Two pages, to exercise nextPageToken.
            if query.get("pageToken") == "page-2":
                return 200, {"services": services[1:]}
            return 200, {"services": services[:1], **({"nextPageToken": "page-2"} if len(services) > 1 else {})}
        if parts[:6] == ["", "compute", "v1", "projects", s.project, "regions"]:
            region = parts[6]
            return 200, {"kind": "compute#region", "id": "1000", "name": region, "status": "UP",
                         "selfLink": f"https://www.googleapis.com/compute/v1/projects/{s.project}/regions/{region}",
                         "zones": [], "quotas": s.region_quotas.get(region, [])}
        if parts[:6] == ["", "compute", "v1", "projects", s.project, "zones"] and parts[7:] == ["acceleratorTypes"]:
            zone = parts[6]
            wanted = query.get("filter", "").removeprefix("name=")
            items = [
                {"kind": "compute#acceleratorType", "id": "10", "name": name, "description": "NVIDIA L4",
                 "zone": f"https://www.googleapis.com/compute/v1/projects/{s.project}/zones/{zone}",
                 "maximumCardsPerInstance": 8}
                for name in s.zone_accelerators.get(zone, []) if not wanted or name == wanted
            ]
            answer = {"kind": "compute#acceleratorTypeList", "id": f"projects/{s.project}/zones/{zone}/acceleratorTypes"}
            if items:
                answer["items"] = items
            else:
                answer["warning"] = {"code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope on this page."}
            return 200, answer
        # collection -> (its scopes, items by scope, its kinds' stem, the aggregated kind's suffix)
        compute_lists = {
            "instances": ("zones", s.instances, "instance", "AggregatedList"),
            "disks": ("zones", s.disks, "disk", "AggregatedList"),
            "addresses": ("regions", s.addresses, "address", "AggregatedList"),
            "forwardingRules": ("regions", s.forwarding_rules, "forwardingRule", "AggregatedList"),
            "targetPools": ("regions", s.target_pools, "targetPool", "AggregatedList"),
            "subnetworks": ("regions", s.subnetworks, "subnetwork", "AggregatedList"),
            "healthChecks": ("regions", s.health_checks, "healthCheck", "sAggregatedList"),  # compute#healthChecksAggregatedList
            "firewalls": ("", {"global": s.firewalls}, "firewall", ""),
            "networks": ("", {"global": s.networks}, "network", ""),
            "httpHealthChecks": ("", {"global": s.http_health_checks}, "httpHealthCheck", ""),
        }  # fmt: skip
        if parts[:6] == ["", "compute", "v1", "projects", s.project, "aggregated"] and parts[6:7] and parts[6] in compute_lists:
            kind = parts[6]
            scope, by_scope, stem, suffix = compute_lists[kind]
            return 200, _aggregated(kind, scope, f"compute#{stem}{suffix}",
                                    {k: v for k, v in by_scope.items() if k != "global"}, query)  # fmt: skip
        if parts[:6] == ["", "compute", "v1", "projects", s.project, "global"] and parts[6:7] and parts[6] in compute_lists:
            kind = parts[6]
            items = _filtered(compute_lists[kind][1].get("global", []), query)
            answer = {"kind": f"compute#{compute_lists[kind][2]}List", "id": f"projects/{s.project}/global/{kind}",
                      "selfLink": f"https://www.googleapis.com/compute/v1/projects/{s.project}/global/{kind}"}  # fmt: skip
            return 200, {**answer, "items": items} if items else answer
        if p == f"/compute/v1/{project_prefix}":
            return 200, {"kind": "compute#project", "id": "100", "name": s.project, "quotas": s.project_quotas,
                         "selfLink": f"https://www.googleapis.com/compute/v1/projects/{s.project}"}  # fmt: skip
        if p == f"/cloudbilling/v1/{project_prefix}/billingInfo":
            info = {"name": f"{project_prefix}/billingInfo", "projectId": s.project}
            # proto3 JSON leaves out a false billingEnabled and an empty account name
            return 200, {**info, **(s.billing or {})}
        if p == f"/iam/v1/{project_prefix}/serviceAccounts":
            return 200, _proto_page("accounts", s.service_accounts, query)
        if p == f"/artifactregistry/v1/{project_prefix}/locations":
            locations = [{"name": f"{project_prefix}/locations/{loc}", "locationId": loc} for loc in s.ar_locations]
            return 200, _proto_page("locations", locations, query)
        if parts[:6] == ["", "artifactregistry", "v1", "projects", s.project, "locations"] and parts[7:] == ["repositories"]:
            return 200, _proto_page("repositories", s.repositories.get(parts[6], []), query)
        if p == f"/file/v1/{project_prefix}/locations/-/instances":
            answer = _proto_page("instances", s.filestore, query)
            return 200, {**answer, "unreachable": s.filestore_unreachable} if s.filestore_unreachable else answer
        if p == f"/container/v1/{project_prefix}/locations/-/clusters":
            answer = {"clusters": s.clusters} if s.clusters else {}
            return 200, {**answer, "missingZones": s.missing_zones} if s.missing_zones else answer
        if parts[:6] == ["", "bigquery", "v2", "projects", s.project, "queries"]:
            return 200, s.bigquery_responses.pop(0)
        return 404, google_error(404, "NOT_FOUND", f"no route for {method} {p}")

    def _storage(self, rest: list[str], query: dict) -> tuple[int, dict | str]:
        """buckets.list (?project=, no label filter: Cloud Storage has none), objects.list (?prefix=),
        two items a page, and objects.get with alt=media (an object's `content`)."""
        s = self.state
        if not rest:
            if query.get("project") != s.project:
                return 403, google_error(403, "PERMISSION_DENIED", "The caller does not have storage.buckets.list access")
            return 200, _page("storage#buckets", s.buckets, query)
        bucket = unquote(rest[0])
        if bucket not in s.objects and bucket not in {b["name"] for b in s.buckets}:
            return 404, google_error(404, "NOT_FOUND", "The specified bucket does not exist.")
        objects = s.objects.get(bucket, [])
        if len(rest) == 2 and rest[1] == "o":
            listed = [o for o in objects if o["name"].startswith(query.get("prefix", ""))]
            return 200, _page("storage#objects", [{k: v for k, v in o.items() if k != "content"} for o in listed], query)
        if len(rest) == 3 and rest[1] == "o" and query.get("alt") == "media":
            name = unquote(rest[2])
            found = next((o for o in objects if o["name"] == name), None)
            if found is None:
                return 404, google_error(404, "NOT_FOUND", f"No such object: {bucket}/{name}")
            return 200, found["content"]  # the object's bytes (text here), as alt=media answers
        return 404, google_error(404, "NOT_FOUND", f"no route for storage {'/'.join(rest)}")


def _proto_page(key: str, items: list[dict], query: dict, size: int = 2) -> dict:
    """A page of an API whose JSON is proto3's (Artifact Registry, Filestore, IAM): no `kind`, empty
    fields left out."""
    start = int(query.get("pageToken") or 0)
    page = {key: items[start : start + size]} if items[start : start + size] else {}
    return {**page, "nextPageToken": str(start + size)} if start + size < len(items) else page


def _page(kind: str, items: list[dict], query: dict, size: int = 2) -> dict:
    start = int(query.get("pageToken") or 0)
    page = {"kind": kind}
    if items[start : start + size]:
        page["items"] = items[start : start + size]
    if start + size < len(items):
        page["nextPageToken"] = str(start + size)
    return page


_LABEL_FILTER = re.compile(r'^labels\.([a-z0-9_-]+)\s*=\s*"([^"]*)"$')


def _filtered(items: list[dict], query: dict) -> list[dict]:
    """Compute's `filter=labels.KEY="VALUE"`, the one form the operator commands send."""
    if "filter" not in query:
        return items
    match = _LABEL_FILTER.match(query["filter"])
    if not match:
        raise ValueError(f"fake Compute API: unsupported filter {query['filter']!r}")
    key, value = match.groups()
    return [i for i in items if (i.get("labels") or {}).get(key) == value]


def _aggregated(kind: str, scope: str, list_kind: str, by_scope: dict[str, list[dict]], query: dict) -> dict:
    """An aggregatedList answer: one scope per page, an empty scope carrying Google's warning."""
    scopes = sorted(by_scope)
    start = int(query.get("pageToken") or 0)
    items = {}
    for name in scopes[start : start + 1]:
        found = _filtered(by_scope[name], query)
        items[f"{scope}/{name}"] = {kind: found} if found else {
            "warning": {"code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope on this page.",
                        "data": [{"key": "scope", "value": f"{scope}/{name}"}]}}
    answer = {"kind": list_kind, "items": items}
    if start + 1 < len(scopes):
        answer["nextPageToken"] = str(start + 1)
    return answer


class FakeGoogle:
    """The server and a GcpClient pointed at it."""

    def __init__(self, state: GoogleState):
        self.state = state
        handler = type("Handler", (_Handler,), {"state": state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeGoogle:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def endpoints(self) -> dict[str, str]:
        """The overrides a command reads from the environment (ops.gcp.ENDPOINT_ENV_PREFIX) to come here:
        each API under its first path segment, with Google's layout below it."""
        paths = {"compute": "/compute/v1", "cloudresourcemanager": "/crm/v1", "bigquery": "/bigquery/v2",
                 "storage": "/storage/v1"}  # fmt: skip
        return {f"{ENDPOINT_ENV_PREFIX}{api.upper()}": f"{self.url}{paths.get(api, f'/{api}/v1')}" for api in DEFAULT_BASE_URLS}

    def environment(self, token: str = VALID_TOKEN) -> dict[str, str]:
        return {**self.endpoints(), TOKEN_ENV: token}

    def client(self, token: str = VALID_TOKEN, **options: Any) -> GcpClient:
        """A client with this server's endpoints and `token` as if from Application Default Credentials;
        `options` go to GcpClient (a short `timeout`, a recording `sleep`)."""
        return GcpClient(token_source=lambda: token, base_urls=endpoint_overrides(self.endpoints()), **options)
