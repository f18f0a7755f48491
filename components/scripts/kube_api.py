"""The few Kubernetes API calls the in-cluster scripts make, over HTTPS with the pod's service
account token (standard library only: the scripts run in a plain python image)."""

from __future__ import annotations

import json
import os
import ssl
import urllib.parse
import urllib.request
from typing import Any

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TIMEOUT_S = 30


class KubeApiError(Exception):
    """The API server answered with an error, or could not be reached."""


class KubeApi:
    def __init__(self, base_url: str, token: str, context: ssl.SSLContext | None = None):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.context = context

    @classmethod
    def in_cluster(cls) -> KubeApi:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        with open(f"{SERVICE_ACCOUNT_DIR}/token") as f:
            token = f.read().strip()
        context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT_DIR}/ca.crt")
        return cls(f"https://{host}:{port}", token, context)

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
             params: dict[str, str] | None = None) -> dict:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(
            f"{self.base_url}{path}{query}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=self.context) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise KubeApiError(f"{method} {path}: HTTP {e.code}: {e.read()[:300]!r}") from e
        except OSError as e:
            raise KubeApiError(f"{method} {path}: {e}") from e

    def list(self, path: str) -> list[dict]:
        """Every item of a list call, following `continue` tokens."""
        items, token = [], None
        while True:
            page = self.call("GET", path, params={"limit": "500", **({"continue": token} if token else {})})
            items += page.get("items", [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items

    def merge_patch(self, path: str, body: dict) -> dict:
        return self.call("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, body: dict | None = None) -> dict:
        return self.call("DELETE", path, body)
