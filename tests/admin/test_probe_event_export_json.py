"""The audit log's CSV export gives each event's payload as JSON, as the store
holds it: it was Python's repr of the dict ({'superuser': 'root', 'ok': True,
'n': None}), which no JSON reader takes back."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from memory.models import MemoryEvent
from memory.services.memories import fact_store

pytestmark = pytest.mark.django_db


def test_the_event_export_gives_payloads_as_json(client, admin_a):
    fact = fact_store(caller=admin_a.caller, subject="acme", predicate="plan", content="Acme plans a launch").memory
    event = MemoryEvent.objects.filter(memory_id=fact.pk).order_by("id").first()
    assert event is not None and isinstance(event.payload, dict) and event.payload
    client.force_login(admin_a.user)
    response = client.post(
        reverse("admin:memory_memoryevent_changelist"),
        {"action": "export_csv", "_selected_action": [str(event.pk)]},
    )
    assert response.status_code == 200
    header, *rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode(), newline="")))
    (row,) = rows
    assert json.loads(row[header.index("payload")]) == event.payload
