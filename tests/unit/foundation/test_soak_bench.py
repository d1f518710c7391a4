"""`tidescale bench soak`'s pure parts: the statistics, the goal judgement, what the attacks met."""

from __future__ import annotations

from typing import Any

import pytest

from tidescale.benches.soak import attacks, stats
from tidescale.benches.soak.stats import Probe, Sample

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
