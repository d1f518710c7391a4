"""`tidescale exporter` and `tidescale profile` (filled by the exporters work)."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="The exporter service: aggregatable latency, batch and queue metrics, op shares.",
                  no_args_is_help=True)
profile_app = typer.Typer(help="Profiler captures and the per-op share report (model-release gate).",
                          no_args_is_help=True)


def register_bench(bench: typer.Typer) -> None:
    """Add `bench percentiles`, `bench ingest`, `bench profiles`, `bench poll`."""
    _register_latency_benches(bench)


# --- the exporter service and the latency benchmarks (exporter service/latency owner) ---------------

@app.command("serve")
def serve_command(
    port: int | None = typer.Option(None, help="Listen port (default 9105)."),
    host: str | None = typer.Option(None, help="Listen address (default 127.0.0.1)."),
    triton: list[str] | None = typer.Option(None, "--triton", help="Triton HTTP URL to poll (repeatable)."),
    kube_namespace: str | None = typer.Option(None, help="Namespace of Triton pods to discover."),
    kube_selector: str | None = typer.Option(None, help="Label selector of Triton pods, e.g. app=triton."),
    trace_file: list[Path] | None = typer.Option(None, "--trace-file",
                                                 help="Triton mode=triton trace file to tail (repeatable)."),
    trace_sample_rate: int | None = typer.Option(None, help="Triton trace rate=N (1 in N requests traced)."),
    config: Path | None = typer.Option(None, "--config", help="YAML file with an `exporter:` section."),
) -> None:
    """Serve /metrics, OTLP trace ingest (/v1/traces) and profile uploads (/v1/profiles)."""
    from exporters.service import serve
    from exporters.settings import ExporterSettings
    from tidescale.settings import load_settings

    settings = load_settings(
        ExporterSettings, config, port=port, host=host, triton_urls=triton or None,
        kube_namespace=kube_namespace, kube_selector=kube_selector, trace_files=trace_file or None,
        trace_sample_rate=trace_sample_rate,
    )
    serve(settings)


def _register_latency_benches(bench: typer.Typer) -> None:
    @bench.command("percentiles")
    def percentiles_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="Fewer requests (still >= 1 M) for CI."),
        seed: int = typer.Option(7, help="Random seed of the latency shapes."),
    ) -> None:
        """Quantile error of our gauges and buckets vs default buckets and averaged summaries."""
        from exporters.benches.percentiles import run_command

        run_command(json_only=json_only, quick=quick, seed=seed)

    @bench.command("ingest")
    def ingest_command(
        json_only: bool = typer.Option(False, "--json", help="Only the JSON result on stdout."),
        quick: bool = typer.Option(False, "--quick", help="Fewer bodies."),
    ) -> None:
        """OTLP spans per second per core into the running exporter vs bare protobuf decoding."""
        from exporters.benches.ingest import run_command

        run_command(json_only=json_only, quick=quick)
