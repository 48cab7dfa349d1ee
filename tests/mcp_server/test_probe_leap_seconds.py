"""pce's provenance.at is an RFC 3339 date-time (the spec's ``format``), and
RFC 3339 has leap seconds: ``23:59:60`` in the last minute of a UTC day, in
whatever offset it is written (section 5.7). Found over real HTTP: a claim whose
provenance is the leap second that ended 2016 was refused as not RFC 3339,
because datetime cannot hold second 60. A second 60 anywhere else is still
refused; the value is kept as written."""

from __future__ import annotations

import uuid

import pytest

from memory.models import Memory
from tests.conftest import call
from tests.mcp_server.test_write_inputs_hostile import pce_code, refused

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    "at",
    [
        "2016-12-31T23:59:60Z",
        "2016-12-31T23:59:60.5z",
        "2016-12-31T18:59:60-05:00",
        "2017-01-01T05:29:60+05:30",
        "2015-06-30T23:59:60+00:00",
    ],
)
async def test_a_leap_second_is_an_rfc3339_date_time(member, mcp_client_for, at):
    async with mcp_client_for(member, "pce") as client:
        claim = (await call(client, "pce.memory.upsert", text=f"written at {at}", provenance={"at": at}))["data"]["id"]
    stored = await Memory.objects.aget(pk=uuid.UUID(claim.removeprefix("clm_")))
    assert stored.metadata["provenance"]["at"] == at


@pytest.mark.parametrize(
    "at",
    [
        "2016-12-31T12:00:60Z",  # not the last minute of the day
        "2016-12-31T23:59:60+01:00",  # 22:59:60 UTC
        "2016-12-31T23:59:61Z",
        "0001-01-01T00:59:60+01:00",  # the last minute of year 0 in UTC
    ],
)
async def test_a_second_60_outside_the_last_minute_of_a_utc_day_is_refused(member, mcp_client_for, at):
    async with mcp_client_for(member, "pce") as client:
        text = await refused(
            client, "pce.memory.upsert", {"text": "a claim", "provenance": {"at": at}}, "INVALID_ARGUMENT"
        )
    assert pce_code(text) == "VALIDATION_ERROR"
