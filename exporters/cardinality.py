"""Bounded label cardinality: a cap on distinct series and clean, short label values.

Hostile or buggy clients can send 10,000 model names; without a cap every name becomes a
series in every scrape forever. `SeriesCap` admits the first `max_series` label sets of a
family and refuses the rest (the caller counts the refusal), so memory and scrape size stay
bounded and the drop is visible in `tidescale_exporter_series_dropped_total`.

Length is bounded first: `cut_label_value` is what decoders apply before a value is stored
anywhere (a parked span, a cache key, a series key), so a 4 MB model name costs 4 MB only while
its request body is being decoded. A cut value ends in a digest of the whole value, so two names
that share their first 115 characters stay two series instead of adding up in one (or, in the
stats poller, of being folded into one as if each were the other's next poll).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from functools import lru_cache

MAX_LABEL_VALUE_CHARS = 128
ELLIPSIS = "…"
DIGEST_CHARS = 12  # 48 bits of blake2b: names that differ only past the cut collide by chance ~never


def cut_label_value(value: str, max_chars: int = MAX_LABEL_VALUE_CHARS) -> str:
    """*value* cut to at most *max_chars* characters, nothing else changed: a cut keeps the start,
    then an ellipsis and `DIGEST_CHARS` hex digits of the whole value's digest (`ranker_…3f2a9b0c1d2e`).

    Idempotent (a cut value is short enough to stay as it is), so every layer may apply it, and
    every source of a label (OTLP, trace files, the stats poller) cuts a long name the same way;
    `clean_label_value` of the cut value equals `clean_label_value` of the original. *max_chars*
    must leave room for the marker (more than `DIGEST_CHARS` + 1).
    """
    if len(value) <= max_chars:
        return value
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=DIGEST_CHARS // 2).hexdigest()
    return value[: max_chars - 1 - DIGEST_CHARS] + ELLIPSIS + digest


def clean_label_value(value: str, max_chars: int = MAX_LABEL_VALUE_CHARS) -> str:
    """Label value with control characters replaced and length bounded.

    prometheus-client escapes quotes, backslashes and newlines in the exposition, so the
    value is safe to expose as-is; control characters are replaced only so logs and
    dashboards stay readable, and the length bound keeps one label from bloating a scrape.
    The value is cut *before* the cache sees it: the cache then holds only short strings.
    """
    return _clean_short(cut_label_value(value, max_chars))


@lru_cache(maxsize=8192)  # called per sample on the ingest path; the same few names repeat
def _clean_short(value: str) -> str:
    return value if value.isprintable() else "".join(ch if ch.isprintable() else "?" for ch in value)


class SeriesCap:
    """Admits at most `max_series` distinct keys; `release` frees a key's slot."""

    def __init__(self, max_series: int) -> None:
        if max_series < 1:
            raise ValueError(f"max_series must be at least 1, got {max_series}")
        self.max_series = max_series
        self._keys: set[Hashable] = set()

    def admit(self, key: Hashable) -> bool:
        """True if *key* already has a slot or one is free. The caller counts what it refuses
        (`tidescale_exporter_series_dropped_total`), per sample."""
        if key in self._keys:
            return True
        if len(self._keys) >= self.max_series:
            return False
        self._keys.add(key)
        return True

    def release(self, key: Hashable) -> None:
        self._keys.discard(key)

    def __len__(self) -> int:
        return len(self._keys)
