"""roampal's always-injected memory_bank facts (the first section of every
KNOWN CONTEXT block) are read by a statement compiled once per process
(``memory_bank_always_injected``): the same rows, in the same order and with
the same values as the queryset it stands for, and no queryset is built or
compiled per block."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db.models import Q
from django.db.models.sql.compiler import SQLCompiler
from django.forms.models import model_to_dict
from django.utils import timezone

from memory import api
from memory.models import Collection, Memory
from memory.selectors.collections import MEMORY_BANK_ALWAYS_INJECT_MAX, known_context
from memory.selectors.memories import _always_injected_statement, memory_bank_always_injected, read_boundary

pytestmark = pytest.mark.django_db


def _queryset_rows(caller: Any, now: Any) -> list[Memory]:
    """What the statement stands for, as the ORM reads it."""
    decision = read_boundary(caller)
    return list(
        Memory.objects.for_caller(caller)
        .visible_in(decision.visible)
        .retrievable(now)
        .filter(collection=Collection.MEMORY_BANK, metadata__contains={"always_inject": True})
        .without_vectors()
        .order_by("-importance", "-created_at")[:MEMORY_BANK_ALWAYS_INJECT_MAX]
    )


def _values(rows: list[Memory]) -> list[dict[str, Any]]:
    vectors = ["embedding", "search_vector"]
    return [{**model_to_dict(m, exclude=vectors), "created_at": m.created_at, "updated_at": m.updated_at} for m in rows]


@pytest.fixture
def facts(member: Any, outsider: Any) -> dict[str, Memory]:
    caller = member.caller
    made = {
        f"pinned-{i}": api.memory_bank_store(
            caller=caller, content=f"pinned fact {i}", importance=0.5 + (i % 3) / 10, always_inject=True
        )
        for i in range(MEMORY_BANK_ALWAYS_INJECT_MAX + 2)
    }
    made["not pinned"] = api.memory_bank_store(caller=caller, content="an ordinary fact", importance=1.0)
    made["replaced"] = api.memory_bank_store(caller=caller, content="old shell", importance=1.0, always_inject=True)
    api.memory_bank_update(caller=caller, memory_id=made["replaced"].id, content="new shell")
    made["expired"] = api.memory_bank_store(caller=caller, content="expired fact", importance=1.0, always_inject=True)
    Memory.objects.filter(id=made["expired"].id).update(expires_at=timezone.now() - timedelta(minutes=1))
    made["forgotten"] = api.memory_bank_store(
        caller=caller, content="forgotten fact", importance=1.0, always_inject=True
    )
    Memory.objects.filter(id=made["forgotten"].id).update(validity="retracted")
    made["secret"] = api.memory_bank_store(caller=caller, content="secret fact", importance=1.0, always_inject=True)
    Memory.objects.filter(id=made["secret"].id).update(boundary_class="secret")
    made["working"] = api.working_store(caller=caller, content="working note", metadata={"always_inject": True})
    made["other tenant"] = api.memory_bank_store(
        caller=outsider.caller, content="another tenant's fact", importance=1.0, always_inject=True
    )
    return made


def test_the_statement_returns_what_the_queryset_returns(member, facts):
    caller = member.caller
    now = timezone.now()
    decision = read_boundary(caller)
    assert "secret" not in decision.visible
    rows = memory_bank_always_injected(caller, decision, now, MEMORY_BANK_ALWAYS_INJECT_MAX)
    expected = _queryset_rows(caller, now)
    assert [m.id for m in rows] == [m.id for m in expected]
    assert all({"embedding", "search_vector"} <= m.get_deferred_fields() for m in rows)
    assert _values(rows) == _values(expected)
    assert len(rows) == MEMORY_BANK_ALWAYS_INJECT_MAX
    excluded = {
        facts[name].id
        for name in ("not pinned", "replaced", "expired", "forgotten", "secret", "working", "other tenant")
    }
    assert not excluded & {m.id for m in rows}
    assert [m.content for m in rows if m.content.endswith("shell")] == ["new shell"]


@pytest.fixture
def fresh_statement():
    """The statement compiled again, under whatever rule the test sets, and
    again after it (so no other test reads a statement of a patched rule)."""
    _always_injected_statement.cache_clear()
    yield
    _always_injected_statement.cache_clear()


def test_the_statement_follows_the_models_retrievable_rule(member, facts, monkeypatch, fresh_statement):
    """The statement states no rule of its own: a change to the one definition
    of "retrievable" (here: a fact must also be less important than this) is a
    change to what the statement returns, as it is to the queryset's."""
    from memory import models

    caller = member.caller
    now = timezone.now()
    decision = read_boundary(caller)
    before = [m.id for m in memory_bank_always_injected(caller, decision, now, MEMORY_BANK_ALWAYS_INJECT_MAX)]
    rule = models.retrievable_q
    monkeypatch.setattr(models, "retrievable_q", lambda when: rule(when) & Q(importance__lt=6.5))
    _always_injected_statement.cache_clear()
    rows = memory_bank_always_injected(caller, decision, now, MEMORY_BANK_ALWAYS_INJECT_MAX)
    expected = _queryset_rows(caller, now)
    assert [m.id for m in rows] == [m.id for m in expected]
    assert rows and all(m.importance < 6.5 for m in rows) and [m.id for m in rows] != before


def test_a_known_context_block_compiles_no_queryset(member, facts, monkeypatch):
    pinned = [m.id for m in _queryset_rows(member.caller, timezone.now())]
    compiled: list[str] = []
    as_sql = SQLCompiler.as_sql

    def counted(self: SQLCompiler, *args: Any, **kwargs: Any) -> Any:
        compiled.append(self.query.model.__name__ if self.query.model else "")
        return as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", counted)
    block = known_context(caller=member.caller, query="")
    assert [h.memory.id for h in block.user_facts] == pinned
    assert compiled == []
