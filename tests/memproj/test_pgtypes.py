"""timestamptz values through psycopg's C parser (memproj/pgtypes.py): the
same values and the same tzinfo as Django's own loader gave."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql.psycopg_any import BaseTzLoader

from memproj.pgtypes import timestamptz_loader

VALUES = [
    dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=zoneinfo.ZoneInfo("Europe/Paris")),
    dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=dt.UTC),  # before the epoch
    dt.datetime(2126, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC),  # an episode kept "forever" (100 years)
    dt.datetime(2000, 2, 29, 23, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-9, minutes=-30))),
]


@pytest.mark.django_db
def test_connections_read_timestamptz_with_the_c_parser_in_djangos_time_zone():
    connection.ensure_connection()
    oid = psycopg.postgres.types["timestamptz"].oid
    loader = connection.connection.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
    assert loader is timestamptz_loader(connection.timezone)
    assert not issubclass(loader, BaseTzLoader)
    if psycopg.pq.__impl__ == "binary":
        instance = loader(oid, connection.connection)
        assert type(instance._parse.__self__).__module__.startswith("psycopg_binary")
        # The session's time zone is Django's: each value goes to C without a Python call of ours.
        assert type(instance.load.__self__).__module__.startswith("psycopg_binary")


@pytest.mark.django_db
def test_values_round_trip_exactly_with_djangos_tzinfo():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT v FROM unnest(%s::timestamptz[]) WITH ORDINALITY AS t(v, n) ORDER BY n", [[*VALUES, None]]
        )
        read = [row[0] for row in cursor.fetchall()]
    assert read[:-1] == VALUES and read[-1] is None
    assert all(value.tzinfo is dt.UTC for value in read[:-1])  # Django's timezone.utc, as its loader gave
    assert [v.utcoffset() for v in read[:-1]] == [dt.timedelta(0)] * len(VALUES)
