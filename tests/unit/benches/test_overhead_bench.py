"""`tidescale bench overhead`'s pure parts: CPU of a process tree from /proc text, Prometheus'
histogram_quantile over bucket deltas, the per-mode arithmetic, the modes and bad input."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import yaml

from tests.clocks import ManualClock
from tests.paths import FIXTURES
from tidescale import cli
from tidescale.benches import loadclients as lc
from tidescale.benches import overhead as ov
from tidescale.benches import overhead_page as ovp
from tidescale.benches import proccpu as pc
from tidescale.benches.histogram import histogram_quantile
from tidescale.contracts.errors import MissingToolError, TidescaleError, UsageError
from tidescale.devstack import tools
from tidescale.devstack.fleet.model_repo import write_model_repository
from tidescale.devstack.tools import REPO_ROOT


def stat(pid: int, ppid: int, utime: int, stime: int, cutime: int = 0, cstime: int = 0, comm: str = "proc") -> str:
    """One /proc/<pid>/stat line as Linux writes it (fields 14-17 are the CPU ticks)."""
    fields = ["S", ppid, pid, pid, 0, -1, 4194560, 100, 0, 0, 0, utime, stime, cutime, cstime, 20, 0, 12, 0]
    return f"{pid} ({comm}) " + " ".join(str(f) for f in fields) + "\n"


# --- CPU of a process tree ------------------------------------------------------------------------

def test_parse_stat_reads_ppid_and_all_four_cpu_fields_even_with_odd_command_names() -> None:
    assert pc.parse_stat(stat(42, 7, 100, 20, 3, 4, comm="triton_python_b")) == (7, 127)
    # a command name with spaces and a closing parenthesis does not shift the fields
    assert pc.parse_stat(stat(43, 42, 5, 6, comm="a b) (c")) == (42, 11)


def test_tree_ticks_sums_the_root_and_every_descendant_and_nothing_else() -> None:
    stats = {
        100: stat(100, 1, 1000, 200, cutime=50),  # tritonserver (50: a reaped child)
        101: stat(101, 100, 300, 30),  # python backend stub
        102: stat(102, 101, 7, 3),  # a grandchild
        200: stat(200, 1, 9999, 9999),  # the exporter: another tree
        201: stat(201, 200, 5, 5),
        300: "garbage without fields",
    }
    assert pc.tree_ticks(100, stats) == 1250 + 330 + 10
    assert pc.tree_ticks(200, stats) == 19998 + 10
    assert pc.tree_ticks(101, stats) == 340
    assert pc.tree_ticks(999, stats) == 0  # gone


def test_read_proc_stats_reads_numeric_entries_only(tmp_path: Path) -> None:
    for pid, ppid in ((1, 0), (12, 1)):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat(pid, ppid, pid, 1))
    (tmp_path / "self").mkdir()
    (tmp_path / "34").mkdir()  # exited between the listing and the read: no stat file
    stats = pc.read_proc_stats(tmp_path)
    assert sorted(stats) == [1, 12]
    assert pc.tree_ticks(1, stats) == 2 + 13


def test_stub_regions_are_read_from_the_stubs_under_the_server(tmp_path: Path) -> None:
    region = "triton_python_backend_shm_region_9fc5f696-1d36-484b-92a8-8e486aa9fd71"
    procs = {100: (1, [b"tritonserver", b"--model-repository", b"/repo"]),
             101: (100, [b"triton_python_backend_stub", b"/repo/m/1/model.py", region.encode(), b"1048576"]),
             200: (1, [b"triton_python_backend_stub", b"/other/model.py",
                       b"triton_python_backend_shm_region_00000000-0000-0000-0000-000000000000"])}
    for pid, (ppid, argv) in procs.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat(pid, ppid, 1, 1))
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(argv) + b"\0")
    assert ov.stub_regions(100, tmp_path) == [region]  # another server's stub is not ours
    assert pc.process_tree(100, pc.read_proc_stats(tmp_path)) == {100: 2, 101: 2}
    # the server crashed and exited: init adopted the stub, which its region still finds
    (tmp_path / "101" / "stat").write_text(stat(101, 1, 1, 1))
    shutil.rmtree(tmp_path / "100")
    assert ov.stub_regions(100, tmp_path) == [] and ov.holders([region], tmp_path) == [101]


def test_the_process_clock_reads_another_process_to_the_microsecond() -> None:
    """Less than one /proc tick of work shows on the exporter's clock, and the clock agrees with /proc."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.readline(); "
                              "sum(range(200_000)); sys.stdin.readline()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdin is not None and child.stdout is not None
        assert child.stdout.readline().strip() == "ready"  # started, and waiting
        before = pc.process_cpu_seconds(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
        after = before
        for _ in range(200):
            time.sleep(0.01)
            after = pc.process_cpu_seconds(child.pid)
            if after - before > 0.001:
                break
        assert after - before > 0.001
        assert after != round(after * pc.CLOCK_TICKS) / pc.CLOCK_TICKS  # not a whole number of ticks
        [ticks] = pc.tree_cpu_seconds([child.pid])
        assert abs(after - ticks) < 0.1
    finally:
        child.kill()
        child.wait()


def test_tree_cpu_seconds_of_this_process_grows_with_work() -> None:
    [before] = pc.tree_cpu_seconds([os.getpid()])
    after = before
    for _ in range(2_000):  # ~1 ms of CPU a round; a clock tick is 10 ms
        sum(range(20_000))
        [after] = pc.tree_cpu_seconds([os.getpid()])
        if after > before:
            break
    assert after > before > 0


# --- quantiles over bucket deltas -------------------------------------------------------------------

def test_bucketed_counts_the_clients_latencies_as_le_buckets() -> None:
    latencies = np.array([0.5, 1.0, 1.5, 2.0, 3.0, 9.0])
    # a value equal to a bound belongs to that bucket ("le"); +Inf's own key is ignored and re-added
    assert ov.bucketed(latencies, [4.0, 1.0, 2.0, math.inf]) == {1.0: 2.0, 2.0: 4.0, 4.0: 5.0, math.inf: 6.0}
    # through buckets, the P99 moves within its bucket: the layout's share of the error, apart
    exact = float(np.quantile(np.linspace(1.0, 2.0, 1001), 0.99))
    through = histogram_quantile(0.99, ov.bucketed(np.linspace(1.0, 2.0, 1001), [1.0, 1.5, 3.0]))
    assert through is not None and through != pytest.approx(exact) and 1.5 < through < 3.0


def test_quantile_of_the_delta_sees_only_the_run() -> None:
    before = {0.01: 1000.0, 0.02: 1000.0, math.inf: 1000.0}  # the warm-up: all fast
    after = {0.01: 1000.0, 0.02: 1100.0, math.inf: 1100.0}  # the run: 100 in (0.01, 0.02]
    delta = ov.bucket_delta(after, before)
    assert delta == {0.01: 0.0, 0.02: 100.0, math.inf: 100.0}
    assert histogram_quantile(0.99, delta) == pytest.approx(0.01 + 0.01 * 0.99)


# --- what the servers expose -----------------------------------------------------------------------

def test_triton_view_reads_the_counter_and_the_summary_p99_of_real_2_51_output() -> None:
    text = (FIXTURES / "triton" / "real-2.51" / "metrics_after_load.txt").read_text()
    batcher = ov.triton_view(text, "batcher")
    assert batcher.requests == 9906 and batcher.summary_p99_s == pytest.approx(0.066832)
    echo = ov.triton_view(text, "echo")  # no requests: Triton writes Nan quantiles
    assert echo.requests == 0 and echo.summary_p99_s is None
    assert ov.triton_view(text, "absent") == ov.TritonView(0.0, None)


def exporter_text() -> str:
    """An exporter page: the request stage from the bench's pod and from an unattributed sender, a
    queue stage, and the detected rate of the bench's pod."""
    def series(stage: str, ns: str, pod: str, count: float, le_001: float) -> list[str]:
        labels = f'model="ctr_ranker",version="1",stage="{stage}",namespace="{ns}",pod="{pod}",deployment=""'
        return [f'tidescale_request_duration_seconds_bucket{{{labels},le="0.01"}} {le_001}',
                f'tidescale_request_duration_seconds_bucket{{{labels},le="+Inf"}} {count}',
                f"tidescale_request_duration_seconds_count{{{labels}}} {count}",
                f"tidescale_request_duration_seconds_sum{{{labels}}} {count / 100}"]

    who = f'namespace="{ov.NAMESPACE}",pod="{ov.POD}",model="ctr_ranker",version="1"'
    return "\n".join([
        "# HELP tidescale_request_duration_seconds d", "# TYPE tidescale_request_duration_seconds histogram",
        *series("request", ov.NAMESPACE, ov.POD, 50.0, 40.0), *series("request", "", "", 10.0, 10.0),
        *series("queue", "", "", 7.0, 7.0),
        "# HELP tidescale_trace_sample_rate_detected n", "# TYPE tidescale_trace_sample_rate_detected gauge",
        f"tidescale_trace_sample_rate_detected{{{who}}} 10.0",
        "# HELP tidescale_trace_sample_rate_confidence c", "# TYPE tidescale_trace_sample_rate_confidence gauge",
        f"tidescale_trace_sample_rate_confidence{{{who}}} 0.75",
        "# HELP tidescale_exporter_spans_accepted OTLP spans accepted.",
        "# TYPE tidescale_exporter_spans_accepted counter", "tidescale_exporter_spans_accepted_total 180.0", ""])


def test_exporter_view_sums_the_request_stage_over_pods_and_reads_the_detected_rate() -> None:
    view = ov.exporter_view(exporter_text())
    assert view.buckets == {0.01: 50.0, math.inf: 60.0} and view.count == 60.0  # the queue stage is left out
    assert (view.detected_rate, view.confidence, view.spans) == (10.0, 0.75, 180.0)
    empty = ov.exporter_view("")
    assert empty.buckets == {} and empty.count == 0.0 and empty.detected_rate is None and empty.spans == 0.0


# --- modes and bad input ---------------------------------------------------------------------------

def test_modes_parse_with_their_rates() -> None:
    assert [(m.name, m.tracing, m.rate) for m in ov.parse_modes(ov.DEFAULT_MODES)] == [
        ("none", "none", None), ("summaries", "summaries", None), ("otlp-1", "otlp", 1), ("otlp-10", "otlp", 10),
        ("otlp-100", "otlp", 100), ("tracefile-1", "tracefile", 1), ("tracefile-10", "tracefile", 10)]
    assert [m.name for m in ov.parse_modes(["none,OTLP-10", " otlp-10", "tracefile-5"])] == [
        "none", "otlp-10", "tracefile-5"]


@pytest.mark.parametrize(("text", "message"), [
    ("bogus", "unknown overhead mode 'bogus'"),
    ("otlp", "unknown overhead mode 'otlp'"),
    ("summaries-3", "unknown overhead mode"),
    ("otlp-0", "the trace rate must be >= 1"),
    ("tracefile--2", "the trace rate must be >= 1"),
    ("otlp-ten", "is not a whole number"),
])
def test_bad_modes_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        ov.parse_modes([text])


@pytest.mark.parametrize(("argv", "message"), [
    (["--mode", "bogus"], "unknown overhead mode 'bogus'"),
    (["--mode", "otlp-0"], "the trace rate must be >= 1"),
    (["--requests", "0"], "--requests must be >= 1, got 0"),
    (["--requests", "-5", "--quick"], "--requests must be >= 1, got -5"),
    (["--client", "curl", "--mode", "none"], "unknown client 'curl'"),
    (["--concurrency", "0", "--mode", "none"], "--concurrency must be >= 1"),
    (["--rounds", "0"], "--rounds must be >= 1, got 0"),
])
def test_bench_bad_input_exits_2_before_starting_anything(argv: list[str], message: str,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def no_servers(*_: object, **__: object) -> None:
        raise AssertionError("started a server on bad input")

    monkeypatch.setattr(ov, "measure", no_servers)
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "overhead", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_client_choice_falls_back_to_the_load_generator_only_when_asked_to_choose(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> tools.PerfAnalyzerInstall:
        raise MissingToolError("perf_analyzer not found on PATH or in .tools/bin")

    monkeypatch.setattr(tools, "perf_analyzer", missing)
    client, why = lc.choose_client("auto", ov.MODEL_SPEC)
    assert client.name == "loadgen" and why is not None and "not found" in why
    with pytest.raises(MissingToolError, match="perf_analyzer not found"):
        lc.choose_client("perf_analyzer", ov.MODEL_SPEC)
    assert lc.choose_client("loadgen", ov.MODEL_SPEC)[0].name == "loadgen"


def test_a_perf_analyzer_that_cannot_run_is_not_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "perf_analyzer"
    broken.write_text("#!/bin/sh\necho 'error while loading shared libraries: libb64.so.0d' >&2\nexit 127\n")
    broken.chmod(0o755)
    monkeypatch.setattr(tools, "perf_analyzer", lambda: tools.PerfAnalyzerInstall(broken, None))
    client, why = lc.choose_client("auto", ov.MODEL_SPEC)
    assert client.name == "loadgen" and why is not None and "libb64" in why


def test_perf_analyzer_env_puts_its_library_dir_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/lib")
    env = tools.PerfAnalyzerInstall(tmp_path / "perf_analyzer", tmp_path).env()
    assert env["LD_LIBRARY_PATH"] == f"{tmp_path}:/usr/local/lib"
    assert tools.PerfAnalyzerInstall(tmp_path / "perf_analyzer", None).env()["LD_LIBRARY_PATH"] == "/usr/local/lib"


def test_profile_export_gives_latencies_errors_and_the_clients_own_wall_time() -> None:
    export = {"experiments": [{"experiment": {"mode": "concurrency", "value": 8}, "requests": [
        {"timestamp": 1_000_000_000, "response_timestamps": [1_004_000_000]},
        {"timestamp": 1_001_000_000, "response_timestamps": [1_003_000_000, 1_011_000_000]},
        {"timestamp": 1_002_000_000, "response_timestamps": []},
    ]}]}
    run = lc.profile_run(export)
    assert run.latencies_s.tolist() == pytest.approx([0.004, 0.010])
    assert run.errors == 1 and run.wall_s == pytest.approx(0.011)
    assert lc.profile_run({}).latencies_s.size == 0


# --- the replica's flags and the exporter's settings -------------------------------------------------

def test_replica_flags_name_the_pod_in_otlp_and_write_the_trace_file_as_it_fills(tmp_path: Path) -> None:
    repo = write_model_repository(tmp_path / "repo", [ov.MODEL_SPEC])
    install = tools.TritonInstall(binary=Path("/opt/tritonserver"), backend_dir=Path("/opt/backends"))
    otlp, tracefile, none = ov.parse_modes(["otlp-10", "tracefile-1", "none"])

    def argv(mode: ov.Mode) -> list[str]:
        replica = ov.BenchReplica(ov.POD, ov.NAMESPACE, repo, tmp_path / mode.name,
                                  trace=mode.trace_settings("http://127.0.0.1:9", tmp_path / mode.name))
        return replica.argv(install)

    flags = argv(otlp)
    assert "opentelemetry,url=http://127.0.0.1:9/v1/traces" in flags and "rate=10" in flags
    assert f"opentelemetry,resource=k8s.pod.name={ov.POD}" in flags
    assert f"opentelemetry,resource=k8s.namespace.name={ov.NAMESPACE}" in flags
    flags = argv(tracefile)
    assert f"triton,file={tmp_path / 'tracefile-1' / 'traces' / f'{ov.NAMESPACE}_{ov.POD}' / 'trace.json'}" in flags
    assert f"triton,log-frequency={ov.TRACE_FILE_FREQUENCY}" in flags and "triton,log-frequency=0" not in flags
    assert not any("trace-config" in f for f in argv(none))


def test_exporter_settings_per_mode(tmp_path: Path) -> None:
    none, otlp, tracefile = ov.parse_modes(["none", "otlp-100", "tracefile-1"])
    env = ov.exporter_env(none, tmp_path / "targets.json", tmp_path)
    assert env["TIDESCALE_EXPORTER_TARGETS_FILE"] == str(tmp_path / "targets.json")
    assert env["TIDESCALE_EXPORTER_TRACES_REQUIRE_TOKEN"] == "false"
    assert "TIDESCALE_EXPORTER_TRACE_SAMPLE_RATE" not in env and "TIDESCALE_EXPORTER_TRACE_DIR" not in env
    assert ov.exporter_env(otlp, tmp_path / "t", tmp_path)["TIDESCALE_EXPORTER_TRACE_SAMPLE_RATE"] == "100"
    # The trace file as the chart deploys it: the pod's subdirectory of the trace directory, read
    # rotations pruned as the chart's exporter.traceFiles.keepRotations says.
    env = ov.exporter_env(tracefile, tmp_path / "t", tmp_path)
    assert env["TIDESCALE_EXPORTER_TRACE_DIR"] == str(tmp_path / "traces")
    assert ov.trace_file(tmp_path).parent == tmp_path / "traces" / f"{ov.NAMESPACE}_{ov.POD}"
    chart = yaml.safe_load((REPO_ROOT / "deploy" / "helm" / "tidescale" / "values.yaml").read_text())
    assert env["TIDESCALE_EXPORTER_TRACE_FILE_KEEP_ROTATIONS"] == str(chart["exporter"]["traceFiles"]["keepRotations"])


def test_the_rotation_keeper_keeps_every_rotation_the_exporter_prunes(tmp_path: Path) -> None:
    source = tmp_path / "pod" / "trace.json"
    source.parent.mkdir()
    keeper = ov.RotationKeeper(source, tmp_path / "kept" / "trace.json", interval_s=0.01)
    for i in range(3):
        (source.parent / f"trace.json.{i}").write_text(f"[{i}]")
    keeper.sweep()
    for i in range(2):
        (source.parent / f"trace.json.{i}").unlink()  # pruned by the exporter
    (source.parent / "trace.json.3").write_text("[3]")  # written at exit
    keeper.start().stop()
    assert sorted(p.name for p in (tmp_path / "kept").iterdir()) == [f"trace.json.{i}" for i in range(4)]
    assert (tmp_path / "kept" / "trace.json.0").read_text() == "[0]" and keeper.missed == 0


# --- per-mode arithmetic -----------------------------------------------------------------------------

def snap(triton_cpu: float, exporter_cpu: float, requests: float, buckets: dict[float, float], t: float,
         summary_p99: float | None = None, detected: float | None = None, ingest_cpu: float = 0.0) -> ov.Snapshot:
    count = buckets.get(math.inf, 0.0)
    return ov.Snapshot(triton_cpu, exporter_cpu, ov.TritonView(requests, summary_p99),
                       ov.ExporterView(buckets, count, detected, 0.9 if detected else None, 0.0, ingest_cpu), t)


def mode_run(triton_cpu_s: float, exporter_cpu_s: float, seconds: float, buckets: dict[float, float],
             summary_p99: float | None = None, detected: float | None = None,
             idle: tuple[float, float] = (0.15, 15.0), reads: int = 10, read_cpu_s: float = 0.002,
             ingest_cpu_s: float = 0.0) -> ov.ModeRun:
    """50,000 requests (500 of warm-up before), the client's latencies uniform over 5-10 ms; the exporter
    left alone afterwards spends *idle* (CPU s, wall s), 10 ms per second by default; the bench read its
    /metrics *reads* times during the round, at *read_cpu_s* each; its ingest threads counted *ingest_cpu_s*."""
    before = snap(10.0, 2.0, 500, {0.005: 400.0, 0.01: 500.0, math.inf: 500.0}, 100.0, ingest_cpu=0.5)
    after = snap(10.0 + triton_cpu_s, 2.0 + exporter_cpu_s, 50_500,
                 {le: before.exporter.buckets[le] + n for le, n in buckets.items()}, 100.0 + seconds,
                 ingest_cpu=0.5 + ingest_cpu_s)
    client = lc.ClientRun(np.linspace(0.005, 0.010, 50_000), 0, seconds - 7.0)
    end = (ov.TritonView(50_500, summary_p99), ov.ExporterView({}, 0.0, detected, 0.9 if detected else None))
    return ov.ModeRun(before, after, client, end, idle=idle, reads=reads, read_cpu_s=read_cpu_s)


def one(mode: ov.Mode, run: ov.ModeRun) -> dict[str, object]:
    """The result of a mode measured in one round."""
    return ov.mode_result(mode, [run])


def test_mode_results_divide_cpu_time_by_requests_and_compare_p99s() -> None:
    none, summaries, otlp = ov.parse_modes(["none", "summaries", "otlp-10"])
    traced_buckets = {0.005: 0.0, 0.01: 50_000.0, math.inf: 50_000.0}  # weighted: N x 5,000 traced
    results = [
        one(none, mode_run(15.0, 0.5, 50.0, {0.005: 0.0, 0.01: 0.0, math.inf: 0.0})),
        one(summaries, mode_run(15.25, 0.5, 50.0, {0.005: 0.0, 0.01: 0.0, math.inf: 0.0},
                                           summary_p99=0.0098)),
        one(otlp, mode_run(15.4, 0.7, 60.0, traced_buckets, detected=10.0, ingest_cpu_s=0.06)),
    ]
    ov.against_none(results)
    base, summ, traced = results
    assert base["requests"] == 50_000 and base["triton_cpu_us_per_request"] == 300.0
    assert base["exporter_cpu_us_per_request"] == 10.0 and base["exporter_role"].startswith("polling only")
    assert base["traced_requests"] is None and base["p99_error"] is None and base["exporter_p99_s"] is None
    assert base["throughput_rps"] == pytest.approx(50_000 / 43.0, abs=0.1)
    assert base["client_p99_s"] == pytest.approx(0.00995, abs=1e-6)
    assert summ["triton_added_cpu_us_vs_none"] == 5.0
    assert summ["triton_summary_p99_error"] == pytest.approx((0.0098 - 0.00995) / 0.00995, abs=1e-4)
    assert traced["triton_added_cpu_us_vs_none"] == 8.0
    assert traced["traced_requests"] == 5_000 and traced["exporter_cpu_us_per_traced_request"] == 140.0
    # net of idle: 10 ms per second left alone -> 0.6 s of this 60 s run; 0.1 s over 5,000 traced requests
    assert traced["exporter_idle_cpu_ms_per_s"] == 10.0
    assert traced["exporter_net_cpu_us_per_traced_request"] == pytest.approx(20.0)
    # the live path: without the bench's own 10 reads at 2 ms, 0.02 s of that 0.1 s
    assert traced["exporter_bench_reads"] == 10 and traced["exporter_ms_per_read"] == 2.0
    assert traced["exporter_live_cpu_us_per_traced_request"] == pytest.approx(16.0)
    # the exporter's own count of its ingest threads' CPU: 0.06 s over 5,000 traced requests
    assert traced["exporter_ingest_cpu_us_per_traced_request"] == pytest.approx(12.0)
    assert traced["exporter_ingest_cpu_us_per_traced_request_by_round"] == [pytest.approx(12.0)]
    assert base["exporter_ingest_cpu_us_per_traced_request"] is None
    # the same from the none mode's 0.5 s per 50 s
    assert traced["exporter_net_cpu_us_per_traced_request_vs_none"] == pytest.approx(20.0)
    assert traced["exporter_counted_requests"] == 50_000 and traced["detected_rate"] == 10.0
    assert traced["exporter_p99_s"] == pytest.approx(0.005 + 0.005 * 0.99)
    assert traced["p99_error"] == pytest.approx((0.00995 - 0.00995) / 0.00995, abs=1e-3)
    goals = ov.goals(results)
    # uniform client latencies through these buckets read their exact P99: the error has no bucket share
    assert traced["client_p99_through_buckets_s"] == pytest.approx(traced["client_p99_s"], rel=1e-3)
    assert traced["p99_error_of_buckets"] == pytest.approx(0.0, abs=1e-3) and base["p99_error_of_buckets"] is None
    assert goals["otlp-10"] == {"requests": 50_000, "enough_requests": True, "p99_error": traced["p99_error"],
                                "p99_error_met": True, "p99_error_of_buckets": traced["p99_error_of_buckets"],
                                "p99_error_beyond_buckets": traced["p99_error_beyond_buckets"],
                                "triton_added_cpu_us": 8.0, "triton_added_cpu_noise_us": None,
                                "triton_added_cpu_met": True}
    # judged net of the idle polling (which costs per poll, not per request)
    assert goals["exporter_cpu_per_traced_request"] == {"otlp-10": {
        "us": 140.0, "net_us": 20.0, "live_us": 16.0, "live_us_by_round": [16.0],
        # one 5 s stats poll at 10 ms/s of idle, over 5,000 traced requests: how far the round can be off
        "noise_us_by_round": [10.0], "within_noise": False, "met": True, "ingest_us": 12.0}}
    page = ovp.markdown(page_of(results, goals))
    assert "| otlp-10 | 50,000 |" in page and "Triton's own summary P99 (its last round) 9.80 ms" in page
    assert "Triton's added CPU ≤ 10 µs per request: 8.0 µs — met" in page
    assert "its ingest threads, by its own count, 12.0 µs) — met" in page
    assert "request on the live path: 16.0 µs (rounds: 16.0 ± 10.0; 20.0 µs net of its own idle cost" in page


def test_the_live_path_is_judged_without_the_benchs_own_reads() -> None:
    otlp, = ov.parse_modes(["otlp-10"])
    buckets = {0.005: 0.0, 0.01: 50_000.0, math.inf: 50_000.0}
    # 0.14 s net of idle over 5,000 traced requests is 28 us; 40 reads at 3 ms take 0.12 s of it (an idle of
    # 1 ms/s: one poll's worth, 1 us per traced request, is under what is left)
    heavy = one(otlp, mode_run(15.0, 0.2, 60.0, buckets, reads=40, read_cpu_s=0.003, idle=(0.015, 15.0)))
    assert heavy["exporter_net_cpu_us_per_traced_request"] == pytest.approx(28.0)
    assert heavy["exporter_live_cpu_us_per_traced_request"] == pytest.approx(4.0)
    costly = one(otlp, mode_run(15.0, 0.84, 60.0, buckets, reads=10, read_cpu_s=0.001))
    assert costly["exporter_live_cpu_us_per_traced_request"] == pytest.approx(46.0)
    ov.against_none([heavy, costly])
    judged = ov.goals([heavy])["exporter_cpu_per_traced_request"]["otlp-10"]
    assert judged["met"] is True and judged["net_us"] == pytest.approx(28.0)
    assert ov.goals([costly])["exporter_cpu_per_traced_request"]["otlp-10"]["met"] is False


def test_a_live_figure_within_the_noise_of_what_was_taken_off_is_not_judged() -> None:
    otlp, = ov.parse_modes(["otlp-10"])
    buckets = {0.005: 0.0, 0.01: 50_000.0, math.inf: 50_000.0}
    # round 1: 0.1 s live (20 us); round 2: its 20 reads at 6 ms exceed the 0.1 s net of idle
    rounds = [mode_run(15.0, 0.7, 60.0, buckets, reads=0), mode_run(15.0, 0.7, 60.0, buckets, reads=20,
                                                                     read_cpu_s=0.006)]
    result = ov.mode_result(otlp, rounds)
    assert result["exporter_live_cpu_us_per_traced_request_by_round"] == [20.0, -4.0]
    assert result["exporter_live_cpu_us_per_traced_request"] == pytest.approx(8.0)  # pooled: under the goal...
    ov.against_none([result])
    judged = ov.goals([result])["exporter_cpu_per_traced_request"]["otlp-10"]
    assert judged["within_noise"] is True and judged["met"] is None  # ... but not "met"
    page = ovp.markdown(page_of([result], ov.goals([result])))
    assert "(rounds: 20.0 ± 10.0, -4.0 ± 10.0;" in page and "not judged: a round's live CPU is within the noise" in page


def test_a_live_figure_under_one_stats_polls_cost_is_not_judged() -> None:
    """At rate 100 a round holds a few hundred traced requests, and one 5 s stats poll more or less in it
    moves the figure by tens of µs: a small positive figure there is noise, not a goal met."""
    otlp, = ov.parse_modes(["otlp-100"])
    buckets = {0.005: 0.0, 0.01: 50_000.0, math.inf: 50_000.0}
    # 500 traced requests; 0.6 s idle, 0.02 s of reads: 0.005 s (10 us) left, under one poll's 50 ms (100 us)
    result = ov.mode_result(otlp, [mode_run(15.0, 0.625, 60.0, buckets)])
    assert result["exporter_live_cpu_us_per_traced_request_by_round"] == [pytest.approx(10.0)]
    assert result["exporter_live_noise_us_by_round"] == [100.0]
    judged = ov.goals([result])["exporter_cpu_per_traced_request"]["otlp-100"]
    assert judged["within_noise"] is True and judged["met"] is None


def test_settle_counts_its_reads_and_read_cost_is_net_of_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = iter([5.0, 7.0, 7.0, 7.0, 7.0])
    got: list[str] = []

    def get(http: object, url: str) -> str:
        got.append(url)
        return ""

    monkeypatch.setattr(ov, "_get", get)
    monkeypatch.setattr(ov, "exporter_view", lambda text: ov.ExporterView({}, next(counts), None, None))
    monkeypatch.setattr(ov, "SETTLE_S", 0.0)
    monkeypatch.setattr(ov, "QUIET_S", 0.01)
    monkeypatch.setattr(ov, "SETTLE_POLL_S", 0.006)
    reads = ov.settle(None, "http://exporter")  # type: ignore[arg-type]
    assert reads == len(got) and 3 <= reads <= 5 and set(got) == {"http://exporter/metrics"}
    cpu = iter([2.0, 2.05])
    monkeypatch.setattr(ov, "process_cpu_seconds", lambda pid: next(cpu))
    got.clear()
    per_read = ov.read_cost(None, "http://exporter", 1, (0.0, 15.0), reads=8)  # type: ignore[arg-type]
    assert len(got) == 8 and per_read == pytest.approx(0.05 / 8)
    cpu = iter([2.0, 2.05])
    # an idle rate of 1 CPU s per s leaves nothing of reads that took about no wall time... but never < 0
    assert 0.0 <= ov.read_cost(None, "http://e", 1, (15.0, 15.0), reads=8) < 0.05 / 8  # type: ignore[arg-type]



def settle_on(monkeypatch: pytest.MonkeyPatch, counts_at: dict[float, float], **kwargs: Any) -> tuple[float, float]:
    """settle against an exporter whose count becomes counts_at[t] at second t: (when it stopped, the count)."""
    clock = ManualClock()
    seen: list[float] = []

    def view(text: str) -> ov.ExporterView:
        seen.append(max((c for t, c in counts_at.items() if t <= clock.now), default=0.0))
        return ov.ExporterView({}, seen[-1], None, None)

    monkeypatch.setattr(ov, "_get", lambda http, url: "")
    monkeypatch.setattr(ov, "exporter_view", view)
    ov.settle(None, "http://exporter", clock=clock, sleep=clock.sleep, **kwargs)  # type: ignore[arg-type]
    return clock.now, seen[-1]


def test_settle_waits_for_a_post_that_comes_a_schedule_delay_after_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton posts at most one batch of up to 2048 spans per schedule delay (5 s) once no new span
    ends: spans the client's last requests left behind can come in two posts 5 s apart, and a round
    that ended in between (its count still for 2 s) would miss the second."""
    posts = {0.0: 480.0, 4.0: 6_000.0, 9.0: 8_500.0}  # the client ended at 0; every request counted at 9 s
    assert settle_on(monkeypatch, posts) == (6.0, 6_000.0)  # a count standing still 2 s is not enough
    assert settle_on(monkeypatch, posts, quiet_s=ov.OTLP_QUIET_S) == (15.0, 8_500.0)
    assert settle_on(monkeypatch, posts, target=8_500.0, quiet_s=ov.OTLP_QUIET_S) == (9.0, 8_500.0)
    # every request counted: no need to wait SETTLE_S; a count that never gets there still ends
    assert settle_on(monkeypatch, {0.0: 500.0}, target=500.0, quiet_s=ov.OTLP_QUIET_S) == (0.0, 500.0)
    assert settle_on(monkeypatch, {0.0: 400.0}, target=500.0, quiet_s=ov.OTLP_QUIET_S) == (6.0, 400.0)
    assert settle_on(monkeypatch, {float(t): float(t) for t in range(100)}, target=1e9) == (ov.SETTLE_TIMEOUT_S, 59.0)
    assert ov.parse_mode("otlp-10").quiet_s == ov.OTLP_QUIET_S > ov.SETTLE_S > ov.OTLP_SCHEDULE_DELAY_S
    assert ov.parse_mode("tracefile-10").quiet_s == ov.QUIET_S


def page_of(results: list[dict[str, object]], goals: dict[str, object]) -> dict[str, object]:
    return {"modes": results, "goals": goals, "goal_thresholds": ov.GOALS, "client": "perf_analyzer",
            "client_settings": {"version": "2.51.0", "concurrency": 8}, "requests_per_mode": 50_000,
            "model": {"name": "ctr_ranker", "exec_ms_batch_1": 2.0}, "cpu_count": 2, "wall_s": 400.0,
            "client_fallback_reason": None, "triton_version": "2.51.0", "warmup_requests": 500, "rounds": 1}


CRASH_LOG = """I1125 11:51:30.238415 13768 http_server.cc:362] "Started Metrics Service at 127.0.0.1:38515"
corrupted double-linked list (not small)
Signal (6) received.
 0# 0x0000562756C6552D in /opt/tritonserver/bin/tritonserver
"""


def test_crash_reason_reads_the_signal_and_glibcs_message_from_tritons_log() -> None:
    assert ov.crash_reason(CRASH_LOG) == "signal 6, corrupted double-linked list (not small)"
    assert ov.crash_reason('Signal (11) received.\n 6# TRITONBACKEND_ResponseSend in libtritonserver.so') == "signal 11"
    assert ov.crash_reason("I1125 server is running\n") == "no reason in its log"


class _Process:
    def __init__(self, log: str) -> None:
        self.log = log

    def log_tail(self, lines: int) -> str:
        return self.log


class _Replica:
    def __init__(self, alive: bool, log: str) -> None:
        self.http_url, self.process, self._alive = "http://127.0.0.1:9", _Process(log), alive
        self.metrics_url = "http://127.0.0.1:9/metrics"  # nothing listens: the count is unreadable

    def alive(self) -> bool:
        return self._alive


class _FailingClient:
    name = "perf_analyzer"

    def play(self, url: str, requests: int, workdir: Path, abort: lc.Abort = lambda: False) -> lc.ClientRun:
        raise TidescaleError("perf_analyzer failed (99): HTTP client failed: Failure when receiving data")


@pytest.mark.parametrize(("alive", "log", "died"), [
    (False, CRASH_LOG, True),  # exited
    (True, CRASH_LOG, True),  # caught a fatal signal and hangs in its handler (seen with 2.51)
    (True, "I1125 serving\n", False),  # the server is fine: the client's own failure
])
def test_a_client_failure_is_triton_dying_only_when_the_replica_crashed(alive: bool, log: str, died: bool,
                                                                       tmp_path: Path) -> None:
    with pytest.raises(TidescaleError, match="perf_analyzer failed|tritonserver died") as exc:
        ov.play(_FailingClient(), _Replica(alive, log), 10, tmp_path)  # type: ignore[arg-type]
    assert isinstance(exc.value, ov.TritonDied) == died
    if died:
        assert "tritonserver died (signal 6, corrupted double-linked list (not small))" in str(exc.value)


def test_perf_analyzer_is_stopped_when_the_server_crashes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hanging = tmp_path / "perf_analyzer"
    hanging.write_text("#!/bin/sh\nexec sleep 60\n")  # a client waiting on a server that hangs
    hanging.chmod(0o755)
    monkeypatch.setattr(lc, "WATCH_S", 0.05)
    client = lc.PerfAnalyzerClient(tools.PerfAnalyzerInstall(hanging, None), ov.MODEL)
    asked = []
    with pytest.raises(lc.Aborted, match="the server crashed"):
        client.play("http://127.0.0.1:9", 100, tmp_path, lambda: asked.append(1) is None and len(asked) >= 3)
    assert len(asked) == 3


def test_perf_analyzer_that_gave_up_on_a_live_server_is_stopped_and_the_mode_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """perf_analyzer 2.51 prints its give-up line when a thread gets an error answer, then waits
    forever: seen with a tritonserver that answered "Not Found" while tracing at rate 1."""
    stuck = tmp_path / "perf_analyzer"
    stuck.write_text(f"#!/bin/sh\necho '{lc.GAVE_UP}. Worker thread(s) failed to generate concurrent requests.'\n"
                     "echo 'Thread [0] had error: Not Found'\nexec sleep 60\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(lc, "WATCH_S", 0.05)
    client = lc.PerfAnalyzerClient(tools.PerfAnalyzerInstall(stuck, None), ov.MODEL)
    with pytest.raises(lc.ClientGaveUp, match="perf_analyzer gave up: Not Found"):
        client.play("http://127.0.0.1:9", 100, tmp_path)
    replica = _Replica(True, "I1126 serving\n")
    replica.http_url = "http://127.0.0.1:9"
    with pytest.raises(ov.TritonDied, match="tritonserver stopped answering; perf_analyzer gave up: Not Found"):
        ov.play(client, replica, 100, tmp_path)  # type: ignore[arg-type]


def test_perf_analyzer_that_gave_up_and_exited_is_the_servers_failure(tmp_path: Path) -> None:
    failing = tmp_path / "perf_analyzer"
    failing.write_text(f"#!/bin/sh\necho '{lc.GAVE_UP}.'\necho 'Thread [0] had error: Not Found'\nexit 99\n")
    failing.chmod(0o755)
    client = lc.PerfAnalyzerClient(tools.PerfAnalyzerInstall(failing, None), ov.MODEL)
    replica = _Replica(True, "I1126 serving\n")
    with pytest.raises(ov.TritonDied, match=r"stopped answering; perf_analyzer gave up \(99\): Not Found"):
        ov.play(client, replica, 100, tmp_path)  # type: ignore[arg-type]


def test_stall_watch_raises_when_no_request_completes_for_stall_s() -> None:
    now, counts, crashed = [0.0], iter([0.0, 100.0, 200.0, 200.0, 200.0, 200.0]), [False]
    watch = ov.StallWatch(lambda: crashed[0], lambda: next(counts), stall_s=30.0, every_s=10.0,
                          clock=lambda: now[0])
    for t in (0.0, 5.0, 10.0, 20.0, 30.0, 40.0):  # read at 0, 10, 20 (moving), 30, 40 (still 200)
        now[0] = t
        assert watch() is False
    now[0] = 50.0  # 30 s since the count last moved (at 20 s)
    with pytest.raises(ov.ServerStalled, match="no request completed for 30 s"):
        watch()
    crashed[0] = True
    assert watch() is True  # a crash is told as such, before any stall


def test_stall_watch_counts_an_unreadable_server_as_no_progress() -> None:
    now = [0.0]

    def unreadable() -> float:
        raise httpx.ConnectError("refused")

    watch = ov.StallWatch(lambda: False, unreadable, stall_s=20.0, every_s=5.0, clock=lambda: now[0])
    for t in (0.0, 5.0, 10.0, 15.0):
        now[0] = t
        assert watch() is False
    now[0] = 20.0
    with pytest.raises(ov.ServerStalled):
        watch()


def test_the_load_generator_is_stopped_when_the_server_crashes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lc, "WATCH_S", 0.05)
    with pytest.raises(lc.Aborted, match="the server crashed"):
        lc.LoadgenClient(ov.MODEL_SPEC, rps=5.0).play("http://127.0.0.1:9", 100, tmp_path, lambda: True)


def test_modes_whose_triton_crashed_keep_the_rounds_that_completed_and_say_why() -> None:
    none, otlp1, otlp10 = ov.parse_modes(["none", "otlp-1", "otlp-10"])
    base = one(none, mode_run(15.0, 0.5, 50.0, {0.005: 0.0, 0.01: 0.0, math.inf: 0.0}))
    crash = ov.ModeFailure("tritonserver 2.51.0 died (signal 11); perf_analyzer stopped: the server crashed during "
                           "the run.", 20_512.0, "2.51.0")
    never = ov.with_crashes(ov.mode_result(otlp1, []), [crash, crash])  # both attempts of its only round
    assert set(never) == set(base)
    assert never["error"] == crash.error and never["crashes"] == 2 and never["crash_errors"] == [crash.error]
    assert never["exporter_counted_before_crashes"] == [20_512, 20_512] and never["rounds"] == 0
    assert never["requests"] is None and never["triton_cpu_us_per_request"] is None
    assert never["p99_error"] is None and never["exporter_cpu_us_per_traced_request"] is None
    traced = mode_run(15.4, 0.7, 60.0, {0.005: 0.0, 0.01: 50_000.0, math.inf: 50_000.0}, detected=10.0)
    retried = ov.with_crashes(ov.mode_result(otlp10, [traced]), [crash])  # crashed once, then completed
    assert retried["error"] is None and retried["crashes"] == 1 and retried["requests"] == 50_000
    results = [base, never, retried]
    ov.against_none(results)
    assert never["triton_added_cpu_us_vs_none"] is None and never["exporter_net_cpu_us_per_traced_request"] is None
    assert never["exporter_net_cpu_us_per_traced_request_vs_none"] is None
    assert retried["triton_added_cpu_us_vs_none"] == 8.0
    goals = ov.goals(results)
    assert goals["otlp-10"]["requests"] == 50_000 and "otlp-1" not in goals["exporter_cpu_per_traced_request"]
    page = ovp.markdown(page_of(results, goals))
    assert "| otlp-1 | Triton failed |" in page and "server#7795" in page and "| otlp-10 | 50,000 |" in page
    assert "`otlp-1`: Triton crashed or stopped answering in 2 of 2 attempts" in page
    assert "after about 20,512, 20,512 requests" in page
    assert "no round completed" in page and "`otlp-10`: Triton crashed or stopped answering in 1 of 2 attempts" in page
    assert "figures are those of the 1 round(s) that completed" in page
    down = [base, ov.with_crashes(ov.mode_result(otlp10, []), [crash])]
    ov.against_none(down)
    assert ov.goals(down)["otlp-10"] == {"error": crash.error}
    assert "- OTLP rate=10: not measured, tritonserver 2.51.0 died" in ovp.markdown(page_of(down, ov.goals(down)))
    ovp.plot({"modes": results}, Path(os.devnull))


def test_rounds_add_up_and_their_spread_is_reported() -> None:
    none, otlp = ov.parse_modes(["none", "otlp-10"])
    first = mode_run(15.0, 0.5, 50.0, {0.005: 0.0, 0.01: 0.0, math.inf: 0.0})  # 300 µs per request
    second = mode_run(15.5, 0.7, 50.0, {0.005: 0.0, 0.01: 0.0, math.inf: 0.0}, summary_p99=0.0098)  # 310 µs
    base = ov.mode_result(none, [first, second])
    assert base["rounds"] == 2 and base["requests"] == 100_000 and base["client_requests"] == 100_000
    assert base["triton_cpu_us_per_request"] == 305.0 and base["triton_cpu_us_per_request_by_round"] == [300.0, 310.0]
    assert base["triton_cpu_spread_us"] == 10.0 and base["exporter_cpu_s"] == 1.2 and base["measured_s"] == 100.0
    assert base["throughput_rps"] == pytest.approx(100_000 / 86.0, abs=0.1)
    assert base["triton_summary_p99_s"] == 0.0098  # the last round's replica
    traced = ov.mode_result(otlp, [mode_run(16.0, 0.6, 60.0, {0.005: 10.0, 0.01: 50_000.0, math.inf: 50_000.0}),
                                   mode_run(16.0, 0.6, 60.0, {0.005: 0.0, 0.01: 50_000.0, math.inf: 50_000.0})])
    assert traced["exporter_counted_requests"] == 100_000 and traced["traced_requests"] == 10_000
    # the buckets of both rounds add up: 10 of 100,000 in the lowest
    assert traced["exporter_p99_s"] == pytest.approx(0.005 + 0.005 * (99_000 - 10) / (100_000 - 10))
    results = [base, traced]
    ov.against_none(results)
    # the none mode's idle: 1.2 s per 100 s -> 1.44 s over 120 s; (1.2 - 1.44) s over 10,000 traced requests
    assert traced["triton_added_cpu_us_vs_none"] == 15.0
    assert traced["exporter_net_cpu_us_per_traced_request_vs_none"] == pytest.approx(-24.0)
    # its own: 10 ms per second, 0.3 s over 30 s left alone -> 1.2 s over 120 s; nothing left
    assert traced["exporter_net_cpu_us_per_traced_request"] == pytest.approx(0.0)
    goals = ov.goals(results)
    # none's rounds moved by 10 µs: +15 ± 5 touches the goal of 10, so it is not judged
    assert goals["otlp-10"]["triton_added_cpu_noise_us"] == 5.0 and goals["otlp-10"]["triton_added_cpu_met"] is None
    page = ovp.markdown({**page_of(results, goals), "rounds": 2})
    assert "in 2 rounds of 25,000 requests, in ABBA order" in page and "by 0.0 to 10.0 µs" in page
    # a quieter run: rounds 8 µs apart make +15 ± 4 all over it
    base["triton_cpu_spread_us"] = 8.0
    goals = ov.goals(results)
    assert goals["otlp-10"]["triton_added_cpu_met"] is False
    assert "Triton's added CPU ≤ 10 µs per request: 15.0 ± 4.0 µs — not met" in ovp.markdown(
        {**page_of(results, goals), "rounds": 2})
    # a noisier run: none's rounds 40 µs apart make the same +15 neither met nor missed
    base["triton_cpu_spread_us"] = 40.0
    goals = ov.goals(results)
    assert goals["otlp-10"]["triton_added_cpu_met"] is None
    assert "15.0 ± 20.0 µs — not judged: the noise bound" in ovp.markdown({**page_of(results, goals), "rounds": 2})


@pytest.mark.parametrize(("value", "noise", "met"), [
    (8.0, None, True), (8.0, 2.0, True), (8.0, 2.5, None), (12.0, 1.0, False), (12.0, 2.0, None),
    (-30.0, 43.0, None), (None, 5.0, None)])
def test_a_goal_is_judged_only_when_its_noise_is_all_on_one_side(value: float | None, noise: float | None,
                                                                  met: bool | None) -> None:
    assert ov.judged_under(value, noise, 10.0) is met


def test_rounds_run_in_abba_order() -> None:
    a, b, c = ov.parse_modes(["none", "otlp-10", "tracefile-1"])
    assert [(r, m.name) for r, m in ov.round_order([a, b, c], 3)] == [
        (0, "none"), (0, "otlp-10"), (0, "tracefile-1"), (1, "tracefile-1"), (1, "otlp-10"), (1, "none"),
        (2, "none"), (2, "otlp-10"), (2, "tracefile-1")]
    assert ov.round_order([a], 1) == [(0, a)]


def test_perf_analyzer_errors_are_told_once_not_once_per_thread() -> None:
    output = ("Failed to generate concurrent requests.\n"
              + "".join(f"Thread [{i}] had error: HTTP client failed: Send failed since rewinding of the data "
                        "stream failed\n\n" for i in range(8))
              + "Thread [3] had error: HTTP client failed: Failure when receiving data from the peer\n")
    assert lc.client_errors(output) == ("HTTP client failed: Send failed since rewinding of the data stream failed; "
                                        "HTTP client failed: Failure when receiving data from the peer")
    assert lc.client_errors("something odd\nlast words\n") == "last words"
    assert lc.client_errors("") == "no output"


def test_without_a_none_mode_nothing_is_compared_to_it() -> None:
    [otlp] = ov.parse_modes(["otlp-1"])
    results = [one(otlp, mode_run(15.0, 0.7, 60.0, {0.005: 0.0, 0.01: 100.0, math.inf: 100.0}))]
    ov.against_none(results)
    assert results[0]["triton_added_cpu_us_vs_none"] is None
    assert results[0]["exporter_net_cpu_us_per_traced_request_vs_none"] is None
    assert "otlp-10" not in ov.goals(results)


def test_plot_draws_every_mode(tmp_path: Path) -> None:
    none, otlp = ov.parse_modes(["none", "otlp-10"])
    results = [one(none, mode_run(15.0, 0.5, 50.0, {0.005: 0.0, 0.01: 0.0, math.inf: 0.0})),
               one(otlp, mode_run(15.4, 0.7, 60.0, {0.005: 0.0, 0.01: 50_000.0, math.inf: 50_000.0}))]
    ov.against_none(results)
    ovp.plot({"modes": results}, tmp_path / "overhead.png")
    assert (tmp_path / "overhead.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


REAL_TRACE = FIXTURES / "triton" / "real-2.51" / "trace_triton.json"


def test_server_windows_read_the_request_stage_and_the_frontends_window_over_rotations(tmp_path: Path) -> None:
    import json

    from tidescale.benches.tracefile import ServerWindows

    entries = json.loads(REAL_TRACE.read_text())
    stamps = {t["name"]: t["ns"] for e in entries if e["id"] == 1 for t in e.get("timestamps", [])}
    half = len(entries) // 2  # a request's entries can land in two rotations: its id joins them
    (tmp_path / "trace.json.0").write_text(json.dumps(entries[:half]))
    (tmp_path / "trace.json.1").write_text(json.dumps(entries[half:]))
    whole = ov.read_windows(tmp_path / "trace.json", skip=0)
    assert isinstance(whole, ServerWindows) and len(whole.request) == len(whole.frontend) == 200
    assert whole.request[0] == pytest.approx((stamps["REQUEST_END"] - stamps["REQUEST_START"]) / 1e9)
    assert whole.frontend[0] == pytest.approx(
        (max(stamps["REQUEST_END"], stamps["HTTP_SEND_END"]) - stamps["HTTP_RECV_START"]) / 1e9)
    assert bool(np.all(whole.frontend >= whole.request))
    # the warm-up is the first received; a request without its frontend's stamps has no window
    assert np.array_equal(ov.read_windows(tmp_path / "trace.json", skip=50).request, whole.request[50:])
    without_http = [e for e in entries if not (e["id"] == 1 and "HTTP_RECV_START" in json.dumps(e))]
    (tmp_path / "trace.json.1").unlink()
    (tmp_path / "trace.json.0").write_text(json.dumps(without_http))
    assert len(ov.read_windows(tmp_path / "trace.json", skip=0).request) == 199
    (tmp_path / "trace.json.1").write_text(json.dumps(entries)[:5000])  # cut short as Triton was stopped
    assert len(ov.read_windows(tmp_path / "trace.json", skip=0).request) == 199


def test_the_p99_error_splits_into_buckets_frontend_and_client_side() -> None:
    from tidescale.benches.tracefile import ServerWindows

    request = np.linspace(0.004, 0.009, 5_000)
    windows = [ServerWindows(request, request + 0.0005)]
    split = ov.p99_split(0.0105, 0.0095, windows)
    exact, frontend = float(np.quantile(request, 0.99)), float(np.quantile(request + 0.0005, 0.99))
    assert split["trace_request_p99_s"] == pytest.approx(exact, abs=1e-6)
    assert split["trace_frontend_p99_s"] == pytest.approx(frontend, abs=1e-6)
    shares = [split[k] for k in ("p99_error_histogram_vs_trace", "p99_error_frontend", "p99_error_client_side")]
    assert shares[1] == pytest.approx(-0.0005 / 0.0105, abs=1e-3) and shares[2] < 0
    assert sum(shares) == pytest.approx((0.0095 - 0.0105) / 0.0105, abs=1e-3)  # they add up to the error
    assert set(ov.p99_split(0.0105, 0.0095, [])) == set(split) and not any(ov.p99_split(0.0105, 0.0095, []).values())
    # on the page, for the trace-file modes only
    tracefile, = ov.parse_modes(["tracefile-10"])
    run = mode_run(16.0, 0.6, 60.0, {0.005: 0.0, 0.01: 50_000.0, math.inf: 50_000.0})
    result = ov.mode_result(tracefile, [ov.ModeRun(run.before, run.after, run.client, run.at_end,
                                                   windows=windows[0])])
    plain = one(tracefile, run)
    ov.against_none([result, plain])
    assert result["trace_frontend_p99_s"] is not None and plain["trace_frontend_p99_s"] is None
    page = ovp.markdown(page_of([result], ov.goals([result])))
    assert "## Where the P99 error comes from" in page and "| tracefile-10 | 9.95 |" in page
    assert "## Where the P99 error comes from" not in ovp.markdown(page_of([plain], ov.goals([plain])))


def test_a_failed_round_names_the_triton_version_that_died() -> None:
    died = ov.TritonDied("tritonserver died (signal 11); perf_analyzer stopped: the server crashed")
    assert ov.died_saying(died, "2.51.0") == ("tritonserver 2.51.0 died (signal 11); perf_analyzer stopped: "
                                              "the server crashed")
