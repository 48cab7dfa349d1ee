"""An import whose database goes away half way: the batches stored before
stay whole, the run ends with the coded storage error saying what it stored
and that the same import goes on from there, and the re-run stores the rest,
nothing twice, the supersession across the break linked.

Found by probing: the database's own exception (psycopg's OperationalError)
came out of the import as it was: a traceback from ``manage.py
import_memories`` and a server error from the admin's Import, with nothing
telling the user that part of the store was in and that a re-run resumes."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError

from memory.errors import StorageUnavailable
from memory.models import Memory, MemoryAlias
from memory.selectors.aliases import memory_pk
from memory.services import imports
from memory.services.imports import memories_import
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

HEADER = {"type": "header", "format": "memproj-export/1", "tenant": "{}"}


def test_an_import_cut_off_by_the_database_says_so_and_a_rerun_finishes_it(tmp_path, monkeypatch):
    a = make_identity("tenant-a", "owner", role="admin").caller
    rows = [
        {"type": "memory", "id": f"m-{i}", "kind": "rule", "content": f"otter rule number {i}", "success_count": i}
        for i in range(5)
    ]
    rows[0].update(validity="superseded", superseded_by_id="m-4")
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [HEADER, *rows]))

    insert = imports.memories_insert
    calls: list[int] = []

    def going_away(**kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OperationalError("server closed the connection unexpectedly")
        return insert(**kwargs)

    monkeypatch.setattr(imports, "memories_insert", going_away)
    with pytest.raises(StorageUnavailable, match="stored 2 memories before") as caught:
        memories_import(caller=a, system="memproj", location=str(path), batch_size=2, embed=False)
    assert "run the same import again" in str(caught.value)
    assert "server closed" not in str(caught.value)
    assert Memory.objects.filter(tenant_id=a.tenant_id).count() == 2
    assert MemoryAlias.objects.filter(tenant_id=a.tenant_id).count() == 2

    monkeypatch.setattr(imports, "memories_insert", insert)
    report = memories_import(caller=a, system="memproj", location=str(path), batch_size=2, embed=False)
    assert report.created_total == 3 and report.superseded_links == 1
    assert Memory.objects.filter(tenant_id=a.tenant_id).count() == 5
    first = Memory.objects.get(pk=memory_pk(a, "m-0"))
    assert first.validity == "superseded" and first.superseded_by_id == memory_pk(a, "m-4")
    assert Memory.objects.get(pk=memory_pk(a, "m-3")).success_count == 3.0
