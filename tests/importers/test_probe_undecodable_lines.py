"""A JSON Lines store with bytes that are not UTF-8 is refused with a coded
error that names the line they are on, and nothing is written.

Found by probing: a byte 0xff on the fourth line of a memory.jsonl was
reported as "memory.jsonl:1: not JSON" (the file is decoded ahead of the line
being read), and a memproj export whose header was fine but whose third line
held such a byte was refused as "not a memproj-export/1 file (its first line
must be the header)", which sends its owner looking at the wrong line."""

from __future__ import annotations

import json

import pytest

from memory.errors import InvalidArgument
from memory.models import Memory
from memory.services.imports import memories_import
from tests.conftest import make_identity

pytestmark = pytest.mark.django_db


def _entity(number: int) -> bytes:
    line = {"type": "entity", "name": f"E{number}", "entityType": "x", "observations": [f"obs {number}"]}
    return json.dumps(line).encode() + b"\n"


@pytest.mark.parametrize("line", [1, 4, 2000])
def test_a_memory_jsonl_with_a_byte_that_is_not_utf8_names_its_line(tmp_path, line):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    body = b"".join(_entity(n) for n in range(1, line))
    body += b'{"type": "entity", "name": "B", "observations": ["bad \xff byte"]}\n' + _entity(line + 1)
    path = tmp_path / "memory.jsonl"
    path.write_bytes(body)
    with pytest.raises(InvalidArgument) as refused:
        memories_import(caller=caller, system="mcp-memory", location=str(path))
    assert f"memory.jsonl:{line}: not JSON (it is not UTF-8 text)" in str(refused.value)
    assert not Memory.objects.filter(tenant_id=caller.tenant_id).exists()


def test_a_broken_multibyte_character_split_at_the_end_of_the_file_names_its_line(tmp_path):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    path = tmp_path / "memory.jsonl"
    path.write_bytes(_entity(1) + _entity(2) + "é".encode()[:1])
    with pytest.raises(InvalidArgument) as refused:
        memories_import(caller=caller, system="mcp-memory", location=str(path))
    assert "memory.jsonl:3: not JSON (it is not UTF-8 text)" in str(refused.value)


def test_a_memproj_export_with_a_good_header_is_not_refused_for_its_header(tmp_path):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    header = {"type": "header", "format": "memproj-export/1"}
    memory = {"type": "memory", "id": "m1", "kind": "episode", "content": "fine", "butler": "x"}
    path = tmp_path / "export.jsonl"
    path.write_bytes(
        (json.dumps(header) + "\n" + json.dumps(memory) + "\n").encode()
        + b'{"type": "memory", "id": "m2", "kind": "episode", "content": "bad \xfe"}\n'
    )
    with pytest.raises(InvalidArgument) as refused:
        memories_import(caller=caller, system="memproj", location=str(path))
    message = str(refused.value)
    assert "export.jsonl:3: not JSON (it is not UTF-8 text)" in message
    assert "header" not in message
    assert not Memory.objects.filter(tenant_id=caller.tenant_id).exists()


def test_a_memproj_export_whose_header_is_not_utf8_is_refused_for_its_header(tmp_path):
    caller = make_identity("tenant-a", "owner", role="admin").caller
    path = tmp_path / "export.jsonl"
    path.write_bytes(b'{"type": "header", "format": "memproj-export/1", "x": "\xff"}\n')
    with pytest.raises(InvalidArgument) as refused:
        memories_import(caller=caller, system="memproj", location=str(path))
    assert "its first line must be the header" in str(refused.value)


def test_a_memproj_export_not_utf8_far_past_its_header_is_refused_before_anything_is_written(tmp_path):
    """Past the part of the file decoded with its header, the line count of
    the progress bar read the file as text and failed with a traceback."""
    caller = make_identity("tenant-a", "owner", role="admin").caller
    header = {"type": "header", "format": "memproj-export/1"}
    rows = [json.dumps(header)] + [
        json.dumps({"type": "memory", "id": f"far{i}", "kind": "episode", "content": f"far {i}", "butler": "x"})
        for i in range(500)
    ]
    path = tmp_path / "export.jsonl"
    path.write_bytes(("\n".join(rows) + "\n\n").encode() + b'{"type": "memory", "id": "z", "content": "\xff"}\n')
    for dry_run in (True, False):
        with pytest.raises(InvalidArgument) as refused:
            memories_import(caller=caller, system="memproj", location=str(path), dry_run=dry_run)
        assert "export.jsonl:503: not JSON (it is not UTF-8 text)" in str(refused.value)
    assert not Memory.objects.filter(tenant_id=caller.tenant_id).exists()
    path.write_bytes(("\n".join(rows) + "\n\n").encode())
    report = memories_import(caller=caller, system="memproj", location=str(path), dry_run=True)
    assert report.created_total == 500
