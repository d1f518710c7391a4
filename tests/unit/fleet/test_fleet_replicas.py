"""Pod naming, tritonserver flags and fleet bookkeeping that need no running server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidescale.errors import UsageError
from tidescale.fleet.fleet import SUFFIX_ALPHABET, PodNamer, TritonFleet, template_hash
from tidescale.fleet.model_repo import DEFAULT_MODELS, with_load_seconds, write_model_repository
from tidescale.fleet.triton import ReplicaPorts, TraceSettings, TritonReplica
from tidescale.tools import TritonInstall


def test_pod_names_look_like_a_deployments_and_are_reproducible() -> None:
    h = template_hash(DEFAULT_MODELS, "triton")
    assert h == template_hash(DEFAULT_MODELS, "triton") and len(h) == 5
    assert h != template_hash(with_load_seconds(DEFAULT_MODELS, 0), "triton")  # config change → new hash
    a, b = PodNamer("triton", h, seed=1), PodNamer("triton", h, seed=1)
    names = [a.next() for _ in range(50)]
    assert names == [b.next() for _ in range(50)]
    assert len(set(names)) == 50
    for name in names:
        dep, tmpl, suffix = name.split("-")
        assert (dep, tmpl) == ("triton", h) and len(suffix) == 5 and set(suffix) <= set(SUFFIX_ALPHABET)


def test_replica_flags_bind_loopback_and_configure_tracing(tmp_path: Path) -> None:
    repo = write_model_repository(tmp_path / "repo", with_load_seconds(DEFAULT_MODELS, 0))
    replica = TritonReplica("triton-x-aaaaa", "ns", repo, tmp_path / "pod", ports=ReplicaPorts(8000, 8001, 8002),
                            trace=TraceSettings(rate=10), summary_latencies=True)
    argv = replica.argv(TritonInstall(Path("/bin/tritonserver"), Path("/backends")))
    joined = " ".join(argv)
    for flag in ("--http-address 127.0.0.1", "--grpc-address 127.0.0.1", "--metrics-address 127.0.0.1",
                 "--http-port 8000", "--metrics-port 8002", "--model-control-mode explicit", "--load-model *",
                 "--allow-gpu-metrics false", "--metrics-config summary_latencies=true",
                 "--trace-config rate=10", "--trace-config mode=triton", "--trace-config level=TIMESTAMPS",
                 f"--trace-config triton,file={tmp_path / 'pod' / 'trace.json'}"):
        assert flag in joined
    assert replica.metrics_url == "http://127.0.0.1:8002/metrics"
    assert replica.labels == {"namespace": "ns", "pod": "triton-x-aaaaa"}
    assert not replica.ready
    otel = TraceSettings(mode="opentelemetry", url="http://127.0.0.1:4318/v1/traces").flags(tmp_path)
    assert "opentelemetry,url=http://127.0.0.1:4318/v1/traces" in otel and "mode=opentelemetry" in otel


@pytest.mark.parametrize("kwargs", [{"mode": "jaeger"}, {"rate": 0}, {"level": "ALL"}])
def test_invalid_trace_settings(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        TraceSettings(**kwargs)  # type: ignore[arg-type]


def test_empty_repository_and_bad_replica_counts(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no models"):
        TritonReplica("p", "ns", tmp_path / "empty", tmp_path / "w")
    with pytest.raises(UsageError):
        TritonFleet(tmp_path, replicas=-1)
    fleet = TritonFleet(tmp_path, replicas=0)
    with pytest.raises(UsageError):
        fleet.scale_to(1000)
    assert fleet.scrape_targets() == [] and fleet.ready_urls() == []
