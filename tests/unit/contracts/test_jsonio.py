"""Every JSON failure from outside is a ValueError; too deep a document says so."""

from __future__ import annotations

import contextlib

import pytest

from tests.hostile import JSON_DOCUMENTS
from tidescale.contracts.jsonio import NestedTooDeeply, loads


@pytest.mark.parametrize(("name", "body"), JSON_DOCUMENTS)
def test_hostile_documents_decode_or_raise_value_error(name: str, body: bytes) -> None:
    with contextlib.suppress(ValueError):  # anything else (RecursionError) fails the test
        loads(body)


def test_a_deep_document_is_named() -> None:
    with pytest.raises(NestedTooDeeply, match="nested too deeply"):
        loads(b"[" * 100_000 + b"]" * 100_000)
