"""A review posted to a memory's page with an oversized value: the refusal is a
short message, not the value. An unknown action came back as Python's repr of
whatever was posted, and a 50 KB replacement id or maturity was quoted whole by
the service's refusal; either message was kept in the session until shown."""

from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from memory.models import Memory
from memory.services.memories import rule_store

pytestmark = pytest.mark.django_db

HUGE = "x" * 50_000


@pytest.mark.parametrize(
    "data",
    [
        {"action": HUGE},
        {"action": "supersede", "replacement": HUGE},
        {"action": "set_maturity", "maturity": HUGE},
        {"action": "conflict_accept", "conflict": HUGE},
    ],
)
def test_a_review_with_an_oversized_value_is_refused_in_a_short_message(client, admin_a, data):
    client.force_login(admin_a.user)
    rule = rule_store(caller=admin_a.caller, content="Deploy on Tuesdays")
    before = Memory.objects.values_list("validity", "maturity", "superseded_by_id").get(pk=rule.pk)
    response = client.post(reverse("admin:memory_memory_review", args=[rule.pk]), data)
    assert response.status_code == 302
    shown = [str(message) for message in get_messages(response.wsgi_request)]
    assert shown and all(len(message) < 300 for message in shown), [m[:100] for m in shown]
    assert Memory.objects.values_list("validity", "maturity", "superseded_by_id").get(pk=rule.pk) == before


def test_an_unknown_action_is_named_in_plain_words(client, admin_a):
    client.force_login(admin_a.user)
    rule = rule_store(caller=admin_a.caller, content="Deploy on Tuesdays")
    response = client.post(reverse("admin:memory_memory_review", args=[rule.pk]), {"action": "explode"})
    shown = [str(message) for message in get_messages(response.wsgi_request)]
    assert shown == [
        "Unknown review action; the page sends one of confirm, retract, restore, supersede, set_maturity, "
        "reembed, conflict_accept, conflict_dismiss."
    ]
