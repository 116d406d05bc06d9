"""Database failures as one-line VmtaxErrors that never carry a password."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from vmtax.errors import VmtaxError
from vmtax.store.url import redact, scrub

# (substring of the driver's message, what the user should read). First match wins.
_SQLITE = (
    ("database is locked", "database is locked by another process (waited {timeout:g} s)"),
    ("readonly database", "database is read-only: it cannot be written"),
    ("database or disk is full", "disk is full: the database cannot grow"),
    (
        "unable to open database file",
        "cannot open the database file (missing or read-only directory?)",
    ),
    ("file is not a database", "the file is not a SQLite database"),
    ("disk i/o error", "disk I/O error while writing the database"),
)
_POSTGRES = (
    ("password authentication failed", "password authentication failed"),
    ("connection refused", "cannot connect to the database server: connection refused"),
    ("could not translate host name", "cannot connect: unknown host"),
    ("name or service not known", "cannot connect: unknown host"),
    ("timeout expired", "cannot connect to the database server: timed out"),
    ("does not exist", None),  # the driver's own line (e.g. 'database "x" does not exist')
    ("no space left on device", "disk is full on the database server"),
    ("could not extend file", "disk is full on the database server"),
)


def describe(exc: BaseException, url: URL, busy_timeout: float = 0.0) -> str:
    """One line naming the store (password redacted) and what went wrong with it."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    detail = _first_line(orig)
    table = _SQLITE if url.get_backend_name() == "sqlite" else _POSTGRES
    low = detail.lower()
    for needle, message in table:
        if needle in low:
            detail = message.format(timeout=busy_timeout) if message else detail
            break
    return scrub(f"database {redact(url)}: {detail}", url)


@contextmanager
def translated(url: URL, busy_timeout: float = 0.0) -> Iterator[None]:
    """Turn any SQLAlchemy/driver error raised inside into a one-line VmtaxError."""
    try:
        yield
    except VmtaxError:
        raise
    except (SQLAlchemyError, OSError) as exc:
        raise VmtaxError(describe(exc, url, busy_timeout)) from None


def _first_line(exc: BaseException) -> str:
    for line in str(exc).strip().splitlines():
        line = line.strip()
        if line:
            return line
    return type(exc).__name__
