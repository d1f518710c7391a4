"""A benchmark's progress reaches a log file as lines, and a terminal as one status line."""

from __future__ import annotations

import io
import itertools

from rich.console import Console

from tidescale.benches.progress import progress_lines


def test_off_a_terminal_each_step_is_a_line_with_the_minutes_since_the_start() -> None:
    out = io.StringIO()
    ticks = itertools.count(0.0, 90.0)  # each read of the clock 1.5 min later
    with progress_lines(Console(file=out, force_terminal=False, width=40), "sizing benchmark",
                        clock=lambda: next(ticks)) as tell:
        tell("surge-3x: hpa-cpu@20 done (5/80), a message far longer than the console is wide")
    lines = out.getvalue().splitlines()
    assert lines == ["sizing benchmark [1.5 min] started",
                     "sizing benchmark [3.0 min] surge-3x: hpa-cpu@20 done (5/80), a message far longer "
                     "than the console is wide"]


def test_on_a_terminal_the_steps_update_rich_s_status_line_not_plain_lines() -> None:
    out = io.StringIO()
    with progress_lines(Console(file=out, force_terminal=True, width=80), "sizing benchmark") as tell:
        tell("seed 3: diurnal done")
    assert "seed 3: diurnal done" in out.getvalue() and "[0." not in out.getvalue() and "started" not in out.getvalue()
