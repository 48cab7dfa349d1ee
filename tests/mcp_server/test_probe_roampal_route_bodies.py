"""roampal's own routes (/api/hooks/*, /api/search, /api/ingest), as a careless
or hostile client sends them, found over real HTTP:

- an unknown field's name came back whole in the refusal (a 200 KB name, a
  200 KB error); it is quoted as a 50-character excerpt;
- get-context's recent_messages, which the route reads no further, took a lone
  surrogate or a NUL without a word, where every other text of these bodies is
  refused; every string of a body, keys too, is now checked as text."""

from __future__ import annotations

import json

import pytest

from tests.mcp_server.test_write_inputs_hostile import post, snapshot

pytestmark = pytest.mark.django_db(transaction=True)

HUGE = "k" * 200_000
BODIES = {
    "/api/hooks/stop": {"conversation_id": "c-1", "assistant_response": "ok"},
    "/api/hooks/get-context": {"query": "tea"},
    "/api/search": {"query": "tea"},
    "/api/ingest": {"title": "t", "content": "a short book"},
}


@pytest.mark.parametrize("path", sorted(BODIES))
async def test_an_unknown_field_is_named_as_an_excerpt(member, path):
    before = await snapshot()
    response = await post(member, path, json.dumps({**BODIES[path], HUGE: 1}))
    assert response.status_code == 422, response.text[:200]
    assert len(response.content) < 1_000
    assert response.json() == {"error": "k" * 47 + "...: Extra inputs are not permitted", "code": "INVALID_ARGUMENT"}
    assert await snapshot() == before


@pytest.mark.parametrize(
    ("recent", "says"),
    [
        ([{"role": "user", "content": "\ud800"}], "recent_messages[0].content is not valid Unicode text"),
        (["fine", "nul \x00 here"], "recent_messages[1] must not contain NUL characters"),
        ([{"\udc00": "x"}], "a key of recent_messages[0] is not valid Unicode text"),
    ],
)
async def test_recent_messages_are_checked_as_text(member, recent, says):
    before = await snapshot()
    response = await post(member, "/api/hooks/get-context", json.dumps({"query": "tea", "recent_messages": recent}))
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["code"] == "INVALID_ARGUMENT" and body["error"].startswith(says), body
    assert await snapshot() == before


async def test_a_lone_surrogate_in_a_text_field_is_named_plainly(member):
    body = {"conversation_id": "c-1", "assistant_response": "ok", "transcript": "\ud800"}
    response = await post(member, "/api/hooks/stop", json.dumps(body))
    assert response.status_code == 422, response.text
    assert response.json() == {
        "error": "transcript is not valid Unicode text (it contains a lone surrogate).",
        "code": "INVALID_ARGUMENT",
    }
