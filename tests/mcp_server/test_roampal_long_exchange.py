"""A long exchange through roampal's Stop hook: upstream v0.3.5 takes an
assistant response of up to 200,000 characters, more than one memory holds
(MEMPROJ_MAX_CONTENT_CHARS). What the answer says was stored must be findable:
a search for a phrase from the end of the response finds it, and the turn is
still scored as one exchange."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.test import Client as DjangoClient

from memory.models import Exchange, Memory
from tests.conftest import call

pytestmark = pytest.mark.django_db(transaction=True)

ENDING = "Finally, rotate the zebrafish credentials on the bastion host before the next release."
QUESTION = "How do I run the shard migration end to end?"


def post(identity, path: str, body: object) -> Any:
    return DjangoClient().post(
        path, data=json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {identity.token}"
    )


def long_answer() -> str:
    """About 60,000 characters: many plain steps, and one sentence at the very end."""
    steps = [f"Step {n}: run the migration for shard {n} and read its log before the next one." for n in range(1, 760)]
    return "\n".join(steps) + "\n" + ENDING


def stop_long(identity, conversation: str = "long-1") -> tuple[dict, str]:
    answer = long_answer()
    assert len(answer) > 3 * settings.MEMPROJ["MAX_CONTENT_CHARS"]
    response = post(
        identity,
        "/api/hooks/stop",
        {"conversation_id": conversation, "user_message": QUESTION, "assistant_response": answer},
    )
    assert response.status_code == 200, response.content
    return response.json(), answer


def test_a_phrase_from_the_end_of_a_long_response_is_found_by_search(member):
    stopped, answer = stop_long(member)
    assert stopped["stored"] is True
    found = post(member, "/api/search", {"query": "rotate the zebrafish credentials on the bastion host"}).json()
    assert found["count"] >= 1
    top = found["results"][0]
    assert ENDING in top["content"] and top["collection"] == "working"
    # The answer names every memory the exchange was stored as, the one scored next turn first.
    assert stopped["doc_ids"][0] == stopped["doc_id"] and len(stopped["doc_ids"]) >= 4
    assert top["id"] in stopped["doc_ids"]

    # Nothing of the response is lost: every step is in one of the stored memories,
    # none of which is over the content limit; the Exchange row keeps the whole text.
    parts = [post(member, "/api/search", {"id": ident}).json()["results"][0] for ident in stopped["doc_ids"]]
    assert all(len(p["content"]) <= settings.MEMPROJ["MAX_CONTENT_CHARS"] for p in parts)
    stored = "\n".join(p["content"] for p in parts)
    assert parts[0]["content"].startswith(f"User: {QUESTION}\n\nAssistant: Step 1: ")
    assert all(line in stored for line in answer.split("\n"))
    assert Exchange.objects.get(conversation_id="long-1").assistant_response == answer


def test_a_short_exchange_is_still_one_memory(member):
    stopped = post(
        member, "/api/hooks/stop", {"conversation_id": "c", "user_message": "hi?", "assistant_response": "Hello."}
    ).json()
    assert stopped["doc_ids"] == [stopped["doc_id"]]
    assert Memory.objects.get().content == "User: hi?\n\nAssistant: Hello."


async def test_the_next_turn_scores_every_part_of_a_long_exchange_once(member, mcp_client_for):
    stopped, _ = await sync_to_async(stop_long)(member, "long-2")
    nxt = await sync_to_async(post)(member, "/api/hooks/get-context", {"query": "thanks", "conversation_id": "long-2"})
    assert nxt.json()["scoring_required"] is True
    async with mcp_client_for(member, "roampal") as client:
        scored = await call(client, "score_response", outcome="worked")
    assert scored["exchange_id"] == stopped["doc_id"] and scored["updated"] == len(stopped["doc_ids"])
    rows = [m async for m in Memory.objects.filter(collection="working")]
    assert len(rows) == len(stopped["doc_ids"])
    # One outcome for the one exchange: each of its memories got it once (0.5 + 0.2).
    assert {(m.applied_count, round(m.outcome_score, 4)) for m in rows} == {(1, 0.7)}


def test_overlapping_parts_are_bounded_overlap_and_lose_nothing():
    from memory.services.collections import overlapping_parts

    words = " ".join(f"w{n}" for n in range(3000))
    parts = overlapping_parts(words, size=1000, overlap=200)
    assert len(parts) > 10 and all(len(p) <= 1000 for p in parts)
    assert parts[0].startswith("w0 ") and parts[-1].endswith("w2999")
    # Any phrase shorter than the overlap, wherever the cuts fall, is whole in one part.
    starts = [0] + [i + 1 for i, c in enumerate(words) if c == " "]
    assert all(any(words[s : s + 150].strip() in p for p in parts) for s in starts)
    # No space to cut at: cut at the size; whitespace only: nothing to store.
    assert [len(p) for p in overlapping_parts("x" * 2500, size=1000, overlap=200)] == [1000, 1000, 900]
    assert overlapping_parts("x" + " " * 5000 + "y", size=1000, overlap=200) == ["x", "y"]
    assert overlapping_parts("short", size=1000, overlap=200) == ["short"]


async def test_deleting_a_long_exchange_deletes_every_part_of_it(member, mcp_client_for):
    stopped, _ = await sync_to_async(stop_long)(member, "long-3")
    phrase = {"query": "rotate the zebrafish credentials on the bastion host"}
    assert (await sync_to_async(post)(member, "/api/search", phrase)).json()["count"] >= 1
    async with mcp_client_for(member, "roampal") as client:
        deleted = await call(client, "delete_memory", id=stopped["doc_id"])
    assert deleted["deleted"] is True
    # No part of the deleted exchange is found, by its end or by any of its steps.
    for query in (phrase, {"query": "run the migration for shard 500"}, {"query": "shard migration end to end"}):
        assert (await sync_to_async(post)(member, "/api/search", query)).json()["count"] == 0, query
    states = {m.validity async for m in Memory.objects.filter(collection="working")}
    assert states == {"retracted"}


def test_forgetting_forgets_only_the_parts_that_name_their_exchange(member):
    """A head's list of parts (in metadata an import keeps as it comes) names a
    fact of the tenant: forgetting the head retracts the head alone."""
    from memory.selectors.memories import CONTINUED_IN
    from memory.services.collections import working_store
    from memory.services.memories import fact_store, memory_forget

    fact = fact_store(caller=member.caller, subject="user", predicate="editor", content="Uses Helix").memory
    head = working_store(
        caller=member.caller, content="User: hi\n\nAssistant: hello", metadata={CONTINUED_IN: [str(fact.pk)]}
    )
    memory_forget(caller=member.caller, kind="episode", memory_id=head.pk)
    states = dict(Memory.objects.values_list("id", "validity"))
    assert states == {head.pk: "retracted", fact.pk: "active"}


async def test_an_id_forged_into_a_heads_list_of_parts_gets_no_outcome(member, mcp_client_for):
    """A head's list of parts is metadata (an import keeps it as it comes): an
    id in it that does not name the head back, here another exchange's memory,
    is no part of the exchange. Scoring the exchange applies its outcome to its
    own parts alone, the ones forgetting it would retract."""
    from memory.selectors.memories import CONTINUED_IN
    from memory.services.collections import exchange_part_ids

    short = {"conversation_id": "other", "user_message": "hi?", "assistant_response": "Hi."}
    assert (await sync_to_async(post)(member, "/api/hooks/stop", short)).status_code == 200
    stopped, _ = await sync_to_async(stop_long)(member, "long-4")
    other_pk = (await Exchange.objects.aget(conversation_id="other")).memory_id
    head_pk = (await Exchange.objects.aget(conversation_id="long-4")).memory_id
    assert other_pk is not None and head_pk is not None
    head = await Memory.objects.aget(pk=head_pk)
    parts = list(head.metadata[CONTINUED_IN])
    assert await sync_to_async(exchange_part_ids)(head) == parts
    await Memory.objects.filter(pk=head_pk).aupdate(metadata={**head.metadata, CONTINUED_IN: [*parts, str(other_pk)]})
    head = await Memory.objects.aget(pk=head_pk)
    assert await sync_to_async(exchange_part_ids)(head) == parts

    nxt = await sync_to_async(post)(member, "/api/hooks/get-context", {"query": "thanks", "conversation_id": "long-4"})
    assert nxt.json()["scoring_required"] is True
    async with mcp_client_for(member, "roampal") as client:
        scored = await call(client, "score_response", outcome="worked")
    assert scored["exchange_id"] == stopped["doc_id"] and scored["updated"] == len(stopped["doc_ids"])
    forged = await Memory.objects.aget(pk=other_pk)
    assert (forged.applied_count, forged.outcome_score) == (0, 0.5)
    scored_rows = [m async for m in Memory.objects.filter(pk__in=[head_pk, *parts])]
    assert {(m.applied_count, round(m.outcome_score, 4)) for m in scored_rows} == {(1, 0.7)}


def promote(pk, *, to: str) -> Memory:
    """Move one memory up roampal's lifecycle as the promotion sweep does: its
    scores made due, then the sweep (working -> history -> patterns)."""
    from memory import scoring
    from memory.services.collections import collections_lifecycle

    due = {
        "history": {"outcome_score": scoring.HISTORY_MIN_SCORE, "applied_count": scoring.HISTORY_MIN_USES},
        "patterns": {
            "outcome_score": scoring.PATTERNS_MIN_SCORE,
            "applied_count": scoring.PATTERNS_MIN_USES,
            "success_count": scoring.PATTERNS_MIN_SUCCESS,
        },
    }
    for step in ("history", "patterns")[: 1 + (to == "patterns")]:
        Memory.objects.filter(pk=pk).update(**due[step])
        assert pk in collections_lifecycle().ids
    memory = Memory.objects.get(pk=pk)
    assert memory.collection == to and memory.validity == "active"
    return memory


@pytest.mark.parametrize("to", ["history", "patterns"])
async def test_forgetting_an_exchange_forgets_a_part_that_moved_on(member, mcp_client_for, to):
    """The part holding the response's end earned its way out of working
    memory; deleting its exchange still forgets it."""
    from memory.selectors.memories import CONTINUES

    stopped, _ = await sync_to_async(stop_long)(member, f"long-moved-{to}")
    head_pk = (await Exchange.objects.aget(conversation_id=f"long-moved-{to}")).memory_id
    ending = await Memory.objects.aget(content__contains=ENDING)
    assert ending.pk != head_pk and ending.metadata[CONTINUES] == str(head_pk)
    moved = await sync_to_async(promote)(ending.pk, to=to)
    assert moved.kind == ("rule" if to == "patterns" else "episode")
    phrase = {"query": "rotate the zebrafish credentials on the bastion host"}
    assert (await sync_to_async(post)(member, "/api/search", phrase)).json()["count"] >= 1

    async with mcp_client_for(member, "roampal") as client:
        deleted = await call(client, "delete_memory", id=stopped["doc_id"])
    assert deleted["deleted"] is True
    assert (await sync_to_async(post)(member, "/api/search", phrase)).json()["count"] == 0
    assert {m.validity async for m in Memory.objects.all()} == {"retracted"}


async def test_forgetting_an_exchange_whose_head_became_a_pattern_forgets_its_parts(member, mcp_client_for):
    stopped, _ = await sync_to_async(stop_long)(member, "long-head-pattern")
    head_pk = (await Exchange.objects.aget(conversation_id="long-head-pattern")).memory_id
    head = await sync_to_async(promote)(head_pk, to="patterns")
    assert head.kind == "rule"
    phrase = {"query": "rotate the zebrafish credentials on the bastion host"}
    assert (await sync_to_async(post)(member, "/api/search", phrase)).json()["count"] >= 1

    async with mcp_client_for(member, "roampal") as client:
        deleted = await call(client, "delete_memory", id=stopped["doc_id"])
    assert deleted["deleted"] is True
    for query in (phrase, {"query": "run the migration for shard 500"}):
        assert (await sync_to_async(post)(member, "/api/search", query)).json()["count"] == 0, query
    assert {m.validity async for m in Memory.objects.all()} == {"retracted"}


def test_forgetting_a_moved_exchange_leaves_other_tenants_and_unlinked_memories(member, outsider):
    """Only memories of the tenant that name the exchange back are its parts,
    whatever their collection: a pattern its list names without the back-link,
    and another tenant's memory that claims to continue it, stay."""
    from memory.selectors.memories import CONTINUED_IN, CONTINUES
    from memory.services.collections import working_store
    from memory.services.memories import memory_forget

    unlinked = promote(working_store(caller=member.caller, content="Prefer small PRs").pk, to="patterns")
    head = working_store(caller=member.caller, content="User: hi\n\nAssistant: hello")
    foreign = working_store(caller=outsider.caller, content="Elsewhere", metadata={CONTINUES: str(head.pk)})
    Memory.objects.filter(pk=head.pk).update(metadata={CONTINUED_IN: [str(unlinked.pk), str(foreign.pk)]})
    memory_forget(caller=member.caller, kind="episode", memory_id=head.pk)
    states = dict(Memory.objects.values_list("id", "validity"))
    assert states == {head.pk: "retracted", unlinked.pk: "active", foreign.pk: "active"}
