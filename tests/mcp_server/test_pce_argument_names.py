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


async def test_an_unknown_key_inside_an_argument_is_named_with_the_keys_that_argument_takes(member, pce):
    """A nested object's extra key: the refusal names that key and where it is,
    and lists the nested object's keys, not the tool's arguments (nor calls a
    valid key unknown)."""
    at = "2026-12-07T08:00:00Z"
    async with pce(member) as client:
        nested = await _error(client, "pce.memory.upsert", text="a decision", provenance={"at": at, "extra": 1})
        deeper = await _error(
            client, "pce.memory.upsert", text="a decision", provenance={"at": at, "git": {"commit": "abc1234", "x": 1}}
        )
        top = await _error(client, "pce.memory.upsert", text="a decision", provenance={"at": at}, extra=1)
    assert nested["code"] == "VALIDATION_ERROR"
    assert nested["message"].startswith("unknown key 'extra' in provenance; it takes: actor, at, git,"), nested
    assert "'at'" not in nested["message"] and "boundary_class" not in nested["message"]
    assert deeper["message"] == "unknown key 'x' in provenance.git; it takes: commit, files, repo, url.", deeper
    assert top["message"].startswith("unknown argument 'extra'; this tool takes: boundary_class, content_hash,"), top
