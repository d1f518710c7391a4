"""`tidescale dashboards`: list, lint and export the generated Grafana dashboards (`preview` is in the dev stack)."""

from __future__ import annotations

from pathlib import Path

import typer

from tidescale.contracts.placeholders import DEFAULT_CLUSTER_LABEL

app = typer.Typer(help="Grafana dashboards: list, lint, export, preview panels as PNG.", no_args_is_help=True)


@app.command("list")
def list_command() -> None:
    """Print uid, title and panel count of each dashboard (JSON is written by `tidescale generate`)."""
    from tidescale.dashboards.lint import panels
    from tidescale.dashboards.registry import build_all

    for uid, board in build_all().items():
        typer.echo(f"{uid}\t{board['title']}\t{sum(1 for _ in panels(board))} panels")


@app.command("lint")
def lint_command() -> None:
    """Check every dashboard against the dashboard-linter rules; exit 1 on any problem."""
    from tidescale.contracts.errors import TidescaleError
    from tidescale.dashboards.lint import link_problems, lint
    from tidescale.dashboards.registry import build_all

    boards = build_all()
    problems = [f"{uid}: {p}" for uid, board in boards.items() for p in lint(board)] + link_problems(boards)
    if problems:
        raise TidescaleError("dashboard lint failed:\n  " + "\n  ".join(problems))
    typer.echo(f"{len(boards)} dashboards pass the linter rules")


@app.command("export")
def export_command(
    out: Path = typer.Option(..., "--out", help="Folder to write <uid>.json into (created)."),
    cluster_label: str = typer.Option(DEFAULT_CLUSTER_LABEL, "--cluster-label",
                                      help="The label that tells clusters apart (the chart's clusterLabel)."),
) -> None:
    """Write every dashboard as Grafana imports it, for a Grafana the chart does not feed."""
    from tidescale.contracts.errors import UsageError
    from tidescale.contracts.promql import LABEL_NAME
    from tidescale.dashboards.base import to_json
    from tidescale.dashboards.registry import build_all

    if not LABEL_NAME.match(cluster_label):
        raise UsageError(f"--cluster-label {cluster_label!r} is not a Prometheus label name")
    boards = build_all(cluster_label)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for uid, board in boards.items():
            (out / f"{uid}.json").write_text(to_json(board))
            typer.echo(f"wrote {out / f'{uid}.json'}")
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot write the dashboards there ({exc.strerror or exc})") from None
