"""The fast path: Triton's counters read from the pods, the window over them, and the panic they drive."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.hostile import HostileServer
from tidescale.autoscaler.fastpath import (
    MAX_BODY_BYTES,
    ExpositionError,
    FastWindow,
    PodCounters,
    pod_counters,
    valid_address,
)
from tidescale.autoscaler.podreader import PodReader, discover_pods
from tidescale.autoscaler.recommend import Observation, Recommender, RecommenderConfig
from tidescale.contracts.errors import UsageError
from tidescale.devstack.tools import FIXTURES

REAL = FIXTURES / "triton" / "real-2.51" / "metrics_during_load.txt"


def test_reads_the_model_s_counters_from_real_triton_exposition() -> None:
    counters = pod_counters(REAL.read_text(), "batcher")
    assert counters == PodCounters(success=2008.0, rejected=0.0, pending=1.0)
    assert pod_counters(REAL.read_text(), "echo") == PodCounters(0.0, 0.0, 0.0)


def test_only_the_rejected_failures_count_as_demand_and_versions_add_up() -> None:
    text = "\n".join([
        'nv_inference_request_success{model="m",version="1"} 10',
        'nv_inference_request_success{model="m",version="2"} 5',
        'nv_inference_request_failure{model="m",reason="REJECTED",version="1"} 3',
        'nv_inference_request_failure{model="m",reason="BACKEND",version="1"} 100',
        'nv_inference_pending_request_count{model="m",version="1"} 4',
        'nv_inference_pending_request_count{model="other",version="1"} 50', ""])
    assert pod_counters(text, "m") == PodCounters(15.0, 3.0, 4.0)


@pytest.mark.parametrize(("text", "problem"), [
    ("<html>nope</html>", "not a Prometheus exposition"),
    ('nv_inference_request_success{model="x",version="1"} 1\n', "no nv_inference_request_success"),
    ('nv_inference_request_success{model="m",version="1"} -1\n', "is -1"),
    ('nv_inference_request_success{model="m",version="1"} NaN\n', "is nan"),
    ('nv_inference_request_success{model="m",version="1"} +Inf\n', "is inf"),
])
def test_an_answer_that_is_not_triton_s_says_why(text: str, problem: str) -> None:
    with pytest.raises(ExpositionError, match=problem):
        pod_counters(text, "m")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_either_parses_or_is_rejected_cleanly(text: str) -> None:
    try:
        c = pod_counters(text, "m")
    except ExpositionError:
        return
    assert all(math.isfinite(v) and v >= 0 for v in (c.success, c.rejected, c.pending))


@pytest.mark.parametrize(("address", "ok"), [
    ("10.0.0.7:8002", True), ("[fd00::7]:8002", True), ("triton-0.triton.ml.svc:8002", True),
    ("10.0.0.7", False), ("http://10.0.0.7:8002", False), ("10.0.0.7:8002/x", False), ("user@host:8002", False),
    ("host:0", False), ("host:70000", False), ("", False), ("host:80?x=1", False),
])
def test_only_plain_host_port_addresses_are_read(address: str, ok: bool) -> None:
    assert valid_address(address) is ok


def test_the_window_reads_arrivals_as_completions_plus_rejections_plus_queue_growth() -> None:
    w = FastWindow(6.0)
    assert w.add(0.0, {"a": PodCounters(0, 0, 0), "b": PodCounters(0, 0, 0)}).arrival_rps is None  # no span yet
    r = w.add(2.0, {"a": PodCounters(200, 0, 10), "b": PodCounters(100, 20, 0)})
    # a: 200 done + 10 queued over 2 s; b: 100 done + 20 rejected over 2 s
    assert r.arrival_rps == pytest.approx(105.0 + 60.0)
    assert (r.queue_depth, r.max_pod_queue, r.pods, r.missing) == (10.0, 10.0, 2, ())


def test_the_window_spans_the_last_window_s_only() -> None:
    w = FastWindow(4.0)
    for k in range(10):  # 100/s until t=10, then 1000/s
        t = 2.0 * k
        w.add(t, {"a": PodCounters(100 * t if t <= 10 else 1000 + 1000 * (t - 10), 0, 0)})
    assert w.add(20.0, {"a": PodCounters(11000, 0, 0)}).arrival_rps == pytest.approx(1000.0)


def test_the_window_also_reads_each_pod_s_newest_interval_alone() -> None:
    """A surge's front: 6 s at 100/s then 2 s at 1,000/s. The window still reads mostly the calm,
    the newest interval reads the surge itself; a pod seen once has no interval and is left out."""
    w = FastWindow(6.0)
    for t in (0.0, 2.0, 4.0, 6.0):
        w.add(t, {"a": PodCounters(100 * t, 0, 0)})
    r = w.add(8.0, {"a": PodCounters(600 + 1600, 300, 100), "new": PodCounters(50, 0, 0)})
    assert r.arrival_rps == pytest.approx((1600 + 300 + 100 + 400) / 6.0)
    assert r.newest_rps == pytest.approx((1600 + 300 + 100) / 2.0)
    r = w.add(10.0, {"a": None, "new": PodCounters(250, 0, 0)})  # a keeps its last rates
    assert r.newest_rps == pytest.approx(1000.0 + 100.0)


def test_a_pod_that_does_not_answer_keeps_its_last_rate_and_is_named() -> None:
    w = FastWindow(6.0)
    w.add(0.0, {"a": PodCounters(0, 0, 0), "b": PodCounters(0, 0, 0)})
    w.add(2.0, {"a": PodCounters(100, 0, 0), "b": PodCounters(300, 0, 6)})
    r = w.add(4.0, {"a": PodCounters(200, 0, 0), "b": None})
    assert r.missing == ("b",)
    assert r.arrival_rps == pytest.approx(50.0 + 153.0)
    assert r.queue_depth == 6.0


def test_a_restarted_server_starts_its_window_afresh_and_a_gone_pod_is_dropped() -> None:
    w = FastWindow(6.0)
    w.add(0.0, {"a": PodCounters(5000, 0, 0)})
    w.add(2.0, {"a": PodCounters(5200, 0, 0)})
    r = w.add(4.0, {"a": PodCounters(10, 0, 0)})  # counters went down: no negative rate
    assert r.arrival_rps is not None and r.arrival_rps >= 0
    r = w.add(6.0, {"c": PodCounters(0, 0, 0)})
    assert r.pods == 1 and r.arrival_rps is None  # a's history is gone, c has one sample


def test_a_scale_down_reads_no_dip_and_no_rise_in_the_fleet_s_arrivals() -> None:
    """900 req/s on three pods, then on two from t=20: the two take the third's requests, and their
    6 s window rates take them in over one window. The gone pod's rate is counted on for the share
    of the window still to come, so the fleet reads 900 throughout; counted only by the others it
    read 600 at once and rose back over 6 s, a ramp the panic projected over the cold start."""
    w = FastWindow(6.0)
    counts = {"a": 0.0, "b": 0.0, "c": 0.0}
    readings, held = [], []
    for k in range(21):
        t = 2.0 * k
        pods = ["a", "b", "c"] if t <= 20 else ["a", "b"]
        if k:
            for pod in pods:
                counts[pod] += 900.0 / len(pods) * 2.0
        readings.append(w.add(t, {pod: PodCounters(counts[pod], 0, 0) for pod in pods}).arrival_rps)
        held.append(len(w._departed))
    assert all(r == pytest.approx(900.0) for r in readings[1:])
    assert held[11:14] == [1, 1, 0] and held[-1] == 0  # c's share runs out with its window, then is forgotten


def test_a_pod_listed_again_within_the_window_is_counted_once() -> None:
    """600 req/s on a and b; b is missing from one listing (a listing taken mid-update) and a takes
    its requests for that round. Once b is read twice again its own rate counts it, and its departed
    entry goes: counted both ways the fleet read 780 (a's window still holds the round it served
    b's requests, hence 660 for one window either way)."""
    w = FastWindow(10.0)
    counts = {"a": 0.0, "b": 0.0}
    readings = []
    for k in range(10):
        t = 2.0 * k
        pods = ["a"] if k == 3 else ["a", "b"]
        if k:
            for pod in pods:
                counts[pod] += 600.0 / len(pods) * 2.0
        readings.append(w.add(t, {pod: PodCounters(counts[pod], 0, 0) for pod in pods}).arrival_rps)
        if k == 4:
            assert len(w._departed) == 1  # b listed again with one read: its departed rate still stands in
    assert not w._departed
    assert max(r for r in readings if r is not None) == pytest.approx(660.0)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from("abc"), st.one_of(st.none(), st.builds(
    PodCounters, st.floats(0, 1e9), st.floats(0, 1e6), st.floats(0, 1e5))), max_size=3), max_size=12))
def test_no_sequence_of_reads_gives_a_negative_or_infinite_rate(rounds: list[dict[str, PodCounters | None]]) -> None:
    w = FastWindow(6.0)
    for k, reads in enumerate(rounds):
        r = w.add(2.0 * k, reads)
        for rate in (r.arrival_rps, r.newest_rps):
            assert rate is None or (math.isfinite(rate) and rate >= 0)


# --- panic ---------------------------------------------------------------------------------------

def test_panic_scales_at_once_in_proportion_to_the_overload_and_holds_that_floor() -> None:
    rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, cold_start_s=60.0))
    assert rec.panic(0.0, 250.0, asked=3) is None  # 250 < 3 x 100 x 0.9: no overload
    up = rec.panic(2.0, 900.0, asked=3)
    assert up is not None and up.reason == "panic" and up.desired >= 10  # ceil(900 / 90), plus the trend
    # The slow path, a scrape later, still sees the old rate: it does not undo the panic.
    obs = Observation(10.0, arrival_rps=250.0, queue_depth=0.0, ready_replicas=3, current_replicas=3)
    assert rec.recommend(obs).desired == up.desired
    late = Observation(2.0 + 61.0, arrival_rps=250.0, queue_depth=0.0, ready_replicas=3, current_replicas=up.desired)
    assert rec.recommend(late).desired == up.desired  # after the hold, the down delay still applies


def test_panic_sizes_on_the_newest_interval_while_a_surge_still_fills_the_window() -> None:
    """The window decides whether to panic; what it asks for reads the newest interval too. Through
    an HPA the first answer is the one that counts: the next one waits for the next sync (15 s)."""
    def first_ask(newest: float | None) -> int | None:
        rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, cold_start_s=60.0))
        up = rec.panic(0.0, 400.0, asked=3, newest_rps=newest)
        return None if up is None else up.desired

    assert first_ask(None) == first_ask(300.0) == math.ceil(400 / 90)  # a calmer newest changes nothing
    assert first_ask(1000.0) == math.ceil(1000 / 90)
    assert first_ask(math.nan) == first_ask(-1.0) == first_ask(None)
    calm = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, cold_start_s=60.0))
    assert calm.panic(0.0, 250.0, asked=3, newest_rps=1000.0) is None  # a 2 s burst alone never panics


def test_panic_projects_a_ramp_over_the_cold_start() -> None:
    flat = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, cold_start_s=60.0))
    ramp = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, cold_start_s=60.0))
    for k in range(6):
        flat.panic(2.0 * k, 300.0, asked=10)
        ramp.panic(2.0 * k, 300.0 + 20.0 * 2.0 * k, asked=10)  # +20 req/s every second
    a, b = flat.panic(12.0, 400.0, asked=3), ramp.panic(12.0, 540.0, asked=3)
    assert a is not None and b is not None
    assert 5 <= a.desired < b.desired  # at least ceil(400 / 90)
    # the ramp where it will be when replicas are Ready, at most twice the measured rate
    assert b.desired == math.ceil(min(2 * 540, 540 + 20 * 70) / 90)


@pytest.mark.parametrize("window_s, desired", [(10.0, 12), (30.0, 10)])
def test_the_panic_s_trend_window_decides_how_early_a_ramp_is_met(window_s: float, desired: int) -> None:
    """A ramp that starts after a flat stretch: over the last 10 s the trend is the ramp's own slope;
    over 30 s the flat readings before it flatten the slope, and the first ask is smaller (the
    replicas that first ask brings are all that serve the ramp one cold start later)."""
    rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, cold_start_s=60.0,
                                        panic_trend_window_s=window_s))
    for t in range(0, 30, 2):
        assert rec.panic(float(t), 300.0 + max(0.0, 20.0 * (t - 20)), asked=10) is None  # below 900: no overload
    up = rec.panic(30.0, 500.0, asked=3)
    assert up is not None and up.desired == desired
    if window_s == 10.0:  # exactly the ramp: 500 + 20 req/s x 70 s, capped at twice the rate
        assert up.desired == math.ceil(min(2 * 500, 500 + 20 * 70) / 90)


def test_a_panic_can_wait_for_readings_in_a_row_over_the_threshold() -> None:
    """`panic_confirm_readings` 2: a burst over the threshold for one reading is let pass, a second
    reading in a row over it panics, and a reading under it starts the count again. The readings let
    pass still shape the trend the panic projects."""
    def fresh(confirm: int) -> Recommender:
        return Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, cold_start_s=60.0,
                                             panic_confirm_readings=confirm))

    at_once = fresh(1)
    assert at_once.panic(0.0, 400.0, asked=3) is not None
    rec = fresh(2)
    assert rec.panic(0.0, 400.0, asked=3) is None  # the first reading over 270 req/s
    assert rec.panic(2.0, 250.0, asked=3) is None  # gone: the count starts again
    assert rec.panic(4.0, 400.0, asked=3) is None
    up = rec.panic(6.0, 400.0, asked=3)
    assert up is not None and up.reason == "panic" and up.desired >= math.ceil(400 / 90)
    with pytest.raises(UsageError, match="panic_confirm_readings must be 1..10, got 0"):
        RecommenderConfig(capacity_rps=100.0, panic_confirm_readings=0)


def test_a_panic_trend_window_of_zero_is_refused() -> None:
    with pytest.raises(UsageError, match="panic_trend_window_s > 0"):
        RecommenderConfig(capacity_rps=100.0, panic_trend_window_s=0.0)


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, -5.0])
def test_panic_ignores_readings_it_cannot_trust(bad: float | None) -> None:
    rec = Recommender(RecommenderConfig(capacity_rps=100.0))
    assert rec.panic(0.0, bad, asked=1) is None


def test_panic_never_asks_beyond_max_replicas() -> None:
    rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=8))
    up = rec.panic(0.0, 1e6, asked=2)
    assert up is not None and up.desired == 8


# --- a pending scale-down withdrawn --------------------------------------------------------------

def test_a_scale_down_not_yet_applied_is_withdrawn_when_the_pods_read_more_than_the_smaller_fleet_carries(
) -> None:
    rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50))
    assert rec.withdraw(0.0, 150.0, published=2, current=5) is None  # 2 x 100 x 0.8 = 160 carries 150
    assert rec.withdraw(0.0, 500.0, published=5, current=5) is None  # nothing pending
    back = rec.withdraw(0.0, 300.0, published=2, current=5)
    assert back is not None and back.reason == "withdrawn" and back.desired == 5  # taken back whole
    for bad in (None, math.nan, math.inf):
        assert rec.withdraw(0.0, bad, published=1, current=5) is None


def test_after_a_withdrawal_the_down_delay_starts_again() -> None:
    rec = Recommender(RecommenderConfig(capacity_rps=100.0, max_replicas=50, down_delay_s=60.0))
    calm = [Observation(float(t), arrival_rps=100.0, queue_depth=0.0, ready_replicas=5, current_replicas=5)
            for t in range(0, 76, 15)]
    answers = [rec.recommend(obs).desired for obs in calm]
    assert answers[-1] == 2 and answers[0] == 5  # 100 req/s at 0.8 x 100 per replica, after 60 s
    assert rec.withdraw(0.0, 300.0, published=2, current=5) is not None
    # The slow path still reads the old rate: it waits the whole delay again, from its next evaluation.
    later = [rec.recommend(Observation(t, arrival_rps=100.0, queue_depth=0.0, ready_replicas=5,
                                       current_replicas=5)).desired for t in (90.0, 105.0, 120.0, 135.0, 150.0)]
    assert later == [5, 5, 5, 5, 2]


# --- reading pods over HTTP ----------------------------------------------------------------------

def _reader(handler: httpx.MockTransport) -> PodReader:
    return PodReader(timeout_s=1.0, transport=handler)


def test_reader_reads_each_pod_and_marks_the_ones_that_fail() -> None:
    body = REAL.read_bytes()

    def answer(request: httpx.Request) -> httpx.Response:
        host = request.url.host
        if host == "10.0.0.1":
            return httpx.Response(200, content=body)
        if host == "10.0.0.2":
            return httpx.Response(503, content=b"starting")
        if host == "10.0.0.3":
            return httpx.Response(200, content=b"x" * (MAX_BODY_BYTES + 10))
        raise httpx.ConnectError("refused")

    reader = _reader(httpx.MockTransport(answer))
    try:
        reads = reader.read({"a": "10.0.0.1:8002", "b": "10.0.0.2:8002", "c": "10.0.0.3:8002",
                             "d": "10.0.0.4:8002"}, "batcher")
    finally:
        reader.close()
    assert reads["a"] == PodCounters(2008.0, 0.0, 1.0)
    assert reads["b"] is None and reads["c"] is None and reads["d"] is None


def test_a_pod_that_answers_too_slowly_is_missing_from_its_round_and_stalls_no_other() -> None:
    """Issue 43 #14: one pod whose answer does not come stalled the panic checks of every target (the
    round waited on it without a deadline) while its metrics said it answered. A round ends
    `timeout_s` after its start; the slow pod is missing from it, the others are read."""
    body, release = REAL.read_bytes(), threading.Event()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.host == "10.0.0.9":
            release.wait(timeout=5)  # bounded, so the unfixed reader fails instead of hanging
        return httpx.Response(200, content=body)

    reader = PodReader(timeout_s=0.2, transport=httpx.MockTransport(answer))
    pods = {"fast": "10.0.0.1:8002", "slow": "10.0.0.9:8002"}
    try:
        first = reader.read(pods, "batcher")
        answered_while_slow = not release.is_set()
        second = reader.read({"fast": "10.0.0.1:8002"}, "batcher")
    finally:
        release.set()
        reader.close()
    assert answered_while_slow
    assert first == {"fast": PodCounters(2008.0, 0.0, 1.0), "slow": None}
    assert second == {"fast": PodCounters(2008.0, 0.0, 1.0)}


@pytest.mark.parametrize("name", ["trickle", "gzip-bomb", "huge-content-length", "redirect-elsewhere"])
def test_a_hostile_pod_is_missing_not_a_stall_or_a_memory_spike(name: str) -> None:
    with HostileServer(name) as url:
        reader = PodReader(timeout_s=0.3)
        try:
            assert reader.read({"pod": url.removeprefix("http://")}, "batcher") == {"pod": None}
        finally:
            reader.close()


class _Prom:
    def __init__(self, rows: list[object]) -> None:
        self.rows = rows

    def query(self, expr: str) -> list[object]:
        return self.rows


def test_discovery_takes_pods_from_prometheus_series_and_skips_odd_addresses(tmp_path: Path) -> None:
    rows: list[object] = [
        {"metric": {"pod": "triton-1", "instance": "10.0.0.1:8002"}},
        {"metric": {"pod": "triton-2", "instance": "http://evil/"}},
        {"metric": {"pod": "triton-3"}},
        {"metric": "nonsense"},
        {"metric": {"pod": "triton-0", "instance": "10.0.0.0:8002"}},
    ]
    found = discover_pods(_Prom(rows), 'nv_inference_pending_request_count{model="m"}', max_pods=10)  # type: ignore[arg-type]
    assert found == {"triton-0": "10.0.0.0:8002", "triton-1": "10.0.0.1:8002"}
    assert discover_pods(_Prom(rows), "x", max_pods=1) == {"triton-0": "10.0.0.0:8002"}  # type: ignore[arg-type]
