"""Upstream timestamps as an import reads them: whatever a store holds, a time
is either one memproj can store and read back (UTC, inside Python's calendar)
or none. A time PostgreSQL accepts but Python cannot read back (year 10000 or
year 0 once in UTC) would make every later read of the memory fail."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from memory.importers.base import parse_time


@pytest.mark.parametrize(
    "value",
    [
        "9999-12-31T23:00:00-05:00",  # year 10000 in UTC
        "0001-01-01T00:30:00+05:00",  # year 0 in UTC
        datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5))),
        datetime(1, 1, 1, 0, 30, tzinfo=timezone(timedelta(hours=5))),
        float("nan"),
        1e30,  # larger than any nanosecond count: not a time in some unit
        "-1e300",
        "not a time",
        True,
    ],
)
def test_a_time_without_a_readable_utc_value_is_no_time(value):
    assert parse_time(value) is None


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2024-03-01T10:00:00+02:00", datetime(2024, 3, 1, 8, 0, tzinfo=UTC)),
        ("2024-03-01T10:00:00", datetime(2024, 3, 1, 10, 0, tzinfo=UTC)),  # naive means UTC
        ("9999-12-31T18:00:00-05:00", datetime(9999, 12, 31, 23, 0, tzinfo=UTC)),
        (1_709_287_200, datetime(2024, 3, 1, 10, 0, tzinfo=UTC)),
        (1_709_287_200_000, datetime(2024, 3, 1, 10, 0, tzinfo=UTC)),  # milliseconds
        (1_709_287_200_000_000, datetime(2024, 3, 1, 10, 0, tzinfo=UTC)),  # microseconds
        ("1709287200000000000", datetime(2024, 3, 1, 10, 0, tzinfo=UTC)),  # nanoseconds, as text
    ],
)
def test_times_arrive_in_utc(value, expected):
    parsed = parse_time(value)
    assert parsed == expected and parsed.utcoffset() == timedelta(0)
