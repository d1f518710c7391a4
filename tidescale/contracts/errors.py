"""Errors that reach the user as a message and an exit code, never a traceback."""

from __future__ import annotations


class TidescaleError(Exception):
    """A failure the user can act on; the CLI prints it and exits 1."""

    exit_code = 1


class UsageError(TidescaleError):
    """Bad input from the user (flags, config, files): the CLI exits 2."""

    exit_code = 2


class MissingToolError(TidescaleError):
    """A binary the local stack needs is not installed; the message says what to run."""

    exit_code = 2
