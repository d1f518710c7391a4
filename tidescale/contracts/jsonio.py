"""Decoding JSON from outside: every failure is a ValueError.

`json.loads` raises RecursionError, not ValueError, on a document nested deeper than the
interpreter's stack; a caller that catches only ValueError then lets one hostile body escape as a
traceback (or stop a loop). Decoding through `loads` gives every parser the same contract.
"""

from __future__ import annotations

import json
from typing import Any


class NestedTooDeeply(ValueError):
    """The document nests arrays or objects deeper than the decoder can follow."""


def loads(data: bytes | str) -> Any:
    """`json.loads`, raising ValueError (JSONDecodeError, UnicodeDecodeError, NestedTooDeeply, digit limits)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise NestedTooDeeply("nested too deeply to decode") from None
