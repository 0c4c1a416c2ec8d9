"""The root of servelab's errors: every exception the package raises on purpose derives from `ServelabError`.

    try:
        main()
    except ServelabError as exc:       # what the CLI catches: one line saying what to fix, exit status 1
        print(f"error: {exc}")

Each error keeps its built-in base as well (`class TrashError(ServelabError, ValueError)`), so code that
catches `ValueError` or `RuntimeError` still does.
"""

from __future__ import annotations


class ServelabError(Exception):
    """Something servelab refuses or could not do, with a message that says what to do about it."""


class UnknownWord(ServelabError, ValueError):
    """A word outside its closed set (servelab.vocabulary): an engine, a server, a place, …"""


class InvalidValue(ServelabError, ValueError):
    """A value the user gave (an argument, a setting, a file's content) that cannot be used; the message names
    what to give instead."""


class CannotRun(ServelabError, RuntimeError):
    """A step that could not run here (a port in use, a server not started, a tool missing or failing); the
    message says what to start, free or install."""
