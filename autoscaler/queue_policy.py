"""The Triton queue policy tidescale recommends for a model: shed what cannot meet the SLO anyway.

A request that has waited longer than the SLO minus the largest batch's P99 execution time will
miss the SLO whatever happens next. Left in the queue, it delays everything behind it, and a surge
turns into a backlog that outlives it. Rejected at once (`timeout_action: REJECT`), it returns an
error the client can retry elsewhere, and the requests behind it keep their SLO. The P99, not the
mean: with the mean, requests that queued nearly the whole timeout and then rode a slower-than-mean
batch ended past the SLO (in bench autoscale, direct mode then missed the 3x surge's goal).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tidescale.contracts.errors import UsageError
from tidescale.contracts.slo import check_slo_threshold


@dataclass(frozen=True)
class QueuePolicy:
    """`dynamic_batching.default_queue_policy` for one model."""

    model: str
    timeout_us: int

    def pbtxt(self) -> str:
        """The config.pbtxt fragment (merge it into the model's `dynamic_batching` block)."""
        return ("dynamic_batching {\n  default_queue_policy {\n    timeout_action: REJECT\n"
                f"    default_timeout_microseconds: {self.timeout_us}\n  }}\n}}\n")


def recommended_queue_policy(model: str, slo_latency_threshold_s: float, max_batch_exec_s: float) -> QueuePolicy:
    """Timeout = SLO − the largest batch's P99 execution time; an SLO that leaves no queue time is an error."""
    check_slo_threshold(slo_latency_threshold_s)
    if not (math.isfinite(max_batch_exec_s) and max_batch_exec_s > 0):
        raise UsageError("largest batch's execution time must be a finite number > 0 (seconds), "
                         f"got {max_batch_exec_s}")
    # whole µs; floor would turn 166000 into 165999
    timeout_us = round((slo_latency_threshold_s - max_batch_exec_s) * 1e6)
    if timeout_us <= 0:
        raise UsageError(
            f"impossible queue policy for model {model}: the SLO of {slo_latency_threshold_s * 1e3:g} ms minus "
            f"the largest batch's execution time of {max_batch_exec_s * 1e3:g} ms leaves no time to queue; lower the "
            "max batch size or raise the SLO")
    return QueuePolicy(model, timeout_us)
