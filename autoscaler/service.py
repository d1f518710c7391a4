"""The recommender service: each target's decision path, from Prometheus and the pods to the published count.

Per target Deployment, a slow evaluation every `interval_s` reads the inputs (`queries.py`), the
`Recommender` (recommend.py) decides, and the service publishes the count, or holds the last good
one when Prometheus is down or a value is missing, NaN or stale (never a scale-down on missing data;
`tidescale_recommender_failsafe{reason}` says why). The fast path reads Triton's own counters from
the pods every `fast_path.interval_s` and only ever raises the count: a panic, or a scale-down the
HPA has not applied yet, withdrawn when the pods read more load than the smaller fleet carries. A
change becomes a Kubernetes Event (`events.py`); in `scale_mode: direct` the service writes the
scale subresource itself, before the Event. Every Kubernetes call has a deadline (`kubeapi.py`).
`tick(now)` runs whichever pass is due; `app.py` serves the state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Iterator
from typing import TypeVar

from tidescale.autoscaler.coldstart import FirstReadyTracker
from tidescale.autoscaler.decisions import UNSCHEDULABLE, decision
from tidescale.autoscaler.events import event_twin_window_s, observation_detail, panic_detail, post_recommendation
from tidescale.autoscaler.fastpath import FastReading, FastWindow
from tidescale.autoscaler.manifests import Target
from tidescale.autoscaler.podreader import PodCounterReader, PodReader, discover_pods
from tidescale.autoscaler.queries import DataProblem, TargetQueries, observe, read_cold_start, value
from tidescale.autoscaler.recommend import Observation, Recommender, asked_replicas, reachable_under_tolerance
from tidescale.autoscaler.settings import RecommenderSettings, TargetSettings
from tidescale.autoscaler.state import TargetState, replica_lag_s
from tidescale.contracts.errors import UsageError
from tidescale.contracts.heartbeat import Heartbeat, stall_after
from tidescale.contracts.kubeapi import EventSeriesApi, HpaApi, ScaleApi, hpa_last_scale_time, scale_spec_replicas
from tidescale.contracts.prometheus import InstantQueries, PrometheusClient, PrometheusUnavailable

log = logging.getLogger(__name__)

FAST, EVALUATION = "fast", "evaluation"
PASSES = (FAST, EVALUATION)  # the order `tick` runs them in when both are due: a panic first

ReplicasFn = Callable[[TargetSettings], tuple[int, int]]
T = TypeVar("T")


def silent_ready_pods(reading: FastReading | None, expected: int) -> tuple[str, ...]:
    """The pods of the fast path's last round that did not answer and may still hold load.

    A pod removed by a scale-down stops answering too, until the next evaluation discovers the pods
    again; it is told apart by the count: when at least *expected* pods answered (the Deployment's
    Ready replicas, or its replica count when that is lower: a scale-down that kube-state-metrics has
    not yet seen through), every pod that should exist answered and the silent ones are gone. Fewer
    answers (a hung pod that is still Ready, still sent requests) keep them all."""
    if reading is None or not reading.missing:
        return ()
    return () if reading.pods - len(reading.missing) >= expected else reading.missing


def kube_read(st: TargetState, what: str, instead: str, read: Callable[[], T]) -> T | None:
    """*read*'s answer, or None when it fails: logged once per run of failures, saying what is done
    *instead*, and once when it works again (a read every evaluation would log every 15 s)."""
    try:
        answer = read()
    except Exception as exc:
        if what not in st.failing_reads:
            log.warning("reading %s failed (%s): %s", what, instead, str(exc)[:200])
        st.failing_reads.add(what)
        return None
    if what in st.failing_reads:
        log.info("reading %s works again", what)
    st.failing_reads.discard(what)
    return answer


class RecommenderService:
    """Every target's decision path: `tick(now)` runs the pass that is due, `snapshot()` shows the state."""

    def __init__(self, settings: RecommenderSettings, client: InstantQueries | None = None,
                 replicas_fn: ReplicasFn | None = None, clock: Callable[[], float] = time.time,
                 events: EventSeriesApi | None = None, reader: PodCounterReader | None = None,
                 scaler: ScaleApi | None = None, hpas: HpaApi | None = None) -> None:
        if not settings.targets:
            raise UsageError("the recommender needs at least one target (recommender.targets in the config file)")
        self.settings = settings
        self.client = client or PrometheusClient(settings.prometheus_url, settings.query_timeout_s,
                                                 auth=settings.prometheus_auth,
                                                 max_answer_bytes=settings.query_max_bytes)
        self.replicas_fn = replicas_fn
        self.clock = clock
        self.events: EventSeriesApi | None = events
        if self.events is None and settings.kube_events:
            from tidescale.contracts.kubeapi import core_v1_api

            self.events = core_v1_api()
        self.started = clock()
        self.states: dict[tuple[str, str], TargetState] = {}
        for t in settings.targets:
            key = (t.namespace, t.deployment)
            if key in self.states:
                raise UsageError(f"target {t.namespace}/{t.deployment} is listed twice")
            names = Target(t.deployment, t.namespace, t.model, t.min_replicas, t.max_replicas, hpa_name=t.hpa_name)
            config = settings.config_for(t)
            queries = self._queries_for(t, settings.cold_start_s)
            self.states[key] = TargetState(t, Recommender(config), queries, names.hpa,
                                           fast=FastWindow(config.panic_window_s, config.client_retries)
                                           if settings.fast_path.enabled else None,
                                           first_ready=FirstReadyTracker(self.started))
        self.scaler: ScaleApi | None = scaler
        if self.scaler is None and settings.scale_mode == "direct":
            from tidescale.contracts.kubeapi import apps_v1_api

            self.scaler = apps_v1_api()
        # The HPA's lastScaleTime, read only where a panic may wait for a confirmation through an HPA
        # (`hpaclock`): created at the first read, so a recommender that never waits needs no such right.
        self.hpas: HpaApi | None = hpas
        self._reads_hpas = settings.scale_mode == "hpa" and (hpas is not None or replicas_fn is None) and any(
            st.recommender.config.panic_confirm_readings > 1 for st in self.states.values())
        fp = settings.fast_path
        self.reader = (reader or PodReader(fp.timeout_s, fp.scheme, fp.path)) if fp.enabled else None
        self._lock = threading.Lock()

        # Beaten by `run_loop` after each round; `/healthz` fails on a stalled one.
        self.evaluation_heartbeat = Heartbeat("evaluation", stall_after(settings.stall_after_s, settings.interval_s))
        self.fast_path_heartbeat = (Heartbeat("fast path", stall_after(settings.stall_after_s, fp.interval_s))
                                    if self.reader is not None else None)
        self.heartbeats = [h for h in (self.evaluation_heartbeat, self.fast_path_heartbeat) if h is not None]
        self._passes: dict[str, tuple[Callable[[float], object], float, Heartbeat]] = {
            EVALUATION: (self.evaluate, settings.interval_s, self.evaluation_heartbeat)}
        if self.fast_path_heartbeat is not None:
            self._passes[FAST] = (self.evaluate_fast, fp.interval_s, self.fast_path_heartbeat)
        self._due = dict.fromkeys(self._passes, -math.inf)  # pass -> when it is next due
        self._lag_s = replica_lag_s(settings.interval_s)

    # --- reading ---------------------------------------------------------------------------------
    def _replicas(self, st: TargetState) -> tuple[int, int]:
        """(spec, Ready) replicas: kube-state-metrics' through Prometheus, the spec count in direct
        mode from the scale subresource itself (`_scale_replicas`)."""
        if self.replicas_fn is not None:
            return self.replicas_fn(st.settings)
        current: float | None = self._scale_replicas(st)
        if current is None:
            current = value(self.client, st.queries.spec_replicas, "spec replicas")
        ready = value(self.client, st.queries.ready_replicas, "ready replicas")
        return int(current or 0), int(ready or 0)

    def _scale_replicas(self, st: TargetState) -> int | None:
        """Direct mode: the count the Deployment holds now, read from the scale subresource the
        service writes. kube-state-metrics' count lags a write by its scrape, and a restart's first
        answer would take a count from before the last scale-down as the fleet: the down delay then
        held it, and writing it to the true, smaller fleet brought up pods nobody needed until the
        delay passed. None outside direct mode or when the read fails (logged once; kube-state-metrics'
        count is read instead, with its checks, `TargetState.replica_disagreement`)."""
        scaler = self.scaler
        if scaler is None or self.settings.scale_mode != "direct":
            return None
        ns, dep = st.settings.namespace, st.settings.deployment
        return kube_read(st, f"the scale of {ns}/{dep}", "kube-state-metrics' count is read instead",
                         lambda: scale_spec_replicas(scaler.read_namespaced_deployment_scale(dep, ns)))

    def hpa_scaled_at(self, st: TargetState) -> float | None:
        """When the HPA that applies the answer last scaled (`status.lastScaleTime`), for the clock of
        its reads (`hpaclock`); None where no panic waits through an HPA, or when the read fails
        (logged once: the clock then knows only what `/desired` shows, and a panic acts at once)."""
        if not self._reads_hpas:
            return None
        ns, name = st.settings.namespace, st.hpa

        def read() -> float | None:
            if self.hpas is None:
                from tidescale.contracts.kubeapi import autoscaling_v2_api

                self.hpas = autoscaling_v2_api()
            return hpa_last_scale_time(self.hpas.read_namespaced_horizontal_pod_autoscaler(name, ns))
        return kube_read(st, f"the HPA {ns}/{name}", "a panic will not wait for a confirmation", read)

    def hpa_replicas(self, st: TargetState) -> tuple[int, int] | None:
        """(current, desired) replicas of the HPA that scales the target, as kube-state-metrics reports
        them; None in direct mode, with the demo's callbacks, or where no HPA is reported."""
        if self.replicas_fn is not None or self.settings.scale_mode != "hpa":
            return None
        current = value(self.client, st.queries.hpa_current, "HPA current replicas", required=False)
        desired = value(self.client, st.queries.hpa_desired, "HPA desired replicas", required=False)
        return None if current is None or desired is None else (int(current), int(desired))

    def observe(self, st: TargetState, now: float) -> Observation:
        """One Observation from Prometheus; raises PrometheusUnavailable or DataProblem."""
        return observe(self.client, st.queries, now, lambda: self._replicas(st), self.settings.slo_for(st.settings),
                       self.settings.stale_after_s, self.settings.forecast.max_growth)

    # --- one evaluation ----------------------------------------------------------------------------
    def evaluate(self, now: float | None = None) -> dict[tuple[str, str], TargetState]:
        """One slow evaluation of every target. Prometheus is read with no lock held, so `/metrics`,
        `/v1/desired` and the fast path's panics never wait behind a slow Prometheus; each
        target's state is updated under the lock once its reads are in."""
        now = self.clock() if now is None else now
        for st in self.states.values():
            self._evaluate_one(st, now)
        with self._lock:
            return dict(self.states)

    def _queries_for(self, t: TargetSettings, cold_start_s: float) -> TargetQueries:
        """*t*'s PromQL, its seasonal forecast reading the peak a period ago over the next *cold_start_s*
        (plus the lookahead's extra)."""
        s = self.settings
        return TargetQueries.for_target(t, s.tuning, s.series_matchers, s.slo_for(t), s.forecast, cold_start_s)

    def _apply_cold_start(self, st: TargetState, learned: tuple[float, str] | None) -> None:
        """The cold start learned, for the lookahead and for the forecast's reads: a replica asked for a
        peak a day ago must be asked one cold start before it, and a model that loads in 5 minutes where
        the chart says 60 s would otherwise be asked for 3.5 minutes late (`forecast.ahead_s`, when
        set, stays as set)."""
        if learned is None:
            return
        cold, st.cold_start_source = learned
        if cold != st.recommender.config.cold_start_s:
            st.recommender.config = dataclasses.replace(st.recommender.config, cold_start_s=cold)
            if self.settings.forecast.enabled and self.settings.forecast.ahead_s is None:
                st.queries = self._queries_for(st.settings, cold)

    def _evaluate_one(self, st: TargetState, now: float) -> None:
        # Every read first, no lock held ...
        learned = read_cold_start(self.client, st.queries, st.first_ready, self.settings)
        obs: Observation | None = None
        pods: dict[str, str] | None = None
        hpa: tuple[int, int] | None = None
        scaled_at = self.hpa_scaled_at(st)
        try:
            obs = self.observe(st, now)
            hpa = self.hpa_replicas(st)
        except PrometheusUnavailable as exc:
            problem = ("prometheus_down", str(exc))
        except DataProblem as exc:
            problem = (exc.reason, str(exc))
        else:
            pods = self._discover(st)
        # ... then the state, under the lock; Kubernetes is written after it.
        with self._lock:
            st.evaluated_at = self.clock()  # the service's clock, as _mark_stuck reads it (*now* may be given)
            self._apply_cold_start(st, learned)
            if scaled_at is not None:
                st.hpa_reads.observe_scale(scaled_at)
            if pods is not None:
                st.pods, st.discovered_at = pods, now
            if obs is None:
                self._hold(st, *problem)
                return
            event = self._decide(st, obs, hpa, now)
        # The scale first: a slow Event post must not hold back the scale-up it reports.
        self._apply(st)
        if event is not None:
            self._send_event(st, *event)

    def _decide(self, st: TargetState, obs: Observation, hpa: tuple[int, int] | None,
                now: float) -> tuple[int, int, str, str] | None:
        """The recommendation for *obs*, published or held (under the lock); the Event to post
        (before, after, decision, detail) when the published count changed.

        A replica reading that disagrees (`TargetState.replica_disagreement`) is replaced by the larger of the
        counts it disagrees with, the disagreement counted, and the answer never drops below the
        last one (`hold_replicas_disagree`); a scale-up still goes out."""
        disagrees = st.replica_disagreement(obs.current_replicas, hpa, self.settings.scale_mode, self._lag_s)
        if disagrees is not None:
            trusted = max(obs.current_replicas, *(hpa or ()), st.published or 0)
            obs = dataclasses.replace(obs, current_replicas=trusted)
            if st.decision != "hold_replicas_disagree":
                log.warning("recommender %s/%s: %s; holding %s", st.settings.namespace, st.settings.deployment,
                            disagrees, st.published)
            st.replica_disagreements += 1
            # Direct mode: the service is the Deployment's only writer, so a count it wrote that never
            # showed was overwritten (`kubectl scale`, a leftover HPA) or lost: write it again, as an HPA
            # would at its next sync.
            st.rewrite = self.settings.scale_mode == "direct"
        try:
            rec = st.recommender.recommend(obs)
        except ValueError as exc:
            self._hold(st, "nan", str(exc))
            return None
        st.current = obs.current_replicas
        desired = rec.desired
        if self.settings.hpa_tolerance_rounding:
            desired = min(st.settings.max_replicas, reachable_under_tolerance(obs.current_replicas, desired))
        missing = silent_ready_pods(st.fast_reading, min(obs.ready_replicas, obs.current_replicas))
        if missing and desired < obs.current_replicas:
            # A pod that does not answer may be the one with the load: never scale down on that.
            self._hold(st, "missing", f"fast path: {len(missing)} pod(s) did not answer "
                       f"({', '.join(missing[:3])}); no scale-down")
            return None
        before, reason, detail = st.published, rec.reason, rec.reason
        if disagrees is not None and before is not None and desired <= before:
            desired, reason, detail = before, "replicas", disagrees
        st.publish(desired, now, self._lag_s)
        st.failsafe, st.detail, st.last_success = None, detail, now
        previous, st.decision = st.decision, decision(desired, obs.current_replicas, reason, None,
                                                        obs.unschedulable_pods)
        # An Event on a change of the count, and when pods first cannot be scheduled: the count then
        # stands, and the Event says why the replicas it asks for do not come.
        newly_unschedulable = st.decision == UNSCHEDULABLE and previous != UNSCHEDULABLE
        if before is None or (desired == before and not newly_unschedulable):
            return None
        return before, desired, st.decision, observation_detail(obs, rec.capacity_rps, rec.projected_rps,
                                                                  rec.lifted_trend_cap)

    def _apply(self, st: TargetState) -> None:
        """Direct mode: write the published count to the Deployment's scale subresource when it
        differs from the replicas last seen, or again when the Deployment has read below it for longer
        than a write takes to show (`TargetState.replica_disagreement`). A failed write is logged and
        retried at the next evaluation; the Deployment keeps its count meanwhile (there is no HPA
        behind it). The write happens with no lock held."""
        with self._lock:
            published, current, rewrite = st.published, st.current, st.rewrite
            st.rewrite = False
        if self.scaler is None or published is None or (published == current and not rewrite):
            return
        ns, dep = st.settings.namespace, st.settings.deployment
        try:
            self.scaler.patch_namespaced_deployment_scale(dep, ns, {"spec": {"replicas": published}})
        except Exception as exc:
            log.warning("scaling %s/%s to %s failed: %s", ns, dep, published, str(exc)[:200])
            with self._lock:
                st.scale_write_failures += 1
            return
        with self._lock:
            # A scale-up's new count at once (the panic then weighs an overload against the pods asked
            # for, not again); a scale-down's only when an observation reads it: the removed pods drain
            # first (preStop, Triton's exit timeout), and until then the count they leave is not yet
            # the fleet (an HPA's lag gives the same in hpa mode).
            st.current = max(published, st.current or 0)
            st.wrote = True

    def _discover(self, st: TargetState) -> dict[str, str] | None:
        """The fast path's pods from Prometheus' series; None keeps the known ones (no fast path, or
        a failed read)."""
        if self.reader is None:
            return None
        try:
            return discover_pods(self.client, st.queries.pending, self.settings.fast_path.max_pods)
        except PrometheusUnavailable as exc:
            log.debug("fast path: pod discovery for %s/%s failed: %s", st.settings.namespace,
                      st.settings.deployment, exc)
            return None

    def evaluate_fast(self, now: float | None = None) -> None:
        """One round of the fast path for every target: read its pods, panic on an overload.

        The panic, and the withdrawal of a pending scale-down (`Recommender.withdraw`), only ever
        raise the published count (at once, with its Event); everything else stays with the slow
        evaluation. A pod that does not answer keeps its last good values in the
        window, and the next slow evaluation does not scale down (`hold_missing_data`). The pods are
        those of the last discovery, found again every `fast_path.discovery_interval_s` between
        evaluations; they are found and read, and the Event posted, with no lock held."""
        if self.reader is None:
            return
        for st in self.states.values():
            if st.fast is None:
                continue
            started = self.clock() if now is None else now
            if st.pods and started - st.discovered_at >= self.settings.fast_path.discovery_interval_s:
                pods = self._discover(st)  # no lock held: a Prometheus query
                with self._lock:
                    if pods is not None:
                        st.pods = pods
                    st.discovered_at = started  # a failed query waits its interval too
            if not st.pods:
                continue
            reads = self.reader.read(st.pods, st.settings.model)
            stamp = self.clock() if now is None else now
            with self._lock:
                reading = st.fast_reading = st.fast.add(stamp, reads)
                st.recommender.record_interval(stamp, reading.newest_rps)
                rec = st.recommender.panic(stamp, reading.arrival_rps, asked_replicas(st.published, st.current),
                                           reading.newest_rps, self._wait_free(st, stamp))
                if rec is None and st.published is not None and st.current is not None \
                        and self.settings.scale_mode != "direct" and not reading.missing \
                        and reading.pods >= st.current:
                    # Pending only while the whole fleet read answers: direct mode has applied its
                    # scale-down already, and a pod that no longer answers, or is no longer found,
                    # is one the HPA removed (the replicas read lag it): the window would still
                    # count its last rate while the pods left serve its share too.
                    rec = st.recommender.withdraw(stamp, reading.arrival_rps, st.published, st.current)
                if rec is None or st.published is None or rec.desired <= st.published:
                    continue
                before = st.published
                st.publish(rec.desired, stamp, self._lag_s)
                st.decision, st.detail = decision(rec.desired, st.current or 0, rec.reason, None), rec.reason
                event = (before, rec.desired, st.decision, panic_detail(reading, st.recommender.config.panic_window_s,
                                                                          st.recommender.capacity_rps))
            self._apply(st)
            self._send_event(st, *event)

    def _wait_free(self, st: TargetState, now: float) -> Callable[[int], bool] | None:
        """Whether a panic's confirmation *n* fast readings later still reaches the HPA's next read
        of the answer (`Recommender.panic`); None in direct mode, where nothing reads it later."""
        if self.settings.scale_mode == "direct":
            return None
        every = self.settings.fast_path.interval_s
        return lambda n: st.hpa_reads.wait_is_free(now, n * every)

    def _send_event(self, st: TargetState, before: int, after: int, why: str, detail: str) -> None:
        """The recommendation's Event (events.py), never under the lock. Read through a query layer
        shared by clusters (`series_matchers`), it says which cluster's series it read: Events shipped
        to one place from several clusters stay told apart, whatever the Deployments are called."""
        scope = ", ".join(f'{k}="{v}"' for k, v in sorted(self.settings.series_matchers.items()))
        if scope:
            detail = f"{detail}; read from the series of {scope}"
        if self.events is not None:
            post_recommendation(self.events, st.settings.namespace, st.settings.deployment, (before, after), why,
                                detail, event_twin_window_s(self.settings.interval_s,
                                                            st.recommender.config.down_delay_s))

    def _hold(self, st: TargetState, reason: str, detail: str) -> None:
        """Keep publishing the last good value (no scale-down on missing data) and say why."""
        st.decision = "hold_missing_data"
        if st.failsafe != reason:
            log.warning("recommender %s/%s holds %s: %s (%s)", st.settings.namespace, st.settings.deployment,
                        st.published, reason, detail)
        st.failsafe, st.detail = reason, detail

    def _mark_stuck(self) -> None:
        """Hold, as `stuck`, every target whose evaluation has not ended for `stuck_after()` (under
        the lock; run by every reader of the state, so the hang shows in `/metrics`, `/v1/desired`
        and `/healthz` while the evaluation itself is still waiting)."""
        now, limit = self.clock(), self.settings.stuck_after()
        for st in self.states.values():
            since = self.started if st.evaluated_at is None else st.evaluated_at
            if now - since > limit:
                self._hold(st, "stuck", f"no evaluation has ended for {now - since:.0f} s (limit {limit:g} s)")

    # --- reading the state ---------------------------------------------------------------------
    @contextlib.contextmanager
    def snapshot(self) -> Iterator[dict[tuple[str, str], TargetState]]:
        """Every target's state, under the lock and with a hung evaluation marked (app.py exports it)."""
        with self._lock:
            self._mark_stuck()
            yield self.states

    # --- running ----------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the Prometheus client and the fast path's connections and threads."""
        if self.reader is not None:
            self.reader.close()
        self.client.close()

    def tick(self, now: float | None = None, passes: Collection[str] = PASSES) -> float:
        """Run each of *passes* that is due at *now*; when the next of them is due (service clock).

        `fast` reads the pods every `fast_path.interval_s` (absent when the fast path is off), `evaluation`
        reads Prometheus every `interval_s`. The service runs each in a thread of its own (`run_loop`: a
        slow Prometheus never delays a panic); the dev stack's demo calls `tick` from one loop. A pass
        that raises is logged and leaves its heartbeat unbeaten: a bug must not stop the loop, and a
        round that raises every time shows as a stalled `/healthz`, the exported values going stale."""
        now = self.clock() if now is None else now
        for name in passes:
            if name in self._due and now >= self._due[name] - 1e-9:  # a float's worth early counts as due
                step, interval_s, heartbeat = self._passes[name]
                # On its own grid (a pass run a little late does not shift the next one), unless a whole
                # interval was missed: then from now, with no burst of catch-up rounds.
                nxt = self._due[name] + interval_s
                self._due[name] = nxt if nxt > now else now + interval_s
                try:
                    step(now)
                except Exception:
                    log.exception("recommender %s pass failed", name)
                else:
                    heartbeat.beat()
        return min((self._due[name] for name in passes if name in self._due), default=math.inf)

    def run_loop(self, stop: threading.Event) -> None:
        """`tick` the evaluation in this thread and the fast path in one of its own until *stop*."""
        fast = None
        if FAST in self._due:
            fast = threading.Thread(target=self._ticking, args=(stop, (FAST,)), daemon=True,
                                    name="recommender-fast-path")
            fast.start()
        self._ticking(stop, (EVALUATION,))
        if fast is not None:
            fast.join(timeout=5)

    def _ticking(self, stop: threading.Event, passes: Collection[str]) -> None:
        while not stop.is_set():
            stop.wait(max(0.0, self.tick(passes=passes) - self.clock()))
