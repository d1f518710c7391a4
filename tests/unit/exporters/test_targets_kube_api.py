"""Pod discovery through the real kubernetes client against a minimal in-process API server:
list, watch from the list's resourceVersion, bookmarks, 410 Gone and relist, deletion."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.waiting import wait_for
from tidescale.exporters.targets import Target, TargetSet

NS = "serving"


def pod(name: str, ip: str, ready: bool, rv: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "resourceVersion": str(rv), "labels": {"app": "triton"}},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class FakeKube:
    """Pods, an event log with resourceVersions, and watches that end after `watch_s`."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.rv = 100
        self.pods: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[int, str, dict[str, Any]]] = []
        self.oldest_rv = 0
        self.lists = 0
        self.watch_versions: list[str] = []
        self.watch_s = 0.3

    def apply(self, kind: str, name: str, ip: str = "", ready: bool = True, silent: bool = False) -> None:
        with self.lock:
            self.rv += 1
            obj = pod(name, ip or self.pods.get(name, {}).get("status", {}).get("podIP", "10.0.0.1"), ready, self.rv)
            if kind == "DELETED":
                self.pods.pop(name, None)
            else:
                self.pods[name] = obj
            if not silent:
                self.log.append((self.rv, kind, obj))
            self.lock.notify_all()

    def expire_history(self) -> None:
        """Forget every event so far: a watch from an older version gets 410 Gone."""
        with self.lock:
            self.oldest_rv = self.rv + 1
            self.log.clear()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        kube = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                q = parse_qs(url.query)
                if url.path != f"/api/v1/namespaces/{NS}/pods" or q.get("labelSelector") != ["app=triton"]:
                    self.send_error(404)
                    return
                if q.get("watch") == ["true"]:
                    self.watch(int(q["resourceVersion"][0]))
                else:
                    with kube.lock:
                        kube.lists += 1
                        body = {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": str(kube.rv)},
                                "items": list(kube.pods.values())}
                    self.reply(json.dumps(body).encode())

            def reply(self, data: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def watch(self, since: int) -> None:
                kube.watch_versions.append(str(since))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Connection", "close")
                self.end_headers()
                if since < kube.oldest_rv - 1:
                    gone = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                        "message": "too old resource version", "reason": "Expired",
                                                        "code": 410}}
                    self.wfile.write(json.dumps(gone).encode() + b"\n")
                    return
                deadline = time.monotonic() + kube.watch_s
                sent = since
                while time.monotonic() < deadline:
                    with kube.lock:
                        fresh = [e for e in kube.log if e[0] > sent]
                        if not fresh:
                            kube.lock.wait(0.05)
                            continue
                    for rv, kind, obj in fresh:
                        self.wfile.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                        self.wfile.flush()
                        sent = rv
                bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                                           "metadata": {"resourceVersion": str(max(sent, kube.rv))}}}
                self.wfile.write(json.dumps(bookmark).encode() + b"\n")

        return Handler


@pytest.fixture
def kube() -> Iterator[tuple[FakeKube, str]]:
    fake = FakeKube()
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_real_client_list_watch_relist(kube: tuple[FakeKube, str]) -> None:
    from kubernetes import client

    fake, url = kube
    fake.apply("ADDED", "triton-a", "10.0.0.1")
    cfg = client.Configuration()
    cfg.host = url
    ts = TargetSet(kube_namespace=NS, kube_selector="app=triton", api=client.CoreV1Api(client.ApiClient(cfg)))
    removed: list[Target] = []
    ts.on_change(lambda added, gone: removed.extend(gone))

    def pods() -> list[str | None]:
        return [t.pod for t in ts.targets()]

    def scenario() -> None:
        wait_for(lambda: pods() == ["triton-a"], 10, "pods [triton-a]", interval=0.02)
        assert ts.targets()[0].url == "http://10.0.0.1:8000"
        fake.apply("ADDED", "triton-b", "10.0.0.2", ready=False)
        time.sleep(0.2)
        assert pods() == ["triton-a"]                      # not Ready: not a target
        fake.apply("MODIFIED", "triton-b", "10.0.0.2", ready=True)
        wait_for(lambda: pods() == ["triton-a", "triton-b"], 10, "pods [triton-a, triton-b]", interval=0.02)
        fake.apply("DELETED", "triton-a")
        wait_for(lambda: pods() == ["triton-b"], 10, "pods [triton-b]", interval=0.02)
        assert [t.pod for t in removed] == ["triton-a"]
        # history expires; a pod changes without an event we could see: only a relist finds it
        fake.apply("ADDED", "triton-c", "10.0.0.3", silent=True)
        fake.expire_history()
        wait_for(lambda: pods() == ["triton-b", "triton-c"], 10, "pods [triton-b, triton-c]", interval=0.02)
        assert fake.lists == 2, (fake.lists, fake.watch_versions)

    async def main() -> None:
        task = asyncio.create_task(ts.run())
        try:
            await asyncio.to_thread(scenario)
        finally:
            ts.stop()
            await asyncio.wait_for(task, 5)

    asyncio.run(main())
    # watches resumed from the list's version and then from events/bookmarks, never from scratch
    assert fake.watch_versions[0] == "101"
    assert all(int(v) >= 101 for v in fake.watch_versions)
