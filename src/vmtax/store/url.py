"""Where the store lives: resolving ``--db`` / ``VMTAX_DB`` / the default, and redacting URLs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import platformdirs

from vmtax.errors import UsageError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

ENV_VAR = "VMTAX_DB"
_POSTGRES_SCHEMES = {"postgresql", "postgres", "postgresql+psycopg"}


def default_path() -> Path:
    """The SQLite file used when neither ``--db`` nor ``VMTAX_DB`` is given."""
    return Path(platformdirs.user_data_dir("vmtax")) / "vmtax.db"


def resolve(url: str | None) -> URL:
    """Turn what the user gave (a URL, a bare file path or nothing) into a SQLAlchemy URL.

    PostgreSQL URLs are bound to the psycopg (v3) driver. Anything but SQLite and PostgreSQL
    is a usage error, as is a string SQLAlchemy cannot parse.
    """
    # heavy: SQLAlchemy, only where a store is opened through it (store.reader reads a
    # SQLite store's path without it)
    from sqlalchemy.engine import URL, make_url
    from sqlalchemy.exc import ArgumentError

    if url is not None and not url.strip():
        # An empty --db is a mistake (an unset shell variable, most often), not a request for
        # the default store, which it would otherwise silently create.
        raise UsageError("--db is empty: give a store URL or path, or leave it out for the default")
    raw = url if url else os.environ.get(ENV_VAR) or None
    if raw is None:
        return URL.create("sqlite", database=str(default_path()))
    raw = raw.strip()
    if "://" not in raw:
        # A bare path is what people put in VMTAX_DB most often.
        return URL.create("sqlite", database=str(Path(raw).expanduser().absolute()))
    try:
        parsed = make_url(raw)
    except (ArgumentError, ValueError) as exc:
        port = _port_text(raw)
        why = _first_line(exc)
        if port is not None and not (port.isascii() and port.isdigit()):
            why = f"its port {port[:40]!r} is not a number (HOST:PORT, PORT in 1..65535)"
        raise UsageError(f"malformed database URL {_scrub(raw)!r}: {why}") from None
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        raise UsageError(
            f"malformed database URL {redact(parsed)!r}: its port {parsed.port} is not in 1..65535"
        )
    backend = parsed.drivername.split("+", 1)[0]
    if parsed.drivername in _POSTGRES_SCHEMES:
        parsed = parsed.set(drivername="postgresql+psycopg")
        if not parsed.database:
            raise UsageError(
                f"malformed database URL {redact(parsed)!r}: it names no database "
                "(postgresql://USER[:PASSWORD]@HOST[:PORT]/DBNAME)"
            )
        return parsed
    if parsed.drivername == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise UsageError(
                f"database URL {raw!r} names no file: use sqlite:///PATH (an in-memory store "
                "would lose every result)"
            )
        return parsed.set(database=str(Path(parsed.database).expanduser().absolute()))
    raise UsageError(
        f"unsupported database URL scheme {backend!r} in {redact(parsed)!r}: "
        "use sqlite:///PATH or postgresql://USER@HOST/DBNAME"
    )


def redact(url: URL) -> str:
    """The URL as text with any password replaced by ``***`` (and no driver suffix)."""
    return url.set(drivername=url.get_backend_name()).render_as_string(hide_password=True)


def scrub(text: str, url: URL) -> str:
    """Remove the URL's password from any text (driver messages may echo a DSN)."""
    if url.password:
        text = text.replace(str(url.password), "***")
    return text


def _scrub(raw: str) -> str:
    # Redact ``user:password@`` in a string that could not be parsed as a URL.
    scheme, sep, rest = raw.partition("://")
    creds, at, host = rest.rpartition("@")
    if sep and at and ":" in creds:
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return raw


def _port_text(raw: str) -> str | None:
    """The port as typed in ``scheme://[user[:password]@]host[:port][/db]``, or None.

    Hand-written: SQLAlchemy's parser says only ``int()``'s message when the port is not a
    number, and this runs exactly when it could not parse the URL."""
    _, sep, rest = raw.partition("://")
    if not sep:
        return None
    where = rest.rpartition("@")[2].split("/", 1)[0].split("?", 1)[0]
    where = where.rpartition("]")[2]  # an IPv6 host is bracketed: [::1]:5432
    host, colon, port = where.rpartition(":")
    return port if colon else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
