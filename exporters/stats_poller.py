"""Poll every target's `/v2/models/stats` and export batch sizes, batching efficiency,
estimated queue depth and model memory.

One aiohttp session (the HTTP engine of tritonclient's aio client) is shared by all
targets, with at most `concurrency` requests in flight and `timeout_s` per target poll;
response bodies are capped. Each (target, model, version) keeps the previous poll's
cumulative statistics so the exported histogram grows by deltas that survive counter
resets; the number of such series is capped (`max_series`, refusals counted). Series of
models that disappear from a target, and of targets that vanish, are dropped.

No target and no response can stop the loop: every failure of one target's poll, expected
(timeout, HTTP status, malformed or too-deep JSON) or not, is counted as a poll error of that
target with a reason, and the next cycle polls it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote, urlsplit

import aiohttp
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from tidescale.contracts import catalog, jsonio
from tidescale.contracts.heartbeat import Heartbeat
from tidescale.contracts.redact import redact_urls
from tidescale.exporters.buckets import BucketHistogram
from tidescale.exporters.cardinality import SeriesCap, clean_label_value
from tidescale.exporters.errors import BadInput
from tidescale.exporters.selfmetrics import SelfMetrics
from tidescale.exporters.targets import Target, TargetSet
from tidescale.exporters.tritonstats import (
    MAX_BODY_BYTES,
    MemoryUsage,
    ModelStats,
    batch_deltas,
    batching_efficiency,
    is_reset,
    parse_stats,
    queue_depth_estimate,
)

log = logging.getLogger(__name__)

BATCH_BUCKETS = (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 192.0,
                 256.0, 512.0, 1024.0)
DEFAULT_MAX_SERIES = 20_000
MAX_CONFIGS_PER_POLL = 64
# nv_inference_pending_request_count exists from Triton 23.08 (server 2.37) on.
PENDING_GAUGE_SINCE = (2, 37)
QueueEstimate = Literal["auto", "always", "never"]
SeriesKey = tuple[str, str, str]  # target url, model label, version label


class _HttpStatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status

    @property
    def reason(self) -> str:
        """The poll-error reason: `redirect` for a 3xx (never followed), else `http_<status>`."""
        return "redirect" if 300 <= self.status < 400 else f"http_{self.status}"


@dataclass
class _Series:
    """One (target, model, version): previous stats and the exported values."""

    labels: tuple[str, str, str, str]  # model, version, namespace, pod
    hist: BucketHistogram = field(default_factory=lambda: BucketHistogram(BATCH_BUCKETS))
    prev: ModelStats | None = None
    prev_t: float = 0.0
    max_batch_size: int | None = None
    efficiency: float | None = None
    queue_depth: float | None = None
    memory: tuple[MemoryUsage, ...] = ()


@dataclass
class _TargetState:
    server_version: tuple[int, ...] | None = None
    keys: set[SeriesKey] = field(default_factory=set)
    duplicates_logged: bool = False


def series_key(target: Target, model: ModelStats) -> SeriesKey:
    """A model version's series key: its labels as exported, so two entries that would export the
    same series (a repeated entry, names that clean alike) are one key, and only one is kept."""
    return target.url, clean_label_value(model.name), clean_label_value(model.version)


def parse_version(text: str) -> tuple[int, ...] | None:
    """'2.51.0' → (2, 51, 0); None when it is not a dotted version."""
    parts = text.strip().split(".")
    try:
        return tuple(int(p) for p in parts[:3])
    except ValueError:
        return None


def target_labels(target: Target) -> tuple[str, str]:
    """(namespace, pod) labels; a static URL's pod label is its host:port so series stay distinct
    (never its user and password: /metrics needs no token)."""
    pod = target.pod if target.pod is not None else urlsplit(target.url).netloc.rpartition("@")[2]
    return clean_label_value(target.namespace or ""), clean_label_value(pod)


class StatsPoller(Collector):
    """Polls Triton statistics; a prometheus-client Collector of the derived metrics."""

    def __init__(self, targets: TargetSet, *, interval_s: float = 5.0, concurrency: int = 64,
                 timeout_s: float = 2.0, max_series: int = DEFAULT_MAX_SERIES,
                 queue_estimate: QueueEstimate = "auto", max_body_bytes: int = MAX_BODY_BYTES,
                 self_metrics: SelfMetrics | None = None, clock: Callable[[], float] = time.monotonic,
                 on_requests: Callable[[tuple[str, str, str, str], float, float], None] | None = None,
                 heartbeat: Heartbeat | None = None) -> None:
        if interval_s <= 0 or concurrency < 1 or timeout_s <= 0:
            raise ValueError("interval_s and timeout_s must be positive and concurrency at least 1")
        self.targets = targets
        self.interval_s = interval_s
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.queue_estimate = queue_estimate
        self.max_body_bytes = max_body_bytes
        self.self_metrics = self_metrics or SelfMetrics()
        self._clock = clock
        # Told every poll's cumulative requests (success + failure) per (namespace, pod, model, version):
        # the trace-rate detector's denominator.
        self.on_requests = on_requests
        self.heartbeat = heartbeat  # beats after each round: a round that never ends fails liveness
        self._cap = SeriesCap(max_series)
        self._lock = threading.Lock()
        self._series: dict[SeriesKey, _Series] = {}
        self._targets: dict[str, _TargetState] = {}
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._stopped = asyncio.Event()
        targets.on_change(self._targets_changed)

    # --- polling ------------------------------------------------------------------------------------

    async def poll_once(self) -> None:
        """Poll every current target once, concurrently."""
        session = self._get_session()
        sem = asyncio.Semaphore(self.concurrency)
        current = self.targets.targets()
        self.self_metrics.set_targets(len(current))
        await asyncio.gather(*(self._poll_target(t, session, sem) for t in current))

    async def run(self) -> None:
        """Poll every `interval_s` until `stop()` (a slow cycle starts the next one at once)."""
        try:
            while not self._stopped.is_set():
                start = time.monotonic()
                await self.poll_once()
                if self.heartbeat is not None:
                    self.heartbeat.beat()
                delay = max(0.0, self.interval_s - (time.monotonic() - start))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), delay)
        finally:
            await self.close()

    def stop(self) -> None:
        self._stopped.set()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            # No pool-wide limit: the semaphore bounds requests in flight, and every target keeps
            # its keep-alive connection (a pool of `concurrency` would reconnect to most targets
            # on every cycle).
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=2, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(connector=connector, raise_for_status=False,
                                                  timeout=aiohttp.ClientTimeout(total=self.timeout_s))
            self._session_loop = loop
        return self._session

    async def _get_json_bytes(self, session: aiohttp.ClientSession, url: str) -> bytes:
        # Never a redirect: a target answers for itself, and what another URL serves (any host the
        # answer names) must not be exported under the target's labels.
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status != 200:
                raise _HttpStatusError(resp.status)
            if (resp.content_length or 0) > self.max_body_bytes:
                raise BadInput(502, f"response larger than {self.max_body_bytes} bytes")
            buf = bytearray()
            async for chunk in resp.content.iter_chunked(1 << 16):
                buf += chunk
                if len(buf) > self.max_body_bytes:
                    raise BadInput(502, f"response larger than {self.max_body_bytes} bytes")
            return bytes(buf)

    async def _poll_target(self, target: Target, session: aiohttp.ClientSession, sem: asyncio.Semaphore) -> None:
        reason: str | None = None
        async with sem:
            start = time.perf_counter()
            try:
                async with asyncio.timeout(self.timeout_s):
                    models = parse_stats(await self._get_json_bytes(session, f"{target.url}/v2/models/stats"))
                    sizes = await self._fetch_metadata(target, models, session)
                self._update(target, models, self._clock(), sizes)
            except TimeoutError:
                reason = "timeout"
            except _HttpStatusError as exc:
                reason = exc.reason
            except (BadInput, ValueError, RecursionError):
                reason = "bad_response"
            except (aiohttp.ClientError, OSError):
                reason = "connect"
            except Exception as exc:  # a bug must cost one target one cycle, never the poller
                reason = "internal_error"
                log.warning("poll of %s failed: %s: %s", target.label, type(exc).__name__,
                            redact_urls(str(exc))[:200], extra={"fields": {"target": target.label}})
            elapsed = time.perf_counter() - start
        self.self_metrics.observe_poll(target.label, elapsed, reason)

    async def _fetch_metadata(self, target: Target, models: list[ModelStats], session: aiohttp.ClientSession
                              ) -> dict[tuple[str, str], int]:
        """Server version (once per target) and max_batch_size (once per model version)."""
        with self._lock:
            state = self._targets.setdefault(target.url, _TargetState())
            need_version = self.queue_estimate == "auto" and state.server_version is None
            # Only admitted series need a config (efficiency needs two polls anyway), and at most
            # MAX_CONFIGS_PER_POLL per target per cycle so a server with many models cannot stall one.
            need_config = [m for m in models
                           if (s := self._series.get(series_key(target, m))) is not None
                           and s.max_batch_size is None][:MAX_CONFIGS_PER_POLL]
        if need_version:
            state.server_version = await self._server_version(session, target)
        sizes = {}
        for m in need_config:
            sizes[(m.name, m.version)] = await self._max_batch_size(session, target, m)
        return sizes

    async def _server_version(self, session: aiohttp.ClientSession, target: Target) -> tuple[int, ...]:
        """The server version, () when unknown (then the queue is estimated); a malformed answer
        is counted as a `bad_metadata` poll error."""
        try:
            meta = _loads(await self._get_json_bytes(session, f"{target.url}/v2"))
            version = parse_version(str(meta.get("version", ""))[:64]) if isinstance(meta, dict) else None
        except BadInput:
            self.self_metrics.count_poll_error(target.label, "bad_metadata")
            version = None
        except _HttpStatusError as exc:
            self._count_redirect(target, exc)
            version = None
        except aiohttp.ClientError:
            version = None
        return version or ()

    async def _max_batch_size(self, session: aiohttp.ClientSession, target: Target, model: ModelStats) -> int:
        """The model's max_batch_size (0: no batching, or the config could not be read; a malformed
        config is counted as a `bad_metadata` poll error)."""
        path = f"/v2/models/{quote(model.name, safe='')}/versions/{quote(model.version, safe='')}/config"
        try:
            config = _loads(await self._get_json_bytes(session, target.url + path))
            value = config.get("max_batch_size", 0) if isinstance(config, dict) else 0
            return int(value) if isinstance(value, int | str) and str(value).isascii() and str(value).isdigit() else 0
        except BadInput:
            self.self_metrics.count_poll_error(target.label, "bad_metadata")
            return 0
        except _HttpStatusError as exc:
            self._count_redirect(target, exc)
            return 0
        except aiohttp.ClientError:
            return 0

    def _count_redirect(self, target: Target, exc: _HttpStatusError) -> None:
        """A metadata answer that redirects is counted (other statuses only leave the value unknown):
        a redirect is never followed, so it is a misconfiguration to see, not a missing endpoint."""
        if exc.reason == "redirect":
            self.self_metrics.count_poll_error(target.label, "redirect")

    # --- state --------------------------------------------------------------------------------------

    def _estimates_queue(self, state: _TargetState) -> bool:
        if self.queue_estimate != "auto":
            return self.queue_estimate == "always"
        return not state.server_version or state.server_version[:2] < PENDING_GAUGE_SINCE

    def _update(self, target: Target, models: list[ModelStats], now: float,
                sizes: dict[tuple[str, str], int] | None = None) -> None:
        """Fold one poll's statistics (and newly read max_batch_sizes) into the series of *target*.

        Each series folds one entry a poll: a later entry with the same labels (Triton listing a
        model version twice, two long names that cut alike) is refused and counted as a
        `duplicate_model` poll error. Folded into the same series, two entries would each read as
        the other's next poll, and every poll would add one's whole count again (an idle histogram
        grew 140 a poll).
        """
        namespace, pod = target_labels(target)
        sizes = sizes or {}
        duplicates: list[SeriesKey] = []
        with self._lock:
            state = self._targets.setdefault(target.url, _TargetState())
            estimate = self._estimates_queue(state)
            seen: set[SeriesKey] = set()
            for m in models:
                key = series_key(target, m)
                if key in seen:
                    duplicates.append(key)
                    continue
                series = self._series.get(key)
                if series is None:
                    if not self._cap.admit(key):
                        self.self_metrics.drop_series(catalog.get("tidescale_batch_size").name)
                        continue
                    series = self._series[key] = _Series((key[1], key[2], namespace, pod))
                if (m.name, m.version) in sizes:
                    series.max_batch_size = sizes[(m.name, m.version)]
                seen.add(key)
                self._fold(series, m, now, estimate)
                if self.on_requests is not None:
                    self.on_requests((namespace, pod, series.labels[0], series.labels[1]),
                                     float(m.success.count + m.fail.count), now)
            for key in state.keys - seen:
                self._drop(key)
            state.keys = seen
            log_duplicate = bool(duplicates) and not state.duplicates_logged
            state.duplicates_logged |= log_duplicate
        if duplicates:
            self.self_metrics.count_poll_error(target.label, "duplicate_model", len(duplicates))
        if log_duplicate:
            _, model, version = duplicates[0]
            log.warning("stats of %s list model %r version %r more than once (or two names cut to the same "
                        "label): only the first entry is exported", target.label, model, version,
                        extra={"fields": {"target": target.label, "duplicates": len(duplicates)}})

    @staticmethod
    def _fold(series: _Series, cur: ModelStats, now: float, estimate_queue: bool) -> None:
        prev = series.prev
        idle = prev is not None and prev.execution_count == cur.execution_count and not is_reset(prev, cur)
        if not idle:  # an idle model (the common case) has no batch deltas to fold
            for size, n in batch_deltas(prev, cur).items():
                series.hist.observe(float(size), n)
        if prev is not None:
            series.efficiency = (batching_efficiency(prev, cur, series.max_batch_size)
                                 if series.max_batch_size and not idle else None)
            series.queue_depth = queue_depth_estimate(prev, cur, now - series.prev_t) if estimate_queue else None
        series.memory = cur.memory
        series.prev, series.prev_t = cur, now

    def _drop(self, key: SeriesKey) -> None:
        self._series.pop(key, None)
        self._cap.release(key)

    def _targets_changed(self, added: list[Target], removed: list[Target]) -> None:
        """Forget every series of vanished targets (called by the TargetSet)."""
        with self._lock:
            for target in removed:
                state = self._targets.pop(target.url, None)
                for key in state.keys if state else ():
                    self._drop(key)
        for target in removed:
            self.self_metrics.forget_target(target.label)

    def series_count(self) -> int:
        with self._lock:
            return len(self._series)

    # --- exposition ---------------------------------------------------------------------------------

    def collect(self) -> Iterator[HistogramMetricFamily | GaugeMetricFamily]:
        labels = ["model", "version", "namespace", "pod"]
        hist = HistogramMetricFamily(*_name_help("tidescale_batch_size"), labels=labels)
        eff = GaugeMetricFamily(*_name_help("tidescale_batching_efficiency_ratio"), labels=labels)
        queue = GaugeMetricFamily(*_name_help("tidescale_queue_depth_estimate"), labels=labels)
        mem = GaugeMetricFamily(*_name_help("tidescale_model_memory_bytes"),
                                labels=["model", "version", "kind", "device_id", "namespace", "pod"])
        with self._lock:
            for series in self._series.values():
                lab = list(series.labels)
                hist.add_metric(lab, series.hist.cumulative(), series.hist.total)
                if series.efficiency is not None:
                    eff.add_metric(lab, series.efficiency)
                if series.queue_depth is not None:
                    queue.add_metric(lab, series.queue_depth)
                for usage in series.memory:
                    mem.add_metric([lab[0], lab[1], clean_label_value(usage.kind),
                                    clean_label_value(usage.device_id), lab[2], lab[3]], usage.byte_size)
        yield from (hist, eff, queue, mem)


def _loads(body: bytes) -> Any:
    """JSON of a Triton metadata answer; BadInput(502) when it is not JSON or nests too deep."""
    try:
        return jsonio.loads(body)
    except ValueError as exc:
        raise BadInput(502, f"response is not JSON: {type(exc).__name__}") from None


def _name_help(name: str) -> tuple[str, str]:
    fam = catalog.get(name)
    return fam.name, fam.help
