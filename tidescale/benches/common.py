"""What every exporter benchmark does around its measurement: progress, the table file, the JSON."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

Progress = Callable[[str], None]


def bench_main(measure: Callable[[Progress], dict[str, Any]], markdown: Callable[[dict[str, Any]], str],
               result_md: Path, json_only: bool) -> dict[str, Any]:
    """Run *measure* with rich progress on stderr, write *result_md*, print the JSON on stdout."""
    console = Console(stderr=True)

    def progress(msg: str) -> None:
        if not json_only:
            console.log(msg)

    result = measure(progress)
    result_md.parent.mkdir(parents=True, exist_ok=True)
    result_md.write_text(markdown(result))
    progress(f"wrote {result_md}")
    print(json.dumps(result, indent=None if json_only else 1, sort_keys=True))
    return result
