"""Static targets and Kubernetes pod discovery (list once, watch, relist on 410)."""

from __future__ import annotations

import threading
from types import SimpleNamespace as NS
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.contracts.errors import UsageError
from tidescale.exporters.targets import Target, TargetSet, normalize_url, pod_target


def pod(name: str, ip: str | None = "10.0.0.1", phase: str = "Running", ready: str = "True",
        ns: str = "serving", deleting: bool = False, rv: str = "1", owner: str | None = None) -> Any:
    """A pod; *owner* "deployment-hash" makes it a Deployment's (ReplicaSet owner, pod-template-hash)."""
    owners = [NS(kind="ReplicaSet", name=owner)] if owner else []
    labels = {"pod-template-hash": owner.rsplit("-", 1)[1]} if owner else {}
    return NS(metadata=NS(name=name, namespace=ns, resource_version=rv, labels=labels, owner_references=owners,
                          deletion_timestamp="now" if deleting else None),
              status=NS(phase=phase, pod_ip=ip, conditions=[NS(type="Ready", status=ready)]))


def test_static_urls_are_normalised() -> None:
    ts = TargetSet(["http://a:8000/", "https://b:8443"])
    assert [t.url for t in ts.targets()] == ["http://a:8000", "https://b:8443"]
    assert not ts.discovers


@pytest.mark.parametrize("url", ["a:8000", "ftp://a:1", "http://", "http://a:8000/v2/models", "http://a:99999",
                                 "http://a:8000?x=1"])
def test_bad_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(UsageError):
        normalize_url(url)


def test_only_running_ready_pods_with_ip_are_targets() -> None:
    assert pod_target(pod("p")) == Target("http://10.0.0.1:8000", "serving", "p")
    assert pod_target(pod("p", ip="fd00::1")) == Target("http://[fd00::1]:8000", "serving", "p")
    assert pod_target(pod("p", ready="False")) is None
    assert pod_target(pod("p", phase="Pending")) is None
    assert pod_target(pod("p", ip=None)) is None
    assert pod_target(pod("p", deleting=True)) is None


def test_events_add_update_and_remove_with_callbacks() -> None:
    ts = TargetSet(kube_namespace="serving", kube_selector="app=triton")
    changes: list[tuple[list[Target], list[Target]]] = []
    ts.on_change(lambda a, r: changes.append((a, r)))
    ts.apply_pod_event("ADDED", pod("p1", ready="False"))
    assert ts.targets() == [] and changes == []
    ts.apply_pod_event("MODIFIED", pod("p1"))
    assert [t.pod for t in ts.targets()] == ["p1"]
    ts.apply_pod_event("MODIFIED", pod("p1", ip="10.0.0.9"))   # new IP: old target removed, new added
    assert changes[-1] == ([Target("http://10.0.0.9:8000", "serving", "p1")],
                           [Target("http://10.0.0.1:8000", "serving", "p1")])
    ts.apply_pod_event("DELETED", pod("p1", ip="10.0.0.9"))
    assert ts.targets() == [] and changes[-1][1][0].pod == "p1"


def test_target_cap_bounds_the_set_and_frees_a_slot_on_delete() -> None:
    ts = TargetSet(kube_selector="app=x", max_targets=2)
    for i in range(4):
        ts.apply_pod_event("ADDED", pod(f"p{i}", ip=f"10.0.0.{i}"))
    assert sorted(t.pod for t in ts.targets()) == ["p0", "p1"]
    ts.apply_pod_event("DELETED", pod("p0", ip="10.0.0.0"))
    ts.apply_pod_event("MODIFIED", pod("p3", ip="10.0.0.3"))
    assert sorted(t.pod for t in ts.targets()) == ["p1", "p3"]


class FakeApi:
    def __init__(self, lists: list[list[Any]]) -> None:
        self.lists = lists
        self.calls = 0

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        items = self.lists[min(self.calls, len(self.lists) - 1)]
        self.calls += 1
        return NS(items=items, metadata=NS(resource_version=str(100 * self.calls)))


class FakeWatch:
    """Plays scripted event batches; the last batch stops the TargetSet."""

    script: ClassVar[list[list[dict[str, Any]]]] = []
    seen_versions: ClassVar[list[str]] = []

    def __init__(self, ts: TargetSet, done: threading.Event) -> None:
        self.ts, self.done = ts, done

    def stream(self, func: Any, *args: Any, resource_version: str, **kwargs: Any) -> Any:
        FakeWatch.seen_versions.append(resource_version)
        batch = FakeWatch.script.pop(0) if FakeWatch.script else []
        yield from batch
        if not FakeWatch.script:
            self.ts.stop()
            self.done.set()

    def stop(self) -> None:
        pass


def test_watch_follows_list_and_relists_on_410() -> None:
    import asyncio

    api = FakeApi([[pod("a", ip="10.0.0.1")], [pod("c", ip="10.0.0.3")]])
    done = threading.Event()
    ts = TargetSet(kube_namespace="serving", kube_selector="app=triton", api=api)
    ts._watch_factory = lambda: FakeWatch(ts, done)  # type: ignore[assignment]
    removed: list[str] = []
    ts.on_change(lambda a, r: removed.extend(t.pod or "" for t in r))
    FakeWatch.seen_versions = []
    FakeWatch.script = [
        [{"type": "ADDED", "object": pod("b", ip="10.0.0.2", rv="101")}],
        [{"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}],
        [{"type": "BOOKMARK", "object": NS(metadata=NS(resource_version="250"))}],
    ]
    asyncio.run(asyncio.wait_for(ts.run(), 10))
    assert done.is_set()
    assert api.calls == 2                          # one initial list, one relist after 410
    assert FakeWatch.seen_versions == ["100", "101", "200"]
    assert [t.pod for t in ts.targets()] == ["c"]  # relist replaced a and b
    assert sorted(removed) == ["a", "b"]


def test_run_returns_at_once_without_discovery() -> None:
    import asyncio

    asyncio.run(asyncio.wait_for(TargetSet(["http://a:8000"]).run(), 2))


def test_cancelling_run_stops_the_watch_thread() -> None:
    import asyncio
    import time

    api = FakeApi([[pod("a")]])
    ts = TargetSet(kube_namespace="serving", kube_selector="app=triton", api=api)

    class BlockingWatch:
        def stream(self, *args: Any, **kwargs: Any) -> Any:
            while not ts._stop.is_set():
                time.sleep(0.01)
            yield from ()

        def stop(self) -> None:
            pass

    ts._watch_factory = BlockingWatch  # type: ignore[assignment]

    async def main() -> None:
        task = asyncio.create_task(ts.run())
        await asyncio.sleep(0.2)
        assert [t.pod for t in ts.targets()] == ["a"]
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert ts._stop.is_set()
    deadline = time.monotonic() + 5
    while any(t.name == "tidescale-pod-watch" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "tidescale-pod-watch" for t in threading.enumerate())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_fuzz_url_parsing(text: str) -> None:
    try:
        url = normalize_url(text)
    except UsageError:
        return
    assert url.startswith(("http://", "https://")) and not url.endswith("/")
    assert normalize_url(url) == url


def test_sender_names_the_discovered_pod_at_an_address_until_it_goes() -> None:
    ts = TargetSet(["http://10.0.0.5:8000"], kube_namespace="serving", kube_selector="app=triton")
    ts.apply_pod_event("ADDED", pod("p1", ip="10.0.0.1", owner="triton-resnet-7d9f8c6b5"))
    ts.apply_pod_event("ADDED", pod("p2", ip="fd00::2"))
    assert ts.sender("10.0.0.1") == ("serving", "p1", "triton-resnet") and ts.sender("fd00::2") == ("serving", "p2", "")
    assert ts.sender("10.0.0.5") is None  # a static target has no pod to name
    ts.apply_pod_event("MODIFIED", pod("p1", ip="10.0.0.9"))
    assert ts.sender("10.0.0.1") is None and ts.sender("10.0.0.9") == ("serving", "p1", "")
    ts.apply_pod_event("DELETED", pod("p1", ip="10.0.0.9"))
    assert ts.sender("10.0.0.9") is None
    ts.replace_pods([pod("p3", ip="10.0.0.3")])
    assert ts.sender("fd00::2") is None and ts.sender("10.0.0.3") == ("serving", "p3", "")


class LookupApi:
    """read_namespaced_pod answering with *status* (200 or an ApiException's), or raising *error*."""

    def __init__(self, status: int = 200, error: Exception | None = None) -> None:
        self.status, self.error = status, error
        self.asked: list[tuple[str, str]] = []

    def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        self.asked.append((namespace, name))
        if self.error is not None:
            raise self.error
        if self.status != 200:
            raise ApiException(status=self.status, reason="test")
        return pod(name, ns=namespace)


@pytest.mark.parametrize(("status", "error", "gone"), [
    (404, None, True), (200, None, False), (403, None, False), (500, None, False),
    (200, ConnectionError("refused"), False)])
def test_a_pod_is_gone_only_on_the_api_servers_404(status: int, error: Exception | None, gone: bool) -> None:
    api = LookupApi(status, error)
    ts = TargetSet(kube_namespace="serving", kube_selector="app=triton", api=api)
    assert ts.pod_gone("serving", "triton-a") is gone and api.asked == [("serving", "triton-a")]


def test_pods_of_namespaces_not_watched_or_without_discovery_are_never_asked_about() -> None:
    api = LookupApi(404)
    assert TargetSet(kube_namespace="serving", kube_selector="app=triton", api=api).pod_gone("other", "p") is False
    assert TargetSet(["http://a:8000"], api=api).pod_gone("serving", "p") is False
    assert api.asked == []
    assert TargetSet(kube_selector="app=triton", api=api).pod_gone("other", "p") is True  # all namespaces
