"""A local HTTP server on loopback that answers like the Google REST APIs the operator commands
call (Cloud Resource Manager, Service Usage, Compute, Container, Cloud Storage, BigQuery), with the
response shapes of Google's API references: list pages with `nextPageToken` (Compute's aggregated
lists one scope per page, so every caller must follow the token), a `filter` on labels honoured as
Compute honours it, errors as {"error": {code, message, status, details}}, a 401 for an expired token.
It also answers like the Compute Engine metadata server (GCE_METADATA_HOST), the Application
Default Credentials of a VM: a service-account token.
Tests set its state and read the calls it saw."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from ops.gcp import ENDPOINT_ENV_PREFIX, TOKEN_ENV, GcpClient, endpoint_overrides

VALID_TOKEN = "ya29.valid-token"
EXPIRED_TOKEN = "ya29.expired-token"


def google_error(code: int, status: str, message: str, reason: str | None = None) -> dict:
    details = [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": "googleapis.com"}] if reason else []
    return {"error": {"code": code, "message": message, "status": status, "details": details}}


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
    calls: list[tuple[str, str, dict, Any]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    state: GoogleState

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, code: int, body: dict | str) -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Metadata-Flavor", "Google")
        self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
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
        code, answer = self._route(method, url.path.split("/"), query, body)  # path still %-encoded
        self._send(code, answer)

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
        compute_lists = {"instances": ("zones", s.instances), "disks": ("zones", s.disks),
                         "addresses": ("regions", s.addresses), "forwardingRules": ("regions", s.forwarding_rules)}
        if parts[:6] == ["", "compute", "v1", "projects", s.project, "aggregated"] and parts[6:7] and parts[6] in compute_lists:
            kind = parts[6]
            scope, by_scope = compute_lists[kind]
            return 200, _aggregated(kind, scope, {k: v for k, v in by_scope.items() if k != "global"}, query)
        if parts[:6] == ["", "compute", "v1", "projects", s.project, "global"] and parts[6:7] and parts[6] in compute_lists:
            kind = parts[6]
            items = _filtered(compute_lists[kind][1].get("global", []), query)
            return 200, {"kind": f"compute#{kind[:-1]}List", "items": items} if items else {"kind": f"compute#{kind[:-1]}List"}
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


def _aggregated(kind: str, scope: str, by_scope: dict[str, list[dict]], query: dict) -> dict:
    """An aggregatedList answer: one scope per page, an empty scope carrying Google's warning."""
    scopes = sorted(by_scope)
    start = int(query.get("pageToken") or 0)
    items = {}
    for name in scopes[start : start + 1]:
        found = _filtered(by_scope[name], query)
        items[f"{scope}/{name}"] = {kind: found} if found else {
            "warning": {"code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope on this page.",
                        "data": [{"key": "scope", "value": f"{scope}/{name}"}]}}
    answer = {"kind": f"compute#{kind[:-1]}AggregatedList", "items": items}
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
        """The overrides a command reads from the environment (ops.gcp.ENDPOINT_ENV_PREFIX) to come here."""
        return {
            f"{ENDPOINT_ENV_PREFIX}{api.upper()}": f"{self.url}{path}"
            for api, path in {
                "serviceusage": "/serviceusage/v1", "compute": "/compute/v1", "cloudresourcemanager": "/crm/v1",
                "bigquery": "/bigquery/v2", "container": "/container/v1", "storage": "/storage/v1",
            }.items()
        }

    def environment(self, token: str = VALID_TOKEN) -> dict[str, str]:
        return {**self.endpoints(), TOKEN_ENV: token}

    def client(self, token: str = VALID_TOKEN) -> GcpClient:
        """A client with this server's endpoints and `token` as if from Application Default Credentials."""
        return GcpClient(token_source=lambda: token, base_urls=endpoint_overrides(self.endpoints()))
