"""Profile bytes in: gzip as a stream with a decompression cap, and format detection.

Uploads and files are read in chunks; a `.gz` is inflated on the fly and refused with 413
once it inflates past `max_inflated_bytes` (a gzip bomb), and a truncated gzip is a 400.
The format is decided from the first bytes (and the file name as a tiebreak), so
`trace.json`, `trace.json.gz`, `host.xplane.pb` and a trtexec `--exportProfile` file all
go through the same door.
"""

from __future__ import annotations

import io
import re
import zlib
from typing import BinaryIO, Literal

from tidescale.exporters.errors import BadInput

ProfileFormat = Literal["chrome_trace", "xplane", "trtexec", "xprof_op_stats"]
FORMATS: tuple[ProfileFormat, ...] = ("chrome_trace", "xplane", "trtexec", "xprof_op_stats")
DEFAULT_MAX_INFLATED_BYTES = 4 << 30
SNIFF_BYTES = 64 * 1024
_GZIP_MAGIC = b"\x1f\x8b"


class CappedGzipReader(io.RawIOBase):
    """Inflates a gzip stream chunk by chunk; BadInput on a bomb or a truncated member."""

    def __init__(self, raw: BinaryIO, max_inflated_bytes: int) -> None:
        self._raw = raw
        self._inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
        self._max = max_inflated_bytes
        self._out = 0
        self._pending = b""
        self._eof = False

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        want = len(b)
        while not self._pending and not self._eof:
            self._fill(want)
        n = min(want, len(self._pending))
        b[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _fill(self, want: int) -> None:
        if self._inflater.unconsumed_tail:
            data = self._inflater.unconsumed_tail
        else:
            data = self._raw.read(256 * 1024)
            if not data:
                if not self._inflater.eof:
                    raise BadInput(400, "truncated gzip: the compressed profile ends mid-stream")
                self._eof = True
                return
        if self._inflater.eof:
            # Concatenated members are legal gzip.
            rest = self._inflater.unused_data + data
            self._inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
            data = rest
        try:
            chunk = self._inflater.decompress(data, max(want, 64 * 1024))
        except zlib.error as exc:
            raise BadInput(400, f"corrupt gzip: {exc}") from None
        self._out += len(chunk)
        if self._out > self._max:
            raise BadInput(413, f"profile inflates past {self._max} bytes (gzip bomb?); refused")
        self._pending = chunk


def open_profile(raw: BinaryIO, max_inflated_bytes: int = DEFAULT_MAX_INFLATED_BYTES) -> io.BufferedReader:
    """A buffered stream of the profile's bytes, inflated when it is gzip."""
    buffered = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(_RawAdapter(raw))
    if buffered.peek(2)[:2] == _GZIP_MAGIC:
        return io.BufferedReader(CappedGzipReader(buffered, max_inflated_bytes), buffer_size=1 << 20)
    return buffered


class _RawAdapter(io.RawIOBase):
    """Lets any binary file object sit under a BufferedReader (for `peek`)."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._raw.read(len(b))
        b[: len(data)] = data
        return len(data)


_TRTEXEC = re.compile(rb'^\s*\[\s*\{\s*"count"\s*:')
_OP_STATS = re.compile(rb'^\s*\[\s*\{\s*"cols"\s*:')


def detect_format(stream: io.BufferedReader, filename: str = "") -> ProfileFormat:
    """Format of the (inflated) profile from its first bytes; BadInput when it is none we read."""
    head = stream.peek(SNIFF_BYTES)[:SNIFF_BYTES]
    if not head.strip():
        raise BadInput(400, "empty profile")
    name = filename.lower().removesuffix(".gz")
    # The name first: an XSpace starts with 0x0a, a newline to a JSON sniffer, and a first plane of 91
    # or 123 bytes puts `[` or `{` next (a small valid .pb read as a malformed trace).
    if name.endswith(".pb") or name.endswith(".xspace"):
        return "xplane"
    if _TRTEXEC.match(head):
        return "trtexec"
    if _OP_STATS.match(head):
        return "xprof_op_stats"
    stripped = head.lstrip()
    if stripped[:1] in (b"{", b"["):
        return "chrome_trace"
    if _looks_like_xspace(head):
        return "xplane"
    raise BadInput(415, "unknown profile format: expected a Chrome trace (JSON), an XSpace "
                        "`.xplane.pb`, a trtexec --exportProfile JSON or xprof framework_op_stats JSON")


def _looks_like_xspace(head: bytes) -> bool:
    # XSpace starts with field 1 (planes), wire type 2: tag byte 0x0a.
    return head[:1] == b"\x0a"
