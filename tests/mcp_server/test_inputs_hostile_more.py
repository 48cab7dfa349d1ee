"""More hostile input to the write and feedback paths, over MCP (the
in-process client) and plain HTTP (/api, roampal's hooks, the LangGraph store),
in the style of test_write_inputs_hostile.py (whose helpers it reuses): each is
refused with a coded error in the dialect's own vocabulary, the same over both,
and changes nothing. One section per rule; each says why."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from memory import api
from memory.models import Exchange, Memory, MemoryEvent
from tests.conftest import call
from tests.mcp_server.test_write_inputs_hostile import AT, pce_code, post, refused, snapshot

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


# --- outcomes on expired memories -----------------------------------------------------------------
# A memory past its TTL is found by no read (the expiry sweep deletes it later):
# it takes no outcome, as a forgotten one takes none. Checked under the row lock.


async def expire(memory_id: Any) -> str:
    """Put a memory past its TTL, as the clock would, before the sweep retires it."""
    expired_at = timezone.now() - timedelta(minutes=5)
    await Memory.objects.filter(pk=memory_id).aupdate(expires_at=expired_at)
    return expired_at.isoformat()


COUNTERS = ("success_count", "harmful_count", "applied_count", "outcome_score", "maturity")


async def test_an_outcome_on_an_expired_rule_is_not_found(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        rule = (await call(client, "memory_store_rule", content="summarise long threads first"))["id"]
        await call(client, "memory_mark_helpful", rule_id=rule)
        expired_at = await expire(rule)
        counters = await Memory.objects.filter(pk=rule).values(*COUNTERS).aget()
        for tool, arguments in [
            ("memory_mark_helpful", {"rule_id": rule}),
            ("memory_mark_harmful", {"rule_id": rule, "reason": "it was wrong"}),
        ]:
            text = await refused(client, tool, arguments, "NOT_FOUND")
            assert text == f"[NOT_FOUND] rule {rule} expired at {expired_at}: outcomes apply to active memories only."
    before = await snapshot()
    response = await post(member, "/api/memory/memory_mark_helpful", json.dumps({"rule_id": rule}))
    assert response.status_code == 404, response.text
    assert response.json()["error"] == {"code": "NOT_FOUND", "message": text}
    assert await snapshot() == before
    assert await Memory.objects.filter(pk=rule).values(*COUNTERS).aget() == counters


async def test_pce_feedback_on_an_expired_claim_is_an_unknown_claim(member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        claim = (await call(client, "pce.memory.upsert", text="the cache lives 10 min", provenance={"at": AT}))["data"][
            "id"
        ]
        await expire(uuid.UUID(claim.removeprefix("clm_")))
        text = await refused(client, "pce.memory.feedback", {"claim_id": claim, "signal": "helpful"}, "UNKNOWN_CLAIM")
    assert pce_code(text) == "UNKNOWN_CLAIM"
    assert json.loads(text)["error"]["details"] == {"claim_id": claim}
    before = await snapshot()
    response = await post(member, "/api/pce/pce.memory.feedback", json.dumps({"claim_id": claim, "signal": "harmful"}))
    assert response.status_code == 404 and response.json()["error"]["code"] == "UNKNOWN_CLAIM", response.text
    assert await snapshot() == before


async def test_a_scored_memory_that_expires_before_its_outcome_lands_is_skipped(member, mcp_client_for, monkeypatch):
    """score_response looks the ids up (an expired memory is not found there),
    then applies each outcome in its own transaction: one that expired in
    between is skipped like an unknown id, not scored."""
    real = api.collection_ids
    expired: list[Any] = []

    def lookup_then_expire(caller: Any, ids: Any) -> Any:
        found = real(caller, ids)
        for memory in found.values():
            Memory.objects.filter(pk=memory.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
            expired.append(memory.pk)
        return found

    async with mcp_client_for(member, "roampal") as client:
        added = await call(client, "add_to_memory_bank", content="the user prefers green tea")
        monkeypatch.setattr(api, "collection_ids", lookup_then_expire)
        scored = await call(client, "score_response", outcome="worked", memory_scores={added["id"]: "worked"})
        monkeypatch.setattr(api, "collection_ids", real)
    assert expired
    assert scored["scored"] == {} and scored["skipped"] == [added["id"]] and scored["updated"] == 0
    row = await Memory.objects.aget(tenant_id=member.caller.tenant_id, collection="memory_bank")
    assert (row.applied_count, row.success_count) == (0, 0)
    assert not await MemoryEvent.objects.filter(memory_id=row.pk, event_type__startswith="marked_").aexists()


# --- confirming what is gone ----------------------------------------------------------------------
# Confirming a forgotten, superseded or expired memory answers as an outcome on it
# does (memory_feedback): NOT_FOUND, naming the successor of a superseded one.


async def test_confirming_a_forgotten_fact_is_not_found(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        fact = (await call(client, "memory_store_fact", subject="user", predicate="pet", content="has a cat"))["id"]
        await call(client, "memory_forget", type="fact", id=fact)
        text = await refused(client, "memory_confirm", {"type": "fact", "id": fact}, "NOT_FOUND")
    assert text == (
        f"[NOT_FOUND] fact {fact} was forgotten (retracted), so it cannot be confirmed; only an active fact can be."
    )
    before = await snapshot()
    response = await post(member, "/api/memory/memory_confirm", json.dumps({"type": "fact", "id": fact}))
    assert response.status_code == 404, response.text
    assert response.json()["error"] == {"code": "NOT_FOUND", "message": text}
    assert await snapshot() == before


async def test_confirming_a_superseded_fact_names_its_successor(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        old = (await call(client, "memory_store_fact", subject="user", predicate="city", content="Austin"))["id"]
        new = (await call(client, "memory_store_fact", subject="user", predicate="city", content="Boston"))["id"]
        text = await refused(client, "memory_confirm", {"type": "fact", "id": old}, "NOT_FOUND")
        assert text == f"[NOT_FOUND] fact {old} was superseded by {new}, so it cannot be confirmed; confirm {new}."
        await call(client, "memory_confirm", type="fact", id=new)


async def test_confirming_an_expired_rule_is_not_found(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        rule = (await call(client, "memory_store_rule", content="cite the ticket number"))["id"]
        expired_at = await expire(rule)
        confirmed_at = (await Memory.objects.aget(pk=rule)).last_confirmed_at
        text = await refused(client, "memory_confirm", {"type": "rule", "id": rule}, "NOT_FOUND")
    assert text == (
        f"[NOT_FOUND] rule {rule} expired at {expired_at}, so it cannot be confirmed; only an active rule can be."
    )
    assert (await Memory.objects.aget(pk=rule)).last_confirmed_at == confirmed_at


async def test_a_reviewer_superseding_a_rule_leaves_it_unconfirmable(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        old = (await call(client, "memory_store_rule", content="reply in English"))["id"]
        new = (await call(client, "memory_store_rule", content="reply in the user's language"))["id"]
    await sync_to_async(api.memory_supersede)(caller=member.caller, old_id=old, new_id=new)
    async with mcp_client_for(member) as client:
        outcome = await refused(client, "memory_mark_helpful", {"rule_id": old}, "NOT_FOUND")
        confirm = await refused(client, "memory_confirm", {"type": "rule", "id": old}, "NOT_FOUND")
    assert outcome == f"[NOT_FOUND] rule {old} was superseded by {new}: send the outcome to {new}."
    assert confirm == f"[NOT_FOUND] rule {old} was superseded by {new}, so it cannot be confirmed; confirm {new}."


# --- roampal: the Stop hook -----------------------------------------------------------------------
# An exchange needs an answer: a blank one (spaces, a newline, invisible
# characters) was stored as a working memory "User: ...\n\nAssistant:" that the
# next turn asked to have scored. It is refused as an empty one is, with the
# same words.


@pytest.mark.parametrize("answer", ["", " ", "\n\t ", "\u200b", " \u202e\ufeff "])
async def test_a_blank_assistant_response_is_refused(member, answer):
    before = await snapshot()
    body = {"conversation_id": "c-1", "user_message": "which port?", "assistant_response": answer}
    response = await post(member, "/api/hooks/stop", json.dumps(body))
    assert response.status_code == 422, response.text
    message = response.json()["error"]
    assert response.json()["code"] == "INVALID_ARGUMENT"
    assert message.startswith("assistant_response must not be empty"), message
    assert await snapshot() == before


@pytest.mark.parametrize("conversation", ["", " ", "\t"])
async def test_a_blank_conversation_id_is_refused_in_one_way(member, conversation):
    before = await snapshot()
    body = {"conversation_id": conversation, "assistant_response": "port 8443"}
    response = await post(member, "/api/hooks/stop", json.dumps(body))
    assert response.status_code == 422, response.text
    assert response.json() == {"error": "conversation_id must be a non-empty string.", "code": "INVALID_ARGUMENT"}
    assert await snapshot() == before


async def test_an_answer_with_text_around_blanks_is_stored_as_given(member):
    body = {"conversation_id": "c-1", "user_message": "", "assistant_response": "  port 8443\n"}
    response = await post(member, "/api/hooks/stop", json.dumps(body))
    assert response.status_code == 200, response.text
    assert (await Exchange.objects.aget(conversation_id="c-1")).assistant_response == "  port 8443\n"


# --- duplicate keys -------------------------------------------------------------------------------
# json.loads keeps the last of a repeated key: {"content": "a", "content": "b"}
# was stored as "b", while a proxy, a log or a policy check reading the same
# bytes may take "a". A body with a key twice in one object, at any depth, is
# refused with the route's invalid-argument error. (The MCP endpoints refuse such
# a message before the SDK parses it: test_mcp_repeated_keys.py.)

TWICE = "the body has the key {key!r} twice in one object; send each key once."


async def test_a_tool_route_refuses_a_repeated_key(member):
    for body, key in [
        ('{"content": "a", "content": "b"}', "content"),
        ('{"content": "a", "metadata": {"k": 1, "k": 2}}', "k"),
        ('{"content": "a", "tags": ["x", {"t": 1, "t": 1}]}', "t"),
    ]:
        before = await snapshot()
        response = await post(member, "/api/memory/memory_store_rule", body)
        assert response.status_code == 400, response.text
        assert response.json()["error"] == {
            "code": "INVALID_ARGUMENT",
            "message": "[INVALID_ARGUMENT] " + TWICE.format(key=key),
        }
        assert await snapshot() == before
    # pce's vocabulary: a nested provenance with "at" twice.
    body = '{"text": "a claim", "provenance": {"at": "' + AT + '", "at": "' + AT + '"}}'
    response = await post(member, "/api/pce/pce.memory.upsert", body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["message"]) == ("VALIDATION_ERROR", TWICE.format(key="at"))
    assert await snapshot() == before


async def test_the_store_and_hook_routes_refuse_a_repeated_key(member):
    before = await snapshot()
    put = '{"op": "put", "namespace": ["a"], "key": "k", "value": {"content": "x", "content": "y"}}'
    response = await post(member, "/api/langmem/store/", '{"ops": [' + put + "]}")
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {"code": "INVALID_ARGUMENT", "message": TWICE.format(key="content")}
    for route, body, key in [
        (
            "/api/hooks/stop",
            '{"conversation_id": "c", "assistant_response": "a", "assistant_response": "b"}',
            "assistant_response",
        ),
        ("/api/hooks/get-context", '{"query": "a", "query": "b"}', "query"),
        ("/api/search", '{"query": "tea", "limit": 5, "limit": 50}', "limit"),
        ("/api/ingest", '{"title": "A", "title": "B", "content": "Chapter one."}', "title"),
    ]:
        response = await post(member, route, body)
        assert response.status_code == 422, (route, response.text)
        assert response.json() == {"error": TWICE.format(key=key), "code": "INVALID_ARGUMENT"}, route
    assert await snapshot() == before


async def test_the_same_key_in_different_objects_is_no_repeat(member):
    entity = {"id": "e1", "type": "Artifact", "name": "Stripe", "attrs": {"text": "a note", "name": {"name": 1}}}
    body = {"text": "Stripe retries webhooks", "provenance": {"at": AT, "note": "text"}, "entities": [entity]}
    response = await post(member, "/api/pce/pce.memory.upsert", json.dumps(body))
    assert response.status_code == 200, response.text


# A write per dialect that takes no connection options, sent with a tenant selector in the query.
OPTIONLESS_WRITES = [
    ("memory", "memory_store_episode", {"content": "asked about tea", "butler": "general"}),
    ("memento", "store_memory", {"content": "the user likes tea"}),
    ("pce", "pce.memory.upsert", {"text": "the user likes tea", "provenance": {"at": AT}}),
    ("roampal", "add_to_memory_bank", {"content": "the user likes tea"}),
]


@pytest.mark.parametrize(("toolset", "tool", "arguments"), OPTIONLESS_WRITES, ids=[w[0] for w in OPTIONLESS_WRITES])
@pytest.mark.parametrize("query", ["tenant=other-tenant", "tenant_id=x&foo=bar"])
async def test_a_query_option_on_an_endpoint_that_takes_none_is_refused_and_changes_nothing(
    member, toolset, tool, arguments, query
):
    """The tenant comes from the token: a `?tenant=` (or any other option) on an
    endpoint that takes no connection options is refused in the dialect's own
    error, never silently ignored while the token's tenant is written."""
    before = await snapshot()
    response = await post(member, f"/api/{toolset}/{tool}?{query}", json.dumps(arguments))
    assert response.status_code in (400, 422), response.text
    assert "unknown connection option" in response.text and "tenant" in response.text, response.text
    assert await snapshot() == before
    plain = await post(member, f"/api/{toolset}/{tool}", json.dumps(arguments))
    assert plain.status_code == 200, plain.text
