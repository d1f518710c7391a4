"""The hostile-input corpus: every parser and endpoint test draws its attacks from here.

Each entry is a (name, value) pair so that parametrized tests name the attack that failed. A new
parser gets the whole corpus by parametrizing over `JSON_DOCUMENTS`, `YAML_DOCUMENTS`,
`LABEL_VALUES`, `NUMBERS`, `TIMESTAMPS` or `DATETIMES`; a new write route of any service gets
`BAD_AUTHORIZATIONS`, `TOKEN_SPELLINGS` and `OVERSIZED_BODIES` (tests/unit/architecture/
test_http_services.py finds the routes itself); a new attack added here reaches every test that uses
its list.
"""

from __future__ import annotations

DEPTH = 100_000  # far beyond Python's recursion limit and any real document


def deep_json(depth: int = DEPTH, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * depth + close * depth).encode()


def deep_json_object(depth: int = DEPTH) -> bytes:
    return ('{"a":' * depth + "1" + "}" * depth).encode()


BILLION_LAUGHS = "\n".join(
    ["a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
       f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]" for i in range(8)]
) + "\n"

# Whole documents for JSON parsers (Triton responses, OTLP JSON, webhook payloads, profiles).
JSON_DOCUMENTS: list[tuple[str, bytes]] = [
    ("deep-array", deep_json()),
    ("deep-object", deep_json_object()),
    ("400-digit-number", b'{"n": ' + b"9" * 400 + b"}"),
    ("huge-exponent", b'{"n": 1e999999}'),
    ("nan-literal", b'{"n": NaN}'),
    ("infinity-literal", b'{"n": Infinity}'),
    ("truncated", b'{"a": [1, 2'),
    ("not-utf8", b'{"a": "\xff\xfe"}'),
    ("nul-in-string", b'{"a": "x\\u0000y"}'),
    ("lone-surrogate", b'{"a": "\\ud800"}'),
    ("empty", b""),
    ("scalar-instead-of-object", b"42"),
    ("array-instead-of-object", b"[]"),
]

# YAML for config files and rule inputs.
YAML_DOCUMENTS: list[tuple[str, str]] = [
    ("billion-laughs", BILLION_LAUGHS),
    ("deep-list", "[" * 5000 + "]" * 5000),
    ("deep-map", "a: " * 2000 + "1"),
    ("python-tag", "!!python/object/apply:os.system ['true']"),
    ("scalar", "42"),
    ("tabs", "a:\n\tb: 1"),
]

# Label values that reach Prometheus, PromQL, SQL columns or caches.
LABEL_VALUES: list[tuple[str, str]] = [
    ("4-MB", "m" * (4 << 20)),
    ("nul", "model\x00name"),
    ("newline", "model\nname"),
    ("quote-backslash", 'a"b\\c'),
    ("promql-injection", '"}[5m]) or vector(1) or x{a="'),
    ("slash", "org/team/model"),
    ("dot-dot", ".."),
    ("unicode", "модель-😀"),
    ("lone-surrogate", "\ud800"),
    ("empty", ""),
    ("whitespace", "   "),
    ("300-chars", "m" * 300),  # longer than a String(255) column, shorter than the 4096-char value limit
    # Two names equal in their first 127 characters: cut to the label cap alike unless the cut keeps them apart.
    ("shared-prefix-a", "m" * 127 + "-a" * 10),
    ("shared-prefix-b", "m" * 127 + "-b" * 10),
]

# Numbers where a count, duration or id is expected.
NUMBERS: list[tuple[str, object]] = [
    ("400-digits", int("9" * 400)),
    ("int64-max-plus-1", 2**63),
    ("uint64-max-plus-1", 2**64),
    ("negative", -1),
    ("float-max", 1.7976931348623157e308),
    ("overflowing-sum", 1e306),
    ("nan", float("nan")),
    ("inf", float("inf")),
    ("neg-inf", float("-inf")),
]

# Unix nanosecond timestamps as OTLP and Triton traces carry them.
TIMESTAMPS: list[tuple[str, object]] = [
    ("10**400", 10**400),
    ("20-digits", 10**19 * 3),
    ("uint64-max", 2**64 - 1),
    ("negative", -5),
    ("string-digits", "9" * 30),
    ("float", 1.5e18),
    # str.isdigit() is true for these, and int() takes the second: a check must also ask isascii().
    ("superscript-two", "²"),
    ("arabic-indic-digits", "١٧٩٥٢٧٤٧١٨٨٩٠٠٠٠٠٠٠٠"),
]

# RFC 3339 instants for webhook payloads.
DATETIMES: list[tuple[str, str]] = [
    ("year-1", "0001-01-01T00:00:00Z"),
    ("year-9999", "9999-12-31T23:59:59.999999Z"),
    ("far-future", "2099-01-01T00:00:00Z"),
    ("offset-overflow", "9999-12-31T23:59:59-23:59"),
    ("not-a-date", "yesterday"),
    ("year-0", "0000-01-01T00:00:00Z"),
]

# URLs that carry a credential, with the secret each must never show (in a label, a log line or an
# error message): (name, url, secret).
URLS_WITH_CREDENTIALS: list[tuple[str, str, str]] = [
    ("userinfo", "http://tidescale:hunter2-pass@triton:8000", "hunter2-pass"),
    ("user-only", "http://ghp-token-as-user@triton:8000", "ghp-token-as-user"),
    ("at-in-password", "http://u:p@ss-w0rd@triton:8000", "p@ss-w0rd"),
    ("slash-in-password", "http://u:pa/ss-w0rd@triton:8000", "pa/ss-w0rd"),
    ("question-mark-in-password", "http://u:pa?ss-w0rd@triton:8000", "pa?ss-w0rd"),
    ("percent-encoded", "http://u:p%40ss%2Fw0rd@triton:8000", "p%40ss%2Fw0rd"),
    ("no-scheme", "u:no-scheme-s3cret@triton:8000", "no-scheme-s3cret"),
    ("ipv6", "https://u:v6-s3cret@[::1]:8000", "v6-s3cret"),
    ("unicode", "http://u:пароль-s3cret@triton:8000", "пароль-s3cret"),
    ("dsn-query-password", "postgresql://app@db/reviews?sslmode=require&password=qwerty-s3cret", "qwerty-s3cret"),
    ("query-token", "http://prometheus:9090/?access_token=tok-123456", "tok-123456"),
]

# Text that a terminal or a markup renderer would interpret (op names, warnings, anything printed).
MARKUP_TEXT: list[tuple[str, str]] = [
    ("rich-close-tag", "[/x]"),
    ("rich-style", "[bold]MatMul[/bold]"),
    ("rich-link", "[link=https://example.com]op[/link]"),
    ("rich-escaped-bracket", "\\[red]op"),
    ("ansi-clear-screen", "\x1b[2J\x1b[31mMatMul"),
    ("carriage-return", "AsString\rMatMul  "),
]

# `Authorization` header values that must not authenticate a write (None: no header at all).
BAD_AUTHORIZATIONS: list[tuple[str, str | None]] = [
    ("none", None),
    ("empty", ""),
    ("basic", "Basic dXNlcjpwYXNz"),
    ("bearer-alone", "Bearer"),
    ("bearer-blank", "Bearer     "),
    ("wrong-token", "Bearer wrong"),
    ("latin-1", "Bearer s\xe9cret"),
]

# How a configured token may be written that must still match `Bearer <token>` ("{}" is the token): a
# Kubernetes Secret made from a file ends in a newline.
TOKEN_SPELLINGS: list[tuple[str, str]] = [
    ("trailing-newline", "{}\n"),
    ("crlf", "{}\r\n"),
    ("spaces", "  {}  "),
    ("tabs", "\t{}\t"),
]

# Bodies sent to a write route, far past any body cap: (name, Content-Length sent or None, bytes sent).
# A PATCH without a token used to be read whole before its 401: 200 MiB of RSS a request.
OVERSIZED_BODIES: list[tuple[str, str | None, int]] = [
    ("declared-200-MiB", str(200 << 20), 1 << 20),
    ("undeclared", None, 1 << 20),
    ("declared-small", "16", 1 << 20),  # a Content-Length that lies
]
