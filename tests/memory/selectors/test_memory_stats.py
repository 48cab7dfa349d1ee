"""memory_stats counts a memory as active as every read sees it: a fact or rule
past its TTL is never retrieved, though it keeps validity=ACTIVE until the
expiry sweep deletes it, so it is not counted as active (a fact past its TTL
is expired, whatever its confidence)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import Memory
from memory.selectors.memories import memory_stats
from memory.services.memories import fact_store, rule_store
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db


@pytest.fixture
def caller():
    return make_identity("tenant-a", "member").caller


def test_a_fact_past_its_ttl_is_not_counted_as_active(caller):
    fact_store(caller=caller, subject="user", predicate="city", content="User lives in Austin")
    gone = fact_store(caller=caller, subject="user", predicate="diet", content="User is vegetarian")
    Memory.objects.filter(pk=gone.memory.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    facts = memory_stats(caller=caller)["facts"]
    assert (facts["total"], facts["active"], facts["fading"], facts["expired"]) == (2, 1, 0, 1)


def test_a_fact_whose_ttl_is_ahead_is_active(caller):
    kept = fact_store(caller=caller, subject="user", predicate="city", content="User lives in Austin")
    Memory.objects.filter(pk=kept.memory.pk).update(expires_at=timezone.now() + timedelta(days=1))
    facts = memory_stats(caller=caller)["facts"]
    assert (facts["active"], facts["expired"]) == (1, 0)


def test_a_rule_past_its_ttl_is_in_no_maturity(caller):
    rule_store(caller=caller, content="Suggest high protein vegetarian meals")
    gone = rule_store(caller=caller, content="Answer in French")
    Memory.objects.filter(pk=gone.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    rules = memory_stats(caller=caller)["rules"]
    assert (rules["total"], rules["candidate"]) == (2, 1)
