"""The trace rate detected from served vs traced requests, and histogram counts that match Triton's."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidescale.exporters.latency import LatencyAggregator
from tidescale.exporters.sample_rate import SampleRateDetector, estimate
from tidescale.exporters.stages import StageSample

KEY = ("serving", "triton-a", "ranker", "1")


class Triton:
    """One Triton pod serving steadily and tracing every *rate*-th request; its spans reach the
    exporter *lag_s* late, posted every *post_every_s* seconds (at second *post_phase_s* of each
    period: Triton's batch span processor), and the stats poller reads its counters every 5 s."""

    def __init__(self, detector: SampleRateDetector, agg: LatencyAggregator, lag_s: float = 3.0,
                 post_every_s: int = 1, post_phase_s: int = 0) -> None:
        self.detector, self.agg, self.lag_s = detector, agg, lag_s
        self.post_every_s, self.post_phase_s = post_every_s, post_phase_s
        self.t, self.served = 0, 0.0
        self.in_flight: list[float] = []

    def serve(self, rps: float, rate: int, seconds: int) -> None:
        for _ in range(seconds):
            before, self.served = self.served, self.served + rps
            traced = int(self.served // rate) - int(before // rate)  # every rate-th request
            self.in_flight += [self.t + self.lag_s] * traced
            posting = self.t % self.post_every_s == self.post_phase_s
            while posting and self.in_flight and self.in_flight[0] <= self.t:
                self.in_flight.pop(0)
                self.agg.observe(StageSample("ranker", "1", "request", 0.05, "serving", "triton-a"))
            if self.t % 5 == 0:
                self.detector.requests(KEY, self.served, float(self.t))
            self.t += 1


def exported_count(agg: LatencyAggregator) -> float:
    return sum(s.histogram.count for k, s in agg._series.items() if k[2] == "request")


def test_rate_10_is_found_and_the_histogram_counts_match_tritons_within_1_percent() -> None:
    detector = SampleRateDetector(configured=1)
    agg = LatencyAggregator((0.1, 0.5), rates=detector)
    triton = Triton(detector, agg)
    triton.serve(rps=200, rate=10, seconds=120)  # learning: until the rate is found, traces count once
    found = detector.rate(KEY)
    assert (found.rate, found.source) == (10.0, "detected") and found.confidence > 0.9
    before, served = exported_count(agg), triton.served
    triton.serve(rps=200, rate=10, seconds=300)
    more = triton.served - served  # 60,000 requests, 6,000 traced
    assert abs((exported_count(agg) - before) - more) / more < 0.01


def test_a_rate_changed_at_run_time_is_followed_and_counts_never_go_back() -> None:
    detector = SampleRateDetector(configured=1)
    agg = LatencyAggregator((0.1,), rates=detector)
    triton = Triton(detector, agg)
    triton.serve(rps=50, rate=1, seconds=300)
    assert detector.rate(KEY).rate == 1.0
    counts = [exported_count(agg)]
    for _ in range(14):  # Triton's trace settings changed at run time (the trace API): 1 in 100
        triton.serve(rps=50, rate=100, seconds=50)
        counts.append(exported_count(agg))
    # 0.5 traced requests a second: a whole window later the rate is found to within the data's precision.
    assert abs(detector.rate(KEY).rate - 100.0) <= 1.0
    assert counts == sorted(counts)


def test_counter_resets_more_traces_than_requests_and_no_data() -> None:
    detector = SampleRateDetector(configured=4, min_traced=10)
    assert detector.rate(KEY).source == "configured" and detector.rate(KEY).rate == 4.0
    detector.requests(KEY, 1000.0, 0.0)
    detector.traced(KEY, 100)
    detector.requests(KEY, 2000.0, 60.0)  # a far rate replaces the configured one over a minute or more
    assert detector.rate(KEY).rate == 10.0
    detector.requests(KEY, 5.0, 70.0)  # a restarted pod: the window starts over, no negative count
    assert detector.rate(KEY).rate == 10.0  # kept until there is data again
    detector.traced(KEY, 50)
    detector.requests(KEY, 25.0, 130.0)  # 50 traces for 20 requests: the windows do not line up
    found = detector.rate(KEY)
    assert found.rate == 1.0 and found.confidence == 0.0


def test_rate_one_read_a_little_high_is_rate_one_with_confidence() -> None:
    """At rate 1 the spans that lag their requests catch up when traffic slows, so traced can run a
    few per cent ahead of served: that is rate 1 with a good fit, not a window that does not line up."""
    ahead = estimate([(0.0, 0.0), (1000.0, 1000.0), (2000.0, 2060.0)], 30)
    assert ahead is not None and ahead[0] == 1.0 and ahead[1] > 0.9
    far_ahead = estimate([(0.0, 0.0), (1000.0, 1000.0), (2000.0, 2600.0)], 30)
    assert far_ahead == (1.0, 0.0)


def test_the_exporter_exports_the_rate_and_its_confidence() -> None:
    detector = SampleRateDetector()
    detector.requests(KEY, 0.0, 0.0)
    detector.traced(KEY, 400)
    detector.requests(KEY, 4000.0, 60.0)
    families = {f.name: f.samples for f in detector.collect()}
    labels = {"namespace": "serving", "pod": "triton-a", "model": "ranker", "version": "1"}
    assert [(s.labels, s.value) for s in families["tidescale_trace_sample_rate_detected"]] == [(labels, 10.0)]
    assert [(s.labels, s.value) for s in families["tidescale_trace_sample_rate_confidence"]] == [(labels, 1.0)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 10_000)), max_size=40))
def test_any_sequence_of_counts_gives_a_finite_weight_of_at_least_one(steps: list[tuple[float, int]]) -> None:
    """Hostile or broken counters (NaN, infinities, resets, huge jumps) never give a weight that
    would make a histogram count negative, infinite or NaN."""
    detector = SampleRateDetector(min_traced=1)
    for t, (total, traced) in enumerate(steps):
        detector.traced(KEY, traced)
        detector.requests(KEY, total, float(t))
        found = detector.rate(KEY)
        assert math.isfinite(found.rate) and found.rate >= 1.0 and 0.0 <= found.confidence <= 1.0


@given(st.lists(st.tuples(st.floats(0, 1e12), st.floats(0, 1e12)), max_size=12))
def test_estimate_is_bounded(points: list[tuple[float, float]]) -> None:
    found = estimate(points, 1)
    assert found is None or (found[0] >= 1.0 and math.isfinite(found[0]) and 0 <= found[1] <= 1)


def test_a_sliver_of_a_request_is_no_window() -> None:
    """Found by hypothesis: a window whose served count grew by 3e-190 scaled a later point to 3e189,
    and its square overflowed (OverflowError on the ingest path)."""
    assert estimate([(0.0, 0.0), (1.0, 0.0), (3.444990984642538e-190, 1.0)], 1) is None


@pytest.mark.parametrize("points", [
    [(0.0, 0.0), (1.0, 1.0), (1.7e308, 1.0)],  # found by hypothesis: a slope whose inverse is infinite
    [(0.0, 0.0), (1.7e308, 2.0), (1.7e308, 1.0)],  # a finite N of 1e308 would weigh each span as much
])
def test_a_rate_triton_cannot_have_is_no_estimate(points: list[tuple[float, float]]) -> None:
    """Triton keeps its trace rate in a uint32; counters that read more are broken, and weighing a
    histogram count by such an N would inflate it."""
    assert estimate(points, 1) is None


def test_a_burst_after_idle_confirms_the_configured_rate_instead_of_reading_it_high() -> None:
    """The overhead bench's shape: a warm-up, 20 s idle, then 50 s at 1,000 req/s traced 1 in 100 with
    spans 5 s late. The lag reads N as 107 to 119; near the configured 100, the configured rate stands."""
    detector = SampleRateDetector(configured=100)
    agg = LatencyAggregator((0.1,), rates=detector)
    triton = Triton(detector, agg, lag_s=5.0)
    triton.serve(rps=500, rate=100, seconds=1)
    triton.serve(rps=0, rate=100, seconds=20)
    served, counted = triton.served, exported_count(agg)
    triton.serve(rps=1000, rate=100, seconds=50)
    triton.serve(rps=0, rate=100, seconds=8)
    found = detector.rate(KEY)
    assert (found.rate, found.source) == (100.0, "confirmed")
    assert abs((exported_count(agg) - counted) / (triton.served - served) - 1) < 0.1
    unconfigured = SampleRateDetector(configured=1)
    unconfigured.requests(KEY, 0.0, 0.0)
    for t in range(1, 13):  # far from the configured 1: replaced only once 120 traced requests are in
        unconfigured.traced(KEY, 10)
        unconfigured.requests(KEY, 1000.0 * t, 5.0 * t)
        assert (unconfigured.rate(KEY).source == "detected") == (t >= 12)


@pytest.mark.parametrize("post_phase_s", range(5))
def test_spans_posted_in_lumps_never_replace_the_configured_rate_on_a_fresh_window(post_phase_s: int) -> None:
    """Triton posts its spans every 5 s when its batch span processor does not fill first. A fresh
    exporter at 1,000 req/s traced 1 in 10 then sees the traced count move in 500-request steps
    against the served count: its first polls read N as 14 to 20, and 120 traced requests are in
    within 2 s. Replacing the configured 10 then weighed a round's traced requests up to 45 % too
    heavily in the overhead bench; the window must also cover a minute."""
    detector = SampleRateDetector(configured=10)
    agg = LatencyAggregator((0.1,), rates=detector)
    triton = Triton(detector, agg, lag_s=0.0, post_every_s=5, post_phase_s=post_phase_s)
    triton.serve(rps=1000, rate=10, seconds=25)
    triton.serve(rps=0, rate=10, seconds=10)  # the last post arrives
    assert detector.rate(KEY).rate == 10.0
    assert abs(exported_count(agg) / triton.served - 1) < 0.01
