"""`RateLimit` and `RateLimitedLog`: a few lines of each message a minute, then the count of those left out."""

from __future__ import annotations

import logging

from tidescale.contracts.loglimit import MAX_KEYS, RateLimit, RateLimitedLog


def test_a_burst_passes_then_the_rest_is_counted_and_reported_with_the_next_window() -> None:
    now = [0.0]
    limit = RateLimit(window_s=60, burst=3, clock=lambda: now[0])
    assert [limit.allow("k") for _ in range(10)] == [0, 0, 0] + [None] * 7
    assert limit.allow("other") == 0  # keys are limited apart
    now[0] = 60.0
    assert limit.allow("k") == 7
    assert limit.allow("k") == 0


def test_the_keys_are_bounded() -> None:
    limit = RateLimit()
    for i in range(10 * MAX_KEYS):
        limit.allow(i)
    assert len(limit._windows) <= MAX_KEYS


def test_the_filter_limits_each_message_template_and_says_how_many_it_left_out() -> None:
    now = [0.0]
    logger = logging.getLogger("tests.loglimit")
    logger.propagate = False
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(handler)
    logger.addFilter(RateLimitedLog(RateLimit(window_s=60, burst=2, clock=lambda: now[0])))
    for i in range(1000):
        logger.warning("connection %d refused", i)  # one template, whatever the arguments
    now[0] = 61.0
    logger.warning("connection %d refused", 1000)
    assert [r.getMessage() for r in records] == [
        "connection 0 refused", "connection 1 refused",
        "connection 1000 refused (998 more like this not logged since the last one)"]
