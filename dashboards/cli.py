"""`tidescale dashboards`: list, lint and preview the generated Grafana dashboards."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Grafana dashboards: list, lint, preview panels as PNG.", no_args_is_help=True)


@app.command("list")
def list_command() -> None:
    """Print uid, title and panel count of each dashboard (JSON is written by `tidescale generate`)."""
    from dashboards.lint import panels
    from dashboards.registry import build_all

    for uid, board in build_all().items():
        typer.echo(f"{uid}\t{board['title']}\t{sum(1 for _ in panels(board))} panels")


@app.command("lint")
def lint_command() -> None:
    """Check every dashboard against the dashboard-linter rules; exit 1 on any problem."""
    from dashboards.lint import link_problems, lint
    from dashboards.registry import build_all
    from tidescale.errors import TidescaleError

    boards = build_all()
    problems = [f"{uid}: {p}" for uid, board in boards.items() for p in lint(board)] + link_problems(boards)
    if problems:
        raise TidescaleError("dashboard lint failed:\n  " + "\n  ".join(problems))
    typer.echo(f"{len(boards)} dashboards pass the linter rules")


@app.command("preview")
def preview_command(
    prometheus: str = typer.Option(..., "--prometheus", help="Prometheus base URL, e.g. http://127.0.0.1:9090."),
    out: Path = typer.Option(..., "--out", help="Folder for <uid>.png (created if missing)."),
    window: float = typer.Option(600.0, "--window", help="Seconds of history to plot."),
    rate_interval: str = typer.Option("30s", "--rate-interval", help="What $__rate_interval becomes."),
) -> None:
    """Render each dashboard's panels to PNG from live queries (no Grafana needed)."""
    from dashboards.preview import render_previews
    from tidescale.errors import UsageError

    if not prometheus.startswith(("http://", "https://")):
        raise UsageError(f"--prometheus must be an http(s) URL, got {prometheus!r}")
    for path in render_previews(prometheus, out, window_s=window, rate_interval=rate_interval):
        typer.echo(str(path))


def register_bench(bench: typer.Typer) -> None:
    """The dashboards package has no benchmark."""
