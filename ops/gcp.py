"""A small client for the few Google REST APIs the operator commands call (Service Usage, Compute,
Container, Cloud Storage, Cloud Resource Manager, BigQuery, Artifact Registry, Filestore, IAM, Cloud
Billing), shared by preflight, status and billing.

The test seam is the constructor: `base_urls` (per API) and `token_source` are injectable, so tests
point it at a local HTTP server that answers like Google. `GcpClient.from_environment` is what the
commands use: per-API endpoint overrides from `GKE_ML_LABS_ENDPOINT_<API>` (the base URL up to and
including the API version, as gcloud's `CLOUDSDK_API_ENDPOINT_OVERRIDES_<API>` are) for private
endpoints and tests, and an access token from `GOOGLE_OAUTH_ACCESS_TOKEN` (the variable Google's
Terraform and Pulumi providers honour) in place of Application Default Credentials. Low-level errors
(HTTP status, transport, google-auth) are translated here, at one boundary, into the small exception
tree below, each message led by the API's host (`compute.googleapis.com: GET ...`).

What a proof may not take for "none": an answer that is not a JSON object (an empty body, cut-off JSON, an
array), a page of the wrong shape (`pydantic` models of the lists, in ops.inventory), a page token the
server repeats, or more than MAX_PAGES pages: each is a `MalformedAnswer`. GET requests are retried on
429 and 5xx, MAX_ATTEMPTS (4) times in all, waiting 1, 2 then 4 s, or the server's Retry-After up to
MAX_BACKOFF_S (8 s) each: at most 24 s of waiting per call before its last answer is the error.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from functools import cache
from typing import Any, TypeVar

import httpx
from pydantic import TypeAdapter, ValidationError

from ops.errors import OpsError

SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
LOGIN_HINT = "run `gcloud auth application-default login`"
TOKEN_HINT = "set a fresh GOOGLE_OAUTH_ACCESS_TOKEN (`gcloud auth print-access-token`) or unset it"
DEFAULT_BASE_URLS = {
    "serviceusage": "https://serviceusage.googleapis.com/v1",
    "compute": "https://compute.googleapis.com/compute/v1",
    "cloudresourcemanager": "https://cloudresourcemanager.googleapis.com/v1",
    "bigquery": "https://bigquery.googleapis.com/bigquery/v2",
    "container": "https://container.googleapis.com/v1",
    "storage": "https://storage.googleapis.com/storage/v1",
    "artifactregistry": "https://artifactregistry.googleapis.com/v1",
    "file": "https://file.googleapis.com/v1",
    "iam": "https://iam.googleapis.com/v1",
    "cloudbilling": "https://cloudbilling.googleapis.com/v1",
}
ENDPOINT_ENV_PREFIX = "GKE_ML_LABS_ENDPOINT_"
TOKEN_ENV = "GOOGLE_OAUTH_ACCESS_TOKEN"
KEY_FILE_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
# Finite timeouts, split per phase: a hung API must not hang preflight.
TIMEOUT = httpx.Timeout(30.0, connect=10.0)
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_ATTEMPTS = 4
BACKOFF_S = (1.0, 2.0, 4.0)  # before the 2nd, 3rd and 4th attempt
MAX_BACKOFF_S = 8.0  # the most a Retry-After is honoured
MAX_PAGES = 1000  # a list longer than this (500 000 items at Google's usual page size) is not believed


class GcpError(OpsError):
    """Base of every error the Google API client raises."""


class CredentialsError(GcpError):
    """No usable credentials: expired or revoked (HTTP 401 or a failed token refresh), or none at all."""

    def __init__(self, detail: str):
        super().__init__(f"credentials expired/invalid: {LOGIN_HINT} ({detail})")


class CredentialsNotFound(CredentialsError):
    """This machine has no Application Default Credentials at all."""

    def __init__(self, detail: str):
        GcpError.__init__(
            self,
            "credentials not found: this machine has no Application Default Credentials; create them with "
            f"`gcloud auth application-default login` (or set GOOGLE_APPLICATION_CREDENTIALS to a key file) ({detail})",
        )


class TokenRefused(CredentialsError):
    """HTTP 401 for the token given in GOOGLE_OAUTH_ACCESS_TOKEN: that token, not ADC, is the problem."""

    def __init__(self, detail: str):
        GcpError.__init__(
            self,
            f"credentials expired/invalid: Google refused the access token in {TOKEN_ENV}: {TOKEN_HINT} to use "
            f"Application Default Credentials ({detail})",
        )


class CredentialsFileInvalid(CredentialsError):
    """GOOGLE_APPLICATION_CREDENTIALS names a file that exists but is not a credentials file."""

    def __init__(self, path: str, detail: str):
        GcpError.__init__(
            self,
            f"credentials file invalid: {KEY_FILE_ENV}={path} exists but is not a usable credentials file "
            f"({detail}); point it at a service-account or ADC JSON file, or unset it and run "
            "`gcloud auth application-default login`",
        )


class PermissionDenied(GcpError):
    """HTTP 403: the caller lacks a permission."""


class ApiDisabled(PermissionDenied):
    """HTTP 403 because the API is not enabled in the project."""


class NotFound(GcpError):
    """HTTP 404."""


class ApiError(GcpError):
    """Any other non-2xx answer, or the API could not be reached."""


class NetworkError(ApiError):
    """Google could not be reached at all (DNS, connection, proxy, timeout): the network, not the request."""


class MalformedAnswer(ApiError):
    """A 2xx answer that cannot be read as the list or object asked for: never taken for "none"."""


def host(api: str) -> str:
    """The API's host, which names it in every message: each API key is its host's first label."""
    return f"{api}.googleapis.com"


Shape = TypeVar("Shape")


@cache
def _adapter(shape: Any) -> TypeAdapter:
    return TypeAdapter(shape)


def validated(shape: type[Shape], data: Any, what: str) -> Shape:
    """`data` as `shape` (a pydantic model of Google's answer, or a list or dict of them), or a
    MalformedAnswer naming the first field that does not fit."""
    try:
        return _adapter(shape).validate_python(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the answer"
        raise MalformedAnswer(f"{what}: not the answer Google documents: {where}: {first['msg']}") from None


TokenSource = Callable[[], str]


def adc_token() -> str:
    """An access token from Application Default Credentials (gcloud ADC, a metadata server, ...),
    refreshed now so an expired or revoked login shows up here, not as an empty answer later."""
    import google.auth
    import google.auth.exceptions
    from google.auth.transport.requests import Request

    try:
        credentials, _ = google.auth.default(scopes=SCOPES)
        credentials.refresh(Request())
    except google.auth.exceptions.DefaultCredentialsError as e:
        raise _no_credentials(str(e)) from e
    except google.auth.exceptions.RefreshError as e:
        raise CredentialsError(f"token refresh failed: {e}") from e
    except google.auth.exceptions.TransportError as e:
        raise NetworkError(f"could not reach Google to refresh the token: {e}") from e
    return credentials.token


def _no_credentials(detail: str) -> CredentialsError:
    """google-auth says "no default credentials" both when the key file is missing and when it is
    malformed; only the first is "not found"."""
    path = os.environ.get(KEY_FILE_ENV)
    if not path or not Path(path).is_file():
        return CredentialsNotFound(detail)
    try:
        json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return CredentialsFileInvalid(path, f"not JSON: {e}")
    return CredentialsFileInvalid(path, detail)


def endpoint_overrides(environ: Mapping[str, str]) -> dict[str, str]:
    """`GKE_ML_LABS_ENDPOINT_COMPUTE=https://host/compute/v1` and so on: API name -> base URL.
    A variable naming an API the client does not call is an error, not silently ignored."""
    overrides = {}
    for name, value in environ.items():
        if not name.startswith(ENDPOINT_ENV_PREFIX):
            continue
        api = name.removeprefix(ENDPOINT_ENV_PREFIX).lower()
        if api not in DEFAULT_BASE_URLS:
            known = ", ".join(ENDPOINT_ENV_PREFIX + a.upper() for a in DEFAULT_BASE_URLS)
            raise GcpError(f"{name}: no such API endpoint to override; known: {known}")
        overrides[api] = value.rstrip("/")
    return overrides


class GcpClient:
    def __init__(
        self,
        token_source: TokenSource = adc_token,
        base_urls: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: httpx.Timeout = TIMEOUT,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self._token_source = token_source
        self._token: str | None = None
        self.base_urls = {**DEFAULT_BASE_URLS, **(base_urls or {})}
        self._http = httpx.Client(timeout=timeout, transport=transport)
        self._sleep = sleep
        self.token_from_env = False  # a 401 then names GOOGLE_OAUTH_ACCESS_TOKEN, not the ADC login

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> GcpClient:
        """The client the operator commands use: endpoint overrides and a token from the environment."""
        token = environ.get(TOKEN_ENV)
        client = cls(token_source=(lambda: token) if token else adc_token, base_urls=endpoint_overrides(environ))
        client.token_from_env = bool(token)
        return client

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GcpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def token(self) -> str:
        if self._token is None:
            self._token = self._token_source()
        return self._token

    def request(self, method: str, api: str, path: str, *, params: dict | None = None, json: Any = None) -> dict:
        """One call; returns the decoded JSON object or raises a GcpError, led by the API's host, saying what
        went wrong. A GET answered 429 or 5xx is tried again (MAX_ATTEMPTS in all, backing off)."""
        url = f"{self.base_urls[api]}/{path.lstrip('/')}"
        what = f"{host(api)}: {method} {url}"
        for attempt in range(1, MAX_ATTEMPTS + 1):
            response = self._send(method, url, what, params, json)
            if response.status_code not in RETRIED_STATUSES or method != "GET" or attempt == MAX_ATTEMPTS:
                break
            self._sleep(_backoff(response, attempt))
        if response.is_success:
            return _decoded(response, what)
        error = _translate(response, what if attempt == 1 else f"{what} (after {attempt} attempts)")
        raise TokenRefused(str(error)) if isinstance(error, CredentialsError) and self.token_from_env else error

    def _send(self, method: str, url: str, what: str, params: dict | None, json: Any) -> httpx.Response:
        try:
            return self._http.request(
                method, url, params=params, json=json, headers={"Authorization": f"Bearer {self.token()}"}
            )
        except httpx.TimeoutException as e:
            raise NetworkError(f"{what}: no answer within {self._http.timeout.read:g} s ({type(e).__name__})") from e
        except httpx.TransportError as e:
            raise NetworkError(f"{what}: could not reach Google ({type(e).__name__}: {e})") from e
        except httpx.HTTPError as e:
            raise ApiError(f"{what}: {e}") from e

    def get(self, api: str, path: str, **params: Any) -> dict:
        return self.request("GET", api, path, params={k: v for k, v in params.items() if v is not None})

    def pages(self, api: str, path: str, kind: str | None = None, **params: Any) -> Iterator[dict]:
        """Every page of a list call (Google's `pageToken` / `nextPageToken` convention). A page must be
        a JSON object, of `kind` where the API states one (Compute and Storage always do); a token seen
        before, or more than MAX_PAGES pages, is a MalformedAnswer, never the end of the list."""
        token, seen = None, set()
        for number in range(1, MAX_PAGES + 1):
            page = self.get(api, path, pageToken=token, **params)
            what = f"{host(api)}: GET {self.base_urls[api]}/{path} (page {number})"
            if kind is not None and page.get("kind") != kind:
                raise MalformedAnswer(f"{what}: not a {kind} page (kind {page.get('kind')!r})")
            token = page.get("nextPageToken")
            if token is not None and not isinstance(token, str):
                raise MalformedAnswer(f"{what}: nextPageToken is not a string: {token!r}")
            if token in seen:
                raise MalformedAnswer(f"{what}: the server repeated page token {token!r}: the list never ends")
            yield page
            if not token:
                return
            seen.add(token)
        raise MalformedAnswer(f"{host(api)}: GET {self.base_urls[api]}/{path}: more than {MAX_PAGES} pages")


def _backoff(response: httpx.Response, attempt: int) -> float:
    """The wait before the next attempt: the server's Retry-After (seconds) where it gives one, capped."""
    try:
        return min(max(float(response.headers["Retry-After"]), 0.0), MAX_BACKOFF_S)
    except (KeyError, ValueError):
        return BACKOFF_S[attempt - 1]


def _decoded(response: httpx.Response, what: str) -> dict:
    """A 2xx body: every answer these APIs give is a JSON object (an empty list is `{}` at least)."""
    if not response.content:
        raise MalformedAnswer(f"{what}: HTTP {response.status_code} with an empty body, where a JSON object was due")
    try:
        body = response.json()
    except ValueError as e:
        raise MalformedAnswer(f"{what}: HTTP {response.status_code} with a body that is not JSON ({e})") from None
    if not isinstance(body, dict):
        raise MalformedAnswer(f"{what}: HTTP {response.status_code} with a JSON {type(body).__name__}, not an object")
    return body


def _translate(response: httpx.Response, what: str) -> GcpError:
    """Google's error body: {"error": {"code", "message", "status", "details": [{"reason", ...}]}}."""
    try:
        error = response.json().get("error") or {}
    except ValueError:
        error = {}
    message = error.get("message") or response.text[:300] or response.reason_phrase
    reasons = {d.get("reason") for d in error.get("details") or [] if isinstance(d, dict)}
    reasons |= {e.get("reason") for e in error.get("errors") or [] if isinstance(e, dict)}
    status = response.status_code
    if status == 401:
        return CredentialsError(f"{what}: HTTP 401 {message}")
    if status == 403 and reasons & {"SERVICE_DISABLED", "accessNotConfigured"}:
        return ApiDisabled(f"{what}: API not enabled: {message}")
    if status == 403:
        return PermissionDenied(f"{what}: HTTP 403 permission denied: {message}")
    if status == 404:
        return NotFound(f"{what}: HTTP 404 not found: {message}")
    return ApiError(f"{what}: HTTP {status}: {message}")
