"""An imported upstream id that is the UUID of a memory the tenant already
holds must not take that UUID over: every dialect resolves an id through the
tenant's aliases first (memory.selectors.aliases.memory_pk), so an alias equal
to another memory's own id made that memory unreachable by its id (a fetch
answered with the imported text, a forget deleted the imported memory).

Found by probing: a memproj export of a tenant imported back into the same
tenant (a restore), or any store whose ids are UUIDs, shadowed the tenant's
own memories and duplicated them; a re-run of the same file must create
nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from memory import api
from memory.models import Memory, MemoryAlias
from memory.services.imports import memories_import
from memory.services.memories import episode_store
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

HEADER = {"type": "header", "format": "memproj-export/1"}


def write_export(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in [HEADER, *rows]))
    return path


def test_an_imported_id_naming_a_memory_of_the_tenant_does_not_shadow_it(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    own = episode_store(caller=a, content="the tenant's own episode", butler="probe")
    path = write_export(
        tmp_path / "shadow.jsonl",
        [{"type": "memory", "id": str(own.id), "kind": "episode", "content": "an imposter", "butler": "x"}],
    )
    for _ in range(2):
        report = memories_import(caller=a, system="memproj", location=str(path))
        assert report.created_total == 0
        assert report.skipped["already here (its id names a memory of this tenant)"] == 1
    assert api.memory_fetch(caller=a, kind="episode", memory_id=str(own.id)).content == "the tenant's own episode"
    assert Memory.objects.filter(tenant_id=a.tenant_id).count() == 1
    assert not MemoryAlias.objects.filter(tenant_id=a.tenant_id).exists()


def test_an_id_spelled_another_way_does_not_shadow_it_either(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    own = episode_store(caller=a, content="the tenant's own episode", butler="probe")
    path = write_export(
        tmp_path / "upper.jsonl",
        [{"type": "memory", "id": str(own.id).upper(), "kind": "episode", "content": "an imposter", "butler": "x"}],
    )
    report = memories_import(caller=a, system="memproj", location=str(path))
    assert report.created_total == 0
    assert api.memory_fetch(caller=a, kind="episode", memory_id=str(own.id)).content == "the tenant's own episode"


def test_an_alias_carried_by_an_export_does_not_shadow_a_memory_of_the_tenant(tmp_path):
    """The aliases a memproj export carries (ids from earlier imports) are kept
    for the imported memory, except one that is another memory's own id here."""
    a = make_identity("tenant-a", "owner", role="admin").caller
    own = episode_store(caller=a, content="the tenant's own episode", butler="probe")
    moved = "0b6f4a52-8d7e-4a8e-9d57-3f0c1e1f0a01"
    path = write_export(
        tmp_path / "aliases.jsonl",
        [
            {"type": "memory", "id": moved, "kind": "episode", "content": "a moved episode", "butler": "x"},
            {"type": "alias", "memory_id": moved, "system": "mem0", "alias": str(own.id)},
            {"type": "alias", "memory_id": moved, "system": "mem0", "alias": "m-7"},
        ],
    )
    report = memories_import(caller=a, system="memproj", location=str(path))
    assert report.created_total == 1
    assert api.memory_fetch(caller=a, kind="episode", memory_id=str(own.id)).content == "the tenant's own episode"
    assert api.memory_fetch(caller=a, kind="episode", memory_id="m-7").content == "a moved episode"
    assert api.memory_fetch(caller=a, kind="episode", memory_id=moved).content == "a moved episode"


def test_a_tenant_s_export_imported_back_into_it_creates_nothing(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    own = episode_store(caller=a, content="the tenant's own episode", butler="probe")
    out = io.StringIO()
    call_command("export", tenant="tenant-a", output="-", stdout=out, stderr=io.StringIO())
    path = tmp_path / "export.jsonl"
    path.write_text(out.getvalue())
    report = memories_import(caller=a, system="memproj", location=str(path))
    assert report.created_total == 0
    assert Memory.objects.filter(tenant_id=a.tenant_id).count() == 1
    assert api.memory_fetch(caller=a, kind="episode", memory_id=str(own.id)).content == "the tenant's own episode"


def test_another_tenant_s_memory_of_that_id_is_left_alone(tmp_path):
    """Tenant B holding the id changes nothing of B; A's copy gets an id of
    its own and answers to B's id as an alias in A only."""
    a = make_identity("tenant-a", "owner", role="admin").caller
    b = make_identity("tenant-b", "owner", role="admin").caller
    theirs = episode_store(caller=b, content="tenant b's episode", butler="probe")
    path = write_export(
        tmp_path / "other.jsonl",
        [{"type": "memory", "id": str(theirs.id), "kind": "episode", "content": "tenant a's copy", "butler": "x"}],
    )
    report = memories_import(caller=a, system="memproj", location=str(path))
    assert report.created_total == 1
    assert api.memory_fetch(caller=a, kind="episode", memory_id=str(theirs.id)).content == "tenant a's copy"
    assert api.memory_fetch(caller=b, kind="episode", memory_id=str(theirs.id)).content == "tenant b's episode"
    assert not MemoryAlias.objects.filter(tenant_id=b.tenant_id).exists()
