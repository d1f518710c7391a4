"""A profile upload streamed to a temporary file: format checked from its first bytes, size capped.

Profiles run to hundreds of MB; buffering one whole before looking at it held 476 MB for a
250 MB upload. Here the first bytes decide whether it can be a profile at all (gzip, JSON
`{`/`[`, an XSpace protobuf's first tag) and anything else is refused (415) before the rest
is read; the body then goes to an anonymous temporary file (the chart's root filesystem is
read-only, its /tmp an emptyDir; `TMPDIR` moves it), with the size cap enforced as it
arrives (413), and is parsed from there. A full disk (the spool's volume, its quota) is a 507 that
says so, never a 500.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator
from typing import BinaryIO

from tidescale.exporters.errors import BadInput

SNIFF_BYTES = 4096  # leading whitespace a JSON profile may start with before we give up
_GZIP = b"\x1f\x8b"
_XSPACE_TAG = b"\x0a"  # field 1 (planes), length-delimited
_JSON_WS = b" \t\r\n"
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def sniff(head: bytes, final: bool) -> bool | None:
    """True when *head* can start a profile, False when it cannot, None when more bytes are needed."""
    if head.startswith(_GZIP) or head.startswith(_XSPACE_TAG):
        return True
    if not final and len(head) < len(_GZIP) and _GZIP.startswith(head):
        return None
    stripped = head.lstrip(_JSON_WS)
    if stripped:
        return stripped[:1] in (b"{", b"[")
    if final or len(head) >= SNIFF_BYTES:
        return False
    return None


def _refuse(head: bytes) -> BadInput:
    if not head.strip():
        return BadInput(400, "empty profile upload")
    return BadInput(415, "unknown profile format: the upload starts with neither gzip, JSON ('{' or '[') nor "
                         f"an XSpace protobuf (first bytes {head[:8]!r})")


@contextlib.asynccontextmanager
async def spooled_upload(chunks: AsyncIterable[bytes], max_bytes: int, declared_length: str | None = None
                         ) -> AsyncIterator[tuple[BinaryIO, int]]:
    """(file positioned at 0, size) of the streamed body; the file is deleted on exit.

    BadInput 413 as soon as the body (or its Content-Length) passes *max_bytes*, 415 when its
    first bytes are no profile's, 400 when it is empty, 507 when the disk is full.
    """
    if declared_length is not None and declared_length.isdigit() and int(declared_length) > max_bytes:
        raise BadInput(413, f"profile upload of {declared_length} bytes exceeds the {max_bytes}-byte limit")
    try:
        with tempfile.TemporaryFile(prefix="tidescale-profile-") as spool:
            size = await _fill(spool, chunks, max_bytes)
            yield spool, size  # type: ignore[misc]
    except OSError as exc:  # creating, writing, flushing or closing the spool
        if exc.errno not in _NO_ROOM:
            raise
        raise BadInput(507, f"no room to spool the profile upload in {tempfile.gettempdir()} "
                            f"({os.strerror(exc.errno)}); try again once other uploads are done, or give the "
                            "exporter's temporary directory more room") from None


async def _fill(spool: BinaryIO, chunks: AsyncIterable[bytes], max_bytes: int) -> int:
    """Write the body to *spool* (positioned at 0 after): its size, checked and sniffed as it arrives."""
    size = 0
    head = b""
    verdict: bool | None = None
    async for chunk in chunks:
        if not chunk:
            continue
        size += len(chunk)
        if size > max_bytes:
            raise BadInput(413, f"profile upload exceeds the {max_bytes}-byte limit")
        if verdict is None:
            head += chunk[:SNIFF_BYTES]
            verdict = sniff(head, final=False)
            if verdict is False:
                raise _refuse(head)
        spool.write(chunk)
    if verdict is None and not sniff(head, final=True):
        raise _refuse(head)
    spool.seek(0)  # flushes: a full disk is found here at the latest
    return size
