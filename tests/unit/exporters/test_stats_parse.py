"""`/v2/models/stats` parsing in all its dialects, deltas, resets and Little's-law estimates."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.paths import FIXTURES
from tidescale.exporters.errors import BadInput
from tidescale.exporters.tritonstats import (
    Duration,
    ModelStats,
    batch_deltas,
    batching_efficiency,
    is_reset,
    parse_stats,
    queue_depth_estimate,
)

TRITON = FIXTURES / "triton"


def test_real_251_stats() -> None:
    models = {m.name: m for m in parse_stats((TRITON / "real-2.51" / "stats.json").read_bytes())}
    batcher = models["batcher"]
    assert batcher.execution_count == 3414 and batcher.inference_count == 9906
    assert batcher.batch_executions[1] == 2285 and batcher.batch_executions[32] == 120
    assert sum(batcher.batch_executions.values()) == batcher.execution_count
    assert sum(s * n for s, n in batcher.batch_executions.items()) == batcher.inference_count
    assert batcher.cache_hit == Duration(0, 0)
    assert models["echo"].batch_executions == {}


def test_old_server_without_cache_stats() -> None:
    (m,) = parse_stats((TRITON / "stats_backend_readme_batching.json").read_bytes())
    assert m.cache_hit is None and m.cache_miss is None and m.memory == ()
    assert m.batch_executions == {2: 1}
    assert m.queue == Duration(2, 9996491319)


@pytest.mark.parametrize("name", ["stats_food_classifier_2025.json", "stats_ensemble_issue_2024.json"])
def test_other_fixtures_parse(name: str) -> None:
    (m,) = parse_stats((TRITON / name).read_bytes())
    assert sum(m.batch_executions.values()) == m.execution_count


def test_grpc_json_dialect() -> None:
    """uint64 as strings, zero messages as {}, camelCase keys and memory usage."""
    body = {"modelStats": [{
        "name": "m", "version": "2", "lastInference": "1700000000000", "inferenceCount": "40",
        "executionCount": "10",
        "inferenceStats": {"success": {"count": "40", "ns": "4000"}, "fail": {}, "queue": {"count": "40", "ns": "900"},
                           "computeInput": {}, "computeInfer": {"count": "40", "ns": "100"}, "computeOutput": {},
                           "cacheHit": {}, "cacheMiss": {}},
        "batchStats": [{"batchSize": "4", "computeInput": {}, "computeInfer": {"count": "10", "ns": "100"},
                        "computeOutput": {}}],
        "memoryUsage": [{"type": "GPU", "id": "0", "byteSize": "1048576"}],
    }]}
    (m,) = parse_stats(json.dumps(body))
    assert (m.inference_count, m.execution_count, m.last_inference_ms) == (40, 10, 1700000000000)
    assert m.fail == Duration() and m.cache_hit == Duration()
    assert m.batch_executions == {4: 10}
    assert m.memory[0].byte_size == 1 << 20 and m.memory[0].kind == "GPU" and m.memory[0].device_id == "0"


@pytest.mark.parametrize("body", [b"<html>502 Bad Gateway</html>", b"", b"[]", b'{"model_stats": 3}',
                                  b'{"model_stats": [{"name": "m", "inference_count": "-1"}]}',
                                  b'{"model_stats": [{"name": "m", "inference_count": "1e3"}]}',
                                  b'{"model_stats": [{"name": "m", "inference_count": true}]}',
                                  b'{"model_stats": [{"name": ["x"]}]}',
                                  b'{"model_stats": [{"name": "m", "batch_stats": [{"batch_size": "\xc2\xb2"}]}]}',
                                  b'{"model_stats": [{"name": "m", "inference_stats": {"queue": 5}}]}'])
def test_bad_responses_are_bad_input(body: bytes) -> None:
    with pytest.raises(BadInput) as exc:
        parse_stats(body)
    assert exc.value.status_code == 502 and exc.value.message


def _stats(execs: dict[int, int], queue_ns: int = 0) -> ModelStats:
    inferences = sum(s * n for s, n in execs.items())
    return ModelStats("m", "1", inference_count=inferences, execution_count=sum(execs.values()),
                      success=Duration(inferences, 0), queue=Duration(inferences, queue_ns),
                      batch_executions=dict(execs))


def test_deltas_between_polls() -> None:
    a, b = _stats({1: 10, 4: 2}), _stats({1: 12, 4: 2, 8: 5})
    assert batch_deltas(None, a) == {1: 10, 4: 2}
    assert batch_deltas(a, b) == {1: 2, 8: 5}
    assert batching_efficiency(a, b, max_batch_size=8) == pytest.approx((2 + 40) / 7 / 8)


def test_reset_counts_from_zero() -> None:
    before, after_reload = _stats({1: 100, 4: 20}), _stats({4: 3})
    assert is_reset(before, after_reload)
    assert batch_deltas(before, after_reload) == {4: 3}
    assert batching_efficiency(before, after_reload, 8) is None
    assert queue_depth_estimate(before, after_reload, 5.0) is None


def test_littles_law_queue_estimate() -> None:
    a, b = _stats({1: 10}, queue_ns=0), _stats({1: 20}, queue_ns=int(15e9))
    assert queue_depth_estimate(a, b, 5.0) == pytest.approx(3.0)  # 15 s of queueing in 5 s


counts = st.dictionaries(st.integers(1, 64), st.integers(0, 10**6), max_size=8)


@settings(max_examples=150, deadline=None)
@given(counts, counts)
def test_deltas_are_never_negative(a: dict[int, int], b: dict[int, int]) -> None:
    d = batch_deltas(_stats(a), _stats(b))
    assert all(n > 0 for n in d.values())
    if not is_reset(_stats(a), _stats(b)):
        assert all(b[s] - a.get(s, 0) == n for s, n in d.items())


json_values = st.recursive(st.none() | st.booleans() | st.integers(-5, 2**65) | st.text(max_size=8)
                           | st.floats(allow_nan=True), lambda c: st.lists(c, max_size=3)
                           | st.dictionaries(st.sampled_from(["name", "version", "count", "ns", "batch_size",
                                                              "inference_stats", "batch_stats", "queue",
                                                              "compute_infer", "memory_usage", "byte_size",
                                                              "model_stats", "execution_count"]), c, max_size=4),
                           max_leaves=20)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_fuzz_parse_never_crashes(doc: object) -> None:
    try:
        parse_stats(json.dumps(doc))
    except BadInput as exc:
        assert exc.status_code == 502


def test_model_versions_are_strings_even_when_numbers() -> None:
    (m,) = parse_stats(b'{"model_stats": [{"name": "m", "version": 3}]}')
    assert m.version == "3"
    assert replace(m, version="4").version == "4"
