"""`tidescale profile report`: print shares and top ops, fail when a class is over its limit."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tidescale.contracts.errors import UsageError
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.ingest import combined_report
from tidescale.exporters.profiles.report import ProfileReport, parse_limits, violations


def run_report(files: list[Path], *, as_json: bool, max_share: list[str]) -> int:
    """Exit status of the gate: 0 within limits, 1 when a class exceeds its limit."""
    limits = parse_limits(max_share)
    for path in files:
        if not path.is_file():
            raise UsageError(f"profile {path} does not exist or is not a file")
    try:
        report = combined_report([str(p) for p in files])
    except BadInput as exc:
        raise UsageError(f"cannot read the profile: {exc.message}") from None
    failed = violations(report, limits)
    if as_json:
        payload = {**report.to_json(), "limits": limits, "violations": failed}
        sys.stdout.write(json.dumps(payload, indent=2, allow_nan=False) + "\n")
    else:
        _print_table(report, limits, failed)
    return 1 if failed else 0


def _print_table(report: ProfileReport, limits: dict[str, float], failed: list[str]) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console()
    err = Console(stderr=True)
    classes = Table(title=f"Op-class share of op self time ({report.format})")
    classes.add_column("op class")
    classes.add_column("share", justify="right")
    classes.add_column("limit", justify="right")
    for cls, share in report.op_class_share.items():
        limit = limits.get(cls)
        classes.add_row(cls, f"{share:.1%}", "" if limit is None else f"{limit:.1%}")
    out.print(classes)
    out.print(f"denominator: total op self time {report.total_self_time_us:,.1f} µs")
    top = Table(title="Top ops by self time")
    for col in ("op", "op class", "share", "self µs"):
        top.add_column(col)
    for op in report.top_ops:
        top.add_row(op.op, op.op_class, f"{op.share:.1%}", f"{op.self_time_us:,.1f}")
    out.print(top)
    for warning in report.warnings:
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    for line in failed:
        err.print(f"[red]FAIL:[/] {line}", highlight=False)
    if not failed:
        err.print("[green]PASS[/]: every op class within its limit")
