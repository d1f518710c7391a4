"""Every command that takes `--seed`: a negative seed is a usage error, not numpy's traceback."""

from __future__ import annotations

import pytest

from tidescale import cli


@pytest.mark.parametrize("command", [
    ["bench", "autoscale"], ["bench", "percentiles"], ["bench", "soak"], ["demo"], ["fleet", "run"],
])
def test_a_negative_seed_exits_2_naming_the_flag(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Until 2026-12-06 `bench autoscale --seed -1` ended in numpy's "expected non-negative integer"."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*command, "--seed", "-1"])
    assert exit_info.value.code == 2
    assert "'--seed'" in capsys.readouterr().err
