"""Prometheus text exposition (format 0.0.4): a strict parser and the matching writer.

The simulated dcgm-exporter and kube-state-metrics write with `render_family`; the tests read
real fixtures and our output with `parse` and compare families, types and label keys. Every
parse error names its line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tidescale.contracts.errors import UsageError

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# HELP text is everything after one space, whitespace included.
COMMENT = re.compile(r"#[ \t]+(HELP|TYPE)[ \t]+(\S+)(?: (.*))?$")
TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped"})
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}
MAX_LINES = 1_000_000


class ExpositionError(UsageError):
    """Malformed exposition text; the message starts with `line N:`."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]  # in the order written
    value: float
    timestamp_ms: int | None = None

    @property
    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def label_keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.labels)


@dataclass
class Family:
    name: str
    type: str = "untyped"
    help: str | None = None
    samples: list[Sample] = field(default_factory=list)


def _unescape(text: str, lineno: int, quotes: bool) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            if i + 1 >= len(text):
                raise ExpositionError(f"line {lineno}: dangling backslash")
            nxt = text[i + 1]
            if nxt == "n":
                out.append("\n")
            elif nxt == "\\" or (quotes and nxt == '"'):
                out.append(nxt)
            else:
                # HELP text keeps unknown escapes verbatim, as Prometheus does.
                if quotes:
                    raise ExpositionError(f"line {lineno}: invalid escape \\{nxt} in label value")
                out.append(c + nxt)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_value(raw: str, lineno: int) -> float:
    text = raw.strip()
    # Like Go's ParseFloat (which Prometheus uses): NaN/Inf in any case; Triton writes "Nan".
    special = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf,
               "+infinity": math.inf, "infinity": math.inf, "-infinity": -math.inf}
    if text.lower() in special:
        return special[text.lower()]
    if not re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", text):
        raise ExpositionError(f"line {lineno}: value {raw!r} is not a number")
    return float(text)


def _parse_labels(text: str, pos: int, lineno: int) -> tuple[tuple[tuple[str, str], ...], int]:
    """Parse `{a="b",...}` starting at text[pos] == '{'; return labels and the index after '}'."""
    labels: list[tuple[str, str]] = []
    i = pos + 1
    while True:
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "}":
            return tuple(labels), i + 1
        m = LABEL_NAME.match(text, i)
        if not m:
            raise ExpositionError(f"line {lineno}: bad label name at column {i + 1}")
        key = m.group(0)
        if any(k == key for k, _ in labels):
            raise ExpositionError(f"line {lineno}: duplicate label {key!r}")
        i = m.end()
        if text[i:i + 2] != '="':
            raise ExpositionError(f"line {lineno}: expected '=\"' after label {key!r}")
        i += 2
        start = i
        while i < len(text) and text[i] != '"':
            i += 2 if text[i] == "\\" else 1
        if i >= len(text):
            raise ExpositionError(f"line {lineno}: unterminated value of label {key!r}")
        labels.append((key, _unescape(text[start:i], lineno, quotes=True)))
        i += 1
        if i < len(text) and text[i] == ",":
            i += 1
        elif i >= len(text) or text[i] != "}":
            raise ExpositionError(f"line {lineno}: expected ',' or '}}' after label {key!r}")


def _parse_sample(line: str, lineno: int) -> Sample:
    m = METRIC_NAME.match(line)
    if not m:
        raise ExpositionError(f"line {lineno}: bad metric name in {line[:60]!r}")
    name, i = m.group(0), m.end()
    labels: tuple[tuple[str, str], ...] = ()
    if i < len(line) and line[i] == "{":
        labels, i = _parse_labels(line, i, lineno)
    rest = line[i:]
    if not rest.startswith((" ", "\t")):
        raise ExpositionError(f"line {lineno}: expected a space before the value of {name}")
    parts = rest.split()
    if len(parts) not in (1, 2):
        raise ExpositionError(f"line {lineno}: expected 'value [timestamp]' after {name}, got {rest.strip()!r}")
    ts: int | None = None
    if len(parts) == 2:
        if not re.fullmatch(r"-?\d+", parts[1]):
            raise ExpositionError(f"line {lineno}: timestamp {parts[1]!r} is not an integer")
        ts = int(parts[1])
    return Sample(name, labels, parse_value(parts[0], lineno), ts)


def _family_of(sample_name: str, families: Mapping[str, Family]) -> str:
    if sample_name in families:
        return sample_name
    for fam in families.values():
        for suffix in SUFFIXES.get(fam.type, ()):
            if sample_name == fam.name + suffix:
                return fam.name
    return sample_name


def parse(text: str) -> dict[str, Family]:
    """Families by name, in order of first appearance; ExpositionError on anything malformed."""
    families: dict[str, Family] = {}
    seen_samples: set[str] = set()
    lines = text.split("\n")
    if len(lines) > MAX_LINES:
        raise ExpositionError(f"line {MAX_LINES + 1}: more than {MAX_LINES} lines")
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if line.startswith("#"):
            m = COMMENT.match(line)
            if m:
                kind, name, rest = m.group(1), m.group(2), m.group(3) or ""
                if kind == "TYPE":
                    rest = rest.strip()
                if not METRIC_NAME.fullmatch(name):
                    raise ExpositionError(f"line {lineno}: bad metric name {name!r} in # {kind}")
                fam = families.setdefault(name, Family(name))
                if kind == "HELP":
                    if fam.help is not None:
                        raise ExpositionError(f"line {lineno}: second HELP for {name}")
                    fam.help = _unescape(rest, lineno, quotes=False)
                else:
                    if rest not in TYPES:
                        raise ExpositionError(f"line {lineno}: unknown type {rest!r} for {name}")
                    if name in seen_samples or fam.type != "untyped":
                        raise ExpositionError(f"line {lineno}: TYPE for {name} after its samples or twice")
                    fam.type = rest
            continue
        sample = _parse_sample(line.strip(), lineno)
        fam_name = _family_of(sample.name, families)
        families.setdefault(fam_name, Family(fam_name)).samples.append(sample)
        seen_samples.add(fam_name)
    return families


# --- writing -------------------------------------------------------------------------------------

def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def render_sample(name: str, labels: Iterable[tuple[str, str]], value: str) -> str:
    """One sample line; *value* is pre-formatted so callers control precision (dcgm writes %f)."""
    body = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels)
    return f"{name}{{{body}}} {value}" if body else f"{name} {value}"


def render_family(name: str, type_: str, help_: str, samples: Iterable[tuple[Iterable[tuple[str, str]], str]]) -> str:
    lines = [f"# HELP {name} {escape_help(help_)}", f"# TYPE {name} {type_}"]
    lines += [render_sample(name, labels, value) for labels, value in samples]
    return "\n".join(lines) + "\n"
