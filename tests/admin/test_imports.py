"""Importing another system's store from the admin: a thin caller of the import
service with a dry run first. The dry run shows what would be created and
skipped and writes nothing; the import creates, and a re-run skips everything;
a tenant admin imports only their upload into their own tenant (no other
tenant, no server path or URL, no DuckDB view over the server's files); a file
the reader cannot read is a form error. Django test client, real database."""

from __future__ import annotations

import gzip
import json
import os
import tarfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from memory.admin import imports as admin_imports
from memory.models import Memory, MemoryAlias, MemoryEvent
from memory.services.events import EventType
from memory.services.imports import tenant_export_cogx

pytestmark = pytest.mark.django_db

IMPORT = "admin:memory_memory_import"

MEMORY_JSONL = "\n".join(
    json.dumps(line)
    for line in (
        {"type": "entity", "name": "alice", "entityType": "person", "observations": ["Alice edits with Helix"]},
        {"type": "entity", "name": "berlin", "entityType": "city", "observations": ["Berlin is cold in winter"]},
        {"type": "relation", "from": "alice", "to": "berlin", "relationType": "lives_in"},
    )
)


def upload(content: str | bytes = MEMORY_JSONL, name: str = "memory.jsonl") -> SimpleUploadedFile:
    data = content.encode("latin-1" if "\x00" in content else "utf-8") if isinstance(content, str) else content
    return SimpleUploadedFile(name, data, content_type="application/octet-stream")


def dry_run(client, tenant, *, system: str = "mcp-memory", file=None, **fields: str):
    data = {"system": system, "tenant": str(tenant.pk), "namespace": "", **fields}
    if file is not None:
        data["upload"] = file
    return client.post(reverse(IMPORT), data)


def form_errors(response) -> list[str]:
    assert response.status_code == 200
    form = response.context["form"]
    return [str(e) for errors in form.errors.values() for e in errors]


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch):
    """Staged uploads go to this test's own directory."""
    monkeypatch.setattr(admin_imports, "_scratch_root", lambda: tmp_path / "staged")
    return tmp_path / "staged"


def test_the_changelist_links_to_the_import_page(client, admin_a):
    client.force_login(admin_a.user)

    page = client.get(reverse("admin:memory_memory_changelist")).content.decode()

    assert reverse(IMPORT) in page
    form = client.get(reverse(IMPORT)).content.decode()
    assert 'enctype="multipart/form-data"' in form and 'name="upload"' in form
    # A tenant admin is offered no server path, no reader options, and only systems read from a file.
    assert 'name="server_location"' not in form and 'name="options"' not in form
    assert '<option value="butlers"' not in form and '<option value="pce"' in form
    # The breadcrumbs lead back to the memory list.
    crumbs = form.split('<div class="breadcrumbs">', 1)[1].split("</div>", 1)[0]
    assert reverse("admin:memory_memory_changelist") in crumbs and crumbs.rstrip().endswith("Import memories")


def test_dry_run_shows_counts_and_writes_nothing(client, admin_a, scratch):
    client.force_login(admin_a.user)

    response = dry_run(client, admin_a.tenant, file=upload(), namespace="imported/mcp")

    assert response.status_code == 200
    report = response.context["report"]
    assert report.dry_run and report.created_total == 2 and report.entities == 2 and report.relations == 1
    page = response.content.decode()
    assert 'id="import-created">2 (2 fact)' in page
    assert "would create 2 fact" in page
    assert 'id="memory-import-confirm"' in page
    crumbs = page.split('<div class="breadcrumbs">', 1)[1].split("</div>", 1)[0]
    assert reverse(IMPORT) in crumbs and crumbs.rstrip().endswith("Dry run")
    assert not Memory.objects.filter(tenant=admin_a.tenant).exists()
    assert not MemoryAlias.objects.filter(tenant_id=admin_a.tenant.pk).exists()
    assert len(list(scratch.iterdir())) == 1  # the upload waits for the import


def test_import_creates_and_a_rerun_skips(client, admin_a, scratch):
    client.force_login(admin_a.user)
    token = dry_run(client, admin_a.tenant, file=upload(), namespace="imported/mcp").context["token"]

    done = client.post(reverse(IMPORT), {"token": token})

    assert done.status_code == 200 and done.context["done"]
    assert done.context["report"].created_total == 2
    memories = Memory.objects.filter(tenant=admin_a.tenant)
    assert sorted(m.content for m in memories) == ["Alice edits with Helix", "Berlin is cold in winter"]
    assert all(m.namespace[:2] == ["imported", "mcp"] for m in memories)
    assert MemoryAlias.objects.filter(tenant_id=admin_a.tenant.pk, system="mcp-memory").count() == 2
    # The memories' own events name the tenant admin who imported them.
    created = MemoryEvent.objects.filter(memory_id__in=[m.pk for m in memories], event_type=EventType.STORED)
    assert {e.actor_principal_id for e in created} == {admin_a.principal.pk}
    assert list(scratch.iterdir()) == []  # the staged upload is gone
    # The token was used: it cannot import twice.
    again_by_token = client.post(reverse(IMPORT), {"token": token})
    assert "no longer here" in again_by_token.content.decode()

    rerun = dry_run(client, admin_a.tenant, file=upload(), namespace="imported/mcp")
    assert rerun.context["report"].created_total == 0
    assert sum(rerun.context["report"].skipped.values()) == 2
    client.post(reverse(IMPORT), {"token": rerun.context["token"]})
    assert Memory.objects.filter(tenant=admin_a.tenant).count() == 2


def test_a_superusers_import_is_audited_with_their_name(client, superuser, admin_b):
    client.force_login(superuser.user)
    token = dry_run(client, admin_b.tenant, file=upload()).context["token"]

    client.post(reverse(IMPORT), {"token": token})

    event = MemoryEvent.objects.get(tenant_id=admin_b.tenant.pk, event_type=EventType.ADMIN_REVIEW)
    assert event.payload["superuser"] == "root" and event.payload["action"] == "import"
    assert event.payload["system"] == "mcp-memory" and event.payload["created"] == 2
    assert Memory.objects.filter(tenant=admin_b.tenant).count() == 2


def test_a_superuser_imports_from_a_server_path(client, superuser, admin_a, tmp_path):
    store = tmp_path / "memory.jsonl"
    store.write_text(MEMORY_JSONL)
    client.force_login(superuser.user)

    response = dry_run(client, admin_a.tenant, server_location=str(store))

    assert response.context["report"].created_total == 2
    client.post(reverse(IMPORT), {"token": response.context["token"]})
    assert Memory.objects.filter(tenant=admin_a.tenant).count() == 2
    assert store.exists()  # a server-side store is the superuser's: never removed


def test_a_tenant_admin_cannot_import_into_another_tenant(client, admin_a, admin_b):
    client.force_login(admin_a.user)

    response = dry_run(client, admin_b.tenant, file=upload())

    assert any("Select a valid choice" in e for e in form_errors(response))
    assert not Memory.objects.filter(tenant=admin_b.tenant).exists()


def test_a_tenant_admin_cannot_read_a_server_path(client, admin_a, tmp_path):
    secret = tmp_path / "memory.jsonl"
    secret.write_text(MEMORY_JSONL)
    client.force_login(admin_a.user)

    by_path = dry_run(client, admin_a.tenant, server_location=str(secret))
    by_url = dry_run(client, admin_a.tenant, system="butlers", server_location="postgresql://localhost/memproj")
    by_option = dry_run(client, admin_a.tenant, file=upload(), options=f"history={secret}")

    assert by_path.status_code == by_url.status_code == by_option.status_code == 403
    assert not Memory.objects.filter(tenant=admin_a.tenant).exists()


def test_a_duckdb_upload_cannot_read_the_servers_files(client, admin_a, tmp_path):
    """A DuckDB file's view over read_text() would put a server file into the
    tenant's memories: the pce reader reads no view (and with external access off)."""
    duckdb = pytest.importorskip("duckdb")
    secret = tmp_path / "secret.txt"
    secret.write_text("the server's secret")
    store = tmp_path / "pce.duckdb"
    with duckdb.connect(str(store)) as connection:
        connection.execute(
            "CREATE VIEW claims AS SELECT 'clm_1' AS id, content AS text, 'fact' AS kind, 'project' AS scope, "
            f"'public' AS boundary_class, '2024-01-01' AS created_at FROM read_text('{secret}')"
        )
    client.force_login(admin_a.user)

    response = dry_run(client, admin_a.tenant, system="pce", file=upload(store.read_bytes(), "pce.duckdb"))

    assert response.status_code == 200
    errors = " ".join(form_errors(response))
    assert "claims is a view, not a table" in errors
    assert "the server's secret" not in response.content.decode()


def test_a_tenant_admins_import_keeps_to_the_tenant_it_dry_ran(client, admin_a, admin_b):
    """The token names the plan kept in the session: another user's session has no such plan."""
    client.force_login(admin_a.user)
    token = dry_run(client, admin_a.tenant, file=upload()).context["token"]
    client.logout()
    client.force_login(admin_b.user)

    response = client.post(reverse(IMPORT), {"token": token})

    assert "no longer here" in response.content.decode()
    assert not Memory.objects.exists()


@pytest.mark.parametrize(
    ("system", "name", "content"),
    [
        ("mcp-memory", "memory.jsonl", "{not json\n"),
        ("cogx", "store.cogx.tar.gz", "not a tarball"),
        ("roampal", "backup.zip", "not a zip"),
        ("pce", "pce.duckdb", "not duckdb"),
        ("memproj", "export.jsonl", "\x00\xff binary"),
        ("mem0", "mem0.json", '{"results": 5}'),
        ("memento", "memento.json", "[1, 2"),
    ],
)
def test_a_bad_file_is_a_form_error_not_a_server_error(client, admin_a, scratch, system, name, content):
    client.force_login(admin_a.user)

    response = dry_run(client, admin_a.tenant, system=system, file=upload(content, name))

    assert response.status_code == 200
    assert form_errors(response), "the reader's complaint is shown on the form"
    assert not Memory.objects.exists()
    assert list(scratch.iterdir()) == []  # nothing left staged


def test_no_file_and_too_large_a_file_are_form_errors(client, admin_a, monkeypatch):
    client.force_login(admin_a.user)

    assert any("Upload the store" in e for e in form_errors(dry_run(client, admin_a.tenant)))
    monkeypatch.setattr(admin_imports, "IMPORT_MAX_BYTES", 10)
    assert any("larger than" in e for e in form_errors(dry_run(client, admin_a.tenant, file=upload())))


def test_a_member_cannot_import(client, member_a):
    member_a.tenant.members_can_review = True
    member_a.tenant.save(update_fields=["members_can_review"])
    client.force_login(member_a.user)

    assert client.get(reverse(IMPORT)).status_code == 403


def test_stale_staged_uploads_are_removed(scratch):
    old, fresh = scratch / "old", scratch / "fresh"
    old.mkdir(parents=True)
    fresh.mkdir()
    os.utime(old, (0, 0))

    admin_imports._forget_stale_uploads()

    assert not old.exists() and fresh.is_dir()


def test_a_run_stops_at_its_limit_and_import_the_rest_goes_on(client, admin_a, scratch, monkeypatch):
    monkeypatch.setattr(admin_imports, "IMPORT_RUN_LIMIT", 1)
    client.force_login(admin_a.user)
    token = dry_run(client, admin_a.tenant, file=upload()).context["token"]

    first = client.post(reverse(IMPORT), {"token": token})

    assert first.context["report"].created_total == 1 and first.context["token"] == token
    assert 'value="Import the rest"' in first.content.decode()
    assert len(list(scratch.iterdir())) == 1  # kept for the rest
    created = [1]
    for _ in range(3):
        rest = client.post(reverse(IMPORT), {"token": token})
        created.append(rest.context["report"].created_total)
        if not rest.context["token"]:
            break
    assert created == [1, 1] and rest.context["report"].entities == 2
    assert Memory.objects.filter(tenant=admin_a.tenant).count() == 2
    assert list(scratch.iterdir()) == []


def test_the_dry_run_page_says_why_it_skips(client, admin_a):
    client.force_login(admin_a.user)
    client.post(reverse(IMPORT), {"token": dry_run(client, admin_a.tenant, file=upload()).context["token"]})

    page = dry_run(client, admin_a.tenant, file=upload()).content.decode()

    assert 'id="import-skipped"' in page
    skipped = page[page.index('id="import-skipped"') : page.index("</table>", page.index('id="import-skipped"'))]
    assert "already imported" in skipped and "<td>2</td>" in skipped


def test_a_store_the_real_pce_memory_wrote_uploads_and_imports(client, admin_a):
    """The DuckDB file pce-memory v0.14.0 wrote (tests/importers/fixtures/pce), uploaded as a file."""
    pytest.importorskip("duckdb")
    fixture = Path(__file__).resolve().parents[1] / "importers" / "fixtures" / "pce" / "pce.duckdb.gz"
    client.force_login(admin_a.user)

    dry = dry_run(client, admin_a.tenant, system="pce", file=upload(gzip.decompress(fixture.read_bytes()), "pce.db"))

    assert dry.context["report"].created_total == 24, dry.context["report_lines"]
    assert not Memory.objects.exists()
    done = client.post(reverse(IMPORT), {"token": dry.context["token"]})
    assert done.context["report"].created_total == 24
    assert MemoryAlias.objects.filter(tenant_id=admin_a.tenant.pk, system="pce", alias__startswith="clm_").count() >= 24


def test_a_cogx_tarball_uploads_under_its_own_name(client, admin_a, admin_b, tmp_path):
    """A .cogx.tar.gz keeps its name when staged, which is how the reader knows to unpack it."""
    client.force_login(admin_b.user)
    client.post(reverse(IMPORT), {"token": dry_run(client, admin_b.tenant, file=upload()).context["token"]})
    directory = tmp_path / "b_cogx"
    tenant_export_cogx(tenant_id=admin_b.tenant.pk, directory=directory)
    tarball = tmp_path / "b.cogx.tar.gz"
    with tarfile.open(tarball, "w:gz") as archive:
        archive.add(directory, arcname="b_cogx")
    client.force_login(admin_a.user)

    dry = dry_run(client, admin_a.tenant, system="cogx", file=upload(tarball.read_bytes(), "b.cogx.tar.gz"))

    assert dry.context["report"].created_total == 2, dry.context["report_lines"]


def test_a_readers_internal_failure_stays_in_the_log(client, admin_a, scratch, monkeypatch):
    """A failure that is not about the file (a database's or a library's text)
    is not shown to the uploader; a parser's complaint about the file is."""
    from memory.admin import imports

    def broken(*args, **kwargs):
        raise RuntimeError("connection to /var/run/internal.sock refused")

    monkeypatch.setattr(imports, "_run", broken)
    client.force_login(admin_a.user)
    [error] = form_errors(dry_run(client, admin_a.tenant, file=upload()))
    assert "internal.sock" not in error and "RuntimeError" not in error
    assert "could not be read as a mcp-memory store" in error
    monkeypatch.undo()
    [error] = form_errors(dry_run(client, admin_a.tenant, file=upload("{not json\n")))
    assert "line 1" in error, error


def _zip_with_store(store: bytes) -> bytes:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("backup/data/chromadb/chroma.sqlite3", store)
    return buffer.getvalue()


def _tar_with_link() -> bytes:
    import io

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        link = tarfile.TarInfo("store/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        archive.addfile(link)
    return buffer.getvalue()


# A library's own words for each of these files: never on the form, always in the log.
LIBRARY_TEXT = [
    ("mcp-memory", "memory.jsonl", b"{not json\n", "Expecting property name"),
    ("memento", "memento.json", b"[1, 2", "delimiter"),
    ("mem0", "mem0.json", b'{"results": ', "Expecting value"),
    ("memproj", "export.jsonl", b"\x00\xff binary", "codec can't decode"),
    ("cogx", "store.cogx.tar.gz", b"not a tarball", "not a gzip file"),
    ("cogx", "store.cogx.tar.gz", _tar_with_link(), "link to an absolute path"),
    ("roampal", "backup.zip", b"not a zip", "File is not a zip file"),
    ("roampal", "backup.zip", _zip_with_store(b"SQLite format 3\x00" + b"\x01" * 4000), "database"),
    ("pce", "pce.duckdb", b"not duckdb", "IO Error"),
]


@pytest.mark.parametrize(
    ("system", "name", "content", "library_text"), LIBRARY_TEXT, ids=[f"{s}-{t}" for s, _, _, t in LIBRARY_TEXT]
)
def test_a_librarys_own_text_stays_in_the_log(client, admin_a, scratch, caplog, system, name, content, library_text):
    """The form says in our words what is wrong with the file, naming it as
    uploaded; the library's exception text and the server's staging path go to
    the log only."""
    client.force_login(admin_a.user)
    with caplog.at_level("INFO"):
        [error] = form_errors(dry_run(client, admin_a.tenant, system=system, file=upload(content, name)))
    assert name in error or "chroma.sqlite3" in error, error  # the upload, or the store inside it
    assert library_text not in error, error
    assert str(scratch) not in error and "/tmp" not in error, error
    assert library_text in caplog.text, caplog.text[-2000:]
