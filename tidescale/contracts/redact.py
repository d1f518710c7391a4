"""Credentials taken out of URLs before a URL reaches a label, a log line or an error message.

A URL a service is given may carry a secret: `http://user:pass@triton:8000`,
`postgresql://app:pw@db/reviews`, `?password=` or `?sslpassword=` in a DSN, `?token=` in a webhook.
`/metrics` needs no token and logs are read by more people than the Secret the URL came from, so
every URL a service shows goes through `redact_url`, and free text that may quote one (an exception's
message) through `redact_urls`.

The rules err towards hiding too much, never too little:
- the userinfo (user and password) is everything between `//` and the **last** `@` of the URL, so a
  password holding an unencoded `@`, `/`, `?` or `#` is hidden whole (a query or path holding an `@`
  loses its part before it too);
- a URL without `//` (`user:pass@host:8000`) is treated the same from its start;
- the value of every query parameter whose name suggests a secret (pass, pwd, secret, token, key,
  auth, cred, sig: `password`, `sslpassword`, `access_token`, `X-Amz-Signature`, …) is replaced.
"""

from __future__ import annotations

import re

SECRET = "***"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_SECRET_PARAM = re.compile(r"pass|pwd|secret|token|key|auth|cred|sig", re.IGNORECASE)
# A URL as free text quotes it: a scheme and `//`, up to whitespace, a quote or an angle bracket.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>`]*")


def redact_url(url: str) -> str:
    """*url* with its credentials replaced by `***` (`http://***@host:8000`); a URL without any is
    returned unchanged."""
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    # Without `//` there is no authority to find, and `user:pass@host` parses as the scheme `user`:
    # then the userinfo is looked for from the start.
    start = start + 2 if url.startswith("//", start) else 0
    rest = url[start:]
    at = rest.rfind("@")
    if at >= 0:
        rest = SECRET + rest[at:]
    head, sep, query = rest.partition("?")
    if sep:
        query = "&".join(_redact_param(p) for p in query.split("&"))
    return url[:start] + head + sep + query


def _redact_param(param: str) -> str:
    name, sep, value = param.partition("=")
    return f"{name}={SECRET}" if sep and value and _SECRET_PARAM.search(name) else param


def redact_urls(text: str) -> str:
    """*text* with every `scheme://…` URL in it redacted (`redact_url`): for messages that may quote
    a URL, such as an HTTP client's exception. A URL is taken to end at whitespace, a quote or an
    angle bracket, as messages write URLs."""
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text) if "://" in text else text
