"""PostgreSQL types: timestamptz values parsed by psycopg's C loader,
and which pgvector types the server has.

Django registers its own timestamptz loader on every connection: a Python
subclass of psycopg's pure-Python loader that sets Django's tzinfo, so the C
implementation that ``psycopg[binary]`` ships is never used for timestamps. A
search reads hundreds of them (two per ranked candidate, several per returned
row), and parsing them in Python is a visible share of the web process's
Python time under load. The loader registered here gives the same values (the session
time zone Django set, with Django's tzinfo object) from the C parser; in a session
on Django's own time zone (UTC, as Django sets it) psycopg's values already carry
Django's tzinfo, and each one is parsed without a Python call at all.
"""

from __future__ import annotations

import functools
from datetime import datetime, tzinfo
from typing import Any

from django.db.backends.signals import connection_created

# A value whose parse shows which tzinfo psycopg gives in the session.
_PROBE = b"2000-01-01 00:00:00+00"


@functools.cache
def timestamptz_loader(tz: tzinfo) -> type:
    """A text-format timestamptz loader in Django's time zone ``tz``. Its
    ``timezone`` attribute is what Django's ``create_cursor`` compares with the
    connection's, so Django keeps it instead of registering its own per cursor."""
    from psycopg import abc
    from psycopg.adapt import Loader
    from psycopg.postgres import adapters
    from psycopg.pq import Format

    found = adapters.get_loader(adapters.types["timestamptz"].oid, Format.TEXT)
    assert found is not None, "psycopg registers a timestamptz loader"
    fast: type[abc.Loader] = found  # the C one with psycopg[binary]

    class DjangoTimeZoneTimestamptzLoader(Loader):
        timezone = tz

        def __init__(self, oid: int, context: Any = None) -> None:
            super().__init__(oid, context)
            self._parse = fast(oid, context).load  # the session time zone is read here, per query
            if self._parse(_PROBE).tzinfo is tz:
                # The session's time zone is Django's (UTC, as Django sets it): psycopg's
                # values already carry Django's tzinfo, so each value is parsed by C
                # alone, without a Python call of its own (psycopg takes ``load``
                # from the instance).
                self.load = self._parse  # type: ignore[method-assign]

        def load(self, data: Any) -> datetime:
            return self._parse(data).replace(tzinfo=tz)

    return DjangoTimeZoneTimestamptzLoader


def use_c_timestamptz_loader(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: on a PostgreSQL connection with USE_TZ (Django's
    loader is replaced only where Django registered one)."""
    if connection.vendor != "postgresql" or connection.timezone is None:
        return
    from psycopg.postgres import adapters

    oid = adapters.types["timestamptz"].oid
    connection.connection.adapters.register_loader(oid, timestamptz_loader(connection.timezone))


def connect() -> None:
    connection_created.connect(use_c_timestamptz_loader, dispatch_uid="memproj.pgtypes.c_timestamptz")


def pgvector_version(cursor: Any) -> tuple[int, int]:
    """The installed pgvector's (major, minor), (0, 0) without the extension:
    halfvec needs 0.7, iterative HNSW scans 0.8."""
    cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
    row = cursor.fetchone()
    numbers = [int(part) for part in (row[0] if row else "").split(".")[:2] if part.isdigit()]
    major, minor = (numbers + [0, 0])[:2]
    return major, minor
