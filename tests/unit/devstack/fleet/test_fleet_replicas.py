"""Pod naming, tritonserver flags and fleet bookkeeping that need no running server."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tidescale.contracts.errors import UsageError
from tidescale.devstack.cluster.serving import triton_deployment
from tidescale.devstack.fleet.fleet import SUFFIX_ALPHABET, PodNamer, TritonFleet, crash_from, template_hash
from tidescale.devstack.fleet.model_repo import DEFAULT_MODELS, with_load_seconds, write_model_repository
from tidescale.devstack.fleet.triton import ReplicaPorts, TraceSettings, TritonReplica, otlp_batch_flags
from tidescale.devstack.procs import ManagedProcess
from tidescale.devstack.tools import REPO_ROOT, TritonInstall


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


def test_every_otlp_triton_the_project_runs_posts_the_batches_install_md_advises(tmp_path: Path) -> None:
    """One batch setting for Triton's OTLP posts: the local fleet's replicas (and so the benchmarks),
    the local cluster's Deployment and the flags docs/install.md tells users to add."""
    advised = otlp_batch_flags()
    assert advised == ["--trace-config=opentelemetry,bsp_max_export_batch_size=2048",
                       "--trace-config=opentelemetry,bsp_max_queue_size=8192"]
    fleet = TraceSettings(mode="opentelemetry").flags(tmp_path)
    assert all(flag in fleet for flag in advised)
    assert not any("bsp_" in flag for flag in TraceSettings(mode="triton").flags(tmp_path))
    [deployment] = [d for d in triton_deployment("serving", otlp_url="http://x:9105/v1/traces")
                    if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert all(flag in args for flag in advised)
    [file_mode] = [d for d in triton_deployment("serving", trace_host_path="/var/traces") if d["kind"] == "Deployment"]
    assert not any("bsp_" in a for a in file_mode["spec"]["template"]["spec"]["containers"][0]["args"])
    install = (REPO_ROOT / "docs" / "install.md").read_text()
    assert all(f"  - {flag}" in install for flag in advised)


@pytest.mark.parametrize("kwargs", [{"mode": "jaeger"}, {"rate": 0}, {"level": "ALL"}, {"log_frequency": -1}])
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


# The end of a tritonserver 2.51 log after it crashed in CI (its HTTP frontend, under overload).
SEGV_TAIL = """I1121 19:52:19.695933 16062 http_server.cc:362] "Started Metrics Service at 127.0.0.1:46847"
Signal (11) received.
 0# 0x000055D7C318452D in /opt/tritonserver/bin/tritonserver
 7# TRITONBACKEND_RequestRelease in /opt/tritonserver/lib/libtritonserver.so
I1121 19:52:40.089036 16078 pb_stub.cc:2145]  Non-graceful termination detected."""


@pytest.mark.parametrize(("returncode", "tail", "signal", "exit_code"), [
    (-11, SEGV_TAIL, 11, 139),      # killed by the re-raised signal
    (1, SEGV_TAIL, 11, 1),          # Triton's handler exited on its own: the log still names the signal
    (-9, "I1121 model loaded", 9, 137),  # OOM kill / chaos: nothing in the log, the status says SIGKILL
    (3, "E1121 fatal: bad config", None, 3),
    (None, "", None, None),
])
def test_a_crash_is_named_like_kubernetes_names_it(returncode: int | None, tail: str, signal: int | None,
                                                   exit_code: int | None) -> None:
    crash = crash_from("triton-x-aaaaa", returncode, tail, at=100.0)
    assert (crash.signal, crash.exit_code) == (signal, exit_code)
    assert crash.describe().startswith("triton-x-aaaaa crashed (")


def test_the_log_tail_and_exit_status_belong_to_the_current_run(tmp_path: Path) -> None:
    """A restarted pod appends to its log; a crash must not be blamed on the previous run's output."""
    log, marker = tmp_path / "p.log", tmp_path / "ran-once"
    script = (f"import pathlib; m = pathlib.Path({str(marker)!r}); "
              "print('second run' if m.exists() else 'Signal (11) received.'); m.touch()")
    first = ManagedProcess("p", [sys.executable, "-c", script], log).start()
    assert first.proc is not None and first.proc.wait(10) == 0
    assert first.returncode == 0 and "Signal (11)" in first.log_tail()
    again = first.start()  # the same object restarted, as TritonReplica.restart() does
    assert again.proc is not None and again.proc.wait(10) == 0
    assert again.log_tail() == "second run" and "Signal (11)" in log.read_text()
    assert ManagedProcess("never", ["true"], tmp_path / "n.log").returncode is None
