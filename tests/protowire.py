"""Protobuf wire-format builders for tests that hand-craft xplane bytes (captures, bombs)."""

from __future__ import annotations


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
