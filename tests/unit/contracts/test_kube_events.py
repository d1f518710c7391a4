"""Events named by the change they report: replicas of one component leave one Event per change."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.kube_events import FakeEventApi
from tidescale.contracts.kubeapi import (
    MAX_NAME_CHARS,
    REQUEST_TIMEOUT_S,
    DeadlinedApi,
    deployment_event,
    post_event_once,
    series_name,
)

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
T0 = datetime(2026, 11, 27, 3, 0, 0, tzinfo=UTC)


def event(message: str, now: datetime, key: str = "3->5") -> dict[str, Any]:
    return deployment_event("ml", "triton", reason="TidescaleRecommendation", message=message, component="c",
                            now=now, name_prefix="tidescale-recommendation", series_key=key)


def test_a_second_replica_reporting_the_same_change_meets_the_first_ones_event() -> None:
    api = FakeEventApi()
    assert post_event_once(api, event("from replica a", T0), now=T0, twin_window_s=60) == "created"
    later = T0 + timedelta(seconds=14)
    assert post_event_once(api, event("from replica b", later), now=later, twin_window_s=60) == "twin"
    [stored] = api.events.values()
    assert len(api.posted) == 1 and stored["count"] == 1 and stored["message"] == "from replica a"


def test_the_same_change_again_later_counts_up_the_one_event() -> None:
    api = FakeEventApi()
    post_event_once(api, event("first", T0), now=T0, twin_window_s=60)
    again = T0 + timedelta(minutes=20)
    assert post_event_once(api, event("second", again), now=again, twin_window_s=60) == "repeated"
    [stored] = api.events.values()
    assert stored["count"] == 2 and stored["message"] == "second" and stored["lastTimestamp"] == "2026-11-27T03:20:00Z"
    assert stored["firstTimestamp"] == "2026-11-27T03:00:00Z"


def test_another_change_is_another_event() -> None:
    api = FakeEventApi()
    post_event_once(api, event("up", T0), now=T0, twin_window_s=60)
    post_event_once(api, event("down", T0, key="5->3"), now=T0, twin_window_s=60)
    assert len(api.posted) == 2


def test_other_errors_reach_the_caller() -> None:
    with pytest.raises(OSError):
        post_event_once(FakeEventApi(fail_with=OSError("connection refused")), event("x", T0), now=T0,
                        twin_window_s=60)


def test_a_series_name_is_a_valid_event_name_whatever_the_deployment_name() -> None:
    name = series_name("d" * 253, "tidescale-recommendation", "3->5")
    assert len(name) == MAX_NAME_CHARS and name.startswith("d") and name.split(".")[-1].startswith("tidescale-")
    cut = series_name("d" * 214 + "-x" * 19, "tidescale-recommendation", "3->5")  # the cut ends on a dash
    assert len(cut) <= MAX_NAME_CHARS and DNS_SUBDOMAIN.fullmatch(cut)
    up, down = series_name("triton", "p", "3->5"), series_name("triton", "p", "5->3")
    assert up == series_name("triton", "p", "3->5") != down
    assert event("x", T0)["metadata"] == {"name": series_name("triton", "tidescale-recommendation", "3->5"),
                                          "namespace": "ml"}


class RecordingApi:
    """The shape of a kubernetes.client API object: methods that take `_request_timeout`."""

    api_client = "the shared ApiClient"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def create_namespaced_event(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append(("create_namespaced_event", args, kwargs))
        return "created"


def test_every_kubernetes_call_carries_a_deadline_unless_the_caller_gives_its_own() -> None:
    """kubernetes.client waits without end by default: a pooled connection dropped without a word
    would hang the recommender's Event post, and the scale write behind it, for minutes."""
    inner = RecordingApi()
    api = DeadlinedApi(inner, timeout_s=7.0)
    assert api.create_namespaced_event("ml", {"kind": "Event"}) == "created"
    api.create_namespaced_event("ml", {}, _request_timeout=2.0)
    assert [c[2] for c in inner.calls] == [{"_request_timeout": 7.0}, {"_request_timeout": 2.0}]
    assert inner.calls[0][1] == ("ml", {"kind": "Event"})
    assert api.api_client == "the shared ApiClient"  # attributes pass through untouched
    assert DeadlinedApi(inner)._timeout_s == REQUEST_TIMEOUT_S > 0
    with pytest.raises(AttributeError):
        api.no_such_call  # noqa: B018
