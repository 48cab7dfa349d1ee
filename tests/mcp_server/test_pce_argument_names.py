"""pce's search and activate name their text as the caller sent it: search's
argument is ``query``, activate's is ``q``; a refusal of it names that argument,
never the other tool's."""

from __future__ import annotations

import pytest

from tests.mcp_server.test_pce_active_contexts import _error

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pce(mcp_client_for):
    return lambda identity: mcp_client_for(identity, "pce")


@pytest.mark.parametrize(("tool", "argument"), [("pce.memory.search", "query"), ("pce.memory.activate", "q")])
async def test_a_refused_text_names_the_argument_the_tool_takes(tool, argument, member, pce, settings):
    limit = settings.MEMPROJ["MAX_QUERY_CHARS"]
    async with pce(member) as client:
        empty = await _error(client, tool, **{argument: "   "})
        long = await _error(client, tool, **{argument: "x" * (limit + 1)})
    assert (empty["code"], empty["message"]) == ("VALIDATION_ERROR", f"{argument} must not be empty.")
    assert (long["code"], long["message"]) == (
        "VALIDATION_ERROR",
        f"{argument} is {limit + 1} characters; the limit is {limit}. Split it up.",
    )
