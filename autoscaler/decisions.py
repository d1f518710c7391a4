"""Why the recommender answered what it did: one word per evaluation, for people and dashboards.

Every evaluation ends in exactly one decision of a fixed vocabulary (bounded label values):
`tidescale_recommender_decision{reason}` is 1 for it and 0 for the rest, and a change of the
published replica count becomes a Kubernetes Event on the target Deployment that says why.
"""

from __future__ import annotations

from typing import Final

# What made the recommendation go up (the recommender's own reasons, recommend.py).
# `return`: the trend projected over the cold start, but no further than a level the arrivals held
# within `return_window_s` (a climb back out of a lull, not a surge). `replace`: pods that crash-loop
# (`replace_crash_looping`, shipped on) are replaced as far as the pods left cannot carry the demand
# at all of their capacity (the rates alone needed no more).
SCALE_UP: Final = {"rate": "scale_up_rate", "lookahead": "scale_up_lookahead", "return": "scale_up_return",
                   "queue": "scale_up_queue", "drain": "scale_up_drain", "latency": "scale_up_latency",
                   "panic": "scale_up_panic", "forecast": "scale_up_forecast", "min": "scale_up_min",
                   "max": "scale_up_max", "replace": "scale_up_replace"}
# Holds the recommender or the service chose, whatever the replicas read: `hold-down` (less is
# needed, not yet for the down delay), `saturated` (the SLO burns, or the completions per replica sit
# at their measured ceiling), `replicas` (the replica reading disagrees with the HPA or with what was
# asked for: the last answer stands), `withdrawn` (the fast path took back a scale-down the HPA had
# not applied yet: the pods read more load than the smaller fleet carries), `dip` (less has been
# needed for the down delay, but not yet for as long as the dips below the level held that came back
# within `return_window_s` lasted: `dip_hold_s`).
HOLDS: Final = {"hold-down": "hold_down_delay", "saturated": "hold_saturated", "replicas": "hold_replicas_disagree",
                "withdrawn": "hold_scale_down_withdrawn", "dip": "hold_dip_returns"}
# Asking for at least the replicas there are while some of them cannot be scheduled (no node has a
# free GPU): the count still goes out (a node autoscaler provisions for the Pending pods), and says so.
UNSCHEDULABLE: Final = "wait_unschedulable"
# `scale_down_fall`: a scale-down while the arrivals fall steadily, with no down delay (falls.py).
DECISIONS: Final = (*SCALE_UP.values(), "scale_down", "scale_down_fall", "scale_down_min", "hold_steady",
                    *HOLDS.values(), "hold_at_max", "hold_missing_data", UNSCHEDULABLE)
# Why the last good answer is held (`hold_missing_data`): `tidescale_recommender_failsafe{reason}`.
FAILSAFE_REASONS: Final = ("prometheus_down", "missing", "nan", "stale", "stuck")


def decision(desired: int, current: int, reason: str, failsafe: str | None, unschedulable: int = 0) -> str:
    """The decision of one evaluation: *desired* published against *current* replicas, the
    recommender's *reason*, or the *failsafe* that made it hold its last good answer.

    `panic` comes from the fast path (an overload read straight from the pods: scale in proportion
    to it at once, and hold that count for the panic hold); `drain` from a worst pod's backlog that
    the measured rate cannot clear within the pod drain horizon; `latency` from most requests slow
    on a settled fleet with no queue to show why (demand Triton's counters do not see)."""
    if failsafe is not None:
        return "hold_missing_data"
    if reason in HOLDS:  # held at what was asked for, which may be more than the replicas read
        return HOLDS[reason]
    if unschedulable > 0 and desired >= current:
        return UNSCHEDULABLE
    if desired > current:
        return SCALE_UP.get(reason, "scale_up_rate")
    if desired < current:
        return {"min": "scale_down_min", "fall": "scale_down_fall"}.get(reason, "scale_down")
    return "hold_at_max" if reason == "max" else "hold_steady"


def event_message(before: int | None, after: int, why: str, detail: str) -> str:
    """The Event's message: the change, the decision and the numbers behind it."""
    start = "none" if before is None else str(before)
    return f"tidescale recommends {after} replicas (was {start}): {why}; {detail}"[:1024]
