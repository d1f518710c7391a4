"""The autoscaling policies the benchmark compares, each seeing the fleet the way it would in production.

HPA-driven policies (`hpa-cpu`, `hpa-gpu-util`, `triton-queue-time`, `keda-rps`, `tidescale`) read
Prometheus-scraped counters through `MetricsLag` (15 s scrape, `rate()` windows) and go through
the `HpaEmulator` every 15 s. Knative's KPA and Ray Serve have their own autoscalers reading their
proxies directly (every 2 s); they are emulated from their documented algorithms and defaults.
`static` is no autoscaler at all: a fixed fleet, swept over its size.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tidescale.autoscaler import adapter
from tidescale.autoscaler.hpa import Behavior, HpaSpec, MetricSpec, ScalingPolicy, ScalingRules
from tidescale.autoscaler.manifests import KEDA_POLLING_S, Target, tidescale_hpa_spec
from tidescale.autoscaler.queries import TargetQueries
from tidescale.autoscaler.service import RecommenderService
from tidescale.autoscaler.settings import RecommenderSettings, TargetSettings
from tidescale.contracts.errors import UsageError
from tidescale.sim import FleetSim, MetricsLag
from tidescale.sim.hpa_controller import HpaEmulator, MetricValue, Pod
from tidescale.sim.recommender_io import DemandHistory, SimHpa, SimPods, SimPrometheus, SimScale

HPA_SYNC_S = 15.0
PROXY_TICK_S = 2.0
RATE_WINDOW_S = 60.0
CPU_REQUEST_CORES = 0.5  # the seed Deployment's container CPU request


def tick_after(t: float, period_s: float, offset_s: float) -> float:
    """The first instant offset_s + k x period_s after *t* (one within 1e-9 before it counts as passed):
    where a clock with that period and phase next ticks."""
    return offset_s + period_s * (math.floor((t - offset_s) / period_s + 1e-9) + 1)


class Policy(Protocol):
    """Decides the replica count every `period_s`; the loop applies it with `sim.set_replicas`."""

    name: str
    period_s: float

    def decide(self, now: float, lag: MetricsLag, sim: FleetSim) -> int: ...


def pods_of(sim: FleetSim) -> list[Pod]:
    """The Deployment's pods as the HPA sees them (starting pods are Running, not Ready)."""
    return [Pod(r.name, "Running", r.ready) for r in sim.counters().replicas if not r.draining]


def _per_ready_pod(pods: list[Pod], value: float | None, unready_value: float | None = None
                   ) -> dict[str, float] | None:
    """Spread a fleet total over the Ready pods; not-Ready pods report *unready_value* or nothing."""
    ready = [p for p in pods if p.ready]
    if value is None or not ready:
        return None
    out = {p.name: value / len(ready) for p in ready}
    if unready_value is not None:
        out.update({p.name: unready_value for p in pods if not p.ready})
    return out


MetricFn = Callable[[MetricsLag, list[Pod]], dict[str, MetricValue]]


@dataclass
class HpaPolicy:
    """A policy that is just an HPA spec plus how its metric is computed from scraped counters."""

    name: str
    spec: HpaSpec
    metrics: MetricFn
    initial: int
    period_s: float = HPA_SYNC_S

    def __post_init__(self) -> None:
        self.hpa = HpaEmulator(self.spec, self.initial)

    def decide(self, now: float, lag: MetricsLag, sim: FleetSim) -> int:
        pods = pods_of(sim)
        return self.hpa.step(now, self.metrics(lag, pods), pods)


def hpa_cpu(initial: int, min_r: int, max_r: int, target_pct: float = 70.0,
            behavior: Behavior | None = None) -> HpaPolicy:
    """CPU utilisation of the request, no behavior (the seed Deployment used 70 %)."""
    spec = HpaSpec(min_r, max_r, (MetricSpec("Resource", "cpu", "Utilization", target_pct),), behavior)

    def metrics(lag: MetricsLag, pods: list[Pod]) -> dict[str, MetricValue]:
        cores, total = lag.rate("cpu_seconds", RATE_WINDOW_S), lag.gauge("replicas_total")
        if cores is None or not total:
            return {"cpu": None}
        return {"cpu": {p.name: cores / total / CPU_REQUEST_CORES for p in pods}}

    return HpaPolicy("hpa-cpu", spec, metrics, initial)


def hpa_gpu_util(initial: int, min_r: int, max_r: int, target: float = 0.8,
                 behavior: Behavior | None = None) -> HpaPolicy:
    """DCGM GPU utilisation (duty cycle, 0–1) as a Pods metric; loading pods' GPUs read 0."""
    spec = HpaSpec(min_r, max_r, (MetricSpec("Pods", adapter.GPU_UTILIZATION, "AverageValue", target),), behavior)

    def metrics(lag: MetricsLag, pods: list[Pod]) -> dict[str, MetricValue]:
        return {adapter.GPU_UTILIZATION: _per_ready_pod(pods, lag.rate("busy_seconds", RATE_WINDOW_S), 0.0)}

    return HpaPolicy("hpa-gpu-util", spec, metrics, initial)


def triton_queue_time(initial: int, min_r: int, max_r: int, target_us: float = 50.0,
                      behavior: Behavior | None = None) -> HpaPolicy:
    """Triton's k8s-onprem example: avg queue µs per pod over 30 s with the `1+` denominator (its target: 50)."""
    spec = HpaSpec(min_r, max_r, (MetricSpec("Pods", "avg_time_queue_us", "AverageValue", target_us),), behavior)

    def metrics(lag: MetricsLag, pods: list[Pod]) -> dict[str, MetricValue]:
        q, n = lag.rate("queue_duration_s", 30.0), lag.rate("requests", 30.0)
        ready = [p for p in pods if p.ready]
        if q is None or n is None or not ready:
            return {"avg_time_queue_us": None}
        per_pod = (q * 30 * 1e6 / len(ready)) / (1 + n * 30 / len(ready))
        return {"avg_time_queue_us": {p.name: per_pod for p in ready}}

    return HpaPolicy("triton-queue-time", spec, metrics, initial)


def keda_rps(initial: int, min_r: int, max_r: int, rps_per_pod: float = 500.0,
             behavior: Behavior | None = None) -> HpaPolicy:
    """KEDA prometheus trigger on the arrivals, a threshold in req/s per pod (AverageValue). The query an
    expert writes counts what the queue policy turned away too (`nv_inference_request_success` plus
    `nv_inference_request_failure{reason="REJECTED"}`): completions alone fall as the fleet saturates."""
    spec = HpaSpec(min_r, max_r, (MetricSpec("External", "s0-prometheus", "AverageValue", rps_per_pod),), behavior)

    def metrics(lag: MetricsLag, pods: list[Pod]) -> dict[str, MetricValue]:
        done, rejected = lag.rate("requests", RATE_WINDOW_S), lag.rate("failures", RATE_WINDOW_S)
        return {"s0-prometheus": None if done is None else done + (rejected or 0.0)}

    return HpaPolicy("keda-rps", spec, metrics, initial)


class ConcurrencyProbe:
    """In-flight requests as a proxy sees them, averaged over each interval between samples (Knative's
    queue-proxy and Ray's handles report averages, not instants): Little's law on the completions,
    the time they spent in the server (queued and executing) per second.

    Before, the queue was added on top: the durations already hold the time spent queued, so a queue
    counted twice and the proxies scaled on about twice the load under any backlog, a safety factor
    that moved their best settings. Requests still queued count once they complete, within the
    queue policy's timeout; an instant count of the outstanding ones read every 2 s instead swung
    with each burst of the Azure trace (KPA's panic window holds three samples) and cost KPA 4.4x
    the oracle there instead of 1.9x."""

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None

    def sample(self, sim: FleetSim) -> float | None:
        """None until two samples exist (a rate needs an interval)."""
        c = sim.counters()
        now, dur = sim.now, c.request_duration_s
        prev, self._last = self._last, (now, dur)
        if prev is None or now <= prev[0]:
            return None
        return (dur - prev[1]) / (now - prev[0])


class ConcurrencyWindow:
    """Proxy concurrency samples over the last `window_s`, as KPA and Ray Serve keep them."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.samples: deque[tuple[float, float]] = deque()
        self.probe = ConcurrencyProbe()
        self.first: float | None = None

    def sample(self, now: float, sim: FleetSim) -> bool:
        """Record one sample; False while no rate can be formed yet."""
        value = self.probe.sample(sim)
        if value is None:
            return False
        self.samples.append((now, value))
        self.first = now if self.first is None else self.first
        while self.samples and self.samples[0][0] <= now - self.window_s:
            self.samples.popleft()
        return True

    def mean(self, now: float, window_s: float | None = None) -> float:
        span = self.window_s if window_s is None else window_s
        vals = [v for t, v in self.samples if t > now - span]
        return sum(vals) / len(vals) if vals else 0.0


class KnativeKpa:
    """Knative KPA: concurrency target × target utilisation (70 %), 60 s stable / 6 s panic windows, panic at 200 %.

    Its requests go through the activator (in the path while spare capacity is under the target burst
    capacity, 200 by default: a fleet this size always), which sends each to a pod with room,
    i.e. least-loaded routing, not the Service's round robin."""

    name = "knative-kpa"
    period_s = PROXY_TICK_S
    routing = "least-loaded"

    def __init__(self, initial: int, min_r: int, max_r: int, container_concurrency: float = 32.0,
                 utilisation: float = 0.7, stable_s: float = 60.0, panic_s: float = 6.0,
                 panic_threshold: float = 2.0, max_scale_down_rate: float = 2.0) -> None:
        self.target = container_concurrency * utilisation
        self.min_r, self.max_r = min_r, max_r
        self.stable_s, self.panic_s = stable_s, panic_s
        self.panic_threshold, self.max_down = panic_threshold, max_scale_down_rate
        self.window = ConcurrencyWindow(stable_s)
        self.current = initial
        self.panic_until: float | None = None

    def decide(self, now: float, lag: MetricsLag, sim: FleetSim) -> int:
        if not self.window.sample(now, sim):
            return self.current
        ready = max(1, sim.replicas_ready)
        stable = math.ceil(self.window.mean(now) / self.target)
        panic = math.ceil(self.window.mean(now, self.panic_s) / self.target)
        if panic / ready >= self.panic_threshold:
            self.panic_until = now + self.stable_s
        if self.panic_until is not None and now < self.panic_until:
            desired = max(panic, self.current)  # never scale down while panicking
        elif now - (self.window.first or now) < self.stable_s:
            desired = max(stable, self.current)  # no scale-down before a full stable window of data
        else:
            self.panic_until = None
            desired = max(stable, math.ceil(ready / self.max_down))
        self.current = max(self.min_r, min(self.max_r, desired))
        return self.current


class RayServe:
    """Ray Serve: target ongoing requests per replica (docs default 2), 30 s upscale / 600 s downscale delay."""

    name = "ray-serve"
    period_s = PROXY_TICK_S
    routing = "least-loaded"  # Ray Serve's router: power of two choices on the replicas' queue lengths

    def __init__(self, initial: int, min_r: int, max_r: int, target_ongoing: float = 2.0,
                 look_back_s: float = 30.0, upscale_delay_s: float = 30.0, downscale_delay_s: float = 600.0) -> None:
        self.target = target_ongoing
        self.up_delay, self.down_delay = upscale_delay_s, downscale_delay_s
        self.min_r, self.max_r = min_r, max_r
        self.window = ConcurrencyWindow(look_back_s)
        self.current = initial
        self.up_since: float | None = None
        self.down_since: float | None = None

    def decide(self, now: float, lag: MetricsLag, sim: FleetSim) -> int:
        if not self.window.sample(now, sim):
            return self.current
        ongoing = self.window.mean(now)
        desired = max(self.min_r, min(self.max_r, math.ceil(ongoing / self.target)))
        if desired > self.current:
            self.down_since = None
            self.up_since = now if self.up_since is None else self.up_since
            if now - self.up_since >= self.up_delay:
                self.current, self.up_since = desired, None
        elif desired < self.current:
            self.up_since = None
            self.down_since = now if self.down_since is None else self.down_since
            if now - self.down_since >= self.down_delay:
                self.current, self.down_since = desired, None
        else:
            self.up_since = self.down_since = None
        return self.current


def shipped_settings(sizing: str | None = None, **fields: Any) -> RecommenderSettings:
    """The service's settings as shipped, with *fields*, and *sizing* instead of the shipped one (None:
    as shipped): what the benchmark runs and what its pages record, whatever the environment says."""
    settings = RecommenderSettings.shipped(**fields)
    if sizing is not None:
        settings.tuning.sizing = sizing  # type: ignore[assignment]
    return settings


class TidescalePolicy:
    """The recommender service itself, feeding the HPA it renders (External AverageValue 1, tolerance 0).

    The service is built as it ships (`RecommenderSettings`, the shipped defaults) and run by its own
    `tick`: the fast path every `fast_path.interval_s` over the pods it discovered at its last
    evaluation, the evaluation every `interval_s` with its holds and fail-safes. It reads Prometheus
    and the pods through the simulator (`tidescale.sim.recommender_io`): scraped series one scrape
    late, each pod's counters as its `/metrics` shows them now. Its answer reaches the HPA one scrape
    of the recommender later (`publish_delay_s`: its ServiceMonitor's interval; the adapter then
    serves it). `direct` replaces the HPA: the service writes the scale subresource itself, at once.
    Its seasonal forecast reads *history* (the demand of the days before the run, a sample a minute),
    then what the run's scrapes show; *forecast_periods* () turns it off, as `forecast.enabled` does
    (None: the shipped periods). *sizing* replaces the shipped `tuning.sizing` (`--sizing`).
    *overrides* are the chart's `recommender.settings` where a run installs its own (the demo's story).
    *budget_shares* are the load test's latency-vs-load curve (`recommender.settings.budget_shares`):
    only queue sizing reads them.
    """

    name = "tidescale"

    def __init__(self, initial: int, min_r: int, max_r: int, capacity_rps: float, cold_start_s: float,
                 slo_s: float, *, publish_delay_s: float, headroom: float = 1.0,
                 fast_path: bool | None = None, direct: bool = False, sync_offset_s: float = 0.0,
                 client_retries: int = 0, forecast_periods: tuple[float, ...] | None = None,
                 history: Sequence[tuple[float, float]] = (), sizing: str | None = None,
                 overrides: Mapping[str, Any] | None = None,
                 budget_shares: Sequence[tuple[float, float]] = ()) -> None:
        target = Target("triton", "bench", "model", min_r, max_r)
        self.hpa = HpaEmulator(tidescale_hpa_spec(target), initial)
        fields: dict[str, Any] = {
            "cold_start_s": cold_start_s, "headroom": headroom, "slo_latency_threshold_s": slo_s,
            "client_retries": client_retries, **({"budget_shares": list(budget_shares)} if budget_shares else {}),
            **(overrides or {}),
            # what the loop itself decides: its one target, its delivery, no Kubernetes Events
            "kube_events": False, "scale_mode": "direct" if direct else "hpa",
            "targets": [TargetSettings(deployment="triton", namespace="bench", model="model", min_replicas=min_r,
                                       max_replicas=max_r, capacity_rps=capacity_rps)]}
        settings = shipped_settings(sizing, **fields)
        if fast_path is not None:  # None: as shipped
            settings.fast_path.enabled = fast_path
        if forecast_periods is not None:
            settings.forecast.enabled = bool(forecast_periods)
            settings.forecast.periods_s = list(forecast_periods) or settings.forecast.periods_s
        [target_settings] = settings.targets
        config = settings.config_for(target_settings)
        queries = TargetQueries.for_target(target_settings, settings.tuning, slo_s=slo_s, forecast=settings.forecast,
                                           cold_start_s=settings.cold_start_s)
        self.prometheus = SimPrometheus(queries, config, slo_s, DemandHistory(history))
        self.pods = SimPods()
        self.scale = SimScale(initial)
        self.hpa_api = SimHpa()
        self.now = 0.0
        self.ready = 0
        self.service = RecommenderService(settings, client=self.prometheus, replicas_fn=self._replicas,
                                          clock=lambda: self.now, reader=self.pods,
                                          scaler=self.scale if direct else None,
                                          hpas=None if direct else self.hpa_api)
        [self.state] = self.service.states.values()
        self.published: deque[tuple[float, int]] = deque()
        self.publish_delay = 0.0 if direct else publish_delay_s
        self.period_s = settings.fast_path.interval_s if settings.fast_path.enabled else settings.interval_s
        self.direct = direct
        self.keda_reads = not direct and publish_delay_s == 0  # KEDA's metrics-api asks `/desired` at each sync
        # ... and KEDA's operator polls it too, every pollingInterval, on a phase of its own: half a sync
        # from the HPA's, the two grids as far apart as they can be (the read clock's worst case).
        self._poll_offset_s = sync_offset_s + HPA_SYNC_S / 2
        self._next_poll = -math.inf
        self.current = initial
        self._sync_offset_s = sync_offset_s  # the HPA syncs at this offset + k x HPA_SYNC_S
        self._next_sync = -math.inf

    def _replicas(self, _target: TargetSettings) -> tuple[int, int]:
        """(spec, Ready) replicas, as kube-state-metrics reports them."""
        return self.current, self.ready

    def decide(self, now: float, lag: MetricsLag, sim: FleetSim) -> int:
        self.now, self.pods.sim = now, sim
        ready = lag.gauge("replicas_ready")
        self.ready = int(ready) if ready is not None else 0
        self.prometheus.bind(now, lag, sim)
        self.prometheus.follow(self.state.queries)
        self.service.tick(now)
        if self.direct:
            self.current = self.scale.replicas
            return self.current
        published = self.state.published
        if published is not None and (not self.published or self.published[-1][1] != published):
            self.published.append((now, published))
        seen_at = now - self.publish_delay
        while len(self.published) > 1 and self.published[1][0] <= seen_at:
            self.published.popleft()
        visible = self.published[0][1] if self.published and self.published[0][0] <= seen_at else None
        if self.keda_reads and now >= self._next_poll - 1e-9:
            self._next_poll = tick_after(now, KEDA_POLLING_S, self._poll_offset_s)
            self.state.hpa_reads.observe(now)
        if now >= self._next_sync - 1e-9:  # at the first tick at or after each of the HPA's syncs
            self._next_sync = tick_after(now, HPA_SYNC_S, self._sync_offset_s)
            if self.keda_reads:
                self.state.hpa_reads.observe(now)  # as `/desired` notes KEDA's read
            before, self.current = self.current, self.hpa.step(now, {adapter.DESIRED_REPLICAS: visible}, pods_of(sim))
            if self.current != before:
                self.hpa_api.scaled_at = now
        return self.current


class StaticFleet:
    """No autoscaler: N replicas, always (within the scenario's min and max). The yardstick every
    autoscaler has to beat: swept over N, its best point is what standing capacity alone buys."""

    name = "static"
    period_s = HPA_SYNC_S

    def __init__(self, replicas: float, min_r: int, max_r: int) -> None:
        self.replicas = max(min_r, min(max_r, round(replicas)))

    def decide(self, now: float, lag: MetricsLag, sim: FleetSim) -> int:
        return self.replicas


def lookahead_slots(ahead_s: float, slot_s: float, period_s: float = HPA_SYNC_S) -> int:
    """Slots an oracle deciding every *period_s* looks ahead so that a replica it asks for now, taking
    *ahead_s* to start, serves from the first slot that needs it."""
    return math.ceil((ahead_s + period_s) / slot_s)


class Oracle:
    """Perfect foresight: at t it asks for the highest level *needed* sets for the next start + one sync
    (the benchmark's levels come from `optimum.cheapest_schedule`)."""

    name = "oracle"
    period_s = HPA_SYNC_S

    def __init__(self, needed: list[int], slot_s: float, cold_start_s: float, min_r: int, max_r: int) -> None:
        self.needed, self.slot_s = needed, slot_s
        self.ahead = lookahead_slots(cold_start_s, slot_s, self.period_s)
        self.min_r, self.max_r = min_r, max_r

    def decide(self, now: float, lag: MetricsLag, sim: FleetSim) -> int:
        k = int(now // self.slot_s)
        window = self.needed[k: k + self.ahead + 1] or [self.min_r]
        return max(self.min_r, min(self.max_r, max(window)))


@dataclass(frozen=True)
class PeerKnob:
    """A peer's main setting: what an expert would sweep, what its documentation recommends, and what
    earlier runs used. A peer judged at one setting that cannot fit the model says nothing about the
    peer, so every peer is run over its sweep and judged by its best point."""

    knob: str  # what the setting is (for the page)
    unit: str
    fixed: float  # the single setting of `--no-sweep` (the seed deployment's, as before the sweeps)
    documented: float  # the documentation's recommendation (always in the sweep)
    sweep: tuple[float, ...]
    low: float  # valid settings are in (low, high]
    high: float
    capacity_fractions: tuple[float, ...] = ()  # more settings: these fractions of the capacity at the SLO

    def settings(self, capacity_rps: float) -> tuple[float, ...]:
        """The default sweep, ascending, with the fixed and the documented setting in it."""
        extra = tuple(float(round(f * capacity_rps)) for f in self.capacity_fractions)
        return tuple(sorted({*self.sweep, *extra, self.fixed, self.documented}))

    def valid(self, value: float) -> bool:
        return math.isfinite(value) and self.low < value <= self.high

    def describe_range(self) -> str:
        return f"in ({self.low:g}, {self.high:g}]"


KNOBS: dict[str, PeerKnob] = {
    # Kubernetes' HPA walkthrough uses 50 %; the seed deployment used 70 %.
    # (20 and 25: earlier runs found the best point at the grid's edge, 30.)
    "hpa-cpu": PeerKnob("CPU utilisation target", "%", 70.0, 50.0,
                        (20.0, 25.0, 30.0, 35.0, 40.0, 50.0, 70.0, 90.0), 0.0, 1000.0),
    # NVIDIA's GPU-autoscaling examples target a DCGM duty cycle around 0.8.
    "hpa-gpu-util": PeerKnob("GPU utilisation target", "", 0.8, 0.8, (0.5, 0.6, 0.7, 0.8, 0.9, 0.95), 0.0, 1.0),
    # Triton's k8s-onprem example (values.yaml): averageValue 50 µs of avg_time_queue_us.
    "triton-queue-time": PeerKnob("queue-time target", "µs", 50.0, 50.0,
                                  (50.0, 1000.0, 5000.0, 10000.0, 20000.0, 30000.0, 50000.0), 0.0, 60e6),
    # KEDA's prometheus scaler: a per-pod threshold; the seed deployment used 500 req/s.
    "keda-rps": PeerKnob("per-pod rate threshold", "req/s", 500.0, 500.0, (), 0.0, 1e6,
                         capacity_fractions=(0.4, 0.5, 0.7, 0.85, 1.0, 1.2)),  # 0.4: the best was at 0.5
    # Knative: container-concurrency-target-default 100 at target utilisation 70 %; 32 = the max batch.
    "knative-kpa": PeerKnob("container concurrency target (× 70 %)", "", 32.0, 100.0,
                            (1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0, 100.0), 0.0, 1e4),
    # (1, 2: the best was at 4; 12, 24, 48: once the queue no longer counted twice, the best fell between
    # powers of two.)
    # Ray Serve: target_ongoing_requests defaults to 2.
    "ray-serve": PeerKnob("target ongoing requests", "", 2.0, 2.0,
                          (1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0), 0.0, 1e4),
    # No autoscaler: a fixed fleet (4: it costs about what the oracle does on the Azure trace). It is up at the
    # scenario's start: it is set during the warm-up, which lasts at least one cold start.
    "static": PeerKnob("replicas", "", 4.0, 4.0, (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 24.0, 40.0),
                       0.0, 40.0),
}


# The behavior an expert ships with an HPA on an inference fleet, swept as a peer of its own
# (`<peer>+fast`) beside the HPA's defaults (a 300 s scale-down window, at most doubling or +4 pods
# per 15 s, 10 % tolerance): tidescale's own scale-up (11x or +8 pods per 15 s, no window, no
# tolerance), and a 60 s scale-down window (the recommender's own down delay; an HPA reading a raw
# metric has no other hold) at most halving per 30 s, no tolerance.
FAST_BEHAVIOR = Behavior(
    scaleUp=ScalingRules(0, "Max", (ScalingPolicy("Percent", 1000, 15), ScalingPolicy("Pods", 8, 15)), 0.0),
    scaleDown=ScalingRules(60, "Max", (ScalingPolicy("Percent", 50, 30),), 0.0),
)
FAST_SUFFIX = "+fast"


def peer_policy(name: str, setting: float, initial: int, min_r: int, max_r: int) -> Policy:
    """Peer *name* at *setting* of its knob (`KNOBS[name]`); `<hpa peer>+fast` runs with `FAST_BEHAVIOR`."""
    base = name.removesuffix(FAST_SUFFIX)
    if base in HPA_PEERS:
        policy = HPA_PEERS[base](initial, min_r, max_r, setting, FAST_BEHAVIOR if base != name else None)
        policy.name = name
        return policy
    factories: dict[str, Callable[[], Policy]] = {
        "knative-kpa": lambda: KnativeKpa(initial, min_r, max_r, container_concurrency=setting),
        "ray-serve": lambda: RayServe(initial, min_r, max_r, target_ongoing=setting),
        "static": lambda: StaticFleet(setting, min_r, max_r),
    }
    return factories[name]()


HPA_PEERS: dict[str, Callable[[int, int, int, float, Behavior | None], HpaPolicy]] = {
    "hpa-cpu": hpa_cpu, "hpa-gpu-util": hpa_gpu_util, "triton-queue-time": triton_queue_time, "keda-rps": keda_rps}
KNOBS.update({peer + FAST_SUFFIX: KNOBS[peer] for peer in HPA_PEERS})
PEERS = tuple(KNOBS)
ALL_POLICIES = (*PEERS, "tidescale", "oracle")


def check_policies(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in ALL_POLICIES]
    if unknown:
        raise UsageError(f"unknown policy {', '.join(unknown)}; choose from {', '.join(ALL_POLICIES)}")
    return names
