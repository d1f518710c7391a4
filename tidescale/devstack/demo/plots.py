"""PNG plots of a demo run: load vs replicas, latency percentiles, queue depth."""

from __future__ import annotations

from pathlib import Path

from tidescale.devstack.demo.timeline import Timeline


def _nan(v: float | None) -> float:
    return float("nan") if v is None else v


def write_plots(timeline: Timeline, out: Path, slo_latency_threshold_s: float) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = timeline.samples
    t = [x.t for x in s]
    paths = []

    fig, ax = plt.subplots(figsize=(9, 4))
    ax.plot(t, [x.offered_rps for x in s], label="offered req/s", color="tab:blue", alpha=0.6)
    ax.plot(t, [x.completed_rps for x in s], label="completed req/s", color="tab:blue")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("requests / s")
    ax2 = ax.twinx()
    ax2.step(t, [x.replicas_ready for x in s], where="post", label="replicas ready", color="tab:green")
    ax2.step(t, [x.replicas_total for x in s], where="post", label="replicas (spec)", color="tab:olive",
             linestyle="--")
    ax2.set_ylabel("replicas")
    ax2.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(lines, labels, loc="upper left")
    ax.set_title("Load vs replicas")
    paths.append(out / "load_vs_replicas.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 4))
    for attr, label in (("p50_s", "P50"), ("p95_s", "P95"), ("p99_s", "P99")):
        ax.plot(t, [_nan(getattr(x, attr)) * 1000 for x in s], label=label)
    ax.axhline(slo_latency_threshold_s * 1000, color="red", linestyle=":", label="P99 SLO")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Client latency percentiles (10 s window)")
    ax.legend(loc="upper left")
    paths.append(out / "latency_percentiles.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 3.5))
    ax.plot(t, [_nan(x.queue_depth) for x in s], color="tab:purple")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("pending requests")
    ax.set_title("Queue depth (sum of nv_inference_pending_request_count)")
    paths.append(out / "queue_depth.png")
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths
