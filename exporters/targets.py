"""Which Triton servers to poll: static URLs, or Ready pods found by a label selector.

A targets file (Prometheus file_sd JSON: `[{"targets": ["host:port"], "labels": {"namespace",
"pod"}}]`) is re-read when it changes, for fleets outside Kubernetes (the local stack uses it).
Kubernetes discovery lists the pods once, then follows a watch from that resourceVersion
(never a list in a loop); a 410 Gone (the version expired) triggers one relist. Only pods
that are Running, Ready, not terminating and have an IP become targets
(`http://<pod IP>:<port>`). Every change is reported to `on_change` callbacks with the
targets added and removed, so the poller drops the series of vanished targets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tidescale.contracts import jsonio
from tidescale.contracts.errors import UsageError
from tidescale.contracts.redact import redact_url, redact_urls
from tidescale.exporters.stages import Sender

log = logging.getLogger(__name__)

DEFAULT_PORT = 8000
MAX_TARGETS = 5000
WATCH_TIMEOUT_S = 60
GET_TIMEOUT_S = 5.0  # one pod's GET (`pod_gone`), on the trace directory's lookup thread
MAX_TARGETS_FILE_BYTES = 4 << 20
TARGETS_FILE_POLL_S = 1.0


@dataclass(frozen=True, order=True)
class Target:
    """One Triton HTTP endpoint; namespace and pod are set for discovered pods."""

    url: str
    namespace: str | None = None
    pod: str | None = None

    @property
    def label(self) -> str:
        """The URL as labels and log lines show it: a static URL may carry a password (`http://user:
        pass@host:8000`), and /metrics needs no token."""
        return redact_url(self.url)


ChangeCallback = Callable[[list[Target], list[Target]], None]


def deployment_of(pod: Any) -> str:
    """The Deployment that owns *pod*, found as OpenTelemetry's k8sattributes finds it: the owning
    ReplicaSet's name without the pod's `pod-template-hash`; '' for pods no Deployment owns."""
    meta = getattr(pod, "metadata", None)
    template_hash = (getattr(meta, "labels", None) or {}).get("pod-template-hash")
    for ref in getattr(meta, "owner_references", None) or []:
        name = getattr(ref, "name", "") or ""
        if getattr(ref, "kind", None) == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
            return name[: -len(template_hash) - 1]
    return ""


def target_host(target: Target) -> str:
    """The address part of a target's URL (the pod IP of a discovered pod, without brackets)."""
    return urlsplit(target.url).hostname or ""


def parse_targets_file(text: str, max_targets: int = MAX_TARGETS) -> list[Target]:
    """Targets from file_sd JSON; UsageError names what is wrong (the caller keeps the old set)."""
    try:
        groups = jsonio.loads(text)
    except ValueError as exc:
        raise UsageError(f"targets file is not JSON: {str(exc)[:200]}") from None
    if not isinstance(groups, list):
        raise UsageError("targets file must be a JSON list of {targets, labels} groups")
    out: list[Target] = []
    for i, group in enumerate(groups):
        if not isinstance(group, dict) or not isinstance(group.get("targets"), list):
            raise UsageError(f"targets file group {i} needs a 'targets' list")
        labels = group.get("labels", {})
        labels = {} if labels is None else labels
        if not isinstance(labels, dict):
            raise UsageError(f"targets file group {i}: 'labels' must be an object")
        for address in group["targets"]:
            if not isinstance(address, str):
                raise UsageError(f"targets file group {i}: target {address!r} is not a string")
            url = normalize_url(address if "://" in address else f"http://{address}")
            out.append(Target(url, labels.get("namespace"), labels.get("pod")))
            if len(out) > max_targets:
                raise UsageError(f"targets file lists more than {max_targets} targets")
    check_distinct(t.url for t in out)
    return out


def check_distinct(urls: Iterable[str]) -> None:
    """UsageError when two URLs name the same server once their credentials are hidden: their series
    and poll metrics would carry the same labels (and the server would be polled twice)."""
    seen: dict[str, str] = {}
    for url in urls:
        label = redact_url(url)
        if seen.setdefault(label, url) != url:
            raise UsageError(f"Triton URL {label} is listed twice (credentials aside)")


def normalize_url(url: str) -> str:
    """`http(s)://host:port` without a trailing slash; UsageError names a bad URL (its credentials hidden)."""
    parts = urlsplit(url.strip())
    shown = repr(redact_url(url))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"Triton URL {shown} must look like http://host:8000")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise UsageError(f"Triton URL {shown} has an invalid port") from None
    if parts.query or parts.fragment or parts.path.strip("/"):
        raise UsageError(f"Triton URL {shown} must not have a path or query (the poller adds /v2/...)")
    return f"{parts.scheme}://{parts.netloc}"


def pod_target(pod: Any, port: int = DEFAULT_PORT) -> Target | None:
    """The target of a pod if it is Running, Ready, not terminating and has an IP."""
    meta, status = getattr(pod, "metadata", None), getattr(pod, "status", None)
    if meta is None or status is None or getattr(meta, "deletion_timestamp", None) is not None:
        return None
    ip = getattr(status, "pod_ip", None)
    if getattr(status, "phase", None) != "Running" or not ip:
        return None
    ready = any(getattr(c, "type", None) == "Ready" and getattr(c, "status", None) == "True"
                for c in (getattr(status, "conditions", None) or []))
    if not ready:
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return Target(f"http://{host}:{port}", getattr(meta, "namespace", None), getattr(meta, "name", None))


class TargetSet:
    """The current targets; static ones fixed, discovered ones kept current by a watch."""

    def __init__(self, static_urls: Iterable[str] = (), kube_namespace: str | None = None,
                 kube_selector: str | None = None, *, port: int = DEFAULT_PORT, api: Any = None,
                 watch_factory: Callable[[], Any] | None = None, max_targets: int = MAX_TARGETS,
                 targets_file: Path | None = None, kube_node: str | None = None) -> None:
        static = [normalize_url(u) for u in static_urls]
        check_distinct(static)
        self._static = {Target(u) for u in static}
        self.kube_namespace = kube_namespace or None
        self.kube_selector = kube_selector
        # Only the pods on this node (a field selector on the API server; checked here too, so a
        # pod that the server sends anyway is never polled by two exporters).
        self.kube_node = kube_node
        self.port = port
        self.max_targets = max_targets
        self._api = api
        self._watch_factory = watch_factory
        self._pods: dict[tuple[str | None, str | None], Target] = {}
        self._by_ip: dict[str, tuple[Target, str]] = {}  # pod IP -> (target, Deployment): who sends spans
        self.targets_file = targets_file
        self._from_file: set[Target] = set()
        self._file_mtime: float | None = None
        self._callbacks: list[ChangeCallback] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()

    @property
    def discovers(self) -> bool:
        return self.kube_selector is not None or self.kube_namespace is not None

    def targets(self) -> list[Target]:
        with self._lock:
            return sorted(self._static | self._from_file | set(self._pods.values()))

    def sender(self, address: str) -> Sender | None:
        """(namespace, pod, deployment) of the discovered pod at *address*, or None for any other
        sender (a collector in between, a static target, a pod not yet Ready)."""
        with self._lock:
            found = self._by_ip.get(address)
        if found is None or not found[0].namespace or not found[0].pod:
            return None
        target, deployment = found
        return target.namespace or "", target.pod or "", deployment

    def pod_sender(self, namespace: str, pod: str) -> Sender | None:
        """(namespace, pod, deployment) of a watched pod, or of a targets-file target labelled with
        that namespace and pod; None for any other (a trace directory of a pod we do not watch)."""
        with self._lock:
            target = self._pods.get((namespace, pod))
            if target is not None:
                found = self._by_ip.get(target_host(target))
                return namespace, pod, found[1] if found is not None else ""
            if any(t.namespace == namespace and t.pod == pod for t in self._from_file):
                return namespace, pod, ""
        return None

    def pod_gone(self, namespace: str, pod: str) -> bool:
        """Whether the API server says pod *namespace/pod* does not exist (404). False wherever that
        is not known for sure: no discovery, a namespace this exporter does not watch (and may not
        read), any other answer or error. Why a GET and not the watch: the watch holds only this
        node's pods, and a trace directory may be shared between nodes (the local cluster's are)."""
        if not self.discovers or (self.kube_namespace and namespace != self.kube_namespace):
            return False
        from kubernetes.client.exceptions import ApiException

        try:
            self._load_api().read_namespaced_pod(pod, namespace, _request_timeout=GET_TIMEOUT_S)
        except ApiException as exc:
            return bool(exc.status == 404)
        except Exception as exc:  # the API server unreachable: keep what may still be a pod's
            log.debug("cannot ask whether pod %s/%s exists: %s", namespace, pod, redact_urls(str(exc)))
        return False

    def reload_targets_file(self) -> bool:
        """Re-read the targets file if it changed; a bad file is logged and the old targets kept."""
        if self.targets_file is None:
            return False
        try:
            st = self.targets_file.stat()
            if st.st_mtime == self._file_mtime:
                return False
            self._file_mtime = st.st_mtime
            if st.st_size > MAX_TARGETS_FILE_BYTES:
                raise UsageError(f"larger than {MAX_TARGETS_FILE_BYTES} bytes")
            fresh = set(parse_targets_file(self.targets_file.read_text(), self.max_targets))
        except (OSError, UsageError) as exc:
            log.warning("targets file %s ignored: %s", self.targets_file, exc)
            return False
        with self._lock:
            before, self._from_file = self._from_file, fresh
        self._notify(sorted(fresh - before), sorted(before - fresh))
        return True

    async def _follow_targets_file(self) -> None:
        while not self._stop.is_set():
            self.reload_targets_file()
            await asyncio.sleep(TARGETS_FILE_POLL_S)

    def on_change(self, callback: ChangeCallback) -> None:
        """Call *callback(added, removed)* after every change of the discovered targets."""
        self._callbacks.append(callback)

    def _notify(self, added: list[Target], removed: list[Target]) -> None:
        if not added and not removed:
            return
        for cb in self._callbacks:
            try:
                cb(added, removed)
            except Exception:  # a broken listener must not stop discovery
                log.exception("target change callback failed")

    def apply_pod_event(self, event_type: str, pod: Any) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED) for *pod*."""
        meta = getattr(pod, "metadata", None)
        key = (getattr(meta, "namespace", None), getattr(meta, "name", None))
        target = None if event_type == "DELETED" or not self._on_this_node(pod) else pod_target(pod, self.port)
        added: list[Target] = []
        removed: list[Target] = []
        with self._lock:
            old = self._pods.get(key)
            if old == target:
                return
            if old is not None:
                del self._pods[key]
                self._by_ip.pop(target_host(old), None)
                removed.append(old)
            if target is not None and len(self._pods) < self.max_targets:  # past the cap a pod waits
                self._pods[key] = target
                self._by_ip[target_host(target)] = (target, deployment_of(pod))
                added.append(target)
        self._notify(added, removed)

    def replace_pods(self, pods: Iterable[Any]) -> None:
        """Set the discovered targets to those of a fresh list (initial list, relist after 410)."""
        fresh: dict[tuple[str | None, str | None], Target] = {}
        by_ip: dict[str, tuple[Target, str]] = {}
        for pod in pods:
            target = pod_target(pod, self.port) if self._on_this_node(pod) else None
            if target is not None and len(fresh) < self.max_targets:
                fresh[(target.namespace, target.pod)] = target
                by_ip[target_host(target)] = (target, deployment_of(pod))
        with self._lock:
            before = set(self._pods.values())
            self._pods = fresh
            self._by_ip = by_ip
            after = set(fresh.values())
        self._notify(sorted(after - before), sorted(before - after))

    def _on_this_node(self, pod: Any) -> bool:
        return self.kube_node is None or getattr(getattr(pod, "spec", None), "node_name", None) == self.kube_node

    async def run(self) -> None:
        """Keep discovered targets current until `stop()` or cancellation; returns at once
        without discovery. The blocking kubernetes watch runs in a daemon thread, so a
        shutdown never waits for the watch's server-side timeout."""
        if self.targets_file is not None:
            self.reload_targets_file()
            if not self.discovers:
                await self._follow_targets_file()
                return
            asyncio.get_running_loop().create_task(self._follow_targets_file())
        if not self.discovers:
            return
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        def watch() -> None:
            try:
                self._watch_forever()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop may already be closed
                    loop.call_soon_threadsafe(finished)

        threading.Thread(target=watch, name="tidescale-pod-watch", daemon=True).start()
        try:
            await done
        finally:
            self.stop()

    def stop(self) -> None:
        self._stop.set()

    def _load_api(self) -> Any:
        if self._api is None:
            from tidescale.contracts.kubeapi import core_v1_api

            self._api = core_v1_api()
        return self._api

    def _list_call(self) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
        api = self._load_api()
        kwargs = {"label_selector": self.kube_selector} if self.kube_selector else {}
        if self.kube_node:
            kwargs["field_selector"] = f"spec.nodeName={self.kube_node}"
        if self.kube_namespace:
            return api.list_namespaced_pod, (self.kube_namespace,), kwargs
        return api.list_pod_for_all_namespaces, (), kwargs

    def _relist(self) -> str | None:
        func, args, kwargs = self._list_call()
        resp = func(*args, **kwargs)
        self.replace_pods(resp.items)
        return resp.metadata.resource_version

    def _watch_forever(self) -> None:
        from kubernetes.client.exceptions import ApiException

        if self._watch_factory is None:
            from kubernetes import watch

            self._watch_factory = watch.Watch
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    version = self._relist()
                func, args, kwargs = self._list_call()
                w = self._watch_factory()
                for event in w.stream(func, *args, resource_version=version, timeout_seconds=WATCH_TIMEOUT_S,
                                      allow_watch_bookmarks=True, **kwargs):
                    if self._stop.is_set():
                        w.stop()
                        break
                    version = self._handle(event, version)
                    if version is None:
                        w.stop()
                        break
            except ApiException as exc:
                if exc.status != 410:
                    log.warning("pod watch failed (HTTP %s); retrying", exc.status)
                    self._stop.wait(5)
                version = None
            except Exception as exc:  # network errors: back off, relist
                log.warning("pod watch failed: %s; retrying", redact_urls(str(exc)))
                self._stop.wait(5)
                version = None

    def _handle(self, event: dict[str, Any], version: str | None) -> str | None:
        """Apply one event; returns the resourceVersion to resume from (None: relist)."""
        kind = event.get("type")
        obj = event.get("object")
        if kind == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else getattr(obj, "code", None)
            if code != 410:
                log.warning("pod watch error event: %s", obj)
            return None
        new_version = getattr(getattr(obj, "metadata", None), "resource_version", None) or version
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.apply_pod_event(kind, obj)
        return new_version
