"""The policy travels with the Caller (resolved once, cached by tenant and
version); its scope TTLs drive expiry and its max_tokens bound context answers."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from memory.context import build_context
from memory.errors import InvalidArgument
from memory.models import Memory, MemoryEvent
from memory.selectors.memories import SearchQuery, memory_search
from memory.services.memories import episode_store, fact_store, rule_store
from memory.services.sweeps import memories_expire
from policy.caller import Caller
from policy.document import DEFAULT_POLICY
from policy.selectors import policies as policy_reads
from policy.services.policies import policy_apply

pytestmark = pytest.mark.django_db(transaction=True)


def fresh(caller: Caller) -> Caller:
    """A new request by the same token."""
    return Caller(tenant_id=caller.tenant_id, principal_id=caller.principal_id, role=caller.role, scopes=caller.scopes)


def test_the_policy_is_resolved_once_per_request_and_parsed_once_per_version(owner, django_assert_num_queries):
    policy_apply(caller=owner.caller, yaml="version: '0.4.0'\nretrieval: { hybrid: { alpha: 0.4 } }\n")
    policy_reads._cache.clear()
    request = fresh(owner.caller)
    with django_assert_num_queries(2):  # the current (id, version), then the document once
        assert request.policy.retrieval.alpha == 0.4
    with django_assert_num_queries(0):  # the rest of the request reads the same object
        assert request.policy.version == "0.4.0" and request.policy is request.policy
    with django_assert_num_queries(1):  # the next request: the version only; the parse is cached
        assert fresh(owner.caller).policy.retrieval.alpha == 0.4
    policy_apply(caller=owner.caller, yaml="version: '0.5.0'\nretrieval: { hybrid: { alpha: 0.5 } }\n")
    assert request.policy.version == "0.4.0"  # a request keeps the version it started with
    assert fresh(owner.caller).policy.retrieval.alpha == 0.5  # the next one sees the new one
    # Elevation resolves the target tenant's policy, not the admin's.
    assert owner.caller.acting_on(fresh(owner.caller).tenant_id).policy.version == "0.5.0"


def test_a_tenant_without_a_row_still_has_the_default(outsider):
    assert fresh(outsider.caller).policy.to_dict() == DEFAULT_POLICY.to_dict()


def test_scope_ttls_from_the_policy_drive_expiry(owner, member):
    policy_apply(
        caller=owner.caller,
        yaml="version: '0.4.0'\nscopes: { session: { ttl: '2d' }, project: { ttl: '30d' }, principle: { ttl: inf } }\n",
    )
    start = timezone.now()
    caller = fresh(member.caller)
    episode = episode_store(caller=caller, content="The zebra deploy failed at noon", butler="ops")
    assert episode.expires_at is not None
    assert abs(episode.expires_at - (start + timedelta(days=2))) < timedelta(minutes=1)
    project = fact_store(
        caller=caller, subject="zebra", predicate="owner", content="Team zebra", scope="project"
    ).memory
    assert project.expires_at is not None
    assert abs(project.expires_at - (start + timedelta(days=30))) < timedelta(minutes=1)
    principle = fact_store(caller=caller, subject="zebra", predicate="rule", content="Zebra", scope="principle").memory
    assert principle.expires_at is None
    ordinary = fact_store(caller=caller, subject="zebra", predicate="color", content="Striped zebra").memory
    assert ordinary.expires_at is None  # 'global' and butler scopes are not policy scopes

    with time_machine.travel(start + timedelta(days=31)):
        found = {
            m.memory.id for m in memory_search(caller=fresh(member.caller), query=SearchQuery("zebra", mode="keyword"))
        }
        assert episode.id not in found and project.id not in found
        assert principle.id in found and ordinary.id in found
    # The expiry sweep deletes each expired memory after its retention period,
    # whatever its kind: the episode first, then the project fact; never the others.
    result = memories_expire(now=start + timedelta(days=2 + 31))
    assert result.ids == [episode.id] and not Memory.objects.filter(pk=episode.id).exists()
    result = memories_expire(now=start + timedelta(days=30 + 31))
    assert result.ids == [project.id]
    assert set(Memory.objects.values_list("id", flat=True)) == {principle.id, ordinary.id}


def test_expired_facts_and_rules_of_a_project_scope_are_deleted_with_an_event_each(owner, member):
    """pce's scopes: a project-scoped fact or rule leaves retrieval at its TTL like an
    episode, and its row goes after the retention period with an audit event.
    An expired fact takes the older versions it superseded with it (each
    audited), so no superseded row is left without its successor."""
    policy_apply(caller=owner.caller, yaml="version: '0.4.0'\nscopes: { project: { ttl: '30d' } }\n")
    start = timezone.now()
    caller = fresh(member.caller)
    older = fact_store(
        caller=caller, subject="zebra", predicate="home", content="Zebra lives in Kenya", scope="project"
    )
    rule = rule_store(caller=caller, content="Always feed the zebra at noon", scope="project")
    lasting = rule_store(caller=caller, content="Never ride the zebra", scope="principle")
    policy_apply(caller=owner.caller, yaml="version: '0.5.0'\nscopes: { project: { ttl: '5d' } }\n")
    newer = fact_store(
        caller=fresh(member.caller),
        subject="zebra",
        predicate="home",
        content="Zebra lives in Tanzania",
        scope="project",
    ).memory
    older.memory.refresh_from_db()
    assert older.memory.superseded_by_id == newer.id

    assert memories_expire(now=start + timedelta(days=5 + 29)).processed == 0  # within the retention period
    result = memories_expire(now=start + timedelta(days=5 + 31))
    # The newer fact expired; the older one (its own TTL not yet past retention) goes as its history.
    assert set(result.ids) == {newer.id, older.memory.id}
    history = MemoryEvent.objects.get(memory_id=older.memory.id, event_type="expired_deleted")
    assert history.payload["superseded_by"] == str(newer.id)
    assert "superseded_by" not in MemoryEvent.objects.get(memory_id=newer.id, event_type="expired_deleted").payload
    assert Memory.objects.filter(pk=rule.id).exists()

    result = memories_expire(now=start + timedelta(days=30 + 31))
    assert result.ids == [rule.id]
    assert MemoryEvent.objects.get(memory_id=rule.id, event_type="expired_deleted").payload["content_hash"] == (
        rule.content_hash
    )
    assert list(Memory.objects.values_list("id", flat=True)) == [lasting.id]
    assert memories_expire(now=start + timedelta(days=400)).processed == 0  # principle: no TTL


def test_max_tokens_bounds_a_context_answer(owner, member):
    policy_apply(
        caller=owner.caller,
        yaml="version: '0.4.0'\nscopes: { session: { max_tokens: 200 }, project: { max_tokens: 1000 }, "
        "principle: { max_tokens: 1500 } }\n",
    )
    caller = fresh(member.caller)
    with pytest.raises(InvalidArgument, match=r"above the tenant policy's max_tokens \(200\)"):
        build_context(caller=caller, trigger_prompt="deploys", butler="session", token_budget=500)
    # A butler scope outside the policy is bounded by the largest policy scope.
    with pytest.raises(InvalidArgument, match=r"max_tokens \(1500\)"):
        build_context(caller=caller, trigger_prompt="deploys", butler="ops", token_budget=3000)
    assert build_context(caller=caller, trigger_prompt="deploys", butler="ops", token_budget=1500).token_count <= 1500
