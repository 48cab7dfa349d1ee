"""``memory_supersedes_map`` (memento's ``supersedes`` of every answer) reads
by a statement compiled once per process: the same pairs as the queryset it
stands for (the latest of several replaced memories, the tenant and the read's
visible classes only), and no queryset is built or compiled per answer."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models.sql.compiler import SQLCompiler

from memory import api
from memory.models import Memory
from memory.selectors.memories import memory_supersedes_map, read_boundary

pytestmark = pytest.mark.django_db


def _queryset_map(caller: Any, ids: list[Any]) -> dict[Any, Any]:
    pairs = (
        Memory.objects.for_caller(caller)
        .visible_in(read_boundary(caller).visible)
        .filter(superseded_by_id__in=ids)
        .order_by("updated_at", "id")
        .values_list("superseded_by_id", "pk")
    )
    return {new: old for new, old in pairs if new is not None}


def _replace(caller: Any, predicate: str, *contents: str) -> list[Memory]:
    """Facts under one key, each stored fact superseding the one before."""
    return [api.fact_store(caller=caller, subject="user", predicate=predicate, content=c).memory for c in contents]


def test_the_statement_answers_what_the_queryset_answers(member, outsider, monkeypatch):
    caller = member.caller
    shell = _replace(caller, "shell", "bash", "zsh", "fish")
    editor = _replace(caller, "editor", "vim", "emacs")
    secret = _replace(caller, "salary", "90k", "95k")
    Memory.objects.filter(id=secret[0].id).update(boundary_class="secret")
    alone = _replace(caller, "city", "Lyon")
    theirs = _replace(outsider.caller, "shell", "ksh", "tcsh")
    ids = [m.id for m in (*shell, *editor, *secret, *alone, *theirs)]
    # Two memories replaced by one: the one updated last is named.
    Memory.objects.filter(id=shell[0].id).update(superseded_by_id=shell[2].id)
    expected = _queryset_map(caller, ids)
    assert set(expected) == {shell[2].id, editor[1].id}
    assert expected[editor[1].id] == editor[0].id and expected[shell[2].id] in {shell[0].id, shell[1].id}

    compiled: list[object] = []
    as_sql = SQLCompiler.as_sql

    def counted(self: SQLCompiler, *args: Any, **kwargs: Any) -> Any:
        compiled.append(self.query.model)
        return as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counted)
    assert memory_supersedes_map(caller=caller, memory_ids=ids) == expected
    assert memory_supersedes_map(caller=caller, memory_ids=[]) == {}
    assert compiled == []
