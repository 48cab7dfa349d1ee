"""Hostile input to every dialect's write, update and delete tools, over MCP
(the in-process client) and plain HTTP (/api, roampal's hooks, the LangGraph
store): each is refused with a coded error in the dialect's own vocabulary
(the same text over both) and changes nothing (memories, events, entities,
relations, outcome reports and exchanges counted before and after), or, where
the input is a legitimate repeat (a second forget), answers without writing
again. One section per rule; each says why."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async

from memory import api
from memory.models import Entity, Exchange, Memory, MemoryEvent, OutcomeReport, Relation
from tests.conftest import call
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

AT = "2025-06-01T12:00:00Z"


async def snapshot() -> tuple[int, ...]:
    """What a refused call must leave as it was."""
    return (
        await Memory.objects.acount(),
        await MemoryEvent.objects.acount(),
        await Entity.objects.acount(),
        await Relation.objects.acount(),
        await OutcomeReport.objects.acount(),
        await Exchange.objects.acount(),
    )


async def post(identity: Any, path: str, body: bytes | str, content_type: str = "application/json") -> httpx.Response:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {identity.token}", "Content-Type": content_type}
    raw = body.encode() if isinstance(body, str) else body
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, content=raw, headers=headers)


async def refused(client: Any, tool: str, arguments: dict[str, Any], code: str) -> str:
    """The call fails with ``code`` behind its text, changing nothing; returns the text."""
    before = await snapshot()
    result = await client.call_tool(tool, arguments)
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error, f"{tool} unexpectedly succeeded: {text}"
    assert result.structured_content is None
    assert (result.meta or {}).get("io.memproj/error-code") == code, (result.meta, text)
    assert "INTERNAL" not in text
    assert await snapshot() == before
    return text


def pce_code(text: str) -> str:
    return json.loads(text)["error"]["code"]


# --- labels ---------------------------------------------------------------------------------------
# A label (scope, butler, session id) is the whole value: a pattern's ``$`` also
# matches before a final newline, so "global\n" was taken and stored as a scope of its own.

LABELLED = [
    ("memory_store_rule", {"content": "answer in French", "scope": "global\n"}, "scope"),
    ("memory_store_fact", {"subject": "user", "predicate": "city", "content": "Austin", "scope": "health\n"}, "scope"),
    ("memory_store_episode", {"content": "asked about recipes", "butler": "general\n"}, "butler"),
    (
        "memory_store_episode",
        {"content": "asked about recipes", "butler": "general", "session_id": "s-1\n"},
        "session_id",
    ),
]


@pytest.mark.parametrize(("tool", "arguments", "field"), LABELLED)
async def test_a_label_with_a_trailing_newline_is_refused(member, mcp_client_for, tool, arguments, field):
    async with mcp_client_for(member) as client:
        text = await refused(client, tool, arguments, "INVALID_ARGUMENT")
    assert text.startswith(f"[INVALID_ARGUMENT] {field} must be 1-100 characters")
    before = await snapshot()
    response = await post(member, f"/api/memory/{tool}", json.dumps(arguments))
    assert response.status_code == 422, response.text
    assert response.json()["error"]["message"] == text
    assert await snapshot() == before


# A conversation id with a newline is refused as any unprintable name is
# (test_inputs_hostile_more.py, identifiers), before it could become a session.


# --- invisible text -------------------------------------------------------------------------------
# Text of invisible characters alone (zero-width, direction and format marks) is empty.

INVISIBLE = ["\u200b", "\u200b\u200f\u2060", " \u202e \ufeff "]


@pytest.mark.parametrize("content", INVISIBLE)
async def test_text_of_invisible_characters_alone_is_empty(member, mcp_client_for, content):
    async with mcp_client_for(member) as client:
        text = await refused(client, "memory_store_rule", {"content": content}, "INVALID_ARGUMENT")
        assert text == "[INVALID_ARGUMENT] content must not be empty (it holds only invisible characters)."
        await refused(
            client, "memory_store_fact", {"subject": content, "predicate": "p", "content": "c"}, "INVALID_ARGUMENT"
        )
    async with mcp_client_for(member, "memento") as client:
        text = await refused(client, "store_memory", {"content": content}, "INVALID_ARGUMENT")
    assert json.loads(text)["error"]["code"] == "INVALID_PARAMETER"
    # Text with something to read between the marks is text.
    async with mcp_client_for(member) as client:
        await call(client, "memory_store_rule", content=f"\u200bcall me Ishmael{content}")


# --- numbers --------------------------------------------------------------------------------------
# -0.0 is within every bound; it is stored and answered as 0.


async def test_negative_zero_is_stored_and_answered_as_zero(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        stored = await call(client, "memory_store_episode", content="a quiet day", butler="general", importance=-0.0)
    assert json.dumps(stored["importance"]) == "0.0"
    async with mcp_client_for(member, "memento") as client:
        created = (await call(client, "store_memory", content="the user is neutral", confidence=-0.0))["created"]
    assert json.dumps(created["confidence"]) == "0.0"


# --- outcomes on memories that are gone -----------------------------------------------------------
# An outcome applies only to an active memory: a forgotten or superseded one is not
# found, as no read finds it (pce: UNKNOWN_CLAIM, its only feedback error).


async def test_an_outcome_on_a_forgotten_rule_is_not_found_and_changes_nothing(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        rule = (await call(client, "memory_store_rule", content="always test the migrations"))["id"]
        await call(client, "memory_mark_helpful", rule_id=rule)
        await call(client, "memory_forget", type="rule", id=rule)
        counters = await Memory.objects.filter(pk=rule).values("success_count", "harmful_count", "applied_count").aget()
        for tool, arguments in [
            ("memory_mark_helpful", {"rule_id": rule}),
            ("memory_mark_harmful", {"rule_id": rule, "reason": "it was wrong"}),
        ]:
            text = await refused(client, tool, arguments, "NOT_FOUND")
            assert text == f"[NOT_FOUND] rule {rule} was forgotten (retracted): outcomes apply to active memories only."
        after = await Memory.objects.filter(pk=rule).values("success_count", "harmful_count", "applied_count").aget()
    assert after == counters
    before = await snapshot()
    response = await post(member, "/api/memory/memory_mark_helpful", json.dumps({"rule_id": rule}))
    assert response.status_code == 404, response.text
    assert await snapshot() == before


async def test_an_outcome_on_a_superseded_rule_names_its_successor(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        old = (await call(client, "memory_store_rule", content="reply in English"))["id"]
        new = (await call(client, "memory_store_rule", content="reply in the user's language"))["id"]
    # A rule is superseded by a merge of the conflict check or by a reviewer (memento supersedes facts only).
    await sync_to_async(api.memory_supersede)(caller=member.caller, old_id=old, new_id=new)
    async with mcp_client_for(member) as client:
        text = await refused(client, "memory_mark_helpful", {"rule_id": old}, "NOT_FOUND")
        assert text == f"[NOT_FOUND] rule {old} was superseded by {new}: send the outcome to {new}."
        await call(client, "memory_mark_helpful", rule_id=new)


async def test_pce_feedback_on_a_deleted_or_replaced_claim_is_an_unknown_claim(member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        deleted = (await call(client, "pce.memory.upsert", text="the API is frozen", provenance={"at": AT}))["data"][
            "id"
        ]
        replaced = (await call(client, "pce.memory.upsert", text="use v1", provenance={"at": AT}))["data"]["id"]
        current = (await call(client, "pce.memory.upsert", text="use v2", provenance={"at": AT}))["data"]["id"]
    as_uuid = {claim: str(uuid.UUID(claim.removeprefix("clm_"))) for claim in (deleted, replaced, current)}
    async with mcp_client_for(member) as client:
        await call(client, "memory_forget", type="fact", id=as_uuid[deleted])
    async with mcp_client_for(member, "memento") as client:
        await call(client, "supersede_memory", old_memory_id=as_uuid[replaced], new_memory_id=as_uuid[current])
    async with mcp_client_for(member, "pce") as client:
        for claim in (deleted, replaced):
            text = await refused(
                client, "pce.memory.feedback", {"claim_id": claim, "signal": "outdated"}, "UNKNOWN_CLAIM"
            )
            assert pce_code(text) == "UNKNOWN_CLAIM"
            assert json.loads(text)["error"]["details"] == {"claim_id": claim}
        await call(client, "pce.memory.feedback", claim_id=current, signal="helpful")
    before = await snapshot()
    response = await post(
        member, "/api/pce/pce.memory.feedback", json.dumps({"claim_id": deleted, "signal": "harmful"})
    )
    assert response.status_code == 404 and response.json()["error"]["code"] == "UNKNOWN_CLAIM", response.text
    assert await snapshot() == before


async def test_an_outcome_racing_a_forget_is_never_recorded_after_it(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        for attempt in range(4):
            rule = (await call(client, "memory_store_rule", content=f"race rule {attempt}"))["id"]
            helpful, forgotten = await asyncio.gather(
                client.call_tool("memory_mark_helpful", {"rule_id": rule}),
                client.call_tool("memory_forget", {"type": "rule", "id": rule}),
            )
            assert not forgotten.is_error
            assert not helpful.is_error or "[NOT_FOUND]" in helpful.content[0].text
            kinds = [
                e
                async for e in MemoryEvent.objects.filter(memory_id=rule)
                .order_by("id")
                .values_list("event_type", flat=True)
            ]
            assert kinds[-1] == "retracted", kinds


async def test_a_scored_memory_forgotten_before_its_outcome_lands_is_skipped(member, mcp_client_for, monkeypatch):
    """score_response looks the ids up, then applies each outcome in its own
    transaction: a memory forgotten in between is skipped like an unknown id."""
    real = api.collection_ids

    def lookup_then_forget(caller: Any, ids: Any) -> Any:
        found = real(caller, ids)
        for memory in found.values():
            api.memory_forget(caller=caller, kind=memory.kind, memory_id=memory.pk)
        return found

    async with mcp_client_for(member, "roampal") as client:
        added = await call(client, "add_to_memory_bank", content="the user prefers tea")
        monkeypatch.setattr(api, "collection_ids", lookup_then_forget)
        scored = await call(client, "score_response", outcome="worked", memory_scores={added["id"]: "worked"})
        monkeypatch.setattr(api, "collection_ids", real)
    assert scored["scored"] == {} and scored["skipped"] == [added["id"]] and scored["updated"] == 0
    row = await Memory.objects.aget(tenant_id=member.caller.tenant_id, collection="memory_bank")
    assert (row.validity, row.applied_count, row.success_count) == ("retracted", 0, 0)


# --- deleting twice -------------------------------------------------------------------------------
# Forgetting a forgotten memory answers as the first forget did and records nothing.


async def test_forgetting_a_forgotten_memory_records_nothing_new(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        fact = (await call(client, "memory_store_fact", subject="user", predicate="city", content="Austin"))["id"]
        first = await call(client, "memory_forget", type="fact", id=fact)
        updated_at = (await Memory.objects.aget(pk=fact)).updated_at
        before = await snapshot()
        again = await call(client, "memory_forget", type="fact", id=fact)
        assert again == first == {"id": fact, "type": "fact", "validity": "retracted"}
        assert await snapshot() == before
        assert (await Memory.objects.aget(pk=fact)).updated_at == updated_at
    response = await post(member, "/api/memory/memory_forget", json.dumps({"type": "fact", "id": fact.upper()}))
    assert response.status_code == 200 and response.json()["validity"] == "retracted"
    assert await snapshot() == before


# --- memento supersedes facts ---------------------------------------------------------------------
# memento's tools show facts only: an episode or a rule is not found there.


async def test_memento_supersedes_only_facts(member, mcp_client_for):
    async with mcp_client_for(member) as client:
        episode = (await call(client, "memory_store_episode", content="the user moved", butler="general"))["id"]
        rule = (await call(client, "memory_store_rule", content="greet the user by name"))["id"]
    async with mcp_client_for(member, "memento") as client:
        fact = (await call(client, "store_memory", content="the user lives in Boston"))["created"]["id"]
        for old, new, missing in [(episode, fact, episode), (fact, rule, rule), (rule, fact, rule)]:
            text = await refused(client, "supersede_memory", {"old_memory_id": old, "new_memory_id": new}, "NOT_FOUND")
            assert json.loads(text) == {
                "error": {"code": "MEMORY_NOT_FOUND", "message": f"Memory with ID {missing} not found"}
            }
    assert await Memory.objects.filter(validity="active").acount() == 3


# --- pce: provenance ------------------------------------------------------------------------------
# provenance.at is an RFC 3339 date-time (the spec's `format`), kept as written.

NOT_RFC3339 = [
    "2025-06-01",
    "2025-06-01T12:00:00",
    "2025-06-01T12:00Z",
    "20250601T120000Z",
    "2025-W22-1T12:00:00Z",
    "2025-06-01 12:00:00Z",
    "2025-06-01T12:00:00+0200",
    "2025-06-01T12:00:00+24:00",
    "2025-02-30T12:00:00Z",
    "0000-01-01T00:00:00Z",
    "10000-01-01T00:00:00Z",
    "２０２５-06-01T12:00:00Z",
    " 2025-06-01T12:00:00Z",
    "2025-06-01T12:00:00Z\n",
]


@pytest.mark.parametrize("at", NOT_RFC3339)
async def test_provenance_at_must_be_an_rfc3339_date_time(member, mcp_client_for, at):
    async with mcp_client_for(member, "pce") as client:
        text = await refused(
            client, "pce.memory.upsert", {"text": "a claim", "provenance": {"at": at}}, "INVALID_ARGUMENT"
        )
    assert pce_code(text) == "VALIDATION_ERROR"
    assert json.loads(text)["error"]["message"].startswith("provenance.at must be an RFC 3339 date-time")


@pytest.mark.parametrize(
    "at",
    [
        "2025-06-01T12:00:00Z",
        "2025-06-01t12:00:00z",
        "2025-06-01T12:00:00.123456789+05:30",
        "9999-12-31T23:59:59-23:59",
    ],
)
async def test_rfc3339_date_times_are_taken_as_written(member, mcp_client_for, at):
    async with mcp_client_for(member, "pce") as client:
        claim = (await call(client, "pce.memory.upsert", text=f"written at {at}", provenance={"at": at}))["data"]["id"]
    stored = await Memory.objects.aget(pk=uuid.UUID(claim.removeprefix("clm_")))
    assert stored.metadata["provenance"]["at"] == at


# --- pce: the knowledge graph ---------------------------------------------------------------------
# An entity's canonical key fits its column instead of being cut (which merged distinct
# entities); the attributes an entity and a relation accumulate stay within the JSON limit.


def entity(**fields: Any) -> dict[str, Any]:
    return {"id": "e1", "type": "Artifact", "name": "Stripe", **fields}


async def test_a_canonical_key_longer_than_its_column_is_refused_not_cut(member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        await call(
            client, "pce.memory.upsert", text="first", provenance={"at": AT}, entities=[entity(canonical_key="k" * 500)]
        )
        text = await refused(
            client,
            "pce.memory.upsert",
            {"text": "second", "provenance": {"at": AT}, "entities": [entity(canonical_key="k" * 500 + "x")]},
            "INVALID_ARGUMENT",
        )
        assert "canonical_key" in text and "500" in text
        # A name whose derived key (type + the NFKC-folded name) would be cut: U+FDFA folds to 18 characters.
        text = await refused(
            client,
            "pce.memory.upsert",
            {"text": "third", "provenance": {"at": AT}, "entities": [entity(name="\ufdfa" * 30)]},
            "INVALID_ARGUMENT",
        )
        assert "canonical_key" in text
    assert await Entity.objects.acount() == 1


async def test_entity_attributes_and_relation_props_stay_within_the_json_limit(member, mcp_client_for):
    chunk = {f"k{i}": "v" * 1000 for i in range(50)}  # about 51 KB
    async with mcp_client_for(member, "pce") as client:
        await call(client, "pce.memory.upsert", text="one", provenance={"at": AT}, entities=[entity(attrs=chunk)])
        more = {f"j{i}": "v" * 1000 for i in range(20)}
        text = await refused(
            client,
            "pce.memory.upsert",
            {"text": "two", "provenance": {"at": AT}, "entities": [entity(attrs=more)]},
            "INVALID_ARGUMENT",
        )
        assert "attrs" in text and "65536" in text
        for attrs in ({"n": 10**300}, {"k" * 201: 1}):
            await refused(
                client,
                "pce.memory.upsert",
                {"text": "three", "provenance": {"at": AT}, "entities": [entity(id="e2", name="Adyen", attrs=attrs)]},
                "INVALID_ARGUMENT",
            )
        two = [entity(), entity(id="e2", name="Adyen")]
        relation = {"id": "r", "src_id": "e1", "dst_id": "e2", "type": "competes_with"}
        await call(
            client,
            "pce.memory.upsert",
            text="four",
            provenance={"at": AT},
            entities=two,
            relations=[{**relation, "props": {"a": "v" * 40000}}],
        )
        text = await refused(
            client,
            "pce.memory.upsert",
            {
                "text": "five",
                "provenance": {"at": AT},
                "entities": two,
                "relations": [{**relation, "props": {"b": "v" * 40000}}],
            },
            "INVALID_ARGUMENT",
        )
        assert "props" in text
    stored = await Entity.objects.aget(name="Stripe")
    assert set(stored.attrs) == set(chunk)


# --- langmem: connection options ------------------------------------------------------------------
# An option that is not UTF-8 is refused: decoded with replacement, every such user id
# resolved to one namespace (U+FFFD).


@pytest.mark.parametrize("value", ["%FF", "%FE", "%ED%A0%80", "a%C3"])
async def test_a_langmem_option_that_is_not_utf8_is_refused(member, value):
    before = await snapshot()
    response = await post(
        member,
        f"/api/langmem/manage_memory?namespace=memories,{{user_id}}&configurable.user_id={value}",
        json.dumps({"content": "the user likes tea"}),
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "code": "INVALID_ARGUMENT",
        "message": "ValueError: option configurable.user_id is not UTF-8 text (percent-encode UTF-8).",
    }
    assert await snapshot() == before


async def test_a_langmem_option_that_is_not_utf8_is_refused_on_the_mcp_endpoint(member):
    from memproj.asgi import Router

    arguments = {"content": "the user likes tea"}
    request = {
        "jsonrpc": "2.0",
        "id": "1",
        "method": "tools/call",
        "params": {"name": "manage_memory", "arguments": arguments},
    }
    headers = {
        "Authorization": f"Bearer {member.token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    router = Router()
    before = await snapshot()
    async with (
        router.servers["langmem"].session_manager.run(),
        httpx.AsyncClient(transport=asgi_transport(router), base_url="http://testserver") as client,
    ):
        path = "/mcp/langmem/?namespace=memories,{user_id}&configurable.user_id=%FF"
        response = await client.post(path, content=json.dumps(request).encode(), headers=headers)
    result = response.json()["result"]
    assert result["isError"] and result["_meta"]["io.memproj/error-code"] == "INVALID_ARGUMENT", result
    assert result["content"][0]["text"] == (
        "ValueError: option configurable.user_id is not UTF-8 text (percent-encode UTF-8)."
    )
    assert await snapshot() == before


async def test_a_langmem_option_name_that_is_not_utf8_is_refused(member):
    response = await post(
        member,
        "/api/langmem/manage_memory?namespace=memories&instructions%FF=x",
        json.dumps({"content": "the user likes tea"}),
    )
    assert response.status_code == 400, response.text
    assert "not UTF-8" in response.json()["error"]["message"]


# --- langmem: store ops ---------------------------------------------------------------------------
# A store op takes only its own (LangGraph's) fields, as every tool refuses unknown arguments.


@pytest.mark.parametrize(
    "op",
    [
        {"op": "put", "namespace": ["a"], "key": "k", "value": {"content": "x"}, "bogus": 1},
        {"op": "get", "namespace": ["a"], "key": "k", "value": {"content": "x"}},
        {"op": "search", "namespace_prefix": ["a"], "key": "k"},
        {"op": "list_namespaces", "prefix": ["a"], "namespace": ["b"]},
    ],
)
async def test_a_store_op_takes_only_its_own_fields(member, op):
    before = await snapshot()
    batch = [{"op": "put", "namespace": ["a"], "key": "first", "value": {"content": "kept out"}}, op]
    response = await post(member, "/api/langmem/store/", json.dumps({"ops": batch}))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "INVALID_ARGUMENT" and "unknown field" in error["message"], error
    assert await snapshot() == before


@pytest.mark.parametrize("kind", [{}, [], 5, None, "delete"])
async def test_an_op_that_names_no_op_is_refused(member, kind):
    before = await snapshot()
    response = await post(member, "/api/langmem/store/", json.dumps({"ops": [{"op": kind, "namespace": ["a"]}]}))
    assert response.status_code == 400, response.text
    assert response.json()["error"] == {
        "code": "INVALID_ARGUMENT",
        "message": "op must be one of get, put, search, list_namespaces.",
    }
    assert await snapshot() == before


async def test_a_store_put_still_takes_langgraphs_index_field(member):
    op = {"op": "put", "namespace": ["a"], "key": "k", "value": {"content": "x"}, "index": ["content"], "ttl": None}
    response = await post(member, "/api/langmem/store/", json.dumps({"ops": [op]}))
    assert response.status_code == 200, response.text


# --- roampal --------------------------------------------------------------------------------------
# A blank key takeaway is refused; a document's source is checked like any other text.


@pytest.mark.parametrize("takeaway", [" ", "\u200b", "\n\t"])
async def test_a_blank_key_takeaway_is_refused(member, mcp_client_for, takeaway):
    async with mcp_client_for(member, "roampal") as client:
        text = await refused(client, "record_response", {"key_takeaway": takeaway}, "INVALID_ARGUMENT")
    assert text.startswith("Error: key_takeaway must not be empty")


@pytest.mark.parametrize(("source", "says"), [("s\u0000", "NUL"), ("\ud800", "valid")])
async def test_a_documents_source_is_checked_like_any_text(member, source, says):
    before = await snapshot()
    body = json.dumps({"title": "Manual", "content": "Chapter one.", "source": source})
    response = await post(member, "/api/ingest", body)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "INVALID_ARGUMENT"
    assert response.json()["error"].startswith("source") and says in response.json()["error"], response.text
    assert await snapshot() == before


@pytest.mark.parametrize("title", ["%FF", "Manual%FE", "%ED%A0%80"])
async def test_a_raw_documents_title_that_is_not_utf8_is_refused(member, title):
    before = await snapshot()
    response = await post(member, f"/api/ingest?title={title}", "Chapter one.", content_type="text/plain")
    assert response.status_code == 422, response.text
    assert response.json() == {
        "error": "title: ?title= is not UTF-8 text (percent-encode UTF-8).",
        "code": "INVALID_ARGUMENT",
    }
    assert await snapshot() == before


async def test_a_raw_documents_utf8_title_is_kept(member):
    response = await post(member, "/api/ingest?title=caf%C3%A9+%F0%9F%99%82", "Chapter one.", content_type="text/plain")
    assert response.status_code == 202, response.text
    assert response.json()["title"] == "café 🙂"


# --- schema messages ------------------------------------------------------------------------------
# A schema violation of an object's size or of its keys names it.


async def test_too_many_entries_and_a_key_too_long_are_named(member, mcp_client_for):
    async with mcp_client_for(member, "roampal") as client:
        many = {f"working_{i:012x}": "worked" for i in range(51)}
        text = await refused(client, "score_response", {"outcome": "worked", "memory_scores": many}, "INVALID_ARGUMENT")
        assert text == "Error: memory_scores allows at most 50 entries."
        text = await refused(
            client, "score_response", {"outcome": "worked", "memory_scores": {"k" * 201: "worked"}}, "INVALID_ARGUMENT"
        )
        assert text == "Error: a key of memory_scores is over the limit of 200 characters."
