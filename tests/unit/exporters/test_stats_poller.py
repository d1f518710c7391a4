"""The stats poller against an in-process fake Triton serving recorded real responses."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from tests.hostile import URLS_WITH_CREDENTIALS
from tidescale.benches.poll import FakeTriton, synthetic_stats
from tidescale.contracts.errors import UsageError
from tidescale.devstack.ports import free_port
from tidescale.exporters import stats_poller
from tidescale.exporters.cardinality import clean_label_value
from tidescale.exporters.stats_poller import StatsPoller
from tidescale.exporters.targets import Target, TargetSet
from tidescale.exporters.tritonstats import parse_stats

BATCHER = parse_stats(synthetic_stats(1, 0))[0]


def run_with_server(fake: FakeTriton, body: Callable[[int], Awaitable[None]]) -> None:
    async def main() -> None:
        runner = web.AppRunner(fake.app(), access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "0.0.0.0", port).start()
        try:
            await body(port)
        finally:
            await runner.cleanup()

    asyncio.run(main())


def sample(poller: StatsPoller, name: str, **labels: str) -> float | None:
    reg = CollectorRegistry()
    reg.register(poller)
    return reg.get_sample_value(name, labels)


def labels(port: int, host: str = "127.0.0.1", model: str = "model_0") -> dict[str, str]:
    return {"model": model, "version": "1", "namespace": "", "pod": f"{host}:{port}"}


def test_batch_histogram_grows_by_deltas_with_efficiency() -> None:
    fake = FakeTriton(models=2, version="2.51.0", max_batch_size=32)

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]), timeout_s=5)
        await poller.poll_once()
        lab = labels(port)
        assert sample(poller, "tidescale_batch_size_count", **lab) == BATCHER.execution_count
        assert sample(poller, "tidescale_batch_size_sum", **lab) == BATCHER.inference_count
        assert sample(poller, "tidescale_batch_size_bucket", **lab, le="1.0") == BATCHER.batch_executions[1]
        assert sample(poller, "tidescale_batching_efficiency_ratio", **lab) is None  # needs two polls
        await poller.poll_once()  # counters doubled
        assert sample(poller, "tidescale_batch_size_count", **lab) == 2 * BATCHER.execution_count
        expected = BATCHER.inference_count / BATCHER.execution_count / 32
        assert sample(poller, "tidescale_batching_efficiency_ratio", **lab) == pytest.approx(expected)
        # Triton 2.51 has nv_inference_pending_request_count: no estimate in auto mode.
        assert sample(poller, "tidescale_queue_depth_estimate", **lab) is None
        assert poller.series_count() == 2
        await poller.close()

    run_with_server(fake, body)


def test_old_server_gets_a_queue_estimate() -> None:
    fake = FakeTriton(models=1, version="2.30.0")
    clock = [100.0]

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]), clock=lambda: clock[0])
        await poller.poll_once()
        clock[0] += 10.0
        await poller.poll_once()
        expected = BATCHER.queue.ns / 10e9  # queue ns grew by one base amount in 10 s
        assert sample(poller, "tidescale_queue_depth_estimate", **labels(port)) == pytest.approx(expected)
        await poller.close()

    run_with_server(fake, body)


def test_counter_reset_never_decreases_the_histogram() -> None:
    bodies = [synthetic_stats(1, 4), synthetic_stats(1, 0)]  # second poll: model reloaded
    fake = FakeTriton(stats_body=lambda host, n: bodies[min(n, 1)])

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]))
        await poller.poll_once()
        before = sample(poller, "tidescale_batch_size_count", **labels(port))
        await poller.poll_once()
        after = sample(poller, "tidescale_batch_size_count", **labels(port))
        assert before == 5 * BATCHER.execution_count
        assert after == before + BATCHER.execution_count
        await poller.close()

    run_with_server(fake, body)


def test_vanished_models_and_targets_lose_their_series() -> None:
    two, one = synthetic_stats(2, 0), synthetic_stats(1, 0)
    fake = FakeTriton(stats_body=lambda host, n: two if n == 0 else one)

    async def body(port: int) -> None:
        targets = TargetSet(kube_selector="app=triton")
        poller = StatsPoller(targets)
        a = Target(f"http://127.0.0.1:{port}", "serving", "triton-a")
        b = Target(f"http://127.0.0.2:{port}", "serving", "triton-b")
        with targets._lock:
            targets._pods = {("serving", "triton-a"): a, ("serving", "triton-b"): b}
        await poller.poll_once()
        assert poller.series_count() == 4
        await poller.poll_once()  # model_1 unloaded everywhere
        assert poller.series_count() == 2
        assert poller.self_metrics.poll_durations.keys() == {a.url, b.url}
        targets.apply_pod_event("DELETED", _pod("triton-b"))
        assert poller.series_count() == 1
        assert b.url not in poller.self_metrics.poll_durations
        lab = {"model": "model_0", "version": "1", "namespace": "serving", "pod": "triton-a"}
        assert sample(poller, "tidescale_batch_size_count", **lab) == BATCHER.execution_count
        await poller.close()

    run_with_server(fake, body)


def _pod(name: str) -> Any:
    from types import SimpleNamespace as NS

    return NS(metadata=NS(name=name, namespace="serving"), status=None)


@pytest.mark.parametrize(("stats_body", "reason"), [
    (lambda h, n: b"<html>oops</html>", "bad_response"),
    (lambda h, n: b'{"model_stats": [{"name": "m", "inference_count": "-4"}]}', "bad_response"),
])
def test_bad_responses_are_counted_not_fatal(stats_body: Callable[[str, int], bytes], reason: str) -> None:
    fake = FakeTriton(stats_body=stats_body)

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]))
        await poller.poll_once()
        assert dict(poller.self_metrics.poll_errors) == {(f"http://127.0.0.1:{port}", reason): 1}
        assert poller.series_count() == 0
        await poller.close()

    run_with_server(fake, body)


def test_timeouts_http_errors_and_refused_connections() -> None:
    fake = FakeTriton(models=1)
    fake.delay_s = 1.0
    dead = free_port()

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}", f"http://127.0.0.1:{dead}"]), timeout_s=0.2)
        await poller.poll_once()
        reasons = {r for (_, r) in poller.self_metrics.poll_errors}
        assert reasons == {"timeout", "connect"}
        await poller.close()

    run_with_server(fake, body)


def test_oversized_bodies_are_refused() -> None:
    fake = FakeTriton(stats_body=lambda h, n: b'{"model_stats": []}' + b" " * 5000)

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]), max_body_bytes=1000)
        await poller.poll_once()
        assert {r for (_, r) in poller.self_metrics.poll_errors} == {"bad_response"}
        await poller.close()

    run_with_server(fake, body)


def test_hostile_model_names_are_capped_and_escaped() -> None:
    names = ['quote"d', "new\nline", *(f"m{i}" for i in range(5_000))]
    doc = json.dumps({"model_stats": [{"name": n, "version": "1", "execution_count": 1, "inference_count": 1,
                                        "batch_stats": [{"batch_size": 1, "compute_infer": {"count": 1, "ns": 5}}]}
                                       for n in names]}).encode()
    fake = FakeTriton(stats_body=lambda h, n: doc, max_batch_size=0)

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]), max_series=100, timeout_s=30)
        await poller.poll_once()
        assert not poller.self_metrics.poll_errors, poller.self_metrics.poll_errors
        assert poller.series_count() == 100
        assert poller.self_metrics.series_dropped["tidescale_batch_size"] == len(names) - 100
        reg = CollectorRegistry()
        reg.register(poller)
        text = generate_latest(reg).decode()
        assert 'model="quote\\"d"' in text and 'model="new?line"' in text
        await poller.close()

    run_with_server(fake, body)


# --- issue 43 #6: no credential from a --triton URL in /metrics, a log line or an error ------------


@pytest.mark.parametrize(("name", "url", "secret"), URLS_WITH_CREDENTIALS, ids=[n for n, _, _ in URLS_WITH_CREDENTIALS])
def test_no_credential_reaches_a_label_a_log_line_or_an_error(name: str, url: str, secret: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeTriton(models=1, version="2.51.0")
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("tidescale.exporters.stats_poller")
    logger.addHandler(handler)

    async def body(port: int) -> None:
        local = url.replace("triton:8000", f"127.0.0.1:{port}").replace("[::1]:8000", f"127.0.0.1:{port}")
        try:
            targets = TargetSet([local])
        except UsageError as exc:  # not a URL the poller takes: the message must not quote its secret
            assert secret not in str(exc)
            return
        poller = StatsPoller(targets, timeout_s=5)
        await poller.poll_once()  # a poll that works (or fails: https to a plain-HTTP server)

        def broken(body: bytes) -> None:
            raise RuntimeError(f"cannot read the answer of {local}/v2/models/stats")

        monkeypatch.setattr(stats_poller, "parse_stats", broken)
        await poller.poll_once()  # an internal error, logged with its message
        poller.self_metrics.count_poll_error(targets.targets()[0].label, "bad_metadata")
        reg = CollectorRegistry()
        reg.register(poller)
        reg.register(poller.self_metrics)
        exposition = generate_latest(reg).decode()
        assert "tidescale_exporter_poll_errors_total{" in exposition
        assert secret not in exposition
        logged = [logging.Formatter().format(r) + json.dumps(getattr(r, "fields", {})) for r in records]
        assert not [line for line in logged if secret in line]
        if any(reason == "internal_error" for _, reason in poller.self_metrics.poll_errors):
            assert logged
        await poller.close()

    try:
        run_with_server(fake, body)
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize(("name", "url", "secret"), URLS_WITH_CREDENTIALS, ids=[n for n, _, _ in URLS_WITH_CREDENTIALS])
def test_no_credential_reaches_a_settings_error(name: str, url: str, secret: str) -> None:
    from tidescale.contracts.settings import load_settings
    from tidescale.exporters.settings import ExporterSettings

    try:
        load_settings(ExporterSettings, triton_urls=[url, "ftp://bad"])
    except UsageError as exc:
        assert secret not in str(exc)
    else:
        raise AssertionError("ftp://bad was accepted")


def test_urls_that_differ_only_in_credentials_are_refused() -> None:
    with pytest.raises(UsageError, match="listed twice"):
        TargetSet(["http://a:one@triton:8000", "http://a:two@triton:8000"])
    assert len(TargetSet(["http://triton:8000", "http://triton:8000/"]).targets()) == 1


# --- issue 43 #20: redirects are never followed ---------------------------------------------------


@pytest.mark.parametrize(("moved_paths", "series"), [(("/v2/models/stats", "/v2"), 0), (("/v2",), 1)])
def test_redirects_are_counted_not_followed(moved_paths: tuple[str, ...], series: int) -> None:
    fake = FakeTriton(models=1)
    followed: list[str] = []

    async def elsewhere(request: web.Request) -> web.Response:
        followed.append(request.path)
        return web.Response(body=synthetic_stats(1, 0), content_type="application/json")

    async def moved(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"/elsewhere{request.path}")

    def app() -> web.Application:
        app = web.Application()
        for path in ("/v2", "/v2/models/stats"):
            app.router.add_get(path, moved if path in moved_paths else elsewhere)
            app.router.add_get(f"/elsewhere{path}", elsewhere)
        return app

    fake.app = app  # type: ignore[method-assign]

    async def body(port: int) -> None:
        url = f"http://127.0.0.1:{port}"
        poller = StatsPoller(TargetSet([url]))
        await poller.poll_once()
        assert [p for p in followed if p.startswith("/elsewhere")] == []
        assert poller.series_count() == series
        assert dict(poller.self_metrics.poll_errors) == {(url, "redirect"): 1}
        await poller.close()

    run_with_server(fake, body)


# --- issue 43 #5: each batch counted once; long names that cut alike stay apart --------------------

LONG = "ranker_" + "x" * 130  # 137 characters: cut to the 128-character label cap


def entry(name: str, executions: int, version: str = "1") -> dict[str, Any]:
    return {"name": name, "version": version, "execution_count": executions, "inference_count": executions,
            "batch_stats": [{"batch_size": 1, "compute_infer": {"count": executions, "ns": 5 * executions}}]}


def stats(*entries: dict[str, Any]) -> bytes:
    return json.dumps({"model_stats": list(entries)}).encode()


def exported_counts(poller: StatsPoller) -> dict[tuple[str, str], float]:
    reg = CollectorRegistry()
    reg.register(poller)
    return {(s.labels["model"], s.labels["version"]): s.value for fam in reg.collect() for s in fam.samples
            if s.name == "tidescale_batch_size_count"}


@pytest.mark.parametrize("doc", [
    stats(entry(LONG + "_a", 140), entry(LONG + "_b", 0)),  # names equal in their first 137 characters
    stats(entry("resnet", 140), entry("resnet", 0)),  # one model version listed twice
    stats(entry("resnet", 0), entry("resnet", 140), entry("resnet", 7)),
], ids=["cut-alike", "duplicated", "duplicated-thrice"])
def test_an_idle_triton_adds_nothing_whatever_its_entries(doc: bytes) -> None:
    fake = FakeTriton(stats_body=lambda h, n: doc, max_batch_size=8)

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]))
        await poller.poll_once()
        first = exported_counts(poller)
        for _ in range(5):
            await poller.poll_once()
        assert exported_counts(poller) == first  # idle: nothing executed, nothing added
        await poller.close()

    run_with_server(fake, body)


def test_names_that_cut_alike_are_two_series_with_their_own_counts() -> None:
    doc = stats(entry(LONG + "_a", 140), entry(LONG + "_b", 3))
    fake = FakeTriton(stats_body=lambda h, n: doc)

    async def body(port: int) -> None:
        poller = StatsPoller(TargetSet([f"http://127.0.0.1:{port}"]))
        for _ in range(3):
            await poller.poll_once()
        counts = exported_counts(poller)
        assert sorted(counts.values()) == [3, 140]
        assert all(len(model) <= 128 and model.startswith(LONG[:100]) for model, _ in counts)
        assert not poller.self_metrics.poll_errors
        await poller.close()

    run_with_server(fake, body)


def test_a_repeated_entry_is_refused_and_counted() -> None:
    doc = stats(entry("resnet", 140), entry("resnet", 0), entry("bert", 2))
    fake = FakeTriton(stats_body=lambda h, n: doc)

    async def body(port: int) -> None:
        url = f"http://127.0.0.1:{port}"
        poller = StatsPoller(TargetSet([url]))
        for _ in range(3):
            await poller.poll_once()
        assert exported_counts(poller) == {("resnet", "1"): 140, ("bert", "1"): 2}  # the first entry wins
        assert dict(poller.self_metrics.poll_errors) == {(url, "duplicate_model"): 3}  # one a poll
        await poller.close()

    run_with_server(fake, body)


NAMES = st.sampled_from(["resnet", "bert", "a\x00", "a\x01", "a?", LONG + "_a", LONG + "_b", LONG[:128], LONG])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(NAMES, st.sampled_from(["1", "2"]), st.integers(0, 10**6)), max_size=8),
       st.integers(2, 5))
def test_fuzz_repeated_polls_of_the_same_stats_add_nothing(entries: list[tuple[str, str, int]], polls: int) -> None:
    """Whatever the entries (repeated, cut or cleaned alike), polling an idle server adds nothing, and
    each exported series counts the executions of the first entry with its labels."""
    models = parse_stats(stats(*(entry(n, e, v) for n, v, e in entries)))
    poller = StatsPoller(TargetSet(["http://triton:8000"]))
    target = Target("http://triton:8000")
    for t in range(polls):
        poller._update(target, models, float(t))
    expected: dict[tuple[str, str], float] = {}
    for m in models:
        expected.setdefault((clean_label_value(m.name), clean_label_value(m.version)), m.execution_count)
    assert exported_counts(poller) == expected
