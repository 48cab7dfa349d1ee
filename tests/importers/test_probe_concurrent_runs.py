"""Two runs of the same import at once (the admin's Import clicked twice, or
from two tabs; the command started again while the first still runs) store
each memory once.

Found by probing: a batch checked which of its ids were imported already
before it took the tenant's write lock, so a second run that stored the same
records in between had them stored again: every memory twice, the second
copy without its alias (the alias insert ignores the conflict), so a re-run
could never find it."""

from __future__ import annotations

import json

import pytest

from memory.models import Memory, MemoryAlias
from memory.services import imports
from memory.services.imports import memories_import
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

HEADER = {"type": "header", "format": "memproj-export/1", "tenant": "{}"}


def export_file(tmp_path, n):
    path = tmp_path / "export.jsonl"
    rows = [
        {"type": "memory", "id": f"m-{i}", "kind": "fact", "content": f"walrus fact number {i}", "outcome_score": 0.5}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in [HEADER, *rows]))
    return str(path)


def test_a_second_run_storing_the_same_batch_meanwhile_doubles_nothing(tmp_path, monkeypatch):
    a = make_identity("tenant-a", "owner", role="admin").caller
    path = export_file(tmp_path, 5)
    write_batch = imports._Importer._write_batch
    other: list[imports.ImportReport] = []
    started: list[bool] = []

    def racing(self, planned):
        if not started:
            started.append(True)
            # The other run gets in between this batch's plan and its write.
            other.append(memories_import(caller=a, system="memproj", location=path, embed=False))
        return write_batch(self, planned)

    monkeypatch.setattr(imports._Importer, "_write_batch", racing)
    report = memories_import(caller=a, system="memproj", location=path, embed=False, batch_size=3)
    assert other[0].created_total == 5
    assert Memory.objects.filter(tenant_id=a.tenant_id).count() == 5
    assert MemoryAlias.objects.filter(tenant_id=a.tenant_id).count() == 5
    assert report.created_total == 0
    assert report.skipped["already imported (its id is an alias of a memory here)"] == 5
    again = memories_import(caller=a, system="memproj", location=path, embed=False)
    assert again.created_total == 0


def test_a_batch_part_of_which_the_other_run_stored_stores_the_rest(tmp_path, monkeypatch):
    a = make_identity("tenant-a", "owner", role="admin").caller
    path = export_file(tmp_path, 4)
    write_batch = imports._Importer._write_batch
    done: list[bool] = []

    def racing(self, planned):
        if not done:
            done.append(True)
            first = planned[0].record
            part = tmp_path / "part.jsonl"
            row = {"type": "memory", "id": first.source_id, "kind": "fact", "content": first.content}
            part.write_text(json.dumps(HEADER) + "\n" + json.dumps(row) + "\n")
            memories_import(caller=a, system="memproj", location=str(part), embed=False)
        return write_batch(self, planned)

    monkeypatch.setattr(imports._Importer, "_write_batch", racing)
    report = memories_import(caller=a, system="memproj", location=path, embed=False)
    assert report.created_total == 3 and report.created == {"fact": 3}
    assert Memory.objects.filter(tenant_id=a.tenant_id).count() == 4
    assert sorted(MemoryAlias.objects.filter(tenant_id=a.tenant_id).values_list("alias", flat=True)) == [
        f"m-{i}" for i in range(4)
    ]
