"""GPU: dcgm-exporter series of the pods that serve the selected models, read from the recording rules.

The rules fold dcgm-exporter's label variants (`exported_pod`/`exported_namespace` behind a
ServiceMonitor with `honorLabels: false`, `Hostname`/`hostname`) into `namespace`/`pod`, read the 4.x
and the 4.9 field names in 4.9's units and count a GPU scraped by two jobs once, so the panels only
keep the pods serving `$model`. Descriptions name the 4.x field (4.9's in parentheses where renamed).
Per-GPU series where the rules keep the GPU (utilisation, memory, temperature, XID); per pod
(averaged or summed over its GPUs) otherwise.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash_b

from tidescale.contracts import recorded as rules
from tidescale.dashboards.base import GPU, new_dashboard
from tidescale.dashboards.panels import PanelBuilder, Query, Threshold, graph, row
from tidescale.dashboards.queries import of_serving_pods

PER_GPU = ("namespace, pod, gpu", "{{pod}} gpu{{gpu}}")
PER_POD = ("namespace, pod", "{{pod}}")


def _gpu_graph(title: str, description: str, unit: str, name: str, keys: tuple[str, str], *,
               thresholds: tuple[Threshold, ...] = (), span: int = 12) -> PanelBuilder:
    by, legend = keys
    return graph(title, description, unit, [Query(of_serving_pods(name, by), legend)], thresholds=thresholds,
                 span=span, min_value=0)


def build() -> dash_b.Dashboard:
    return (
        new_dashboard(GPU)
        .with_row(row("Activity"))
        .with_panel(_gpu_graph(
            "GPU utilisation", "DCGM_FI_DEV_GPU_UTIL (DCGM_FI_DEV_GPU_UTIL_RATIO) per GPU: share of time a "
            "kernel ran (a duty cycle: reads high with a single request in flight, so a poor scaling signal; "
            "compare with SM activity).",
            "percentunit", rules.GPU_UTILIZATION, PER_GPU, span=8))
        .with_panel(_gpu_graph(
            "SM activity", "DCGM_FI_PROF_SM_ACTIVE (DCGM_FI_PROF_SM_UTIL_RATIO) averaged over a pod's GPUs: "
            "ratio of cycles an SM has at least one warp, how much of the GPU the model actually uses.",
            "percentunit", rules.POD_GPU_SM_ACTIVE, PER_POD, span=8))
        .with_panel(_gpu_graph(
            "Tensor core activity", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (DCGM_FI_PROF_TENSOR_UTIL_RATIO) averaged "
            "over a pod's GPUs: ratio of cycles the tensor pipe is active; near zero for a model that should use "
            "tensor cores means FP32 or an unfused op.", "percentunit", rules.POD_GPU_TENSOR_ACTIVE, PER_POD,
            span=8))
        .with_row(row("Memory, power, health"))
        .with_panel(_gpu_graph(
            "Framebuffer used", "DCGM_FI_DEV_FB_USED (DCGM_FI_DEV_FB_USED_BYTES) per GPU: memory in use (model "
            "weights, activations, instance groups).", "bytes", rules.GPU_FB_USED_BYTES, PER_GPU))
        .with_panel(_gpu_graph(
            "Framebuffer free", "DCGM_FI_DEV_FB_FREE (DCGM_FI_DEV_FB_FREE_BYTES) per GPU: memory left for more "
            "model instances or bigger batches.", "bytes", rules.GPU_FB_FREE_BYTES, PER_GPU))
        .with_panel(_gpu_graph(
            "Power draw", "DCGM_FI_DEV_POWER_USAGE (DCGM_FI_DEV_BOARD_POWER_WATTS) summed over a pod's GPUs.",
            "watt", rules.POD_GPU_POWER_WATTS, PER_POD, span=8))
        .with_panel(_gpu_graph(
            "Temperature", "DCGM_FI_DEV_GPU_TEMP (DCGM_FI_DEV_GPU_TEMP_CELSIUS) per GPU; clocks throttle above "
            "~85 °C on most data-centre GPUs.",
            "celsius", rules.GPU_TEMP_CELSIUS, PER_GPU, thresholds=(Threshold(85),), span=8))
        .with_panel(_gpu_graph(
            "XID errors", "DCGM_FI_DEV_XID_ERRORS (DCGM_FI_DEV_XID_ERROR) per GPU: the last XID error code (0 = "
            "none). Any non-zero value is a driver/hardware event worth a look (e.g. 79 = GPU fell off the bus).",
            "none", rules.GPU_XID_ERRORS, PER_GPU, thresholds=(Threshold(1),), span=8))
    )
