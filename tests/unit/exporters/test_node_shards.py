"""One exporter per node (chart `exporter.mode: daemonset`): every Triton pod is polled, and its
spans attributed, by exactly one exporter, so the shards' series add up to one exporter's."""

from __future__ import annotations

from types import SimpleNamespace as NS
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.unit.exporters.test_stats_poller import run_with_server
from tidescale.benches.poll import FakeTriton, synthetic_stats
from tidescale.exporters.settings import ExporterSettings
from tidescale.exporters.stats_poller import StatsPoller
from tidescale.exporters.targets import TargetSet

# Four Triton pods on two nodes, each at its own loopback address (one fake Triton answers them all).
PODS = [("triton-a", "127.0.0.1", "gpu-0"), ("triton-b", "127.0.0.2", "gpu-1"),
        ("triton-c", "127.0.0.3", "gpu-0"), ("triton-d", "127.0.0.4", "gpu-1")]


def pod(name: str, ip: str, node: str) -> Any:
    return NS(metadata=NS(name=name, namespace="serving", labels={"pod-template-hash": "5d8f"},
                          owner_references=[NS(kind="ReplicaSet", name="triton-5d8f")], deletion_timestamp=None),
              spec=NS(node_name=node),
              status=NS(phase="Running", pod_ip=ip, conditions=[NS(type="Ready", status="True")]))


def samples(poller: StatsPoller) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample the poller exports, except its own per-exporter health series."""
    reg = CollectorRegistry()
    reg.register(poller)
    out = {}
    for family in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in family.samples:
            if not s.name.startswith("tidescale_exporter_"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def targets(node: str | None, port: int) -> TargetSet:
    ts = TargetSet(kube_namespace="serving", kube_selector="app=triton", port=port, kube_node=node)
    ts.replace_pods(pod(*p) for p in PODS)
    return ts


def test_two_node_shards_scrape_to_exactly_what_one_exporter_exports() -> None:
    cycle = [0]  # every exporter sees the same counters in a round, as scrapes of one moment would
    fake = FakeTriton(stats_body=lambda host, n: synthetic_stats(2, cycle[0]))

    async def body(port: int) -> None:
        pollers = {node: StatsPoller(targets(node, port)) for node in (None, "gpu-0", "gpu-1")}
        for cycle[0] in range(2):  # the second poll adds deltas: the counters must add up too
            for p in pollers.values():
                await p.poll_once()
        whole, shard0, shard1 = (samples(p) for p in pollers.values())
        assert whole and shard0 and shard1
        assert not shard0.keys() & shard1.keys(), "a series exported by both shards would be counted twice"
        assert {**shard0, **shard1} == whole
        pods0 = {dict(labels)["pod"] for _, labels in shard0 if "pod" in dict(labels)}
        assert pods0 == {"triton-a", "triton-c"}
        for p in pollers.values():
            await p.close()

    run_with_server(fake, body)


def test_a_shard_attributes_spans_only_from_the_pods_on_its_node() -> None:
    shard = targets("gpu-0", 8000)
    assert shard.sender("127.0.0.1") is not None
    assert shard.sender("127.0.0.2") is None  # triton-b runs on gpu-1: not this exporter's
    assert {t.pod for t in shard.targets()} == {"triton-a", "triton-c"}


def test_a_pod_event_from_another_node_is_ignored() -> None:
    shard = targets("gpu-0", 8000)
    shard.apply_pod_event("ADDED", pod("triton-e", "127.0.0.5", "gpu-1"))
    shard.apply_pod_event("MODIFIED", pod("triton-a", "127.0.0.1", "gpu-1"))  # never happens; still not ours
    assert {t.pod for t in shard.targets()} == {"triton-c"}


def test_the_list_and_watch_ask_the_api_server_for_this_node_only() -> None:
    api = NS(list_namespaced_pod=lambda ns, **kw: None)
    _, args, kwargs = TargetSet(kube_namespace="serving", kube_selector="app=triton", api=api,
                                   kube_node="gpu-0")._list_call()
    assert args == ("serving",)
    assert kwargs == {"label_selector": "app=triton", "field_selector": "spec.nodeName=gpu-0"}


@pytest.mark.parametrize(("values", "message"), [
    ({"kube_node_name": "gpu-0"}, "needs kube_namespace"),
    ({"kube_node_name": "GPU_0", "kube_namespace": "s", "kube_selector": "a=b"}, "kube_node_name"),
])
def test_a_node_name_without_discovery_or_malformed_is_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExporterSettings.model_validate(values)
