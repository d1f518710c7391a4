"""The Kubernetes API client the way every tidescale component loads it."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

MAX_NAME_CHARS = 253  # an Event's name is a DNS subdomain


def _load_config() -> Any:
    """The in-cluster service account, else the local kubeconfig (for development)."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client


# Every call's deadline, connecting and reading: kubernetes.client has none by default, and a call on a
# pooled connection that the API server (or the Service in front of it) dropped without a word waits
# for the kernel to give up, minutes. A recommender hung so posts no Event and writes no scale.
REQUEST_TIMEOUT_S = 10.0


class DeadlinedApi:
    """A kubernetes.client API object whose every call carries `_request_timeout` (unless the caller
    gives its own), so that no tidescale component can wait on the API server without end."""

    def __init__(self, api: Any, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self._api, self._timeout_s = api, timeout_s

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._api, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("_request_timeout", self._timeout_s)
            return attr(*args, **kwargs)
        return call


def core_v1_api() -> Any:
    return DeadlinedApi(_load_config().CoreV1Api())


def apps_v1_api() -> Any:
    return DeadlinedApi(_load_config().AppsV1Api())


def autoscaling_v2_api() -> Any:
    return DeadlinedApi(_load_config().AutoscalingV2Api())


class EventsApi(Protocol):
    """The one call of kubernetes.client.CoreV1Api that posting an Event needs (a fake in tests)."""

    def create_namespaced_event(self, namespace: str, body: Any) -> Any: ...


class EventSeriesApi(EventsApi, Protocol):
    """The calls of CoreV1Api that `post_event_once` needs: an Event named by what it reports is
    created once, read when it exists already, and patched when the same change comes again."""

    def read_namespaced_event(self, name: str, namespace: str) -> Any: ...

    def patch_namespaced_event(self, name: str, namespace: str, body: Any) -> Any: ...


class ScaleApi(Protocol):
    """The calls of kubernetes.client.AppsV1Api that direct scaling needs (a fake in tests): the
    scale subresource read, for the count the Deployment holds now, and written."""

    def read_namespaced_deployment_scale(self, name: str, namespace: str) -> Any: ...

    def patch_namespaced_deployment_scale(self, name: str, namespace: str, body: Any) -> Any: ...


MAX_SCALE_REPLICAS = 2**31 - 1  # the API's int32


class HpaApi(Protocol):
    """The one call of kubernetes.client.AutoscalingV2Api the recommender makes: reading the HPA
    that applies its answer, for the syncs it stamps (`hpaclock`)."""

    def read_namespaced_horizontal_pod_autoscaler(self, name: str, namespace: str) -> Any: ...


def hpa_last_scale_time(answer: Any) -> float | None:
    """`status.lastScaleTime` of an HPA read (the client's object or its dict), as Unix time; None
    when it never scaled or the answer has no such field."""
    status = answer.get("status") if isinstance(answer, dict) else getattr(answer, "status", None)
    stamp = (status.get("lastScaleTime") if isinstance(status, dict)
             else getattr(status, "last_scale_time", None))
    if isinstance(stamp, str):
        try:
            stamp = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(stamp, datetime):
        return None
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()


def scale_spec_replicas(answer: Any) -> int:
    """`spec.replicas` of a scale subresource read, as kubernetes.client's `V1Scale` or as a
    mapping. The API server leaves a zero count out (`omitempty`), so a Deployment scaled to zero
    reads without one. Raises ValueError on an answer with no spec or a count the API does not allow."""
    spec = answer.get("spec") if isinstance(answer, dict) else getattr(answer, "spec", None)
    if spec is None:
        raise ValueError(f"the scale subresource read has no spec: {str(answer)[:80]!r}")
    if not isinstance(spec, dict) and not hasattr(spec, "replicas"):
        raise ValueError(f"the scale subresource read's spec is not one: {str(spec)[:80]!r}")
    replicas = spec.get("replicas") if isinstance(spec, dict) else spec.replicas
    if replicas is None:
        return 0
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 0 <= replicas <= MAX_SCALE_REPLICAS:
        raise ValueError(f"the scale subresource reads spec.replicas={str(replicas)[:40]!r}, not a count")
    return replicas


def _stamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def series_name(deployment: str, name_prefix: str, series_key: str) -> str:
    """The name of the one Event that reports *series_key* (a change, not a moment) on *deployment*:
    the same for every replica of a component, so a second replica's post of the same change
    meets the first one's Event instead of adding its own."""
    suffix = f".{name_prefix}-{hashlib.sha256(series_key.encode()).hexdigest()[:12]}"
    # A cut name must still end a DNS label with a letter or digit.
    return deployment[:MAX_NAME_CHARS - len(suffix)].rstrip("-.") + suffix


def deployment_event(namespace: str, deployment: str, *, reason: str, message: str, component: str,
                     now: datetime, name_prefix: str, series_key: str | None = None) -> dict[str, Any]:
    """A core/v1 Event about a Deployment, as `kubectl describe deployment` lists them: named by
    `series_name` when *series_key* is given, else a fresh generated name."""
    metadata = ({"name": series_name(deployment, name_prefix, series_key)} if series_key is not None
                else {"generateName": f"{deployment}.{name_prefix}-"})
    stamp = _stamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**metadata, "namespace": namespace},
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


def post_event_once(api: EventSeriesApi, body: dict[str, Any], *, now: datetime,
                    twin_window_s: float) -> Literal["created", "twin", "repeated"]:
    """Post *body* (a `deployment_event` with a series key) so that replicas of one component that
    report the same change leave one Event, as Kubernetes' own event recorder aggregates repeats.

    - "created": no Event of that name existed.
    - "twin": it existed and was last seen within *twin_window_s*: another replica already reported
      this change (its message stands).
    - "repeated": an older one (the same change again, within the Events' one-hour life): its count
      goes up by one and its lastTimestamp and message are this post's.

    Errors other than the name being taken are raised (the callers log them: best effort).
    """
    name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
    try:
        api.create_namespaced_event(namespace, body)
        return "created"
    except Exception as exc:
        if getattr(exc, "status", None) != 409:
            raise
    existing = api.read_namespaced_event(name, namespace)
    last = getattr(existing, "last_timestamp", None) or getattr(existing, "first_timestamp", None)
    if isinstance(last, datetime) and (now - last).total_seconds() <= twin_window_s:
        return "twin"
    count = getattr(existing, "count", None) or 1
    api.patch_namespaced_event(name, namespace, {"count": count + 1, "lastTimestamp": _stamp(now),
                                                 "message": body["message"]})
    return "repeated"
