"""The base of the store's repositories: one per concern (exit profiles, sweeps, adaptive
sampling), reached as ``store.exits``, ``store.sweeps`` and ``store.sampling``.

Their queries run through the store's own door: every error is translated into one line
(``Store._guard``) and a read that loses its PostgreSQL connection is repeated on a new one
(``Store._retry``), as the store's own methods are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from vmtax.errors import VmtaxError

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, CursorResult

    from vmtax.store.store import Store

T = TypeVar("T")


def inserted_id(result: CursorResult[Any]) -> int:
    """The primary key of the one row an ``insert()`` added."""
    key = result.inserted_primary_key
    if key is None:  # only an executemany() has no single key
        raise VmtaxError("the insert returned no primary key")
    return int(key[0])


class Repository:
    """Queries of one concern, on the tables the store's migrations create."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def _read(self, query: Callable[[Connection], T]) -> T:
        """``query`` on a connection, repeated on a new one after a lost connection."""

        def once() -> T:
            with self._store._guard(), self._store._engine.connect() as connection:
                return query(connection)

        return self._store._retry(once)

    def _write(self, change: Callable[[Connection], T], *, repeatable: bool = False) -> T:
        """``change`` in one transaction. Repeated after a lost connection only when
        ``repeatable`` (its transaction gives the same result when run twice)."""

        def once() -> T:
            with self._store._guard(), self._store._engine.begin() as connection:
                return change(connection)

        return self._store._retry(once) if repeatable else once()
