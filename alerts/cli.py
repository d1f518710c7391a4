"""`tidescale alerts` (render and check the rules) and `tidescale reviews` (the model-review service)."""

from __future__ import annotations

from pathlib import Path

import typer

from tidescale.contracts.errors import UsageError
from tidescale.contracts.serveopts import HEALTH_PORT_OPTION

app = typer.Typer(help="Recording and alerting rules, Alertmanager config.", no_args_is_help=True)
reviews_app = typer.Typer(help="The model-review service (Alertmanager webhook receiver).", no_args_is_help=True)

CONFIG_OPTION = typer.Option(None, "--config", help="tidescale YAML file; its `alerts:` section.")


@app.command("render")
def render_command(
    config: Path | None = CONFIG_OPTION,
    out: Path = typer.Option(Path("rendered-alerts"), "--out", help="Directory for the three YAML files."),
) -> None:
    """Render rules and the Alertmanager config for your thresholds (the committed files use defaults)."""
    from tidescale.alerts.config import AlertsConfig
    from tidescale.alerts.generate import rendered
    from tidescale.contracts.settings import load_settings

    cfg = load_settings(AlertsConfig, config)
    files = rendered(cfg)
    prepare_out_dir(out)
    for name, content in files.items():
        try:
            (out / name).write_text(content)
        except OSError as exc:
            raise UsageError(f"--out {out}: cannot write {name}: {exc.strerror or exc}") from None
        typer.echo(f"wrote {out / name}")


def prepare_out_dir(out: Path) -> None:
    """Make the --out directory; an existing file or an unwritable place is a usage error, not a traceback."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the directory: {exc.strerror or exc}") from None


@app.command("check")
def check_command(
    config: Path | None = CONFIG_OPTION,
    tests: Path | None = typer.Option(None, "--tests", help="A folder of promtool rule-test files to run too."),
) -> None:
    """promtool check (and test) the rules, amtool check-config the Alertmanager config, rendered for your config.

    promtool and amtool are found on PATH.
    """
    from tidescale.alerts.check import check_rendered
    from tidescale.alerts.config import AlertsConfig
    from tidescale.contracts.errors import TidescaleError
    from tidescale.contracts.settings import load_settings

    runs = check_rendered(load_settings(AlertsConfig, config), tests)
    failed = [name for name, run in runs.items() if not run.ok]
    for name, run in runs.items():
        typer.echo(f"{'ok  ' if run.ok else 'FAIL'} {name}", err=not run.ok)
        if not run.ok:
            typer.echo(run.output, err=True)
    if failed:
        raise TidescaleError(f"{', '.join(failed)} failed")


@reviews_app.command("serve")
def serve_command(
    port: int | None = typer.Option(None, "--port", help="Listen port (default 8080)."),
    health_port: int | None = HEALTH_PORT_OPTION,
    host: str | None = typer.Option(None, "--host", help="Listen address (default 127.0.0.1)."),
    database: str | None = typer.Option(None, "--database", help="SQLAlchemy URL (default sqlite:///reviews.db)."),
    exporter_url: str | None = typer.Option(None, "--exporter-url", help="Exporter base URL for profile reports."),
    config: Path | None = typer.Option(None, "--config", help="tidescale YAML file; its `reviews:` section."),
) -> None:
    """Serve the Alertmanager webhook and the review API; the token comes from TIDESCALE_REVIEWS_TOKEN."""
    from tidescale.alerts.reviews.service import create_app
    from tidescale.alerts.reviews.settings import ReviewsSettings
    from tidescale.contracts.serving import serve
    from tidescale.contracts.settings import load_settings

    settings = load_settings(ReviewsSettings, config, port=port, health_port=health_port, host=host,
                             database=database, exporter_url=exporter_url)
    serve(create_app(settings), settings)
