"""memento's remember and recall answer every error as the Memento server's
plain sentences (their own renderer), also on plain HTTP when the body is
refused before the tool runs: found over real HTTP, where a body over the limit,
no JSON, too deep or with a key twice came back in the specification's JSON
shape with its INVALID_PARAMETER, while the same tool's other refusals are a
plain sentence under INVALID_ARGUMENT. The specification's tools keep theirs."""

from __future__ import annotations

import pytest

from tests.mcp_server.test_write_inputs_hostile import post, snapshot

pytestmark = pytest.mark.django_db(transaction=True)

BODIES = {
    "over the limit": ('{"query": "' + "x" * 300_000 + '"}', 413, "The body is over 262144 bytes."),
    "no JSON": ('{"query": "tea",}', 400, "The body must be a JSON object of the tool's arguments."),
    "a key twice": ('{"query": "tea", "query": "coffee"}', 400, "The body has the key 'query' twice"),
    "too deep": ('{"query": "tea", "limit": ' + "[" * 5000 + "]" * 5000 + "}", 400, "The body is nested too deeply"),
}


@pytest.mark.parametrize("tool", ["recall", "remember"])
@pytest.mark.parametrize("case", sorted(BODIES))
async def test_a_refused_body_is_a_plain_sentence_for_the_memento_servers_tools(member, tool, case):
    body, status, says = BODIES[case]
    before = await snapshot()
    response = await post(member, f"/api/memento/{tool}", body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT", error
    assert error["message"].startswith(says), error
    assert await snapshot() == before


@pytest.mark.parametrize("case", sorted(BODIES))
async def test_the_specifications_tools_keep_their_json_refusals(member, case):
    body, status, says = BODIES[case]
    response = await post(member, "/api/memento/search_memories", body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_PARAMETER", error
    assert error["message"].lower().startswith(says.lower()), error
