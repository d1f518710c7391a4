"""The recommender's fast path: Triton's own counters, read straight from its pods every 1–2 s.

Through Prometheus a surge shows one scrape (15 s) and part of a rate window late. Each Triton pod
serves its cumulative completion and rejection counters and its pending-request gauge on
`/metrics` at all times, so reading them directly every couple of seconds sees the arrival rate
within a few seconds, as Knative's activator-fed KPA does. Only this short-term signal comes from
here; everything slow (P99, replica counts, cold start, the long windows) stays with Prometheus.

This module is the pure part: a sliding window of per-pod samples and what it says about the
fleet (`FastWindow`), and the parser of one pod's exposition (`pod_counters`). `PodReader` does the
HTTP, with the discovery of the pods' addresses from the series Prometheus already holds.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from tidescale.autoscaler.recommend import first_attempt_rate
from tidescale.contracts import catalog

SUCCESS = catalog.get("nv_inference_request_success").name
FAILURE = catalog.get("nv_inference_request_failure").name
PENDING = catalog.get("nv_inference_pending_request_count").name
MAX_BODY_BYTES = 4 << 20  # Triton's exposition is a few KB per model; more is not a Triton
MAX_DEPARTED = 1024  # pods gone within one window, counted on at most (a bound, whatever the churn)
# host:port as Prometheus' `instance` label holds it for a scraped pod (IPv4, [IPv6] or a DNS name).
ADDRESS = re.compile(r"^(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?):[0-9]{1,5}$")


class ExpositionError(ValueError):
    """A pod's `/metrics` answer that is not Triton's exposition for the model (says why)."""


@dataclass(frozen=True)
class PodCounters:
    """One read of one pod, for one model (summed over its versions)."""

    success: float  # nv_inference_request_success, cumulative
    rejected: float  # nv_inference_request_failure{reason="REJECTED"}, cumulative (queue-policy timeouts)
    pending: float  # nv_inference_pending_request_count, a gauge


@dataclass(frozen=True)
class FastReading:
    """What the fast path says about the fleet at *t*."""

    t: float
    arrival_rps: float | None  # completions + rejections + queue growth per second; None before a window
    queue_depth: float
    max_pod_queue: float
    pods: int
    missing: tuple[str, ...] = ()  # pods that did not answer: their last good values stand in
    newest_rps: float | None = None  # the same over each pod's newest interval alone (a surge's front)


def pod_counters(text: str, model: str) -> PodCounters:
    """The three series the fast path needs from one pod's exposition, for *model*.

    Raises ExpositionError when the text does not parse, a value is negative or not finite, or
    the model has no completion counter (not loaded, or not this model's server)."""
    sums = {SUCCESS: 0.0, FAILURE: 0.0, PENDING: 0.0}
    seen = set()
    try:
        for family in text_string_to_metric_families(text):
            if family.name not in sums:
                continue
            for s in family.samples:  # the parser names a counter's samples `_total` (and `_created`)
                if s.name not in (family.name, f"{family.name}_total") or s.labels.get("model") != model:
                    continue
                if family.name == FAILURE and s.labels.get("reason") != "REJECTED":
                    continue
                if not (math.isfinite(s.value) and s.value >= 0):
                    raise ExpositionError(f"{family.name} for model {model!r} is {s.value}")
                sums[family.name] += s.value
                seen.add(family.name)
    except ExpositionError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ExpositionError(f"not a Prometheus exposition: {type(exc).__name__}") from None
    if SUCCESS not in seen:
        raise ExpositionError(f"no {SUCCESS} for model {model!r}")
    return PodCounters(sums[SUCCESS], sums[FAILURE], sums[PENDING])


def valid_address(address: str) -> bool:
    """A host:port to read `/metrics` from (nothing else: no scheme, path, user or query)."""
    return bool(ADDRESS.match(address)) and 0 < int(address.rsplit(":", 1)[1]) < 65536


class FastWindow:
    """Per-pod samples over the last `window_s`; the fleet's arrival rate from their differences.

    Arrivals on a pod = its completions + rejections + the growth of its queue between the oldest
    sample of the window and the newest (Triton counts a request only when it completes, so under
    overload the queue or the rejection counter holds the rest). A counter that goes down (the
    server restarted) starts the pod's window afresh. A pod that does not answer keeps its last
    good rate and queue, and the reading names it as missing; a pod no longer listed is dropped,
    and its rate over the window is counted on, less the share of the window that has passed since
    (`_departed`), until the window ends or a pod of that name, listed again, has a rate of its own.

    The departed pod's requests go to the others, whose window rates take in the extra over one
    window: counted only by the others, a scale-down read as a dip of the fleet's arrivals and then
    as a steep rise, which the panic projected over the cold start (under burst sizing a fleet of 7
    at 2,400 req/s panicked to 11-15 after each scale-down in the simulated 3x surge).
    """

    def __init__(self, window_s: float, client_retries: int = 0) -> None:
        """*client_retries*: how often clients retry a refused request (`first_attempt_rate`)."""
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"the fast path's window must be > 0 s, got {window_s}")
        self.window_s = window_s
        self.client_retries = client_retries
        self._samples: dict[str, deque[tuple[float, PodCounters]]] = {}
        self._rates: dict[str, tuple[float, float]] = {}  # pod -> (over the window, over its newest interval)
        # pod -> (completions, rejections) per second over the window: with retrying clients the
        # fleet's share refused reads its attempts back to requests
        self._outcomes: dict[str, tuple[float, float]] = {}
        # (pod, last read, rate over the window) of pods gone
        self._departed: deque[tuple[str, float, float]] = deque()

    def add(self, t: float, reads: Mapping[str, PodCounters | None]) -> FastReading:
        """Fold one round of reads (pod -> counters, None when it did not answer) into the window."""
        for gone in set(self._samples) - set(reads):
            last_read = self._samples.pop(gone)
            window_rate, _ = self._rates.pop(gone, (0.0, 0.0))
            if window_rate > 0 and last_read and len(self._departed) < MAX_DEPARTED:
                self._departed.append((gone, last_read[-1][0], window_rate))  # its requests moved on after
            self._outcomes.pop(gone, None)
        missing = []
        for pod, read in reads.items():
            samples = self._samples.setdefault(pod, deque())
            if read is None:
                missing.append(pod)
                continue
            if samples and (read.success < samples[-1][1].success or read.rejected < samples[-1][1].rejected):
                samples.clear()  # the counters restarted
            samples.append((t, read))
            # Keep the newest sample at or before the window's start, so the span reaches the window.
            while len(samples) > 1 and samples[1][0] <= t - self.window_s:
                samples.popleft()
            (t0, first), (t1, last) = samples[0], samples[-1]
            if t1 > t0:
                (tp, previous) = samples[-2]
                latest = (_arrivals_per_s(previous, last, t1 - tp) if t1 > tp  # two reads at one instant
                          else self._rates.get(pod, (0.0, 0.0))[1])
                self._rates[pod] = (_arrivals_per_s(first, last, t1 - t0), latest)
                self._outcomes[pod] = ((last.success - first.success) / (t1 - t0),
                                       (last.rejected - first.rejected) / (t1 - t0))
        queues = [s[-1][1].pending for s in self._samples.values() if s]
        if any(pod in self._rates for pod, _, _ in self._departed):  # listed again, and read twice since:
            self._departed = deque(d for d in self._departed if d[0] not in self._rates)  # counted once
        while self._departed and self._departed[0][1] <= t - self.window_s:
            self._departed.popleft()
        departed = sum(w * (1 - (t - gone) / self.window_s) for _, gone, w in self._departed)
        arrival = sum(w for w, _ in self._rates.values()) + departed if self._rates else None
        newest = sum(n for _, n in self._rates.values()) if self._rates else None
        if arrival and newest is not None and self.client_retries:
            completed = sum(c for c, _ in self._outcomes.values())
            rejected = sum(r for _, r in self._outcomes.values())
            # less the attempts the retries added beyond the requests behind them; the newest interval
            # in the same proportion
            retried = completed + rejected - first_attempt_rate(completed, rejected, self.client_retries)
            corrected = max(0.0, arrival - retried)
            arrival, newest = corrected, newest * corrected / arrival
        return FastReading(t, arrival, float(sum(queues)), float(max(queues, default=0.0)), len(reads),
                           tuple(sorted(missing)), newest)


def _arrivals_per_s(first: PodCounters, last: PodCounters, span_s: float) -> float:
    """Arrivals between two reads of one pod: completions, rejections and the queue's growth."""
    done = (last.success - first.success) + (last.rejected - first.rejected)
    return max(0.0, (done + last.pending - first.pending) / span_s)
