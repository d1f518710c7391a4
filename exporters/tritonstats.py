"""`GET /v2/models/stats` parsed into plain numbers, and the deltas between two polls.

Triton answers with cumulative `{count, ns}` objects per model version. The same data
comes in three dialects, all handled here: HTTP JSON (numbers), gRPC-as-JSON
(`MessageToJson`: uint64 as strings, zero messages as `{}`, possibly camelCase keys), and
older servers without `cache_hit`/`cache_miss`/`response_stats`/`memory_usage`. Counters
reset when a model reloads or the server restarts; `is_reset` detects it so deltas never
go negative. Parsing is bounded: body size, model count and label lengths.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tidescale.exporters.cardinality import cut_label_value
from tidescale.exporters.errors import BadInput

_loads: Callable[[bytes | str], Any]
try:  # orjson decodes ~2x faster; its JSONDecodeError subclasses the stdlib one
    from orjson import loads as _loads
except ImportError:  # pragma: no cover
    _loads = json.loads

MAX_BODY_BYTES = 16 << 20
MAX_MODELS = 10_000
MAX_BATCH_SIZES = 4096
MAX_UINT64 = (1 << 64) - 1


@dataclass(frozen=True)
class Duration:
    """One cumulative `{count, ns}` object."""

    count: int = 0
    ns: int = 0


@dataclass(frozen=True)
class MemoryUsage:
    kind: str
    device_id: str
    byte_size: int


@dataclass(frozen=True)
class ModelStats:
    """One model version's cumulative statistics."""

    name: str
    version: str
    inference_count: int = 0
    execution_count: int = 0
    last_inference_ms: int = 0
    success: Duration = Duration()
    fail: Duration = Duration()
    queue: Duration = Duration()
    compute_input: Duration = Duration()
    compute_infer: Duration = Duration()
    compute_output: Duration = Duration()
    cache_hit: Duration | None = None
    cache_miss: Duration | None = None
    # executions per batch size, from batch_stats[].compute_infer.count
    batch_executions: dict[int, int] = field(default_factory=dict)
    memory: tuple[MemoryUsage, ...] = ()


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(p.title() for p in rest)


def _get(obj: dict[str, Any], key: str) -> Any:
    if key in obj:
        return obj[key]
    return obj.get(_camel(key))


def _uint(value: Any, what: str) -> int:
    """A uint64 that may be a JSON number or (gRPC-as-JSON) a decimal string."""
    if type(value) is int and 0 <= value <= MAX_UINT64:  # the common case, fast
        return value
    if value is None:
        return 0
    if isinstance(value, bool):
        raise BadInput(502, f"{what}: expected a number, got a boolean")
    integral_float = isinstance(value, float) and value.is_integer()
    digits = isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 20
    if isinstance(value, int) or integral_float or digits:
        n = int(value)
    else:
        raise BadInput(502, f"{what}: expected a non-negative integer, got {value!r:.40}")
    if not 0 <= n <= MAX_UINT64:
        raise BadInput(502, f"{what}: {n} is outside uint64")
    return n


def _duration(obj: Any, what: str) -> Duration:
    if obj is None:
        return Duration()
    if not isinstance(obj, dict):
        raise BadInput(502, f"{what}: expected a {{count, ns}} object")
    return Duration(_uint(obj.get("count"), f"{what}.count"), _uint(obj.get("ns"), f"{what}.ns"))


def _text(value: Any, what: str) -> str:
    """A name or id (they become label values): cut to the label cap before anything keeps it."""
    if isinstance(value, int) and not isinstance(value, bool):
        return cut_label_value(str(value))
    if not isinstance(value, str):
        raise BadInput(502, f"{what}: expected a string")
    return cut_label_value(value)


def _model(entry: Any) -> ModelStats:
    if not isinstance(entry, dict):
        raise BadInput(502, "model_stats entry is not an object")
    name = _text(entry.get("name"), "model_stats[].name")
    version = _text(entry.get("version", ""), f"{name!r:.60} version")
    where = f"model {name!r:.60} v{version!r:.20}"
    stats = _get(entry, "inference_stats") or {}
    if not isinstance(stats, dict):
        raise BadInput(502, f"{where}: inference_stats is not an object")
    cache_hit = _get(stats, "cache_hit")
    cache_miss = _get(stats, "cache_miss")
    return ModelStats(
        name=name,
        version=version,
        inference_count=_uint(_get(entry, "inference_count"), f"{where} inference_count"),
        execution_count=_uint(_get(entry, "execution_count"), f"{where} execution_count"),
        last_inference_ms=_uint(_get(entry, "last_inference"), f"{where} last_inference"),
        success=_duration(stats.get("success"), f"{where} success"),
        fail=_duration(stats.get("fail"), f"{where} fail"),
        queue=_duration(stats.get("queue"), f"{where} queue"),
        compute_input=_duration(_get(stats, "compute_input"), f"{where} compute_input"),
        compute_infer=_duration(_get(stats, "compute_infer"), f"{where} compute_infer"),
        compute_output=_duration(_get(stats, "compute_output"), f"{where} compute_output"),
        cache_hit=None if cache_hit is None else _duration(cache_hit, f"{where} cache_hit"),
        cache_miss=None if cache_miss is None else _duration(cache_miss, f"{where} cache_miss"),
        batch_executions=_batches(_get(entry, "batch_stats"), where),
        memory=_memory(_get(entry, "memory_usage"), where),
    )


def _batches(items: Any, where: str) -> dict[int, int]:
    if items is None:
        return {}
    if not isinstance(items, list) or len(items) > MAX_BATCH_SIZES:
        raise BadInput(502, f"{where}: batch_stats must be a list of at most {MAX_BATCH_SIZES} entries")
    out: dict[int, int] = {}
    for item in items:
        if item.__class__ is not dict:
            raise BadInput(502, f"{where}: batch_stats entry is not an object")
        size = item.get("batch_size")
        if size.__class__ is not int or size < 0:
            size = _uint(_get(item, "batch_size"), f"{where} batch_size")
        # Each duration object carries the execution count; compute_infer is set whenever
        # the count is non-zero (gRPC-as-JSON writes a zero object as {}).
        infer = item.get("compute_infer") or item.get("computeInfer")
        if infer.__class__ is dict and "count" in infer:
            count = _uint(infer["count"], f"{where} batch {size} count")
        else:
            count = max(_duration(_get(item, k), f"{where} batch {size}").count
                        for k in ("compute_infer", "compute_input", "compute_output"))
        out[size] = out.get(size, 0) + count
    return out


def _memory(items: Any, where: str) -> tuple[MemoryUsage, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise BadInput(502, f"{where}: memory_usage is not a list")
    out = []
    for item in items[:64]:
        if not isinstance(item, dict):
            raise BadInput(502, f"{where}: memory_usage entry is not an object")
        out.append(MemoryUsage(_text(item.get("type", ""), f"{where} memory type"),
                               _text(item.get("id", 0), f"{where} memory id"),
                               _uint(_get(item, "byte_size"), f"{where} memory byte_size")))
    return tuple(out)


def parse_stats(body: bytes | str | dict[str, Any]) -> list[ModelStats]:
    """Models of one `/v2/models/stats` response; BadInput (502: the upstream is wrong) otherwise."""
    if isinstance(body, bytes | str):
        if len(body) > MAX_BODY_BYTES:
            raise BadInput(502, f"stats response larger than {MAX_BODY_BYTES} bytes")
        try:
            doc = _loads(body)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError; stdlib: depth
            raise BadInput(502, f"stats response is not JSON: {str(exc)[:200]}") from None
    else:
        doc = body
    if not isinstance(doc, dict):
        raise BadInput(502, "stats response is not a JSON object")
    models = _get(doc, "model_stats")
    if models is None:
        return []
    if not isinstance(models, list):
        raise BadInput(502, "model_stats is not a list")
    if len(models) > MAX_MODELS:
        raise BadInput(502, f"stats response lists {len(models)} models, more than {MAX_MODELS}")
    return [_model(m) for m in models]


def is_reset(prev: ModelStats, cur: ModelStats) -> bool:
    """True when any cumulative counter went backwards (model reload, server restart)."""
    if cur.execution_count < prev.execution_count or cur.inference_count < prev.inference_count:
        return True
    if cur.success.count < prev.success.count or cur.queue.ns < prev.queue.ns:
        return True
    return any(cur.batch_executions.get(size, 0) < n for size, n in prev.batch_executions.items())


def batch_deltas(prev: ModelStats | None, cur: ModelStats) -> dict[int, int]:
    """Executions per batch size since *prev* (all of *cur* after a reset or on first sight)."""
    if prev is None or is_reset(prev, cur):
        return {s: n for s, n in cur.batch_executions.items() if n > 0}
    out = {}
    for size, n in cur.batch_executions.items():
        delta = n - prev.batch_executions.get(size, 0)
        if delta > 0:
            out[size] = delta
    return out


def batching_efficiency(prev: ModelStats, cur: ModelStats, max_batch_size: int) -> float | None:
    """Inferences per execution over the interval divided by max_batch_size (None when idle)."""
    if max_batch_size <= 0 or is_reset(prev, cur):
        return None
    executions = cur.execution_count - prev.execution_count
    if executions <= 0:
        return None
    return min(1.0, (cur.inference_count - prev.inference_count) / executions / max_batch_size)


def queue_depth_estimate(prev: ModelStats, cur: ModelStats, interval_s: float) -> float | None:
    """Little's law: mean requests waiting = queue time accumulated / wall time elapsed.

    Triton adds a request's queue time when it completes, so this lags under overload
    and is an estimate; servers with `nv_inference_pending_request_count` should use that.
    """
    if interval_s <= 0 or is_reset(prev, cur):
        return None
    return max(0, cur.queue.ns - prev.queue.ns) / (interval_s * 1e9)
