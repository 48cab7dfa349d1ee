"""A JSON file saved with a UTF-8 byte order mark (Windows Notepad, PowerShell's
``Out-File -Encoding utf8``, Excel's "CSV UTF-8") is the same JSON: RFC 8259
lets a reader ignore the mark, and Python's own ``json`` asks for
``utf-8-sig`` to do so.

Found by probing: a memory.jsonl, a mem0 or Memento export, a memproj export
or a COGX manifest starting with the mark was refused as "not JSON (line 1,
column 1)", which tells its owner nothing they can see in the file."""

from __future__ import annotations

import json
import shutil

import pytest

from memory.models import Memory
from memory.services.imports import memories_import, tenant_export_cogx
from memory.services.memories import fact_store
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db

BOM = b"\xef\xbb\xbf"
MEM0_ID = "5c2f8a1e-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("system", "name", "body", "text"),
    [
        (
            "mcp-memory",
            "memory.jsonl",
            '{"type":"entity","name":"Ana","entityType":"person","observations":["Ana likes green tea"]}\r\n',
            "Ana likes green tea",
        ),
        (
            "memproj",
            "export.jsonl",
            '{"type":"header","format":"memproj-export/1","tenant":"{}"}\n'
            '{"type":"memory","id":"x1","kind":"fact","content":"The boiler is serviced in May"}\n',
            "The boiler is serviced in May",
        ),
        (
            "mem0",
            "mem0.json",
            json.dumps([{"id": MEM0_ID, "memory": "Prefers aisle seats", "user_id": "u"}]),
            "Prefers aisle seats",
        ),
        (
            "memento",
            "memento.json",
            json.dumps([{"id": MEM0_ID, "content": "The cat is called Miso"}]),
            "The cat is called Miso",
        ),
    ],
)
def test_a_json_file_with_a_byte_order_mark_is_read(tmp_path, system, name, body, text):
    a = make_identity("tenant-a", "owner", role="admin").caller
    path = tmp_path / name
    path.write_bytes(BOM + body.encode())
    report = memories_import(caller=a, system=system, location=str(path))
    assert report.created_total == 1, report.lines()
    assert list(Memory.objects.filter(tenant_id=a.tenant_id).values_list("content", flat=True)) == [text]


def test_a_cogx_archive_whose_files_carry_the_mark_is_read(tmp_path):
    a = make_identity("tenant-a", "owner", role="admin").caller
    b = make_identity("tenant-b", "owner", role="admin").caller
    fact_store(caller=a, subject="boiler", predicate="service", content="The boiler is serviced in May")
    archive = tmp_path / "archive"
    tenant_export_cogx(tenant_id=a.tenant_id, directory=archive)
    for path in archive.iterdir():
        shutil.copyfile(path, tmp_path / "plain")
        path.write_bytes(BOM + (tmp_path / "plain").read_bytes())
    report = memories_import(caller=b, system="cogx", location=str(archive))
    assert report.created_total == 1, report.lines()
