"""More hostile input to the write and feedback paths, over MCP (the
in-process client) and plain HTTP (/api, roampal's hooks, the LangGraph store),
in the style of test_write_inputs_hostile.py (whose helpers it reuses): each is
refused with a coded error in the dialect's own vocabulary, the same over both,
and changes nothing. One section per rule; each says why."""

from __future__ import annotations

import json
import uuid

import pytest

from memory.models import Exchange, Memory
from tests.conftest import call
from tests.mcp_server.test_write_inputs_hostile import AT, post, refused, snapshot

pytestmark = pytest.mark.django_db(transaction=True)


# --- identifiers ----------------------------------------------------------------------------------
# A client-chosen name (a conversation id, a store key, a namespace segment) is
# printable text: a control character (a bell, a terminal escape, NEL), a format
# character (a direction override, a byte order mark) or a line or paragraph
# separator is refused, as a label refuses them. Such a name is shown back in
# logs, the admin and answers, where it rings, recolours or reorders what follows.

UNPRINTABLE = ["\x07", "\x1b[31m", "\u0085", "\u2028", "\u2029", "\u202e", "\ufeff", "\n"]


def unprintable(field: str, char: str) -> str:
    """The refusal of a name that holds ``char`` (the first character it cannot hold)."""
    return f"{field} must not contain control, format or line separator characters (it contains U+{ord(char[0]):04X})."


@pytest.mark.parametrize("char", UNPRINTABLE)
async def test_a_conversation_id_that_is_not_printable_is_refused(member, char):
    conversation = f"c-1{char}"
    for route, body in [
        ("/api/hooks/stop", {"conversation_id": conversation, "assistant_response": "ok"}),
        ("/api/hooks/get-context", {"query": "tea", "conversation_id": conversation}),
    ]:
        before = await snapshot()
        response = await post(member, route, json.dumps(body))
        assert response.status_code == 422, response.text
        assert response.json() == {"error": unprintable("conversation_id", char), "code": "INVALID_ARGUMENT"}
        assert await snapshot() == before


@pytest.mark.parametrize("char", UNPRINTABLE)
async def test_a_store_key_or_namespace_that_is_not_printable_is_refused(member, char):
    bad = f"k{char}1"
    for op, field in [
        ({"op": "put", "namespace": ["a"], "key": bad, "value": {"content": "x"}}, "subject"),
        ({"op": "put", "namespace": ["a", bad], "key": "k", "value": {"content": "x"}}, "namespace segment"),
        ({"op": "get", "namespace": ["a"], "key": bad}, "key"),
    ]:
        before = await snapshot()
        response = await post(member, "/api/langmem/store/", json.dumps({"ops": [op]}))
        assert response.status_code == 400, response.text
        assert response.json()["error"] == {"code": "INVALID_ARGUMENT", "message": unprintable(field, char)}
        assert await snapshot() == before


async def test_a_langmem_namespace_option_that_is_not_printable_is_refused(member):
    before = await snapshot()
    response = await post(
        member,
        "/api/langmem/manage_memory?namespace=memories,{user_id}&configurable.user_id=u%1B%5B31m",
        json.dumps({"content": "the user likes tea"}),
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "code": "INVALID_ARGUMENT",
        "message": "ValueError: " + unprintable("namespace segment", "\x1b"),
    }
    assert await snapshot() == before


@pytest.mark.parametrize("name", ["c-1", "conversation 7", "café 🙂", "Ⅻ 名前"])
async def test_printable_identifiers_are_kept_as_given(member, name):
    response = await post(member, "/api/hooks/stop", json.dumps({"conversation_id": name, "assistant_response": "ok"}))
    assert response.status_code == 200, response.text
    assert await Exchange.objects.filter(conversation_id=name).aexists()


# --- pce: provenance URLs -------------------------------------------------------------------------
# A provenance URL is shown back in answers (search's provenance, an activation's
# evidence) and may be rendered as a link: only an absolute http or https URL is
# taken (a javascript: or data: URL runs when followed).

NOT_HTTP = [
    "javascript:alert(1)",
    "JavaScript:alert(document.cookie)",
    "data:text/html,<script>alert(1)</script>",
    "vbscript:msgbox(1)",
    "file:///etc/passwd",
    "ftp://example.com/file",
    "mailto:someone@example.com",
    "//example.com/path",
    "/relative/path",
    "https://",
    "https:///path",
    "http://exa mple.com/",
    "https://example.com/\njavascript:alert(1)",
    " https://example.com/",
]


@pytest.mark.parametrize("url", NOT_HTTP)
@pytest.mark.parametrize("where", ["provenance.url", "provenance.git.url"])
async def test_a_provenance_url_must_be_http_or_https(member, mcp_client_for, url, where):
    provenance = {"at": AT, "url": url} if where == "provenance.url" else {"at": AT, "git": {"url": url}}
    arguments = {"text": "a claim with a source", "provenance": provenance}
    async with mcp_client_for(member, "pce") as client:
        text = await refused(client, "pce.memory.upsert", arguments, "INVALID_ARGUMENT")
    error = json.loads(text)["error"]
    assert (error["code"], error["message"]) == ("VALIDATION_ERROR", f"{where} must be an absolute http or https URL.")
    before = await snapshot()
    response = await post(member, "/api/pce/pce.memory.upsert", json.dumps(arguments))
    assert response.status_code == 422, response.text
    assert {k: response.json()["error"][k] for k in ("code", "message")} == {k: error[k] for k in ("code", "message")}
    assert await snapshot() == before


@pytest.mark.parametrize(
    "url", ["https://example.com/a?b=c#d", "HTTP://Example.COM", "http://[::1]:8080/x", "https://user@host/p"]
)
async def test_http_and_https_urls_are_kept_as_written(member, mcp_client_for, url):
    async with mcp_client_for(member, "pce") as client:
        claim = (
            await call(client, "pce.memory.upsert", text=f"sourced from {url}", provenance={"at": AT, "url": url})
        )["data"]["id"]
    stored = await Memory.objects.aget(pk=uuid.UUID(claim.removeprefix("clm_")))
    assert stored.metadata["provenance"]["url"] == url
