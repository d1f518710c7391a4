"""A long benchmark's progress on stderr: rich's status line on a terminal, plain lines elsewhere."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from rich.console import Console


@contextlib.contextmanager
def progress_lines(console: Console, title: str,
                   clock: Callable[[], float] = time.monotonic) -> Iterator[Callable[[str], None]]:
    """A function that reports one step. rich draws its status line only on a terminal, so with
    stderr sent to a file (CI, nohup) an hour's run stayed silent until it ended; there each step
    is a line of its own, with the minutes since the start."""
    if console.is_terminal:
        with console.status(title) as status:
            yield status.update
        return
    started = clock()

    def tell(message: str) -> None:
        console.print(f"{title} [{(clock() - started) / 60:.1f} min] {message}", markup=False, highlight=False,
                      soft_wrap=True)

    tell("started")
    yield tell
