"""Every metric family, grouped by who produces it.

Triton families follow `tests/fixtures/triton/triton_metrics_catalog.csv`; dcgm-exporter
families follow its `default-counters.csv` / `dcp-metrics-included.csv`; kube-state-metrics
families are the ones the HPA/pod views need. `tidescale_*` families are ours.
"""

from __future__ import annotations

from tidescale.contracts.catalog.model import DcgmRename, MetricFamily, MetricType

# dcgm-exporter labels; with pod mapping it adds pod/namespace/container (exported_* behind
# a ServiceMonitor with honorLabels: false), and older releases use Hostname, newer hostname
# (4.8.3); 4.9 renames the driver-version label DCGM_FI_DRIVER_VERSION to DCGM_FI_SYSTEM_DRIVER_VERSION.
DCGM_LABELS = ("gpu", "UUID", "device", "modelName")
DCGM_OPTIONAL_LABELS = (
    "Hostname", "hostname", "pci_bus_id", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION",
    "pod", "namespace", "container", "exported_pod", "exported_namespace", "exported_container",
)


def _triton(
    name: str, type_: MetricType, unit: str, help_: str, labels: tuple[str, ...], optional: tuple[str, ...]
) -> MetricFamily:
    return MetricFamily(name, type_, unit, help_, "triton", labels, optional)


def _dcgm(name: str, type_: MetricType, unit: str, help_: str) -> MetricFamily:
    return MetricFamily(name, type_, unit, help_, "dcgm", DCGM_LABELS, DCGM_OPTIONAL_LABELS)


def _ksm(name: str, type_: MetricType, unit: str, help_: str, labels: tuple[str, ...]) -> MetricFamily:
    return MetricFamily(name, type_, unit, help_, "kube-state-metrics", labels)


def _own(
    name: str, type_: MetricType, unit: str, help_: str, labels: tuple[str, ...] = (),
    optional: tuple[str, ...] = (),
) -> MetricFamily:
    return MetricFamily(name, type_, unit, help_, "tidescale", labels, optional)


TRITON: list[MetricFamily] = [
    _triton('nv_inference_request_success', 'counter', 'requests', 'Number of successful inference requests, all batch sizes', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_request_failure', 'counter', 'requests', 'Number of failed inference requests, all batch sizes', ('model', 'version', 'reason'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_count', 'counter', 'inferences (batch of n = n)', 'Number of inferences performed (does not include cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_exec_count', 'counter', 'executions', 'Number of model executions performed (does not include cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_pending_request_count', 'gauge', 'requests', 'Instantaneous number of pending requests awaiting execution per-model.', ('model', 'version'), ('namespace',)),
    _triton('nv_model_load_duration_secs', 'gauge', 'seconds', 'Model load time in seconds', ('model', 'version'), ('namespace',)),
    _triton('nv_inference_request_duration_us', 'counter', 'microseconds', 'Cumulative inference request duration in microseconds (includes cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_queue_duration_us', 'counter', 'microseconds', 'Cumulative inference queuing duration in microseconds (includes cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_compute_input_duration_us', 'counter', 'microseconds', 'Cumulative compute input duration in microseconds (does not include cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_compute_infer_duration_us', 'counter', 'microseconds', 'Cumulative compute inference duration in microseconds (does not include cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_compute_output_duration_us', 'counter', 'microseconds', 'Cumulative inference compute output duration in microseconds (does not include cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_first_response_histogram_ms', 'histogram', 'milliseconds', 'Duration from request to first response in milliseconds', ('model', 'version'), ('namespace',)),
    _triton('nv_inference_request_summary_us', 'summary', 'microseconds', 'Summary of inference request duration in microseconds (includes cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_queue_summary_us', 'summary', 'microseconds', 'Summary of inference queuing duration in microseconds (includes cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_compute_input_summary_us', 'summary', 'microseconds', 'Cumulative compute input duration in microseconds (does not include cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_compute_infer_summary_us', 'summary', 'microseconds', 'Cumulative compute inference duration in microseconds (does not include cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_inference_compute_output_summary_us', 'summary', 'microseconds', 'Cumulative inference compute output duration in microseconds (does not include cached requests)', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_cache_num_hits_per_model', 'counter', 'hits', 'Number of cache hits per model', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_cache_num_misses_per_model', 'counter', 'misses', 'Number of cache misses per model', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_cache_hit_duration_per_model', 'counter', 'microseconds', 'Total cache hit duration per model, in microseconds', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_cache_miss_duration_per_model', 'counter', 'microseconds', 'Total cache miss (insert+lookup) duration per model, in microseconds', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_cache_hit_summary_per_model', 'summary', 'microseconds', 'Summary of cache hit counts/durations per model, in microseconds.', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_cache_miss_summary_per_model', 'summary', 'microseconds', 'Summary of cache miss counts/durations per model, in microseconds.', ('model', 'version'), ('gpu_uuid', 'namespace')),
    _triton('nv_gpu_utilization', 'gauge', 'ratio 0.0-1.0', 'GPU utilization rate [0.0 - 1.0)', ('gpu_uuid',), ()),
    _triton('nv_gpu_memory_total_bytes', 'gauge', 'bytes', 'GPU total memory, in bytes', ('gpu_uuid',), ()),
    _triton('nv_gpu_memory_used_bytes', 'gauge', 'bytes', 'GPU used memory, in bytes', ('gpu_uuid',), ()),
    _triton('nv_gpu_power_usage', 'gauge', 'watts', 'GPU power usage in watts', ('gpu_uuid',), ()),
    _triton('nv_gpu_power_limit', 'gauge', 'watts', 'GPU power management limit in watts', ('gpu_uuid',), ()),
    _triton('nv_energy_consumption', 'counter', 'joules', 'GPU energy consumption in joules since the Triton Server started', ('gpu_uuid',), ()),
    _triton('nv_cpu_utilization', 'gauge', 'ratio 0.0-1.0', 'CPU utilization rate [0.0 - 1.0]', (), ()),
    _triton('nv_cpu_memory_total_bytes', 'gauge', 'bytes', 'CPU total memory (RAM), in bytes', (), ()),
    _triton('nv_cpu_memory_used_bytes', 'gauge', 'bytes', 'CPU used memory (RAM), in bytes', (), ()),
    _triton('nv_pinned_memory_pool_total_bytes', 'gauge', 'bytes', 'Pinned memory pool total memory size, in bytes', (), ()),
    _triton('nv_pinned_memory_pool_used_bytes', 'gauge', 'bytes', 'Pinned memory pool used memory size, in bytes', (), ()),
]

DCGM: list[MetricFamily] = [
    _dcgm('DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS', 'counter', 'count', 'Number of remapped rows for correctable errors'),
    _dcgm('DCGM_FI_DEV_DEC_UTIL', 'gauge', 'percent', 'Decoder utilization (in %).'),
    _dcgm('DCGM_FI_DEV_ENC_UTIL', 'gauge', 'percent', 'Encoder utilization (in %).'),
    _dcgm('DCGM_FI_DEV_FB_FREE', 'gauge', 'MiB', 'Framebuffer memory free (in MiB).'),
    _dcgm('DCGM_FI_DEV_FB_RESERVED', 'gauge', 'MiB', 'Framebuffer memory reserved (in MiB).'),
    _dcgm('DCGM_FI_DEV_FB_USED', 'gauge', 'MiB', 'Framebuffer memory used (in MiB).'),
    _dcgm('DCGM_FI_DEV_GPU_TEMP', 'gauge', 'celsius', 'GPU temperature (in C).'),
    _dcgm('DCGM_FI_DEV_GPU_UTIL', 'gauge', 'percent', 'GPU utilization (in %).'),
    _dcgm('DCGM_FI_DEV_MEMORY_TEMP', 'gauge', 'celsius', 'Memory temperature (in C).'),
    _dcgm('DCGM_FI_DEV_MEM_CLOCK', 'gauge', 'MHz', 'Memory clock frequency (in MHz).'),
    _dcgm('DCGM_FI_DEV_MEM_COPY_UTIL', 'gauge', 'percent', 'Memory utilization (in %).'),
    _dcgm('DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL', 'counter', 'count', 'Total number of NVLink bandwidth counters for all lanes.'),
    _dcgm('DCGM_FI_DEV_PCIE_REPLAY_COUNTER', 'counter', 'count', 'Total number of PCIe retries.'),
    _dcgm('DCGM_FI_DEV_POWER_USAGE', 'gauge', 'watts', 'Power draw (in W).'),
    _dcgm('DCGM_FI_DEV_ROW_REMAP_FAILURE', 'gauge', 'count', 'Whether remapping of rows has failed'),
    _dcgm('DCGM_FI_DEV_SM_CLOCK', 'gauge', 'MHz', 'SM clock frequency (in MHz).'),
    _dcgm('DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION', 'counter', 'millijoules', 'Total energy consumption since boot (in mJ).'),
    _dcgm('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS', 'counter', 'count', 'Number of remapped rows for uncorrectable errors'),
    _dcgm('DCGM_FI_DEV_VGPU_LICENSE_STATUS', 'gauge', 'count', 'vGPU License status'),
    _dcgm('DCGM_FI_DEV_XID_ERRORS', 'gauge', 'count', 'Value of the last XID error encountered.'),
    _dcgm('DCGM_FI_PROF_DRAM_ACTIVE', 'gauge', 'ratio', 'Ratio of cycles the device memory interface is active sending or receiving data.'),
    _dcgm('DCGM_FI_PROF_GR_ENGINE_ACTIVE', 'gauge', 'ratio', 'Ratio of time the graphics engine is active.'),
    _dcgm('DCGM_FI_PROF_PCIE_RX_BYTES', 'gauge', 'bytes_per_second', 'The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.'),
    _dcgm('DCGM_FI_PROF_PCIE_TX_BYTES', 'gauge', 'bytes_per_second', 'The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.'),
    _dcgm('DCGM_FI_PROF_PIPE_TENSOR_ACTIVE', 'gauge', 'ratio', 'Ratio of cycles the tensor (HMMA) pipe is active.'),
    _dcgm("DCGM_FI_PROF_SM_ACTIVE", "gauge", "ratio",
          "The ratio of cycles an SM has at least 1 warp assigned."),
    _dcgm("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "gauge", "bitmask",
          "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*), formerly CLOCK_THROTTLE_REASONS."),
    _dcgm("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "watts", "Power management limit (in W)."),
]

# dcgm-exporter 4.9.0 (DCGM 4.7) renames the default and profiling fields that DCGM 4.7 deprecates, and
# eleven of them change unit: clocks MHz -> Hz, energy mJ -> J, utilisation % -> 0-1 ratio, memory MiB ->
# bytes, NVLink throughput MB/s -> bytes/s. One row per field of the DCGM list above that has a 4.9 name:
# (4.x name, 4.9 name, type, 4.9 unit, factor from the 4.x unit to the 4.9 one, help). The names and units
# are listed with their sources in tests/fixtures/dcgm/dcgm-exporter-4.9-renames.csv; the help texts are
# ours (no verbatim 4.9 output was available).
_DCGM_49_ROWS: tuple[tuple[str, str, MetricType, str, float, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_SM_CLOCK_HERTZ", "gauge", "hertz", 1e6, "SM clock frequency (in Hz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "gauge", "hertz", 1e6,
     "Memory clock frequency (in Hz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "gauge", "celsius", 1.0,
     "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "gauge", "celsius", 1.0, "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_BOARD_POWER_WATTS", "gauge", "watts", 1.0, "Board power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", "counter", "joules", 1e-3,
     "Total energy consumption since the driver was loaded (in J)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "counter", "count", 1.0,
     "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_UTIL_RATIO", "gauge", "ratio", 0.01, "GPU utilization (ratio 0-1)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_MEMORY_UTIL_RATIO", "gauge", "ratio", 0.01,
     "Memory utilization (ratio 0-1)."),
    ("DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_ENC_UTIL_RATIO", "gauge", "ratio", 0.01, "Encoder utilization (ratio 0-1)."),
    ("DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_DEC_UTIL_RATIO", "gauge", "ratio", 0.01, "Decoder utilization (ratio 0-1)."),
    ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_XID_ERROR", "gauge", "count", 1.0,
     "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_FREE_BYTES", "gauge", "bytes", 1048576.0,
     "Framebuffer memory free (in bytes)."),
    ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_USED_BYTES", "gauge", "bytes", 1048576.0,
     "Framebuffer memory used (in bytes)."),
    ("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_RESERVED_BYTES", "gauge", "bytes", 1048576.0,
     "Framebuffer memory reserved (in bytes)."),
    # The legacy field is the KiB/s sample divided by 1000, the byte field the same sample times 1024.
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND", "gauge",
     "bytes_per_second", 1024000.0, "NVLink throughput over all links (in bytes per second)."),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL", "counter", "count", 1.0,
     "Number of remapped rows for uncorrectable errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL", "counter", "count", 1.0,
     "Number of remapped rows for correctable errors."),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_FAILED", "gauge", "count", 1.0,
     "Whether remapping of rows has failed."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", "gauge", "ratio", 1.0,
     "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_UTIL_RATIO", "gauge", "ratio", 1.0,
     "The ratio of cycles an SM has at least 1 warp assigned."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_TENSOR_UTIL_RATIO", "gauge", "ratio", 1.0,
     "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_DRAM_UTIL_RATIO", "gauge", "ratio", 1.0,
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    # Opt-in, not one of the 23 default/profiling renames; DCGM 4.7 deprecates the 4.x name.
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS", "gauge", "watts", 1.0,
     "Power management limit (in W)."),
)

DCGM_RENAMES: tuple[DcgmRename, ...] = tuple(DcgmRename(old, new, factor) for old, new, _, _, factor, _ in _DCGM_49_ROWS)

# The 4.9 families, beside their 4.x twins in DCGM (catalog.dcgm_rename links the two).
DCGM_49: list[MetricFamily] = [_dcgm(new, type_, unit, help_) for _, new, type_, unit, _, help_ in _DCGM_49_ROWS]

KUBE_STATE_METRICS: list[MetricFamily] = [
    _ksm("kube_horizontalpodautoscaler_spec_max_replicas", "gauge", "replicas",
         "Upper limit for the number of pods that can be set by the autoscaler.",
         ("namespace", "horizontalpodautoscaler")),
    _ksm("kube_horizontalpodautoscaler_spec_min_replicas", "gauge", "replicas",
         "Lower limit for the number of pods that can be set by the autoscaler.",
         ("namespace", "horizontalpodautoscaler")),
    _ksm("kube_horizontalpodautoscaler_status_current_replicas", "gauge", "replicas",
         "Current number of replicas of pods managed by this autoscaler.",
         ("namespace", "horizontalpodautoscaler")),
    _ksm("kube_horizontalpodautoscaler_status_desired_replicas", "gauge", "replicas",
         "Desired number of replicas of pods managed by this autoscaler.",
         ("namespace", "horizontalpodautoscaler")),
    _ksm("kube_horizontalpodautoscaler_info", "gauge", "info",
         "Information about this autoscaler.",
         ("namespace", "horizontalpodautoscaler", "scaletargetref_kind", "scaletargetref_name")),
    _ksm("kube_deployment_spec_replicas", "gauge", "replicas",
         "Number of desired pods for a deployment.", ("namespace", "deployment")),
    _ksm("kube_deployment_status_replicas", "gauge", "replicas",
         "The number of replicas per deployment.", ("namespace", "deployment")),
    _ksm("kube_deployment_status_replicas_ready", "gauge", "replicas",
         "The number of ready replicas per deployment.", ("namespace", "deployment")),
    _ksm("kube_pod_status_ready", "gauge", "bool",
         "Describes whether the pod is ready to serve requests.", ("namespace", "pod", "condition")),
    _ksm("kube_pod_container_status_restarts_total", "counter", "restarts",
         "The number of container restarts per container.", ("namespace", "pod", "container")),
    _ksm("kube_pod_container_status_waiting_reason", "gauge", "info",
         "Describes the reason the container is currently in waiting state.",
         ("namespace", "pod", "uid", "container", "reason")),
    _ksm("kube_pod_start_time", "gauge", "seconds",
         "Start time in unix timestamp for a pod.", ("namespace", "pod", "uid")),
    _ksm("kube_pod_status_ready_time", "gauge", "seconds",
         "Readiness achieved time in unix timestamp for a pod.", ("namespace", "pod", "uid")),
    _ksm("kube_pod_status_unschedulable", "gauge", "info",
         "Describes the unschedulable status for the pod.", ("namespace", "pod", "uid")),
    _ksm("kube_pod_owner", "gauge", "info",
         "Information about the Pod's owner.", ("namespace", "pod", "owner_kind", "owner_name")),
    _ksm("kube_replicaset_owner", "gauge", "info",
         "Information about the ReplicaSet's owner.", ("namespace", "replicaset", "owner_kind", "owner_name")),
]

PROMETHEUS: list[MetricFamily] = [
    MetricFamily("up", "gauge", "bool", "1 if the last scrape of the target succeeded.", "prometheus",
                 ("job", "instance")),
    MetricFamily("ALERTS", "gauge", "bool", "Active alerts (pending and firing).", "prometheus",
                 ("alertname", "alertstate")),
    MetricFamily("ALERTS_FOR_STATE", "gauge", "seconds", "Start time of active alerts.", "prometheus",
                 ("alertname",)),
]

_MVS = ("model", "version")

TIDESCALE: list[MetricFamily] = [
    # --- exporter: latency from traces -----------------------------------------------------------
    _own("tidescale_request_duration_seconds", "histogram", "seconds",
         "Per-request stage duration from Triton traces; log-spaced buckets with the SLO thresholds as "
         "exact boundaries, aggregatable across pods.", (*_MVS, "stage"), ("namespace", "pod", "deployment")),
    _own("tidescale_trace_sample_rate", "gauge", "ratio",
         "1/N for Triton trace rate=N in use (the detected one where known, else the configured one): each traced "
         "request already counts N times in tidescale_request_duration_seconds.", _MVS, ("namespace",)),
    _own("tidescale_trace_sample_rate_detected", "gauge", "requests",
         "N of Triton's trace rate=N as detected per pod and model version: requests served (stats poller) "
         "over requests traced, snapped to a whole number.", ("namespace", "pod", "model", "version")),
    _own("tidescale_trace_sample_rate_confidence", "gauge", "ratio",
         "How sure the trace-rate detection is, 0 to 1 (enough traced requests, and a ratio close to a whole "
         "number).", ("namespace", "pod", "model", "version")),
    # --- exporter: statistics poller ---------------------------------------------------------------
    _own("tidescale_batch_size", "histogram", "requests",
         "Executions by batch size, from /v2/models/stats batch_stats deltas.",
         _MVS, ("namespace", "pod")),
    _own("tidescale_batching_efficiency_ratio", "gauge", "ratio",
         "Inferences per execution divided by max_batch_size over the last poll interval.",
         _MVS, ("namespace", "pod")),
    _own("tidescale_queue_depth_estimate", "gauge", "requests",
         "Queue depth by Little's law on stats deltas (queue ns / interval), for servers without "
         "nv_inference_pending_request_count. An estimate.", _MVS, ("namespace", "pod")),
    _own("tidescale_model_memory_bytes", "gauge", "bytes",
         "Model memory usage reported in /v2/models/stats memory_usage.",
         (*_MVS, "kind", "device_id"), ("namespace", "pod")),
    # --- exporter: profiler op-time share ----------------------------------------------------------
    _own("tidescale_op_time_share", "gauge", "ratio",
         "Share of op self time spent in an op class, per model version, from the latest profile.",
         (*_MVS, "op_class")),
    _own("tidescale_op_top_share", "gauge", "ratio",
         "Share of op self time of the top-N op types, per model version, from the latest profile.",
         (*_MVS, "op", "op_class")),
    _own("tidescale_profile_timestamp_seconds", "gauge", "seconds",
         "Unix time at which the latest profile of a model version was ingested.", _MVS),
    _own("tidescale_profile_age_seconds", "gauge", "seconds",
         "Age of the latest profile of a model version.", _MVS),
    # --- exporter: self-observability --------------------------------------------------------------
    _own("tidescale_exporter_poll_duration_seconds", "histogram", "seconds",
         "Duration of one statistics poll of one target.", ("target",)),
    _own("tidescale_exporter_poll_errors_total", "counter", "errors",
         "Failed statistics polls, by target and reason.", ("target", "reason")),
    _own("tidescale_exporter_targets", "gauge", "targets", "Targets currently polled.", ()),
    _own("tidescale_exporter_spans_accepted_total", "counter", "spans", "OTLP spans accepted.", ()),
    _own("tidescale_exporter_spans_dropped_total", "counter", "spans",
         "OTLP spans dropped, by reason.", ("reason",)),
    _own("tidescale_exporter_ingest_cpu_seconds_total", "counter", "seconds",
         "CPU time spent turning traces into latency samples, by source: otlp (an OTLP body from its "
         "decompression to the histograms; not the HTTP server's own work) or trace_file (every poll of "
         "the trace files, idle ones too: reading, decoding and joining, and the histograms).", ("source",)),
    _own("tidescale_exporter_profile_bytes_total", "counter", "bytes", "Profile bytes ingested.", ()),
    _own("tidescale_exporter_series_dropped_total", "counter", "series",
         "Series not created because a cardinality cap was reached.", ("family",)),
    _own("tidescale_exporter_task_restarts_total", "counter", "restarts",
         "Background tasks of the exporter that died and were restarted, by task.", ("task",)),
    _own("tidescale_exporter_trace_dirs", "gauge", "directories",
         "Subdirectories of the trace directory (trace_dir) at the last look: read (a watched pod's), "
         "waiting (a pod this exporter does not watch, or over the limit), ignored (not <namespace>_<pod>).",
         ("state",)),
    _own("tidescale_exporter_trace_dirs_deleted_total", "counter", "directories",
         "Pod subdirectories of the trace directory deleted, by reason: read (a gone pod's, once every "
         "file was read) or gone_unread (a pod that no exporter read, gone by the API server's word).",
         ("reason",)),
    _own("tidescale_exporter_join_buffer_bytes", "gauge", "bytes",
         "Bytes held by spans waiting in the join buffer for the rest of their request.", ()),
    _own("tidescale_exporter_profile_store_bytes", "gauge", "bytes",
         "Bytes of profile reports held by the exporter's profile store.", ()),
    # --- every tidescale HTTP service --------------------------------------------------------------
    _own("tidescale_http_unhandled_errors_total", "counter", "errors",
         "Requests that met an unexpected exception and got a 500, by service and route.",
         ("service", "route")),
    # --- model reviews -----------------------------------------------------------------------------
    _own("tidescale_model_reviews", "gauge", "reviews", "Model reviews by state.", ("state",)),
    _own("tidescale_reviews_webhook_rejected_total", "counter", "alerts",
         "Alertmanager webhook alerts rejected by the review service, by reason.", ("reason",)),
    # --- autoscaler --------------------------------------------------------------------------------
    _own("tidescale_desired_replicas", "gauge", "replicas",
         "Replicas the recommender wants for a Deployment (read by the HPA).", ("namespace", "deployment")),
    _own("tidescale_recommender_failsafe", "gauge", "bool",
         "1 while the recommender holds its last good recommendation, with the reason.",
         ("namespace", "deployment", "reason")),
    _own("tidescale_recommender_decision", "gauge", "bool",
         "1 for what the recommender's last evaluation decided and why (scale_up_rate, scale_up_queue, "
         "scale_up_panic, scale_up_forecast, scale_up_drain, scale_up_latency, scale_down, hold_down_delay, "
         "hold_dip_returns, "
         "hold_saturated, hold_replicas_disagree, "
         "hold_scale_down_withdrawn, hold_missing_data, ...), 0 for the other reasons.",
         ("namespace", "deployment", "reason")),
    _own("tidescale_recommender_capacity_rps", "gauge", "requests_per_second",
         "Per-replica capacity at the SLO the recommender currently uses.", ("namespace", "deployment")),
    _own("tidescale_recommender_cold_start_seconds", "gauge", "seconds",
         "Time a new replica needs to serve that the recommender uses now: the slowest pod's start-to-Ready "
         "time from kube-state-metrics (source=pod_ready), else Triton's model load time plus the pod start "
         "overhead (source=model_load), else the configured one.",
         ("namespace", "deployment", "source")),
    _own("tidescale_recommender_fast_path_arrival_rps", "gauge", "requests_per_second",
         "Arrival rate (completions + queue-policy rejections + queue growth) the fast path read straight "
         "from the target's Triton pods over the panic window.", ("namespace", "deployment")),
    _own("tidescale_recommender_fast_path_pods", "gauge", "pods",
         "Triton pods in the fast path's last round, by whether they answered (state=answered|missing).",
         ("namespace", "deployment", "state")),
    _own("tidescale_recommender_last_success_timestamp_seconds", "gauge", "seconds",
         "Unix time of the recommender's last successful evaluation.", ("namespace", "deployment")),
    _own("tidescale_recommender_replica_disagreements_total", "counter", "evaluations",
         "Evaluations whose replica reading (kube-state-metrics' Deployment spec) was 0, or below what the "
         "HPA reports or (direct mode) what the recommender asked for: the last answer was held, never lowered.",
         ("namespace", "deployment")),
    _own("tidescale_recommender_scale_write_failures_total", "counter", "writes",
         "Direct scale mode: writes of the Deployment's scale subresource that failed (RBAC, API server "
         "away); each is retried at the next evaluation.", ("namespace", "deployment")),
]

ALL_FAMILIES: list[MetricFamily] = [*TRITON, *DCGM, *DCGM_49, *KUBE_STATE_METRICS, *PROMETHEUS, *TIDESCALE]
