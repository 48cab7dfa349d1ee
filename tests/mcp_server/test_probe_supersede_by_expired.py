"""memento's supersede_memory with a replacement past its TTL (a pce claim of a
session scope, whose policy TTL has run out, is a fact memento reads until then):
found through the MCP SDK client, where the live memory was marked superseded by
one no read finds any more, so both vanished from every search. The replacing
memory must be one a read finds, as for a superseded or forgotten one: refused
in memento's words, and the old memory stays found."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import Memory
from tests.conftest import call

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_memory_past_its_ttl_replaces_nothing(member, mcp_client_for):
    async with mcp_client_for(member, "memento") as memento:
        old = (await call(memento, "store_memory", content="The user lives in Seattle"))["created"]["id"]
        new = (await call(memento, "store_memory", content="The user moved to Austin"))["created"]["id"]
        # The replacement's TTL runs out (as a policy TTL does) before the client supersedes.
        await Memory.objects.filter(pk=uuid.UUID(new)).aupdate(expires_at=timezone.now() - timedelta(seconds=1))
        result = await memento.call_tool("supersede_memory", {"old_memory_id": old, "new_memory_id": new})
        assert result.is_error
        error = json.loads(result.content[0].text)["error"]
        assert error["code"] == "INVALID_PARAMETER", error
        assert f"the replacing memory {new} expired at" in error["message"], error
        found = await call(memento, "search_memories", query="where does the user live")
    assert [m["id"] for m in found["memories"]] == [old]
    stored = await Memory.objects.aget(pk=uuid.UUID(old))
    assert (stored.validity, stored.superseded_by_id) == ("active", None)
