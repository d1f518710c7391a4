"""A simulated kube-state-metrics endpoint for the local fleet: Deployment, pods and HPA state.

Series names, label names and label order follow kube-state-metrics v2 so the same rules and
dashboards work against the local stack and a cluster. The HPA's state comes from whoever drives
the (emulated) HPA, through `set_hpa`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from tidescale.contracts import catalog
from tidescale.contracts.errors import UsageError
from tidescale.devstack.fleet.exposition import render_family
from tidescale.devstack.fleet.httpserve import LoopbackHttpServer, ServesHttp, text_response
from tidescale.sim.hpa_controller import HpaStatus

CONTAINER = "triton"
Labels = list[tuple[str, str]]


class Pod(Protocol):
    pod: str
    started_at: float | None
    ready_at: float | None

    @property
    def ready(self) -> bool: ...


class FleetView(Protocol):
    """What kube-state-metrics reads from the fleet (TritonFleet satisfies it)."""

    namespace: str
    deployment: str
    restarts: dict[str, int]

    @property
    def replicas(self) -> Sequence[Pod]: ...


def check_hpa(name: str, status: HpaStatus) -> None:
    """A status kube-state-metrics could report: 1 <= min <= max, counts >= 0."""
    if not 1 <= status.min_replicas <= status.max_replicas:
        raise UsageError(f"HPA {name}: need 1 <= min ({status.min_replicas}) <= max ({status.max_replicas})")
    if status.current_replicas < 0 or status.desired_replicas < 0:
        raise UsageError(f"HPA {name}: replica counts must be >= 0")


def pod_uid(pod: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"tidescale/pod/{pod}"))


def _family(name: str, samples: list[tuple[Labels, int]] | list[tuple[Labels, float]]) -> str:
    fam = catalog.get(name)
    return render_family(name, fam.type, fam.help, [(labels, _value(v)) for labels, v in samples])


def _value(v: float) -> str:
    return str(v) if isinstance(v, int) else f"{v:.3f}"


def render_kube_state(namespace: str, deployment: str, pods: list[tuple[str, bool, int]],
                      hpas: dict[str, HpaStatus],
                      times: dict[str, tuple[float | None, float | None]] | None = None) -> str:
    """The exposition for one Deployment's pods ((name, ready, restarts), oldest first) and its HPAs.

    *times* maps a pod to its (start, ready) unix times for kube_pod_start_time/kube_pod_status_ready_time.
    """
    dep: Labels = [("namespace", namespace), ("deployment", deployment)]
    ready_count = sum(1 for _, ready, _ in pods if ready)
    pod_labels = {name: [("namespace", namespace), ("pod", name), ("uid", pod_uid(name))] for name, _, _ in pods}
    parts = [
        _family("kube_deployment_spec_replicas", [(dep, len(pods))]),
        _family("kube_deployment_status_replicas", [(dep, len(pods))]),
        _family("kube_deployment_status_replicas_ready", [(dep, ready_count)]),
        _family("kube_pod_status_ready", [
            ([*pod_labels[name], ("condition", cond)], int(value))
            for name, ready, _ in pods
            for cond, value in (("true", ready), ("false", not ready), ("unknown", False))
        ]),
        _family("kube_pod_container_status_restarts_total", [
            ([*pod_labels[name], ("container", CONTAINER)], restarts) for name, _, restarts in pods
        ]),
        _family("kube_pod_owner", [
            ([*pod_labels[name], ("owner_kind", "ReplicaSet"), ("owner_name", name.rsplit("-", 1)[0]),
              ("owner_is_controller", "true")], 1) for name, _, _ in pods
        ]),
    ]
    times = times or {}
    starts = [(pod_labels[n], t[0]) for n, _, _ in pods if (t := times.get(n)) and t[0] is not None]
    readies = [(pod_labels[n], t[1]) for n, _, _ in pods if (t := times.get(n)) and t[1] is not None]
    if starts:
        parts.append(_family("kube_pod_start_time", starts))
    if readies:
        parts.append(_family("kube_pod_status_ready_time", readies))
    if hpas:
        def hpa_family(metric: str, value: Callable[[HpaStatus], int]) -> str:
            return _family(metric, [([("namespace", namespace), ("horizontalpodautoscaler", name)], value(h))
                                    for name, h in hpas.items()])

        parts += [
            _family("kube_horizontalpodautoscaler_info", [
                ([("namespace", namespace), ("horizontalpodautoscaler", name),
                  ("scaletargetref_api_version", "apps/v1"), ("scaletargetref_kind", "Deployment"),
                  ("scaletargetref_name", deployment)], 1) for name in hpas
            ]),
            hpa_family("kube_horizontalpodautoscaler_spec_min_replicas", lambda h: h.min_replicas),
            hpa_family("kube_horizontalpodautoscaler_spec_max_replicas", lambda h: h.max_replicas),
            hpa_family("kube_horizontalpodautoscaler_status_current_replicas", lambda h: h.current_replicas),
            hpa_family("kube_horizontalpodautoscaler_status_desired_replicas", lambda h: h.desired_replicas),
        ]
    return "".join(parts)


class KubeStateMetricsServer(ServesHttp):
    """Serves `/metrics` in kube-state-metrics format for one fleet, on loopback."""

    def __init__(self, fleet: FleetView, port: int | None = None) -> None:
        self.fleet = fleet
        self._hpas: dict[str, HpaStatus] = {}
        self._lock = threading.Lock()
        self._server = LoopbackHttpServer("kube-state-metrics", port)
        self._server.get_routes["/metrics"] = lambda: text_response(self.render())

    def set_hpa(self, name: str, min_replicas: int, max_replicas: int, current: int, desired: int) -> None:
        """Record the HPA's spec and status (called by whoever drives the HPA every sync)."""
        status = HpaStatus(min_replicas, max_replicas, current, desired)
        check_hpa(name, status)
        with self._lock:
            self._hpas[name] = status

    def render(self) -> str:
        replicas = list(self.fleet.replicas)
        pods = [(p.pod, p.ready, self.fleet.restarts.get(p.pod, 0)) for p in replicas]
        times = {p.pod: (getattr(p, "started_at", None), getattr(p, "ready_at", None)) for p in replicas}
        with self._lock:
            hpas = dict(self._hpas)
        return render_kube_state(self.fleet.namespace, self.fleet.deployment, pods, hpas, times)

    def start(self) -> KubeStateMetricsServer:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def scrape_target(self) -> tuple[str, dict[str, str]]:
        return self.address, {"job": "kube-state-metrics"}
