"""The node agent's link to the API server: a failed request is an ApiError, and the heartbeat outlives one.

CI's run of stop 78 lost a node this way: a reset connection raised httpx's own error past every
`except ApiError`, the heartbeat thread died, and 5 minutes later the taint manager evicted the node's
pods (among them the in-cluster OCI registry, with the chart the brownfield tests install from).
"""

from __future__ import annotations

import threading
from ipaddress import IPv4Address
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tidescale.devstack.cluster.pki import Pki
from tidescale.devstack.node.agent import NodeAgent
from tidescale.devstack.node.kubeapi import ApiError, ApiUnreachable, KubeApi
from tidescale.devstack.node.sandbox import DnsConfig


def _kubeconfig(tmp_path: Path) -> Path:
    pki = Pki(tmp_path / "pki")
    ca = pki.ca("ca", "test-ca")
    node = pki.leaf("node", ca, "system:node:n0", ["system:nodes"])
    path = tmp_path / "node.kubeconfig"
    path.write_text(yaml.safe_dump({
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                               "certificate-authority": str(ca.cert)}}],
        "users": [{"name": "u", "user": {"client-certificate": str(node.cert), "client-key": str(node.key)}}]}))
    return path


def test_a_connection_reset_is_an_api_error_that_names_the_request(tmp_path: Path) -> None:
    def reset(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadError("[Errno 9] Bad file descriptor", request=request)

    api = KubeApi(_kubeconfig(tmp_path), transport=httpx.MockTransport(reset))
    with pytest.raises(ApiError) as caught:
        api.patch_strategic("/api/v1/nodes/n0/status", {"status": {}})
    assert isinstance(caught.value, ApiUnreachable) and caught.value.status == 0
    assert str(caught.value) == ("PATCH /api/v1/nodes/n0/status: no answer from the API server "
                                 "([Errno 9] Bad file descriptor)")


def test_an_answer_is_still_read_through_the_transport(tmp_path: Path) -> None:
    api = KubeApi(_kubeconfig(tmp_path), transport=httpx.MockTransport(
        lambda r: httpx.Response(404, json={"message": f"{r.url.path} not found"})))
    with pytest.raises(ApiError) as caught:
        api.get("/api/v1/nodes/n0")
    assert not isinstance(caught.value, ApiUnreachable)
    assert (caught.value.status, str(caught.value)) == (404, "HTTP 404: /api/v1/nodes/n0 not found")


class FlakyHeartbeatApi:
    """Its first lease renewal raises what no handler expects; the agent stops once a later one lands."""

    def __init__(self, agent_stopping: threading.Event) -> None:
        self.stopping = agent_stopping
        self.calls: list[str] = []

    def patch_merge(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"lease {body['spec']['holderIdentity']}")
        if len(self.calls) == 1:
            raise RuntimeError("a bug in one round")
        self.stopping.set()
        return {}

    def patch_strategic(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(f"status {path}")
        return {}


def test_the_heartbeat_survives_a_round_that_raises_and_uses_its_own_client(tmp_path: Path) -> None:
    pod_traffic: Any = object()  # any call on the pods' client would raise AttributeError
    agent = NodeAgent("n0", pod_traffic, "10.0.0.1", DnsConfig(IPv4Address("10.96.0.10"), ("svc.cluster.local",)),
                      tmp_path, b"", ("10.96.0.1", 443))
    heartbeat = FlakyHeartbeatApi(agent.stopping)
    agent.heartbeat_api = heartbeat  # type: ignore[assignment]
    thread = threading.Thread(target=agent._heartbeat, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert heartbeat.calls == ["lease n0", "lease n0", "status /api/v1/nodes/n0/status"]
