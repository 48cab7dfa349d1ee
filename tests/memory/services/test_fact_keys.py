"""Fact keys: the butlers memory module's subject+predicate supersession is unchanged, a
subject alone keys a LangGraph store item, and keyless facts (memento) never
supersede each other. accessed_at moves only through the reading services."""

from datetime import timedelta

import pytest
import time_machine
from django.db import IntegrityError, transaction

from memory import api
from memory.errors import InvalidArgument
from memory.models import Memory
from memory.services.memories import ACCESSED_AT_GRANULARITY
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db


@pytest.fixture
def caller():
    return make_identity("tenant-a", "member").caller


def test_seed_000_key_still_supersedes_and_blank_parts_are_refused(caller):
    first = api.fact_store(caller=caller, subject="user", predicate="city", content="Seattle")
    second = api.fact_store(caller=caller, subject="user", predicate="city", content="Austin")
    assert second.superseded_ids == [first.memory.id]
    with pytest.raises(InvalidArgument):
        api.fact_store(caller=caller, subject="user", predicate="  ", content="x")
    with pytest.raises(InvalidArgument):
        api.fact_store(caller=caller, subject=None, predicate="city", content="x")


def test_keyless_facts_never_supersede_each_other(caller):
    a = api.fact_store(caller=caller, subject=None, predicate=None, content="User lives in Seattle")
    b = api.fact_store(caller=caller, subject=None, predicate=None, content="User moved to Austin")
    assert a.superseded_ids == b.superseded_ids == []
    assert Memory.objects.filter(kind="fact", validity="active").count() == 2


def test_subject_key_supersedes_within_its_namespace_only(caller):
    one = api.fact_store(caller=caller, subject="k1", predicate=None, namespace=["u", "1"], content="v1")
    other_ns = api.fact_store(caller=caller, subject="k1", predicate=None, namespace=["u", "2"], content="v1")
    two = api.fact_store(caller=caller, subject="k1", predicate=None, namespace=["u", "1"], content="v2")
    assert two.superseded_ids == [one.memory.id] and other_ns.superseded_ids == []
    current = api.fact_get_by_key(caller=caller, namespace=["u", "1"], subject="k1")
    assert current is not None and current.content == "v2"
    retracted = api.fact_retract_by_key(caller=caller, namespace=["u", "1"], subject="k1")
    assert retracted is not None and retracted.id == two.memory.id
    assert api.fact_retract_by_key(caller=caller, namespace=["u", "1"], subject="k1") is None
    assert api.fact_get_by_key(caller=caller, namespace=["u", "1"], subject="k1") is None


def test_the_unique_index_still_backs_keyed_facts(caller):
    api.fact_store(caller=caller, subject="user", predicate="city", content="Seattle")
    row = Memory.objects.get()
    row.pk = None
    with pytest.raises(IntegrityError), transaction.atomic():
        row.save(force_insert=True)


def test_attribute_filters_prefix_and_namespaces(caller):
    for ns, key, source, category in (
        (["docs", "u1"], "a", "explicit", "preference"),
        (["docs", "u1"], "b", "extracted", "travel"),
        (["docs", "u2"], "a", "explicit", "preference"),
    ):
        api.fact_store(
            caller=caller,
            subject=key,
            predicate=None,
            namespace=ns,
            content=f"{key} {category} note",
            source=source,
            metadata={"category": category},
        )
    listed = api.memory_list_recent(caller=caller, namespace_prefix=["docs"], attributes={"category": "preference"})
    assert sorted(m.namespace[1] for m in listed) == ["u1", "u2"]
    found = api.memory_search(
        caller=caller,
        query=api.SearchQuery(
            "note", types=["fact"], namespace_prefix=["docs", "u1"], attributes={"category": "travel"}
        ),
    )
    assert [f.memory.subject for f in found] == ["b"]
    assert api.namespaces_list(caller=caller) == [("docs", "u1"), ("docs", "u2")]
    assert api.namespaces_list(caller=caller, prefix=["*", "u2"]) == [("docs", "u2")]
    assert api.namespaces_list(caller=caller, max_depth=1) == [("docs",)]
    with pytest.raises(InvalidArgument, match=r"Unsupported operator: \$in"):
        api.memory_search(caller=caller, query=api.SearchQuery("note", attributes={"category": {"$in": ["travel"]}}))


@pytest.mark.parametrize("query", [None, "note"])
def test_attribute_filters_are_equality_on_the_text_or_a_metadata_key(caller, query):
    """LangGraph's store filter: ``content`` is the text, any other key a
    metadata key compared as JSON (a list equals only that list), with a query
    (the channels' SQL) and without one (the newest first), alike."""
    for key, content, metadata in (
        ("a", "a note", {"source": "web", "tags": ["x"]}),
        ("b", "b note", {"source": "chat", "tags": ["x", "y"]}),
    ):
        api.fact_store(caller=caller, subject=key, predicate=None, content=content, metadata=metadata, source="import")

    def keys(attributes: dict) -> list[str]:
        if query is None:
            return sorted(m.subject for m in api.memory_list_recent(caller=caller, attributes=attributes))
        found = api.memory_search(caller=caller, query=api.SearchQuery(query, types=["fact"], attributes=attributes))
        return sorted(f.memory.subject for f in found)

    assert keys({"content": "a note"}) == ["a"]
    assert keys({"content": "a"}) == []
    assert keys({"source": "chat"}) == ["b"]  # the value's key, not the column every item shares
    assert keys({"source": "import"}) == []
    assert keys({"tags": ["x"]}) == ["a"]
    assert keys({"tags": ["y", "x"]}) == []
    assert keys({"tags": ["x", "y"], "content": "b note"}) == ["b"]
    assert keys({"content": 1}) == []


def test_accessed_at_moves_only_when_a_reader_returns_the_memory(caller):
    fact = api.fact_store(caller=caller, subject=None, predicate=None, content="User likes jazz").memory
    assert Memory.objects.get(pk=fact.pk).accessed_at is None
    api.memory_search(caller=caller, query=api.SearchQuery("jazz"))  # the plain selector has no side effect
    assert Memory.objects.get(pk=fact.pk).accessed_at is None
    api.memory_search_accessed(caller=caller, query=api.SearchQuery("jazz"))
    first = Memory.objects.get(pk=fact.pk).accessed_at
    assert first is not None
    listed = api.memory_list_recent_accessed(caller=caller)
    # Within a minute a memory is not written again; the answer shows the read's time all the same.
    shown = listed[0].accessed_at
    assert Memory.objects.get(pk=fact.pk).accessed_at == first and shown is not None and shown > first
    with time_machine.travel(first + ACCESSED_AT_GRANULARITY + timedelta(seconds=1)):
        api.memory_list_recent_accessed(caller=caller)
    written = Memory.objects.get(pk=fact.pk).accessed_at
    assert written is not None and written > first + ACCESSED_AT_GRANULARITY
    assert api.memory_view(Memory.objects.get(pk=fact.pk)).accessed_at == Memory.objects.get(pk=fact.pk).accessed_at
