"""A fake of the Kubernetes Events calls that tidescale makes, keeping Events as the API server does."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any


class Conflict(Exception):
    """What kubernetes.client raises for a taken name (an ApiException with status 409)."""

    status = 409


class FakeEventApi:
    """create/read/patch of core/v1 Events by name: a taken name is a 409, a generateName gets a
    fresh suffix. `posted` lists every created Event in order; `fail_with` makes every create raise."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.posted: list[tuple[str, dict[str, Any]]] = []
        self.fail_with = fail_with

    def create_namespaced_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.fail_with is not None:
            raise self.fail_with
        meta = body["metadata"]
        name = meta.get("name") or f"{meta['generateName']}{len(self.posted):05x}"
        if (namespace, name) in self.events:
            raise Conflict(f'events "{name}" already exists')
        self.events[(namespace, name)] = dict(body)
        self.posted.append((namespace, body))
        return body

    def read_namespaced_event(self, name: str, namespace: str) -> SimpleNamespace:
        body = self.events[(namespace, name)]
        last = datetime.strptime(body["lastTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        return SimpleNamespace(count=body["count"], last_timestamp=last)

    def patch_namespaced_event(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.events[(namespace, name)].update(body)
