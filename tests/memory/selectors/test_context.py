"""memory_context: token budget, lowest-scored omitted first, deterministic ties."""

from __future__ import annotations

import uuid

import pytest

from memory.context import build_context
from memory.errors import InvalidArgument
from memory.models import Memory
from memory.services.memories import fact_store, rule_store
from memory.tokenizer import count_tokens
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db


@pytest.fixture
def caller():
    return make_identity("tenant-a", "member").caller


def _fill(caller, n: int) -> None:
    for i in range(n):
        fact_store(
            caller=caller,
            subject="user",
            predicate=f"diet_detail_{i}",
            scope="health",
            importance=float(i % 10),
            content=f"Dietary detail {i}: the user avoids ingredient number {i} and prefers meal plan {i} " * 3,
        )
        rule_store(
            caller=caller, content=f"Diet rule {i}: check ingredient {i} before suggesting recipes", scope="health"
        )


@pytest.mark.parametrize("budget", [60, 150, 400, 1200, 3000])
def test_context_never_exceeds_budget_and_omits_lowest_scored(caller, budget):
    _fill(caller, 30)
    block = build_context(caller=caller, trigger_prompt="Help user with diet", butler="health", token_budget=budget)
    assert count_tokens(block.text) == block.token_count <= budget
    for heading in ("## Facts", "## Rules", "## Recent episodes"):
        assert heading in block.text
    full = build_context(caller=caller, trigger_prompt="Help user with diet", butler="health", token_budget=100_000)
    for section, items in block.included.items():
        ranked = [i.memory.id for i in full.included[section]]
        # What fits is always a prefix of the full ranking: lower scores go first.
        assert [i.memory.id for i in items] == ranked[: len(items)]
    if budget < 3000:
        assert block.omitted > 0


def test_context_section_quotas_are_configurable(caller):
    _fill(caller, 20)
    # Both the facts and the rules mention the ingredient: each section has hits to fill its quota with.
    facts_heavy = build_context(
        caller=caller,
        trigger_prompt="diet ingredient",
        butler="health",
        token_budget=600,
        quotas={"facts": 1.0, "rules": 0.0, "episodes": 0.0},
    )
    rules_heavy = build_context(
        caller=caller,
        trigger_prompt="diet ingredient",
        butler="health",
        token_budget=600,
        quotas={"facts": 0.0, "rules": 1.0, "episodes": 0.0},
    )
    assert len(facts_heavy.included["facts"]) > len(rules_heavy.included["facts"])
    assert len(rules_heavy.included["rules"]) > len(facts_heavy.included["rules"])
    with pytest.raises(InvalidArgument):
        build_context(caller=caller, trigger_prompt="diet", butler="health", quotas={"gossip": 1.0})


def test_context_ties_break_by_created_at_desc_then_id_asc(caller):
    # Identical content, importance and confidence -> identical scores.
    ids = []
    for i in range(4):
        ids.append(
            fact_store(
                caller=caller, subject="user", predicate=f"tie_{i}", content="Likes green tea", scope="health"
            ).memory.id
        )
    same_time = Memory.objects.get(pk=ids[0]).created_at
    # Two share a timestamp, so the id decides between them.
    Memory.objects.filter(pk__in=ids[2:]).update(created_at=same_time, last_confirmed_at=same_time)
    Memory.objects.filter(pk__in=ids[:2]).update(
        created_at=same_time.replace(year=same_time.year - 1), last_confirmed_at=same_time
    )
    first = build_context(caller=caller, trigger_prompt="green tea", butler="health")
    second = build_context(caller=caller, trigger_prompt="green tea", butler="health")
    order = [i.memory.id for i in first.included["facts"]]
    assert order == [i.memory.id for i in second.included["facts"]]
    assert first.text == second.text
    scores = {round(i.score, 9) for i in first.included["facts"]}
    assert len(scores) == 1, "the fixture must produce a real tie"
    newest = sorted(ids[2:], key=lambda pk: str(pk))
    oldest = sorted(ids[:2], key=lambda pk: str(pk))
    assert order == newest + oldest


def test_context_rejects_bad_budget(caller):
    with pytest.raises(InvalidArgument):
        build_context(caller=caller, trigger_prompt="x", butler="health", token_budget=5)
    with pytest.raises(InvalidArgument):
        build_context(caller=caller, trigger_prompt="x", butler="bad butler name!", token_budget=500)


def test_unknown_ids_are_not_found_not_errors(caller):
    from memory.errors import NotFound
    from memory.selectors.memories import memory_fetch

    with pytest.raises(NotFound):
        memory_fetch(caller=caller, kind="fact", memory_id=uuid.uuid4())
