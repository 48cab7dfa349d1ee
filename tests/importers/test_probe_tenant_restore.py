"""``manage.py import`` (a whole tenant restored from ``manage.py export``)
against files that are not that tenant's export.

Found by probing: a row of the file naming a memory of another tenant was
stored as it came (an alias, a link or a supersession of tenant C pointing at
tenant B's memory, which the admin's chain and link views then showed in C);
a line that was not a JSON object, an id that is no UUID, a vector of another
dimension or a NUL in a text ended the command in a traceback; and every line
was read whole however long it was."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memory.models import Memory, MemoryAlias, MemoryEvent, MemoryLink
from memory.services import export as export_service
from memory.services.memories import episode_store
from policy.models import Tenant
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

WHEN = "2024-01-01T00:00:00+00:00"
HEADER = {"type": "header", "format": "memproj-export/1", "tenant": json.dumps({"name": "restored"})}
MINE = "00000000-0000-4000-8000-000000000001"


def memory_row(**extra):
    return {
        "type": "memory",
        "id": MINE,
        "kind": "episode",
        "content": "an episode of the restored tenant",
        "content_hash": "x",
        "created_at": WHEN,
        "updated_at": WHEN,
        "occurred_at": WHEN,
        "namespace": [],
        "tags": [],
        "metadata": {},
        **extra,
    }


def restore(tmp_path, rows, raw: str | None = None):
    path = tmp_path / "restore.jsonl"
    path.write_text(raw if raw is not None else "".join(json.dumps(r) + "\n" for r in [HEADER, *rows]))
    call_command("import", tenant="tenant-c", input=str(path), stdout=io.StringIO())


def assert_nothing_imported():
    assert not Tenant.objects.filter(slug="tenant-c").exists()
    assert not Memory.objects.filter(pk=MINE).exists()


@pytest.fixture
def theirs():
    b = make_identity("tenant-b", "owner", role="admin").caller
    return episode_store(caller=b, content="tenant b's own episode", butler="probe")


@pytest.mark.parametrize(
    "rows",
    [
        lambda b: [memory_row(superseded_by_id=b, validity="superseded")],
        lambda b: [
            memory_row(),
            {"type": "alias", "memory_id": b, "system": "mem0", "alias": "m1", "created_at": WHEN},
        ],
        lambda b: [
            memory_row(),
            {
                "type": "link",
                "id": 1,
                "from_memory_id": MINE,
                "to_memory_id": b,
                "kind": "derived_from",
                "created_at": WHEN,
            },
        ],
        lambda b: [
            memory_row(),
            {
                "type": "conflict",
                "id": "00000000-0000-4000-8000-000000000002",
                "memory_id": MINE,
                "other_id": b,
                "kind": "duplicate",
                "status": "open",
                "reason": "",
                "created_at": WHEN,
            },
        ],
        lambda b: [
            memory_row(),
            {"type": "event", "event_type": "marked_worked", "memory_id": b, "payload": {}, "created_at": WHEN},
        ],
    ],
    ids=["superseded_by", "alias", "link", "conflict", "event"],
)
def test_a_row_naming_another_tenant_s_memory_is_refused_and_nothing_is_imported(tmp_path, theirs, rows):
    events = MemoryEvent.objects.count()
    with pytest.raises(CommandError, match="belongs to another tenant"):
        restore(tmp_path, rows(str(theirs.id)))
    assert_nothing_imported()
    assert not MemoryAlias.objects.exists() and not MemoryLink.objects.exists()
    assert MemoryEvent.objects.count() == events
    assert Memory.objects.get(pk=theirs.id).superseded_by_id is None


def test_a_memory_of_another_tenant_s_principal_is_refused(tmp_path):
    b = make_identity("tenant-b", "owner", role="admin").caller
    with pytest.raises(CommandError, match="belongs to another tenant"):
        restore(tmp_path, [memory_row(principal_id=str(b.principal_id))])
    assert_nothing_imported()


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("[1, 2]", "line 2: not a row"),
        ('"a string"', "line 2: not a row"),
        ('{"id": 1}', "line 2: not a row"),
        ("{" * 100_000, "line 2"),
        (json.dumps(memory_row(id="not-a-uuid")), "does not fit its table"),
        (json.dumps(memory_row(embedding=[0.1, 0.2, 0.3])), "does not fit its table"),
        (json.dumps(memory_row(content="nul \u0000 in it")), "does not fit its table"),
        (json.dumps(memory_row(created_at=12345)), "created_at must be an ISO 8601 time"),
    ],
)
def test_a_line_that_is_not_a_row_is_a_coded_refusal(tmp_path, line, says):
    with pytest.raises(CommandError, match=f"nothing was imported: .*{says}"):
        restore(tmp_path, [], raw=json.dumps(HEADER) + "\n" + line + "\n")
    assert_nothing_imported()


def test_a_line_past_the_bound_is_refused_before_it_is_read_whole(monkeypatch):
    monkeypatch.setattr(export_service, "RECORD_MAX_CHARS", 1000)
    handle = io.BytesIO((json.dumps(HEADER) + "\n" + json.dumps(memory_row(content="x" * 50_000)) + "\n").encode())
    lines = export_service.export_lines(handle)
    assert next(lines).startswith('{"type": "header"')
    with pytest.raises(export_service.InvalidArgument, match="line 2 is longer than 1000 characters"):
        next(lines)
    assert handle.tell() < 5000  # the 50 KB line was not read to its end


def test_a_line_that_is_not_utf8_is_refused_naming_it(tmp_path):
    path = tmp_path / "restore.jsonl"
    path.write_bytes(json.dumps(HEADER).encode() + b"\n" + json.dumps(memory_row()).encode()[:-2] + b'\xff"}\n')
    with pytest.raises(CommandError, match="nothing was imported: line 2 is not UTF-8 text"):
        call_command("import", tenant="tenant-c", input=str(path), stdout=io.StringIO())
    assert_nothing_imported()


def test_a_restore_naming_only_its_own_rows_still_comes_in(tmp_path):
    restore(
        tmp_path,
        [
            memory_row(),
            {"type": "alias", "memory_id": MINE, "system": "mem0", "alias": "m1", "created_at": WHEN},
            {"type": "event", "event_type": "marked_worked", "memory_id": MINE, "payload": {}, "created_at": WHEN},
        ],
    )
    tenant = Tenant.objects.get(slug="tenant-c")
    assert Memory.objects.get(pk=MINE).tenant_id == tenant.pk
    assert MemoryAlias.objects.get(alias="m1").memory_id == Memory.objects.get(pk=MINE).pk
