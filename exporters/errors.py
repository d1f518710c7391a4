"""Errors the exporter's parsers raise for bad input; the service turns them into HTTP 4xx."""

from __future__ import annotations


class BadInput(Exception):
    """Input the exporter refuses: `status_code` is the HTTP status, `message` says what is wrong."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
