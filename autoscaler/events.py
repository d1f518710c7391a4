"""The Kubernetes Event that says why the recommendation changed, on the target Deployment.

Best effort: the API server being away never delays a scale-up. Two recommender replicas (HA) see
the same change within an interval or two, perhaps by different paths (one panics on the fast path,
one follows the rate), so the Event is named by the change alone and a twin is counted, not doubled.
"""

from __future__ import annotations

import logging
import math
from datetime import UTC, datetime

from tidescale.autoscaler.decisions import event_message
from tidescale.autoscaler.fastpath import FastReading
from tidescale.autoscaler.forecast import period_name
from tidescale.autoscaler.recommend import Observation
from tidescale.contracts.kubeapi import EventSeriesApi, deployment_event, post_event_once

EVENT_COMPONENT = "tidescale-recommender"
# Another replica's Event for the same change, seen within this long (or two intervals), is the
# same report; event_twin_window_s() keeps it shorter than a real repeat can come.
EVENT_TWIN_WINDOW_S = 60.0
log = logging.getLogger(__name__)


def event_twin_window_s(interval_s: float, down_delay_s: float) -> float:
    """How long another replica's Event for the same change counts as the same report.

    Long enough for two replicas' unsynchronised rounds (two intervals, at least a minute), and
    shorter than a real repeat can come: the same change again needs the opposite change between
    them, and a scale-down waits `down_delay_s`, then the next round. So a tuning with a short
    scale-down delay shortens the window too, and a repeat always counts up its Event."""
    return min(max(EVENT_TWIN_WINDOW_S, 2 * interval_s), down_delay_s + interval_s)


def post_recommendation(api: EventSeriesApi, namespace: str, deployment: str, change: tuple[int, int],
                        why: str, detail: str, twin_window_s: float) -> None:
    """Post (or count a twin of) the Event for *change* (before, after); failures are logged, never raised."""
    before, after = change
    now = datetime.now(UTC)
    body = deployment_event(namespace, deployment, reason="TidescaleRecommendation", now=now,
                            message=event_message(before, after, why, detail),
                            component=EVENT_COMPONENT, name_prefix="tidescale-recommendation",
                            series_key=f"{before}->{after}")
    try:
        post_event_once(api, body, now=now, twin_window_s=twin_window_s)
    except Exception as exc:
        log.warning("posting the recommendation Event for %s/%s failed: %s", namespace, deployment, exc)


def panic_detail(reading: FastReading, panic_window_s: float, capacity_rps: float) -> str:
    """What the fast path read when it raised the count (a panic, a withdrawn scale-down), for the Event."""
    newest = "" if reading.newest_rps is None else f" ({reading.newest_rps:.1f} req/s over the newest read)"
    return (f"arrival {reading.arrival_rps or 0.0:.1f} req/s read from {reading.pods} pod(s) over the last "
            f"{panic_window_s:g} s{newest}, capacity {capacity_rps:.1f} req/s per replica")


def observation_detail(obs: Observation, capacity_rps: float, projected_rps: float | None = None,
                       lifted_trend_cap: float | None = None) -> str:
    """What the evaluation read, for the Event, and the rate it projected when above the rate read (a
    trend over the cold start, up to a level held, a fast reading's jump): a scale-up to 8 replicas
    at 410 req/s only makes sense beside the 2,400 req/s it was sized for. With *lifted_trend_cap*
    (an unshed backlog let the trend reach that multiple of the rate) the projection says why."""
    p99 = "unknown" if obs.p99_s is None else f"{obs.p99_s * 1e3:.0f} ms"
    ahead = projected_rps is not None and math.isfinite(projected_rps) and \
        projected_rps > obs.arrival_rps + 0.005 * max(obs.arrival_rps, 1.0)
    return (f"arrival {obs.arrival_rps:.1f} req/s"
            + (f" (projected {projected_rps:.1f} req/s ahead"
               + ("" if lifted_trend_cap is None else
                  f", the trend cap lifted to x{lifted_trend_cap:g}: a pod holds a backlog that no queue policy sheds")
               + ")" if ahead else "")
            + f", rejected {obs.rejected_rps:.1f} req/s, queue "
            f"{obs.queue_depth:.0f}, P99 {p99}, capacity {capacity_rps:.1f} req/s per replica, "
            f"{obs.ready_replicas}/{obs.current_replicas} replicas ready"
            + (f", {obs.unschedulable_pods} pod(s) cannot be scheduled" if obs.unschedulable_pods else "")
            + (f", {obs.crash_looping_pods} pod(s) crash-looping"
               if obs.crash_looping_pods else "")
            + ("" if obs.forecast is None else
               f", forecast {obs.forecast.rps:.1f} req/s ({period_name(obs.forecast.period_s)} ago peaked at "
               f"{obs.forecast.peak_rps:.1f} req/s, x{obs.forecast.growth:.2f} today's level)"))
