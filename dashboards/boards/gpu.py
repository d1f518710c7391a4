"""GPU: dcgm-exporter metrics for the pods that serve the selected models, one series per pod and GPU."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash_b

from tidescale.dashboards.base import GPU, new_dashboard
from tidescale.dashboards.panels import PanelBuilder, Query, Threshold, graph, row
from tidescale.dashboards.queries import dcgm

LEGEND = "{{pod}} gpu{{gpu}}"


def _gpu_graph(title: str, description: str, unit: str, family: str, *, thresholds: tuple[Threshold, ...] = (),
               span: int = 12) -> PanelBuilder:
    return graph(title, description, unit, [Query(dcgm(family), LEGEND)], thresholds=thresholds, span=span,
                 min_value=0)


def build() -> dash_b.Dashboard:
    return (
        new_dashboard(GPU)
        .with_row(row("Activity"))
        .with_panel(_gpu_graph(
            "GPU utilisation", "DCGM_FI_DEV_GPU_UTIL: share of time a kernel ran (a duty cycle: reads high with "
            "a single request in flight, so a poor scaling signal; compare with SM activity).",
            "percent", "DCGM_FI_DEV_GPU_UTIL", span=8))
        .with_panel(_gpu_graph(
            "SM activity", "DCGM_FI_PROF_SM_ACTIVE: ratio of cycles an SM has at least one warp: how much of "
            "the GPU the model actually uses.", "percentunit", "DCGM_FI_PROF_SM_ACTIVE", span=8))
        .with_panel(_gpu_graph(
            "Tensor core activity", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: ratio of cycles the tensor pipe is active; "
            "near zero for a model that should use tensor cores means FP32 or an unfused op.",
            "percentunit", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", span=8))
        .with_row(row("Memory, power, health"))
        .with_panel(_gpu_graph(
            "Framebuffer used", "DCGM_FI_DEV_FB_USED: GPU memory in use (model weights, activations, "
            "instance groups).", "decmbytes", "DCGM_FI_DEV_FB_USED"))
        .with_panel(_gpu_graph(
            "Framebuffer free", "DCGM_FI_DEV_FB_FREE: GPU memory left for more model instances or bigger "
            "batches.", "decmbytes", "DCGM_FI_DEV_FB_FREE"))
        .with_panel(_gpu_graph(
            "Power draw", "DCGM_FI_DEV_POWER_USAGE per GPU.", "watt", "DCGM_FI_DEV_POWER_USAGE", span=8))
        .with_panel(_gpu_graph(
            "Temperature", "DCGM_FI_DEV_GPU_TEMP; clocks throttle above ~85 °C on most data-centre GPUs.",
            "celsius", "DCGM_FI_DEV_GPU_TEMP", thresholds=(Threshold(85),), span=8))
        .with_panel(_gpu_graph(
            "XID errors", "DCGM_FI_DEV_XID_ERRORS: the last XID error code (0 = none). Any non-zero value is a "
            "driver/hardware event worth a look (e.g. 79 = GPU fell off the bus).", "none",
            "DCGM_FI_DEV_XID_ERRORS", thresholds=(Threshold(1),), span=8))
    )
