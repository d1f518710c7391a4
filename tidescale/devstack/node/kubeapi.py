"""A small client for the Kubernetes API with a kubeconfig's client certificate.

The node agent works on the API's own JSON (camelCase dicts, as the kubelet sees it) and needs
watch streams it can restart from a resourceVersion, so it talks HTTP directly instead of going
through the generated client's models.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

Json = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class ApiUnreachable(ApiError):
    """No answer from the API server (refused, reset, timed out); it has no HTTP status, so 0.

    Callers retry it as they retry a 5xx. Before, httpx's own error passed by their `except ApiError`:
    one reset in CI killed a node agent's heartbeat thread, the node went unreachable, and 5 minutes
    later the taint manager evicted every pod on it (an in-cluster registry lost its charts)."""

    def __init__(self, method: str, path: str, reason: str) -> None:
        Exception.__init__(self, f"{method} {path}: no answer from the API server ({reason})")
        self.status = 0


class KubeApi:
    def __init__(self, kubeconfig: Path, timeout: float = 30.0, transport: httpx.BaseTransport | None = None) -> None:
        doc = yaml.safe_load(kubeconfig.read_text())
        cluster = doc["clusters"][0]["cluster"]
        user = doc["users"][0]["user"]
        self.server = cluster["server"].rstrip("/")
        ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        self._ctx = ctx
        self._client = httpx.Client(base_url=self.server, verify=ctx, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: str, body: Json | None = None, *, params: dict[str, str] | None = None,
                content_type: str = "application/json") -> Json:
        try:
            resp = self._client.request(method, path, params=params,
                                        content=None if body is None else json.dumps(body),
                                        headers={"Content-Type": content_type})
        except httpx.TransportError as exc:
            raise ApiUnreachable(method, path, str(exc) or type(exc).__name__) from exc
        if resp.status_code >= 400:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            raise ApiError(resp.status_code, str(message)[:500])
        return resp.json() if resp.content else {}

    def get(self, path: str, **params: str) -> Json:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, body: Json) -> Json:
        return self.request("POST", path, body)

    def patch_merge(self, path: str, body: Json) -> Json:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def patch_strategic(self, path: str, body: Json) -> Json:
        return self.request("PATCH", path, body, content_type="application/strategic-merge-patch+json")

    def delete(self, path: str, body: Json | None = None) -> Json:
        return self.request("DELETE", path, body)

    def watch(self, path: str, resource_version: str, timeout_s: int = 240, **params: str) -> Iterator[Json]:
        """The events of one watch request; the caller lists again on a 410 (expired version)."""
        query = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(timeout_s), **params}
        timeout = httpx.Timeout(10.0, read=timeout_s + 30)
        with httpx.Client(base_url=self.server, verify=self._ctx, timeout=timeout) as c, \
                c.stream("GET", path, params=query) as resp:
            if resp.status_code >= 400:
                raise ApiError(resp.status_code, resp.read().decode(errors="replace")[:500])
            for line in resp.iter_lines():
                if line:
                    yield json.loads(line)
