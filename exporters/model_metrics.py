"""The `model_metrics` section of a Triton model's config.pbtxt (Triton 2.65+): per-model buckets of
`nv_inference_first_response_histogram_ms` with every SLO threshold an exact boundary, so the
server's own histogram answers "share of requests within the SLO" exactly, as the exporter's does.

Triton's default buckets (100, 500, 2000, 5000 ms) put a 250 ms threshold inside a bucket; the
snippet replaces them for one model. Traces stay the source of the queue and compute stages.
"""

from __future__ import annotations

from collections.abc import Sequence

from tidescale.contracts.errors import UsageError
from tidescale.exporters.buckets import log_buckets

FAMILY = "nv_inference_first_response_histogram_ms"


def first_response_buckets_ms(slo_thresholds_s: Sequence[float], min_ms: float = 1.0, max_ms: float = 20_000.0,
                              max_buckets: int = 30) -> tuple[float, ...]:
    """Log-spaced boundaries in milliseconds with each threshold exact; UsageError names a threshold
    that cannot be one (outside the range, or more thresholds than buckets)."""
    thresholds_ms = sorted({round(s * 1000, 6) for s in slo_thresholds_s})
    for t in thresholds_ms:
        if not min_ms < t < max_ms:
            raise UsageError(f"SLO threshold {t / 1000:g} s cannot be a bucket boundary of {FAMILY}: "
                             f"it must lie between {min_ms:g} and {max_ms:g} ms")
    try:
        return log_buckets(min_ms, max_ms, thresholds_ms, max_buckets)
    except ValueError as exc:
        raise UsageError(f"{FAMILY} buckets: {exc}") from None


def model_metrics_snippet(slo_thresholds_s: Sequence[float], max_buckets: int = 30) -> str:
    """The config.pbtxt text (protobuf text format of inference.ModelMetrics) to append to a model."""
    bounds = first_response_buckets_ms(slo_thresholds_s, max_buckets=max_buckets)
    buckets = ", ".join(f"{b:g}" for b in bounds)
    return (
        "model_metrics {\n"
        "  metric_control: [\n"
        "    {\n"
        f'      metric_identifier: {{ family: "{FAMILY}" }}\n'
        f"      histogram_options: {{ buckets: [ {buckets} ] }}\n"
        "    }\n"
        "  ]\n"
        "}\n"
    )
