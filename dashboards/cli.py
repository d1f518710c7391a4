"""`tidescale dashboards`: list and lint the generated Grafana dashboards (`preview` is in the dev stack)."""

from __future__ import annotations

import typer

app = typer.Typer(help="Grafana dashboards: list, lint, preview panels as PNG.", no_args_is_help=True)


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
