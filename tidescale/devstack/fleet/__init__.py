"""The local fleet: real Triton replicas, simulated GPUs/dcgm-exporter and kube-state-metrics, traffic.

Import the submodules directly (`tidescale.fleet.fleet`, `.gpus`, `.kube`, `.loadgen`); this package
stays import-light so `tidescale --help` is fast.
"""
