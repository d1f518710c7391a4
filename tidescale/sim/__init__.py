"""The fast discrete-event simulator of a Triton fleet (dynamic batcher, service curve, cold start, lags)."""

from tidescale.sim.batcher import BatcherConfig, batch_to_send
from tidescale.sim.fleet import ROUTINGS, FleetSim
from tidescale.sim.lag import MetricsLag, ScrapedSeries, prom_rate
from tidescale.sim.results import CompletedRequests, FleetCounters, ReplicaCounters

__all__ = [
    "ROUTINGS",
    "BatcherConfig",
    "CompletedRequests",
    "FleetCounters",
    "FleetSim",
    "MetricsLag",
    "ReplicaCounters",
    "ScrapedSeries",
    "batch_to_send",
    "prom_rate",
]
