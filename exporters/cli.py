"""`tidescale exporter` and `tidescale profile`: the exporter service and the model-release gate."""

from __future__ import annotations

from pathlib import Path

import typer

from tidescale.contracts.serveopts import HEALTH_PORT_OPTION

app = typer.Typer(help="The exporter service: aggregatable latency, batch and queue metrics, op shares.",
                  no_args_is_help=True)
profile_app = typer.Typer(help="Profiler captures and the per-op share report (model-release gate: exit 0 "
                               "within the limits, 1 over a limit, 2 bad input, 3 could not judge).",
                          no_args_is_help=True)


# --- the exporter service ---------------------------------------------------------------------------

@app.command("serve")
def serve_command(
    port: int | None = typer.Option(None, help="Listen port (default 9105)."),
    health_port: int | None = HEALTH_PORT_OPTION,
    host: str | None = typer.Option(None, help="Listen address (default 127.0.0.1)."),
    triton: list[str] | None = typer.Option(None, "--triton", help="Triton HTTP URL to poll (repeatable)."),
    kube_namespace: str | None = typer.Option(None, help="Namespace of Triton pods to discover."),
    kube_selector: str | None = typer.Option(None, help="Label selector of Triton pods, e.g. app=triton."),
    targets_file: Path | None = typer.Option(None, "--targets-file",
                                             help="file_sd JSON of Triton HTTP targets, re-read when it changes."),
    trace_file: list[Path] | None = typer.Option(None, "--trace-file",
                                                 help="Triton mode=triton trace file to tail (repeatable)."),
    trace_dir: Path | None = typer.Option(None, "--trace-dir",
                                          help="Directory of per-pod trace files, <namespace>_<pod>/trace.json."),
    trace_sample_rate: int | None = typer.Option(None, help="Triton trace rate=N (1 in N requests traced)."),
    config: Path | None = typer.Option(None, "--config", help="YAML file with an `exporter:` section."),
) -> None:
    """Serve /metrics, OTLP trace ingest (/v1/traces) and profile uploads (/v1/profiles)."""
    from tidescale.contracts.settings import load_settings
    from tidescale.exporters.service import serve
    from tidescale.exporters.settings import ExporterSettings

    settings = load_settings(
        ExporterSettings, config, port=port, health_port=health_port, host=host, triton_urls=triton or None,
        kube_namespace=kube_namespace, kube_selector=kube_selector, targets_file=targets_file,
        trace_files=trace_file or None, trace_dir=trace_dir,
        trace_sample_rate=trace_sample_rate,
    )
    serve(settings)


@app.command("open-trace-dir")
def open_trace_dir_command(
    path: Path = typer.Argument(..., help="The trace directory (the chart's hostPath mount)."),
) -> None:
    """Make the trace directory and each pod's subdirectory in it writable by all (0777), so that
    Triton pods of any user can write their files and the non-root exporter can delete what it has
    read. Run as the directory's owner: the chart's init container, as root, with no capabilities."""
    from tidescale.exporters.tracedir import open_for_writers

    try:
        opened = open_for_writers(path)
    except OSError as exc:
        typer.echo(f"error: cannot open {path} to writers: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"{path}: {opened} director{'y' if opened == 1 else 'ies'} made writable by all")


@app.command("model-metrics")
def model_metrics_command(
    slo_threshold: list[float] = typer.Option([0.1, 0.25, 0.5, 1.0], "--slo-threshold",
                                              help="Latency SLO threshold in seconds (repeatable)."),
    max_buckets: int = typer.Option(30, min=4, max=60, help="Boundaries in all, the SLO thresholds included."),
) -> None:
    """Print the config.pbtxt `model_metrics` section for Triton 2.65+: first-response histogram
    buckets with each SLO threshold an exact boundary."""
    from tidescale.exporters.model_metrics import model_metrics_snippet

    typer.echo(model_metrics_snippet(slo_threshold, max_buckets=max_buckets), nl=False)


@profile_app.command("report")
def profile_report_command(
    files: list[Path] = typer.Argument(..., help="Profiles of one model version: Chrome trace JSON(.gz), "
                                                 "*.xplane.pb, trtexec --exportProfile JSON, xprof op stats."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    max_share: list[str] = typer.Option([], "--max-share", metavar="CLASS=FRACTION",
                                        help="Fail when an op class's share exceeds FRACTION "
                                             "(repeatable; default string=0.05)."),
) -> None:
    """Op-class shares of op self time and the top ops. Exit status, the gate's verdict:

    0: every op class within its limit
    1: an op class over its limit
    2: bad input (flags, a file that cannot be read or parsed)
    3: could not judge (the profile holds no op time, or the gate failed on it)
    """
    from tidescale.exporters.profiles.gate import run_report

    raise typer.Exit(run_report(files, as_json=as_json, max_share=max_share))


@profile_app.command("capture")
def profile_capture_command(
    target: str = typer.Option(..., "--target", help="HOST:PORT of the TF Serving / TF profiler gRPC service."),
    duration: str = typer.Option("2s", "--duration", help="Capture length, e.g. 2s or 500ms."),
    out: Path = typer.Option(..., "--out", help="Log directory (TF layout: plugins/profile/<run>/)."),
    host_tracer_level: int = typer.Option(3, min=1, max=3, help="Host tracer level (3 keeps cheap ops)."),
    post_url: str | None = typer.Option(None, "--post", help="Exporter URL to upload the capture to."),
    model: str | None = typer.Option(None, help="Model name for --post."),
    version: str | None = typer.Option(None, help="Model version for --post."),
    token: str | None = typer.Option(None, envvar="TIDESCALE_PROFILE_TOKEN", show_default=False,
                                     help="Bearer token for --post (env TIDESCALE_PROFILE_TOKEN)."),
) -> None:
    """Capture a host trace at tracer level 3 with xprof's client; optionally post it to the exporter."""
    from tidescale.contracts.errors import UsageError
    from tidescale.exporters.profiles.capture import capture, post

    if post_url and not (model and version):
        raise UsageError("--post needs --model and --version")
    files = capture(target, duration, out, host_tracer_level)
    for path in files:
        typer.echo(str(path))
    if post_url and model and version:
        post(files, post_url, model, version, token)


