"""The hostile-input corpus: every parser and endpoint test draws its attacks from here.

Each entry is a (name, value) pair so that parametrized tests name the attack that failed. A new
parser gets the whole corpus by parametrizing over `JSON_DOCUMENTS`, `YAML_DOCUMENTS`,
`LABEL_VALUES`, `NUMBERS`, `TIMESTAMPS` or `DATETIMES`; a new write route of any service gets
`BAD_AUTHORIZATIONS`, `TOKEN_SPELLINGS` and `OVERSIZED_BODIES` (tests/unit/architecture/
test_http_services.py finds the routes itself); a new attack added here reaches every test that uses
its list.
"""

from __future__ import annotations

import gzip
import socket
import threading
import time

# `Authorization` header values that must not authenticate a write, and bodies far past any body cap:
# `tidescale bench soak` sends them to the running services too, so they live with it.
from tidescale.benches.soak.attacks import BAD_AUTHORIZATIONS as BAD_AUTHORIZATIONS
from tidescale.benches.soak.attacks import OVERSIZED_BODIES as OVERSIZED_BODIES

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

# Release names at the edge of what helm takes, for the names the chart makes: the longest (53 characters,
# so that `<release>-tidescale-<component>` passes 63), and one with a digit first (no Service name before
# Kubernetes 1.36).
LONGEST_RELEASE = "a" * 44 + "-" + "b" * 8
DIGIT_FIRST_RELEASE = "1st"

# How a configured token may be written that must still match `Bearer <token>` ("{}" is the token): a
# Kubernetes Secret made from a file ends in a newline.
TOKEN_SPELLINGS: list[tuple[str, str]] = [
    ("trailing-newline", "{}\n"),
    ("crlf", "{}\r\n"),
    ("spaces", "  {}  "),
    ("tabs", "\t{}\t"),
]


# --- hostile HTTP answers, for every outbound client (Prometheus, Triton pods, the exporter's profiles) ---

def _http(head: str, body: bytes = b"") -> bytes:
    return f"HTTP/1.1 {head}\r\nConnection: close\r\n".encode() + b"\r\n" + body


def _gzip_bomb(inflated: int = 64 << 20) -> bytes:
    """*inflated* bytes of '[' (what a JSON parser would recurse into) as a ~64 KB gzip body."""
    body = gzip.compress(b"[" * inflated, compresslevel=9)
    return (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


TRICKLE_DELAY_S = 0.05  # per byte: a ~70-byte answer takes ~3.5 s, every read well within any read timeout
TRICKLED_ANSWER = b'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}'

# (name, raw answer): what a server that is not what it claims sends back. `trickle` is sent one
# byte every TRICKLE_DELAY_S (a per-read timeout never trips); the others at once.
HTTP_ANSWERS: list[tuple[str, bytes]] = [
    ("trickle", TRICKLED_ANSWER),
    ("gzip-bomb", _gzip_bomb()),
    ("huge-content-length", _http(f"200 OK\r\nContent-Length: {1 << 40}", b"{}")),
    ("redirect-elsewhere", _http("302 Found\r\nLocation: http://169.254.169.254/latest/meta-data\r\n"
                                 "Content-Length: 0")),
    ("unasked-encoding", _http("200 OK\r\nContent-Encoding: br\r\nContent-Length: 2", b"{}")),
    ("corrupt-gzip", _http("200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 10", b"\x1f\x8b" + b"\x00" * 8)),
]


class HostileServer:
    """A TCP server that answers every request with one of HTTP_ANSWERS (a context manager giving its
    URL). It reads the request head first; `trickle` goes out byte by byte, and gives up when the
    client has gone."""

    def __init__(self, name: str) -> None:
        self.name, self.answer = name, dict(HTTP_ANSWERS)[name]
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.requests += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                if self.name == "trickle":
                    for byte in self.answer:
                        conn.sendall(bytes([byte]))
                        time.sleep(TRICKLE_DELAY_S)
                else:
                    conn.sendall(self.answer)
            except OSError:
                pass

    def __enter__(self) -> str:
        threading.Thread(target=self._serve, daemon=True).start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
