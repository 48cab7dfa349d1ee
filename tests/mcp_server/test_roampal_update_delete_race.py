"""roampal's update_memory and delete_memory on one memory_bank entry at once.
Each looks the entry up before it takes any lock; the other may commit in
between. Whichever order they land in, the entry's text (old or new) must not
stay active once both answered: an update that lands after the delete answers
not-found, and a delete that lands after an update forgets the new version.

The interleaving is made deterministic by running the other write from inside
the window: the update's embedding of its new text (computed before its
transaction), the delete's lookup of the id it was given.

Parallel updates of one id all apply (the last one wins), and parallel
deletes of one id delete it once; the others answer not found, naming the
id the client sent."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from django.test import Client as DjangoClient

from memory import api
from memory.errors import NotFound
from memory.models import Memory
from tests.conftest import call, call_error

pytestmark = pytest.mark.django_db(transaction=True)

OLD = "The deploy key lives in vault slot four"
NEW = "The deploy key lives in vault slot seven"


def search_count(identity, query: str) -> int:
    response = DjangoClient().post(
        "/api/search",
        data=json.dumps({"query": query}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {identity.token}",
    )
    assert response.status_code == 200, response.content
    return response.json()["count"]


def active_texts() -> set[str]:
    return set(Memory.objects.filter(validity="active").values_list("content", flat=True))


def forget_while_embedding(monkeypatch: pytest.MonkeyPatch, identity, entry: Memory) -> None:
    """The entry is forgotten (committed) while fact_store embeds the new text."""
    from memory.services import memories

    real = memories._embed_for_store

    def embed(content: str, **kwargs: Any) -> Any:
        if content == NEW:
            api.memory_forget(caller=identity.caller, kind=entry.kind, memory_id=entry.pk)
        return real(content, **kwargs)

    monkeypatch.setattr(memories, "_embed_for_store", embed)


def test_an_update_whose_entry_is_forgotten_meanwhile_stores_nothing(member, monkeypatch):
    entry = api.memory_bank_store(caller=member.caller, content=OLD)
    forget_while_embedding(monkeypatch, member, entry)
    with pytest.raises(NotFound):
        api.memory_bank_update(caller=member.caller, memory_id=entry.pk, content=NEW)
    assert active_texts() == set()
    assert Memory.objects.get(pk=entry.pk).validity == "retracted"
    assert not Memory.objects.filter(content=NEW).exists()


async def test_update_memory_racing_delete_answers_not_found_and_nothing_comes_back(
    member, mcp_client_for, monkeypatch
):
    from asgiref.sync import sync_to_async

    async with mcp_client_for(member, "roampal") as client:
        added = await call(client, "add_to_memory_bank", content=OLD)
        entry = await Memory.objects.aget(content=OLD)
        forget_while_embedding(monkeypatch, member, entry)
        error = await call_error(client, "update_memory", id=added["id"], new_content=NEW)
    assert "no active memory with that id" in error
    assert await sync_to_async(active_texts)() == set()
    for text in (OLD, NEW):
        assert await sync_to_async(search_count)(member, text) == 0, text


def test_a_fact_store_replacing_a_superseded_fact_is_refused(member):
    """``replaces`` names the key's active holder, not any version of it."""
    first = api.fact_store(caller=member.caller, subject="user", predicate="editor", content="Uses vim").memory
    api.fact_store(caller=member.caller, subject="user", predicate="editor", content="Uses helix")
    with pytest.raises(NotFound):
        api.fact_store(
            caller=member.caller, subject="user", predicate="editor", content="Uses emacs", replaces=first.pk
        )
    assert active_texts() == {"Uses helix"}


async def test_delete_memory_racing_update_forgets_the_new_version(member, mcp_client_for, monkeypatch):
    """The update commits after delete_memory looked the entry up: the delete
    forgets the version that is current when it runs, so neither text stays."""
    from asgiref.sync import sync_to_async

    real = api.collection_get
    raced: list[Memory] = []

    def lookup_then_update(caller: Any, memory_id: str, **kwargs: Any) -> Memory:
        found = real(caller, memory_id, **kwargs)
        if not raced:
            raced.append(api.memory_bank_update(caller=caller, memory_id=found.pk, content=NEW)[1])
        return found

    async with mcp_client_for(member, "roampal") as client:
        added = await call(client, "add_to_memory_bank", content=OLD)
        monkeypatch.setattr(api, "collection_get", lookup_then_update)
        deleted = await call(client, "delete_memory", id=added["id"])
        monkeypatch.setattr(api, "collection_get", real)
    assert raced and deleted["deleted"] is True and deleted["id"] == added["id"]
    assert await sync_to_async(active_texts)() == set()
    assert (await Memory.objects.aget(pk=raced[0].pk)).validity == "retracted"
    for text in (OLD, NEW):
        assert await sync_to_async(search_count)(member, text) == 0, text


PARALLEL = 8


def text_of(result: Any) -> str:
    return " ".join(getattr(block, "text", "") for block in result.content)


async def test_concurrent_update_memory_on_one_id_all_succeed_and_the_last_one_wins(member, mcp_client_for):
    """Each update whose version another update replaced meanwhile applies to
    the version current after that one: all of them answer success with the
    id the client holds, every text is stored once, and one version stays."""
    from asgiref.sync import sync_to_async

    texts = [f"The deploy key lives in vault slot {n}" for n in range(PARALLEL)]
    async with mcp_client_for(member, "roampal") as client:
        added = await call(client, "add_to_memory_bank", content=OLD)
        answers = await asyncio.gather(
            *(client.call_tool("update_memory", {"id": added["id"], "content": text}) for text in texts)
        )
        assert [text_of(a) for a in answers if a.is_error] == []
        assert {(a.structured_content or {}).get("id") for a in answers} == {added["id"]}
        found = await call(client, "search_memory", id=added["id"])
    active = await sync_to_async(active_texts)()
    assert len(active) == 1 and active <= set(texts)
    assert [r["content"] for r in found["results"]] == list(active)
    for text in texts:
        assert await Memory.objects.filter(content=text).acount() == 1, text


def test_an_update_whose_lookup_sees_another_update_commit_mid_read_applies_after_it(member):
    """The lookup follows the id's version chain to its current version and
    reads that row. Another update committing right after the chain is read
    must not make the entry look gone: this one applies after it."""
    from django.db import connection

    first = api.memory_bank_store(caller=member.caller, content=OLD)
    other: list[Memory] = []
    started: list[threading.Thread] = []

    def other_update() -> None:
        try:
            other.append(api.memory_bank_update(caller=member.caller, memory_id=first.pk, content="slot nine")[1])
        finally:
            connection.close()  # this thread's own connection

    def commit_another_update_after_the_chain_read(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if "WITH RECURSIVE chain" in sql and not started:
            started.append(threading.Thread(target=other_update))
            started[0].start()
            started[0].join()
        return result

    with connection.execute_wrapper(commit_another_update_after_the_chain_read):
        replaced, new = api.memory_bank_update(caller=member.caller, memory_id=first.pk, content=NEW)
    assert other, "the other update did not run"
    assert replaced.pk == other[0].pk
    assert active_texts() == {NEW}
    assert api.collection_get(member.caller, str(first.pk)).pk == new.pk


async def test_concurrent_delete_memory_on_one_id_one_succeeds_the_rest_name_the_id_sent(member, mcp_client_for):
    """A delete that finds the memory already deleted by another answers as
    delete_memory answers a missing one, naming the id the client sent, never
    a version's UUID."""
    from asgiref.sync import sync_to_async

    async with mcp_client_for(member, "roampal") as client:
        added = await call(client, "add_to_memory_bank", content=OLD)
        await call(client, "update_memory", id=added["id"], content=NEW)
        answers = await asyncio.gather(
            *(client.call_tool("delete_memory", {"id": added["id"]}) for _ in range(PARALLEL))
        )
        missing = await call_error(client, "delete_memory", id=added["id"])
    deleted = [a for a in answers if not a.is_error]
    assert len(deleted) == 1 and deleted[0].structured_content == {"id": added["id"], "deleted": True}
    assert {text_of(a) for a in answers if a.is_error} == {missing}
    assert added["id"] in missing
    versions = [str(pk) async for pk in Memory.objects.values_list("pk", flat=True)]
    for answer in answers:
        assert not any(pk in text_of(answer) or pk.replace("-", "") in text_of(answer) for pk in versions)
    assert await sync_to_async(active_texts)() == set()
