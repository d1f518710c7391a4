"""`tidescale profile report`: print shares and top ops, fail when a class is over its limit.

Its exit status is a CI gate's verdict, so each has one meaning and no other path reaches it:
0 within the limits, 1 over a limit, 2 bad input (flags, a file that cannot be read or parsed),
3 could not judge (the profile holds no op time, or the gate failed on it). An uncaught exception
would exit 1, "over the limit", which is why none is let through.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tidescale.contracts.errors import TidescaleError, UsageError
from tidescale.exporters.errors import BadInput
from tidescale.exporters.profiles.ingest import combined_report
from tidescale.exporters.profiles.report import ProfileReport, parse_limits, unjudgeable, violations

if TYPE_CHECKING:
    from rich.text import Text

EXIT_PASS = 0
EXIT_OVER_LIMIT = 1
EXIT_CANNOT_JUDGE = 3  # 2 is every CLI's usage error (UsageError)


class CannotJudge(TidescaleError):
    """The gate failed on a profile it could read (a defect): neither a pass nor a fail."""

    exit_code = EXIT_CANNOT_JUDGE


def run_report(files: list[Path], *, as_json: bool, max_share: list[str]) -> int:
    """Exit status of the gate: 0 within limits, 1 when a class exceeds its limit, 3 when the profile
    cannot be judged (UsageError, exit 2, for bad input; CannotJudge, exit 3, for a failure of the gate)."""
    limits = parse_limits(max_share)
    for path in files:
        if not path.is_file():
            raise UsageError(f"profile {path} does not exist or is not a file")
    try:
        report = combined_report([str(p) for p in files])
    except BadInput as exc:
        raise UsageError(f"cannot read the profile: {exc.message}") from None
    except OSError as exc:
        raise UsageError(f"cannot read the profile {exc.filename or ''}: {exc.strerror or exc}") from None
    except Exception as exc:  # a defect of the parser: the profile was not judged, whatever it holds
        raise CannotJudge(f"could not judge the profile: the gate failed on it ({type(exc).__name__}: "
                          f"{str(exc)[:200]})") from None
    cannot = unjudgeable(report)
    failed = [] if cannot else violations(report, limits)
    if as_json:
        verdict = "could_not_judge" if cannot else "fail" if failed else "pass"
        payload = {**report.to_json(), "limits": limits, "violations": failed, "verdict": verdict,
                   "could_not_judge": cannot}
        sys.stdout.write(json.dumps(payload, indent=2, allow_nan=False) + "\n")
    else:
        _print_table(report, limits, failed, cannot)
    if cannot:
        return EXIT_CANNOT_JUDGE
    return EXIT_OVER_LIMIT if failed else EXIT_PASS


def _print_table(report: ProfileReport, limits: dict[str, float], failed: list[str], cannot: str | None) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console()
    err = Console(stderr=True)
    classes = Table(title=_plain(f"Op-class share of op self time ({report.format})"))
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
        top.add_row(_plain(op.op), op.op_class, f"{op.share:.1%}", f"{op.self_time_us:,.1f}")
    out.print(top)
    for warning in report.warnings:
        err.print(Text.assemble(("warning:", "yellow"), " ", _plain(warning)), highlight=False)
    for line in failed:
        err.print(Text.assemble(("FAIL:", "red"), " ", _plain(line)), highlight=False)
    if cannot:
        err.print(Text.assemble(("COULD NOT JUDGE:", "magenta"), " ", cannot), highlight=False)
    elif not failed:
        err.print("[green]PASS[/]: every op class within its limit")


def _plain(value: str) -> Text:
    """*value*, from the profile, as plain text: never read as Rich markup (a layer named `[/x]`
    crashed the gate, and `[bold]MatMul[/bold]` printed as `MatMul`), and with control characters
    written as escapes (an ESC sequence could repaint what the terminal shows)."""
    from rich.text import Text

    if not value.isprintable():
        value = "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in value)
    return Text(value)
