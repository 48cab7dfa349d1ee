"""``Memory.from_db`` builds a loaded row without ``Model.__init__``'s
per-field work; a loaded memory must be indistinguishable from one Django's
own ``Model.from_db`` builds, in full or with deferred columns."""

from __future__ import annotations

import pytest
from django.db import models
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

from memory.models import Memory
from memory.selectors.memories import memory_rows_by_id
from memory.services.memories import episode_store, fact_store
from policy.boundary import boundary_for

pytestmark = pytest.mark.django_db


def _as_django_builds(memory_id, *only: str) -> Memory:
    """The same row built by Django's own Model.from_db."""
    queryset = Memory.objects.filter(pk=memory_id)
    if only:
        queryset = queryset.only(*only)
    compiler = queryset.query.get_compiler(using="default")
    compiler.setup_query()
    attnames = [col.target.attname for col, _, _ in compiler.select]
    values = list(queryset.values_list(*attnames).get())
    return models.Model.from_db.__func__(Memory, "default", attnames, values)  # type: ignore[attr-defined]


def _same(loaded: Memory, reference: Memory) -> None:
    assert type(loaded) is Memory
    assert loaded.__dict__.keys() - {"_state"} == reference.__dict__.keys() - {"_state"}
    for name in reference.__dict__.keys() - {"_state"}:
        assert getattr(loaded, name) == getattr(reference, name), name
    assert loaded.get_deferred_fields() == reference.get_deferred_fields()
    assert loaded._state.adding is False and loaded._state.db == "default"


def test_a_full_row_is_the_row_django_would_build(member):
    fact = fact_store(caller=member.caller, subject="user", predicate="editor", content="User edits in Helix").memory
    _same(Memory.objects.get(pk=fact.pk), _as_django_builds(fact.pk))


def test_deferred_columns_stay_deferred_and_load_on_access(member):
    episode = episode_store(caller=member.caller, content="We chose Postgres for the store", butler="general")
    loaded = Memory.objects.only("id", "tenant_id", "content").get(pk=episode.pk)
    _same(loaded, _as_django_builds(episode.pk, "id", "tenant_id", "content"))
    assert "kind" in loaded.get_deferred_fields()
    assert loaded.kind == "episode"  # loaded on access, as Django does
    assert loaded.tenant.pk == member.caller.tenant_id


def test_a_loaded_row_saves_as_an_update_and_reads_its_relations(member):
    episode = episode_store(caller=member.caller, content="The deploy runs on Fridays", butler="general")
    loaded = memory_rows_by_id(member.caller, boundary_for(member.caller.policy), [episode.pk])[episode.pk]
    loaded.importance = 9.0
    loaded.save(update_fields=["importance"])
    assert Memory.objects.get(pk=episode.pk).importance == 9.0
    assert Memory.objects.count() == 1
    assert loaded.principal_id == episode.principal_id


def test_the_shortcut_holds_only_while_init_does_nothing_more_than_set_attributes():
    """What makes skipping Model.__init__ equivalent: no init signal listener,
    no custom __init__, and every column's class attribute a plain deferred
    attribute (a data descriptor would be bypassed by writing __dict__)."""
    assert not pre_init.has_listeners(Memory) and not post_init.has_listeners(Memory)
    assert Memory.__init__ is models.Model.__init__
    for field in Memory._meta.concrete_fields:
        assert isinstance(Memory.__dict__[field.attname], DeferredAttribute), field.name
