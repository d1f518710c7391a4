"""Credentials out of URLs and DSNs before they reach a log line, an error message or printed output.

Users put passwords in URLs (`https://user:pass@mimir/prometheus`, `postgresql+psycopg://u:p@db/reviews`)
because the clients accept them there. Every message that names such a URL shows `redact_url(url)`,
and text that may quote one (an exception from a library) passes through `redact_text` first.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit

MASK = "***"
# Query parameters that carry a secret (`?password=…` in a DSN, `?token=…`, a signed URL's `sig`).
SECRET_PARAM = re.compile(r"pass|token|secret|credential|key|sig|auth", re.IGNORECASE)
# `scheme://userinfo@` anywhere in free text: what redact_text masks, the scheme kept.
_USERINFO_IN_TEXT = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#@'\"]*)@")
# `user:password@host` without a scheme (urlsplit reads `user` as the scheme there).
_BARE_USERINFO = re.compile(r"^(?P<user>[^\s/:@]+):[^\s/@]*@")


def redact_url(url: str) -> str:
    """*url* with the password of its userinfo (or the whole userinfo, when it is a lone token) and
    every secret-named query value replaced by `***`; anything that does not parse is masked whole."""
    bare = _BARE_USERINFO.match(url)
    if bare and "://" not in url[: bare.end()]:
        return f"{bare['user']}:{MASK}@{url[bare.end():]}"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a URL that does not parse>"
    netloc, query = parts.netloc, parts.query
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, has_password, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if has_password else f"{MASK}@{host}"
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(SECRET_PARAM.search(name) for name, _ in pairs):
        query = urlencode([(name, MASK if SECRET_PARAM.search(name) else value) for name, value in pairs], safe="*")
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # nothing secret: exactly as given
    # Rebuilt by hand: urlunsplit drops an empty authority (`sqlite:////abs/path` would lose a slash).
    scheme = f"{parts.scheme}:" if parts.scheme else ""
    authority = f"//{netloc}" if url[len(scheme):].startswith("//") else netloc
    return (f"{scheme}{authority}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def redact_text(text: str) -> str:
    """*text* with the userinfo of every `scheme://…@` in it masked: a library's exception message
    may quote the URL it was given, password included."""
    return _USERINFO_IN_TEXT.sub(lambda m: f"{m['scheme']}{MASK}@", text)
