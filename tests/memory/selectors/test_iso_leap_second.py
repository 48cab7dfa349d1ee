"""roampal's date filters read an RFC 3339 leap second as PostgreSQL does: the
``23:59:60`` of a UTC day (in whatever offset it is written, or in the current
timezone when it has none) is the next day's 00:00:00 UTC. A second 60 outside
the last minute of a UTC day is no instant (None: the filter refuses it)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from memory.selectors.collections import _iso

NEW_YEAR_2017 = datetime(2017, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("raw", "instant"),
    [
        ("2016-12-31T23:59:60Z", NEW_YEAR_2017),
        ("2016-12-31T23:59:60+00:00", NEW_YEAR_2017),
        ("2016-12-31T18:59:60-05:00", NEW_YEAR_2017),
        ("2017-01-01T05:29:60+05:30", NEW_YEAR_2017),
        ("2016-12-31 23:59:60Z", NEW_YEAR_2017),
        ("2016-12-31T23:59:60.5Z", NEW_YEAR_2017.replace(microsecond=500_000)),
        ("2016-12-31T23:59:60,25+00:00", NEW_YEAR_2017.replace(microsecond=250_000)),
        # The instant one second on is in Python's years though the :59 in UTC is not.
        ("0001-01-01T00:59:60+01:00", datetime(1, 1, 1, tzinfo=UTC)),
        # One second past Python's last instant: the end of the range, as _iso clamps any other.
        ("9999-12-31T23:59:60Z", datetime.max.replace(tzinfo=UTC)),
    ],
)
def test_a_leap_second_is_the_next_second(raw, instant):
    assert _iso(raw) == instant


@pytest.mark.parametrize(
    "raw",
    [
        "2016-12-31T12:00:60Z",
        "2016-12-31T23:59:60+01:00",
        "2016-12-31T23:58:60Z",
        "2016-12-31T23:59:61Z",
        "2016-12-31T23:60:00Z",
        "2016-02-30T23:59:60Z",
        "2016-12-31T23:59:60Zjunk",
    ],
)
def test_a_second_60_outside_the_last_minute_of_a_utc_day_is_no_instant(raw):
    assert _iso(raw) is None


def test_a_leap_second_without_an_offset_is_in_the_current_timezone():
    with timezone.override("America/New_York"):
        assert _iso("2016-12-31T18:59:60") == NEW_YEAR_2017
        assert _iso("2016-12-31T23:59:60") is None
    with timezone.override("UTC"):
        assert _iso("2016-12-31T23:59:60") == NEW_YEAR_2017
