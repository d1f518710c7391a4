"""The Kubernetes API client the way every tidescale component loads it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol


def _load_config() -> Any:
    """The in-cluster service account, else the local kubeconfig (for development)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client


def core_v1_api() -> Any:
    return _load_config().CoreV1Api()


def apps_v1_api() -> Any:
    return _load_config().AppsV1Api()


class EventsApi(Protocol):
    """The one call of kubernetes.client.CoreV1Api that posting an Event needs (a fake in tests)."""

    def create_namespaced_event(self, namespace: str, body: Any) -> Any: ...


class ScaleApi(Protocol):
    """The one call of kubernetes.client.AppsV1Api that direct scaling needs (a fake in tests)."""

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> Any: ...


def deployment_event(namespace: str, deployment: str, *, reason: str, message: str, component: str,
                     now: datetime, name_prefix: str) -> dict[str, Any]:
    """A core/v1 Event about a Deployment, as `kubectl describe deployment` lists them."""
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{deployment}.{name_prefix}-", "namespace": namespace},
        "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment, "namespace": namespace},
        "reason": reason,
        "message": message[:1024],
        "type": "Normal",
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
