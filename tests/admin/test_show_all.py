"""`?all=` ("show all") on the list pages that never count their table: the
paginator's count is only a lower bound, so Django's "at most
list_max_show_all rows" check would always pass and the page would load the
tenant's whole table. Those lists render one page at most, whoever asks."""

from __future__ import annotations

import re

import pytest
from django.contrib import admin as django_admin
from django.urls import reverse

from memory.models import ConflictCandidate, Memory, MemoryEvent
from memory.services.memories import rule_store

pytestmark = pytest.mark.django_db

PER_PAGE = 2


@pytest.fixture
def small_pages(monkeypatch):
    for model in (Memory, MemoryEvent, ConflictCandidate):
        monkeypatch.setattr(django_admin.site._registry[model], "list_per_page", PER_PAGE)


def rules(staff, count: int) -> list[Memory]:
    return [rule_store(caller=staff.caller, content=f"Show-all rule number {i}") for i in range(count)]


def assert_one_page(response) -> None:
    page = response.content.decode()
    assert response.status_code == 200
    assert len(response.context["cl"].result_list) == PER_PAGE
    assert "more on the next page" in page  # still paged, with a link one page ahead
    # Neither offered nor carried on by the sorting and filter links.
    assert not re.search(r"[?&;]all=", page)


def test_show_all_renders_one_page_of_memories_even_for_a_read_only_member(client, member_a, small_pages):
    rules(member_a, 6)
    tenant = member_a.tenant
    tenant.members_can_review = True
    tenant.save()
    client.force_login(member_a.user)
    url = reverse("admin:memory_memory_changelist")

    assert_one_page(client.get(url + "?all="))
    assert_one_page(client.get(url + "?all=&kind__exact=rule"))


def test_show_all_renders_one_page_of_audit_events(client, admin_a, small_pages):
    rules(admin_a, 6)  # one "stored" event each
    assert MemoryEvent.objects.filter(tenant_id=admin_a.tenant.pk).count() >= 6
    client.force_login(admin_a.user)

    assert_one_page(client.get(reverse("admin:memory_memoryevent_changelist") + "?all="))


def test_show_all_renders_one_page_of_conflicts(client, admin_a, small_pages):
    stored = rules(admin_a, 6)
    for newer, older in zip(stored[1:], stored[:-1], strict=True):
        ConflictCandidate.objects.create(
            tenant=admin_a.tenant, memory=newer, other=older, kind="duplicate", similarity=0.99
        )
    client.force_login(admin_a.user)

    assert_one_page(client.get(reverse("admin:memory_conflictcandidate_changelist") + "?all="))
