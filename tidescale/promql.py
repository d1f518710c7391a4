"""Building PromQL safely: label values that reach a query are escaped, never pasted raw."""

from __future__ import annotations

import re

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def escape_label_value(value: str) -> str:
    """A PromQL double-quoted string literal body: backslash, quote and newlines escaped."""
    return (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    )


def matcher(name: str, value: str, op: str = "=") -> str:
    if not _LABEL_NAME.match(name):
        raise ValueError(f"invalid label name {name!r}")
    if op not in ("=", "!=", "=~", "!~"):
        raise ValueError(f"invalid matcher operator {op!r}")
    return f'{name}{op}"{escape_label_value(value)}"'


def selector(metric: str, **labels: str) -> str:
    """`metric{a="x",b="y"}` with every value escaped."""
    if not _LABEL_NAME.match(metric.replace(":", "_")):
        raise ValueError(f"invalid metric name {metric!r}")
    if not labels:
        return metric
    return metric + "{" + ",".join(matcher(k, v) for k, v in labels.items()) + "}"


def regex_escape(value: str) -> str:
    """Escape a literal for use inside a `=~` matcher (RE2), then as a PromQL string."""
    return re.sub(r"([.*+?^${}()|\[\]\\])", r"\\\1", value)
