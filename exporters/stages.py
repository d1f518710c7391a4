"""Triton's trace timestamps turned into stage durations (request, queue, compute_*), one sample each.

Both trace readers (OTLP spans, `exporters/otlp.py`; trace files, `exporters/tracefile.py`) end here,
and `LatencyAggregator` (`exporters/latency.py`) takes the samples.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

STAGES: tuple[str, ...] = ("request", "queue", "compute_input", "compute_infer", "compute_output")
# stage → (start stamp, end stamp), Triton's TIMESTAMPS names (mode=triton and OTLP events alike).
STAGE_STAMPS: dict[str, tuple[str, str]] = {
    "request": ("REQUEST_START", "REQUEST_END"),
    "queue": ("QUEUE_START", "COMPUTE_START"),
    "compute_input": ("COMPUTE_START", "COMPUTE_INPUT_END"),
    "compute_infer": ("COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START"),
    "compute_output": ("COMPUTE_OUTPUT_START", "COMPUTE_END"),
}
# The only stamps a stage reads; the frontend's (HTTP_*, GRPC_*, INFER_RESPONSE_COMPLETE) are not kept.
STAMP_NAMES = frozenset(name for pair in STAGE_STAMPS.values() for name in pair)
_STAGE_STAMP_ROWS = tuple((stage, start, end) for stage, (start, end) in STAGE_STAMPS.items())


class StageSample(msgspec.Struct, frozen=True, gc=False):
    """One request's duration in one stage of one model version. A msgspec Struct, built in C: the
    ingest path makes five per traced request, and a Struct is built about 3x faster than a named
    tuple (whose `__new__` is Python) and 5x faster than a frozen dataclass. Untracked by the cyclic
    GC (`gc=False`): it holds only strings and a float, so it can never be part of a cycle."""

    model: str
    version: str
    stage: str
    seconds: float
    namespace: str = ""
    pod: str = ""  # the Triton pod that served the request (empty when the sender is unknown)
    deployment: str = ""  # the Deployment that owns that pod


# (namespace, pod, deployment) of the Triton pod that served a request: who sent its spans, or
# whose trace file it came from; empty when unknown.
Sender = tuple[str, str, str]
NO_SENDER: Sender = ("", "", "")

# Triton's clock is a uint64 of nanoseconds: a stamp outside it is not one (both trace readers).
MAX_STAMP_NS = (1 << 64) - 1
# A stage longer than this is a broken clock or a forged stamp, never a request: a request with
# such a stage is rejected whole and counted (`duration_too_long`), by both trace readers.
MAX_STAGE_SECONDS = 3600
MAX_STAGE_NS = MAX_STAGE_SECONDS * 1_000_000_000


def interval_problem(start: int, end: int) -> str | None:
    """Why *start* to *end* (ns) cannot be a stage of a request, nor a span's own time:
    "end_before_start" or "duration_too_long"; None when it can. Integers throughout, so a
    400-digit stamp never meets a float."""
    if end < start:
        return "end_before_start"
    if end - start > MAX_STAGE_NS:
        return "duration_too_long"
    return None


def measure_stages(stamps: Mapping[str, int]) -> dict[str, float] | str:
    """Stage → seconds for every stage whose two stamps (ns) are present, or why the stamps cannot
    be measured (`interval_problem` of any stage), which rejects the request whole (half a request
    would skew the stages against each other). One pass serves both the check and the measurement
    on the ingest path."""
    out: dict[str, float] = {}
    for stage, start, end in _STAGE_STAMP_ROWS:
        t0 = stamps.get(start)
        if t0 is None:
            continue
        t1 = stamps.get(end)
        if t1 is None:
            continue
        # `interval_problem`, written out: this runs for every stage of every traced request
        if t1 < t0:
            return "end_before_start"
        if t1 - t0 > MAX_STAGE_NS:
            return "duration_too_long"
        out[stage] = (t1 - t0) / 1e9
    return out


def stage_samples(model: str, version: str, stages: Mapping[str, float], namespace: str = "", pod: str = "",
                  deployment: str = "") -> list[StageSample]:
    """One request's measured stages as samples of its model version (both trace readers)."""
    return [StageSample(model, version, stage, seconds, namespace, pod, deployment)
            for stage, seconds in stages.items()]
