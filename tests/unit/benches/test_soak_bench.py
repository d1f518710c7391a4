"""`tidescale bench soak`'s pure parts: the statistics, the goal judgement, what the attacks met, the
flood schedule, bad flags, the fake fleet's answers to the recommender's real queries, the page and plot."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tidescale import cli
from tidescale.autoscaler.queries import TargetQueries
from tidescale.autoscaler.settings import TargetSettings
from tidescale.benches.soak import attacks, fakes, monitor, report, stats
from tidescale.benches.soak import run as soak
from tidescale.benches.soak.stats import Probe, Sample
from tidescale.contracts.errors import UsageError
from tidescale.devstack.ports import free_port

MB = 1 << 20


# --- statistics --------------------------------------------------------------------------------------

def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(100, 0, -1)]
    assert stats.percentile(values, 99) == 99.0
    assert stats.percentile(values, 50) == 50.0
    assert stats.percentile(values, 100) == 100.0
    assert stats.percentile([7.0], 99) == 7.0
    assert stats.percentile([], 99) is None
    with pytest.raises(ValueError):
        stats.percentile(values, 0)


def test_the_slope_is_per_minute_and_needs_two_times() -> None:
    assert stats.slope_per_min([(0.0, 10.0), (30.0, 11.0), (60.0, 12.0)]) == pytest.approx(2.0)
    assert stats.slope_per_min([(5.0, 1.0)]) is None
    assert stats.slope_per_min([(5.0, 1.0), (5.0, 2.0)]) is None


def test_a_sample_is_in_a_flood_until_it_has_settled() -> None:
    floods = [(10.0, 20.0)]
    assert stats.in_windows(10.0, floods) and stats.in_windows(21.9, floods)
    assert not stats.in_windows(9.9, floods) and not stats.in_windows(22.1, floods)


def samples(rss: list[float], fds: list[int], every: float = 10.0) -> list[Sample]:
    return [Sample(i * every, int(r * MB), f, cpu_s=i * 0.5) for i, (r, f) in enumerate(zip(rss, fds, strict=True))]


def test_flat_after_the_warm_up_ignores_the_warm_up_and_the_floods_and_reports_their_peaks() -> None:
    # 100 s, warm-up 20 s; a flood from 50 to 60 s (settled from 62 s): its samples at 50 and 60 s are peaks.
    rss = [40, 60, 80, 80, 81, 120, 119, 82, 82, 83, 82]
    fds = [20, 30, 60, 60, 61, 1010, 1009, 62, 60, 61, 60]
    res = stats.resources(samples(rss, fds), 100.0, [(50.0, 60.0)])
    assert res["warmup_s"] == 20.0
    assert res["samples_settled_after_warmup"] == 7  # 20, 30, 40, 70, 80, 90, 100
    assert res["rss"]["flat"] and res["rss"]["start"] == 80 * MB and res["rss"]["max"] == 83 * MB
    assert res["rss"]["flood_max_bytes"] == 120 * MB and res["rss"]["warmup_max_bytes"] == 60 * MB
    assert res["fds"]["flat"] and res["fds"]["limit"] == 60 + stats.FD_MARGIN and res["fds"]["flood_max"] == 1010
    assert res["cpu_share"] == pytest.approx(0.05)


def test_a_leak_is_not_flat_and_its_slope_says_how_fast() -> None:
    rss = [50.0 + 2 * i for i in range(11)]  # +2 MB every 10 s: 50 -> 70
    fds = [60 + 3 * i for i in range(11)]  # +3 every 10 s: +24 after the warm-up
    res = stats.resources(samples(rss, fds), 100.0, [])
    assert res["rss"]["flat"] is False and res["rss"]["slope_per_min"] == pytest.approx(12 * MB)
    assert res["fds"]["flat"] is False and res["fds"]["slope_per_min"] == pytest.approx(18.0)


def test_the_margins_are_inclusive() -> None:
    at_limit = stats.resources(samples([100, 100, 100, 110], [50, 50, 50, 66]), 30.0, [], warmup_share=0.2)
    assert at_limit["rss"]["flat"] and at_limit["fds"]["flat"]
    past = stats.resources(samples([100, 100, 100, 111], [50, 50, 50, 67]), 30.0, [], warmup_share=0.2)
    assert past["rss"]["flat"] is False and past["fds"]["flat"] is False


def test_no_settled_sample_is_not_judged() -> None:
    res = stats.resources(samples([50, 60], [10, 20]), 20.0, [(0.0, 30.0)])
    assert res["rss"]["flat"] is None and res["fds"]["flat"] is None


def test_healthz_counts_failures_at_their_latency_and_their_longest_run() -> None:
    probes = [Probe(i * 0.5, 0.002, True) for i in range(196)]
    probes[50:53] = [Probe(25.0, 3.0, False, "timeout"), Probe(25.5, 3.0, False, "timeout"),
                     Probe(26.0, 0.004, False, "503")]
    probes[100] = Probe(50.0, 0.001, False, "ConnectionRefusedError")
    h = stats.healthz(probes)
    assert h["probes"] == 196 and h["failures"] == 4 and h["longest_failure_run"] == 3
    assert h["failure_kinds"] == {"timeout": 2, "503": 1, "ConnectionRefusedError": 1}
    assert h["max_s"] == 3.0 and h["p99_s"] == 3.0 and h["p50_s"] == 0.002


def test_served_counts_only_2xx_as_served() -> None:
    s = stats.served({"GET /metrics": {"200": 998}, "POST /v1/traces": {"200": 1000, "503": 1, "ReadTimeout": 1}})
    assert (s["sent"], s["served"]) == (2000, 1998) and s["share"] == pytest.approx(0.999)
    assert s["routes"]["POST /v1/traces"] == {"sent": 1002, "served": 1000,
                                              "outcomes": {"200": 1000, "503": 1, "ReadTimeout": 1}}
    assert stats.served({})["share"] is None


def judged(rss_flat: bool | None = True, fds_flat: bool | None = True, p99: float | None = 0.02,
           failures: int = 0, share: float | None = 1.0) -> dict[str, Any]:
    return {"resources": {"rss": {"flat": rss_flat}, "fds": {"flat": fds_flat}},
            "healthz": {"p99_s": p99, "failures": failures}, "normal": {"share": share}}


def test_the_goals() -> None:
    assert stats.goals(judged()) == {"rss_flat": True, "fds_flat": True, "healthz_p99": True, "normal_served": True}
    assert stats.goals(judged(p99=0.1))["healthz_p99"] is False  # under 100 ms, not at it
    assert stats.goals(judged(failures=1))["healthz_p99"] is False
    assert stats.goals(judged(share=0.9989))["normal_served"] is False
    assert stats.goals(judged(share=0.999))["normal_served"] is True
    assert stats.goals(judged(rss_flat=False, fds_flat=None))["rss_flat"] is False
    assert stats.goals(judged(p99=None, share=None)) == {"rss_flat": True, "fds_flat": True, "healthz_p99": None,
                                                          "normal_served": None}


@pytest.mark.parametrize(("kind", "outcomes", "held", "writes", "held_up"), [
    ("slowloris", {"closed": 40, "503": 3}, 10.1, True, True),
    ("slowloris", {"closed": 40}, 16.0, True, False),  # the header deadline did not close it
    ("slowloris", {"closed": 39, "200": 1}, 10.0, True, False),  # a head never finished was answered
    ("slowloris", {"held_past_limit": 1}, None, True, False),
    ("trickled_body_no_token", {"401": 10}, 10.0, True, True),
    ("trickled_body_no_token", {"405": 10}, 10.0, False, True),
    ("trickled_body_no_token", {"401": 10}, 40.0, True, False),  # held on after its 401
    ("trickled_body_no_token", {"200": 1}, 0.1, True, False),
    ("flood", {"503": 250, "closed": 950}, 10.2, True, True),
    ("flood", {"closed": 1200, "connect:ConnectionRefusedError": 1}, 10.0, True, False),
    ("oversized_body", {"401": 3, "413": 2, "400": 1, "closed": 1, "503": 2}, None, True, True),
    ("oversized_body", {"413": 2, "200": 1}, None, True, False),
    ("oversized_body", {"held_past_limit": 1}, None, True, False),
    ("bad_token", {"401": 20, "503": 2}, None, True, True),
    ("bad_token", {"401": 20, "200": 1}, None, True, False),
    ("bad_token", {"200": 20}, None, False, None),  # the recommender takes no token
    ("bad_token", {}, None, True, None),
])
def test_what_an_attack_met_against_the_limits(kind: str, outcomes: dict[str, int], held: float | None,
                                               writes: bool, held_up: bool | None) -> None:
    data = {"outcomes": outcomes, "held_max_s": held}
    assert stats.limits_held(kind, data, header_timeout_s=10.0, takes_writes=writes) is held_up


def test_an_unknown_attack_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown attack"):
        stats.limits_held("teardrop", {"outcomes": {"200": 1}}, 10.0, True)


# --- the attacks' pieces -----------------------------------------------------------------------------

def test_a_head_leaves_out_absent_headers_and_keeps_latin_1() -> None:
    assert attacks.head("POST", "/w", {"Authorization": None, "Content-Length": "16", "X": "s\xe9"}) == (
        b"POST /w HTTP/1.1\r\nHost: soak\r\nContent-Length: 16\r\nX: s\xe9\r\n\r\n")


def test_status_of_reads_an_answers_first_line_only() -> None:
    assert attacks.status_of(b"HTTP/1.1 503 Service Unavailable\r\n") == "503"
    assert attacks.status_of(b"HTTP/1.1 401") == "401"
    assert attacks.status_of(b"garbage") is None and attacks.status_of(b"") is None


def test_bodies_are_sent_in_chunks_framed_when_undeclared() -> None:
    plain = list(attacks.body_chunks(attacks.CHUNK + 10, chunked=False)())
    assert [len(c) for c in plain] == [attacks.CHUNK, 10]
    framed = list(attacks.body_chunks(10, chunked=True)())
    assert framed == [b"a\r\n" + b"x" * 10 + b"\r\n", b"0\r\n\r\n"]


def test_an_exchange_names_its_outcome() -> None:
    assert attacks.Exchange(0.0, error="connect:TimeoutError").outcome() == "connect:TimeoutError"
    assert attacks.Exchange(0.0, status="413", closed=1.0).outcome() == "413"
    assert attacks.Exchange(0.0, closed=1.0).outcome() == "closed"
    assert attacks.Exchange(0.0).outcome() == "held_past_limit"


def test_the_tests_take_their_hostile_requests_from_the_bench() -> None:
    from tests import hostile

    assert hostile.BAD_AUTHORIZATIONS is attacks.BAD_AUTHORIZATIONS
    assert hostile.OVERSIZED_BODIES is attacks.OVERSIZED_BODIES


# --- the schedule and the flags ------------------------------------------------------------------------

def test_floods_start_in_the_warm_up_and_end_before_the_run() -> None:
    assert soak.flood_starts(600.0, 60.0, 10.0) == [30.0 + 60 * k for k in range(10)]
    assert soak.flood_starts(20.0, 60.0, 10.0) == [1.0]
    assert soak.flood_starts(14.0, 60.0, 10.0) == []  # its connections would outlive the run
    assert soak.flood_starts(600.0, 0.0, 10.0) == []


@pytest.mark.parametrize(("argv", "message"), [
    (["--services", "exporter,bogus"], "unknown service(s) 'bogus'"),
    (["--services", "reviews", "--services", "reviews"], "a service is named twice"),
    (["--duration", "0"], "--duration must be a positive number"),
    (["--duration", "3"], "--duration must be at least 5 s"),
    (["--duration", "inf"], "--duration must be a positive number"),
    (["--normal-rps", "-1"], "--normal-rps must be a positive number"),
    (["--probe-every", "0"], "--probe-every must be a positive number"),
    (["--slowloris", "-1"], "--slowloris must be 0 or more"),
    (["--flood-every", "-5"], "--flood-every must be 0 (off)"),
    (["--oversized-every", "nan"], "--oversized-every must be 0 (off)"),
    (["--warmup", "1"], "--warmup must be a share in [0, 1)"),
])
def test_bad_flags_exit_2_before_anything_starts(argv: list[str], message: str, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def no_services(*_: object, **__: object) -> None:
        raise AssertionError("started a service on bad input")

    monkeypatch.setattr(soak, "soak_one", no_services)
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "soak", *argv])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_a_flag_typer_cannot_parse_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "soak", "--duration", "ten"])
    assert exc.value.code == 2


def test_the_options_are_checked_when_run_directly() -> None:
    with pytest.raises(UsageError):
        soak.run(soak.Options(services=()))


# --- the fake fleet the recommender reads --------------------------------------------------------------

def test_the_fake_prometheus_answers_every_query_the_recommender_makes_with_a_steady_fleet() -> None:
    q = TargetQueries.for_target(TargetSettings(deployment="ranker", namespace="ml", model=fakes.MODEL))

    def value(expr: str) -> float | None:
        rows = fakes.answer(expr, "127.0.0.1:9", 1000.0, 2000.0)["result"]
        return float(rows[0]["value"][1]) if rows else None

    assert value(q.completions) == value(q.fast_completions) == fakes.RPS
    assert value(q.rejections) == value(q.fast_rejections) == 0.0
    assert value(q.queue) == value(q.max_pod_queue) == 0.0
    assert value(q.queue_age) == 5.0 and value(q.p99) == fakes.P99_S
    assert value(q.spec_replicas) == value(q.ready_replicas) == fakes.PODS
    assert value(q.hpa_current) == value(q.hpa_desired) == fakes.PODS
    assert value(q.model_load) is None
    pods = fakes.answer(f"group by (pod, instance) ({q.pending})", "127.0.0.1:9", 0.0, 1.0)["result"]
    assert [r["metric"]["pod"] for r in pods] == [f"ranker-5f7d9c8b4-{i:05d}" for i in range(fakes.PODS)]
    assert {r["metric"]["instance"] for r in pods} == {"127.0.0.1:9"}
    started = fakes.answer(q.pod_started, "x:1", 5000.0, 6000.0)["result"]
    ready = fakes.answer(q.pod_ready_at, "x:1", 5000.0, 6000.0)["result"]
    assert [float(r["value"][1]) for r in started] == [5000.0 - 3600.0] * fakes.PODS
    assert [float(r["value"][1]) for r in ready] == [5000.0 - 3600.0 + 45.0] * fakes.PODS


def test_the_fake_pods_count_completions_at_their_share_of_the_rate() -> None:
    from tidescale.autoscaler.fastpath import pod_counters

    template = fakes.EXPOSITION.read_text()
    before = pod_counters(fakes.exposition(template, 100.0, 110.0), fakes.MODEL)
    after = pod_counters(fakes.exposition(template, 100.0, 120.0), fakes.MODEL)
    assert after.success - before.success == pytest.approx(fakes.RPS / fakes.PODS * 10, abs=1)
    assert after.pending == 0


# --- the watcher -------------------------------------------------------------------------------------------

def test_the_watcher_reads_rss_open_files_and_cpu_of_a_process() -> None:
    rss, fds, cpu = monitor.read_process(os.getpid())
    assert rss > 10 * MB and fds >= 3 and cpu > 0


def test_a_probe_nobody_answers_fails_with_the_reason() -> None:
    latency, ok, detail = monitor.probe("127.0.0.1", free_port(), 1.0)
    assert not ok and detail == "ConnectionRefusedError" and latency < 1.0


# --- the page and the plot ---------------------------------------------------------------------------------

def service_result(missed_p99: bool = False) -> dict[str, Any]:
    rest = [Sample(20.0 + 2 * i, 80 * MB, 60) for i in range(40)]
    probes = [Probe(0.5 * i, 0.2 if missed_p99 and i % 50 == 0 else 0.003, True) for i in range(200)]
    result: dict[str, Any] = {
        "service": "exporter", "duration_s": 100.0,
        "limits": {"max_connections": 1000, "header_timeout_s": 10.0, "max_body_bytes": 8 << 20},
        "normal": {**stats.served({"GET /metrics": {"200": 100}, "POST /v1/traces": {"200": 399, "503": 1}}),
                   "latency_p50_s": 0.01, "latency_p99_s": 0.05, "latency_max_s": 0.2, "clients": []},
        "healthz": stats.healthz(probes),
        "resources": stats.resources([Sample(0.0, 40 * MB, 20), Sample(8.0, 90 * MB, 1008), *rest], 100.0,
                                     [(5.0, 15.0)]),
        "hostile": {"flood": {"sent": 1200, "outcomes": {"503": 250, "closed": 950}, "held_max_s": 10.1,
                              "held_p50_s": 10.0, "limits_held": True}},
        "floods": [[5.0, 15.0]], "log_bytes": 1234, "exit_code": None,
        "series": {"samples": [[s.t, s.rss_bytes, s.fds] for s in rest], "probes": [[p.t, p.latency_s, p.ok]
                                                                                   for p in probes]},
    }
    result["goals"] = stats.goals(result)
    return result


def whole(*services: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"benchmark": "soak", "schedule": "each service alone, one after another",
            "options": soak.Options(duration_s=100.0).as_json(),
            "goals": {"rss_margin": stats.RSS_MARGIN, "fd_margin": stats.FD_MARGIN, "settle_s": stats.SETTLE_S,
                      "healthz_p99_s": stats.HEALTHZ_P99_S, "normal_served_min": stats.SERVED_MIN,
                      "warmup_share": 0.2},
            "cpu_count": 2, "load_average_1m": {"before": 1.0, "after": 1.2},
            "all_goals_met": False, "services": dict(services)}


def test_the_page_has_a_table_per_service_with_each_goal_met_or_missed(tmp_path: Path) -> None:
    result = soak.public(whole(("exporter", service_result()), ("reviews", service_result(missed_p99=True))))
    assert "series" not in result["services"]["exporter"]
    page = report.markdown(result)
    assert "| exporter | **met** | **met** | **met** | **missed** |" in page  # 499 of 500 served: 99.8 %
    assert "| reviews | **met** | **met** | **missed** | **missed** |" in page
    assert "99.800 % (499 of 500)" in page and "P99 200.0 ms" in page
    assert "`max_body_bytes` 8,388,608" in page and "open files up to 1008" in page
    assert "| flood | 1200 | 503: 250, closed: 950 | 10.1 s | yes |" in page
    assert "![RSS, open files and /healthz latency over the run](soak.png)" in page
    raw = page.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert json.loads(raw)["services"]["exporter"]["goals"]["normal_served"] is False


def test_the_plot_draws_every_service(tmp_path: Path) -> None:
    result = whole(("exporter", service_result()), ("recommender", copy.deepcopy(service_result())))
    result["services"]["recommender"]["series"]["probes"][3][2] = False
    report.plot(result, tmp_path / "soak.png")
    assert (tmp_path / "soak.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
