"""``manage.py import`` (a whole tenant restored from ``manage.py export``)
restores in one transaction and holds every row of the file at once, so the
file's size is its memory: a file past the limit (``--max-bytes``, 256 MiB by
default) is refused before it is read, with a coded message naming the limit
and how to raise it.

Found by probing: the file was read whole, however large."""

from __future__ import annotations

import importlib
import io
import json
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memory.services import export as export_service
from policy.models import Tenant

pytestmark = pytest.mark.django_db

HEADER = {"type": "header", "format": "memproj-export/1", "tenant": json.dumps({"name": "restored"})}


def export_file(tmp_path, padding: int = 0):
    path = tmp_path / "restore.jsonl"
    path.write_text(json.dumps(HEADER) + "\n" + " " * padding + "\n")
    return path


def test_a_file_past_the_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = export_file(tmp_path, padding=5000)

    def unread(*args, **kwargs):
        raise AssertionError("the file was read")

    monkeypatch.setattr(export_service, "line_value", unread)
    with pytest.raises(CommandError) as refused:
        call_command("import", tenant="tenant-c", input=str(path), max_bytes=4096, stdout=io.StringIO())
    message = str(refused.value)
    assert message.startswith("[INVALID_ARGUMENT] import failed, nothing was imported: ")
    assert f"the file is {path.stat().st_size} bytes, more than the 4096 bytes manage.py import reads" in message
    assert "--max-bytes" in message and "Traceback" not in message
    assert not Tenant.objects.filter(slug="tenant-c").exists()


def test_the_default_limit_is_enforced(tmp_path, monkeypatch):
    path = export_file(tmp_path, padding=200)
    command = importlib.import_module("memory.management.commands.import")
    assert command.TENANT_IMPORT_MAX_BYTES == export_service.TENANT_IMPORT_MAX_BYTES == 256 * 1024 * 1024
    monkeypatch.setattr(command, "TENANT_IMPORT_MAX_BYTES", 100)
    with pytest.raises(CommandError, match=r"\[INVALID_ARGUMENT\] .*more than the 100 bytes"):
        call_command("import", tenant="tenant-c", input=str(path), stdout=io.StringIO())


def test_stdin_is_refused_once_it_passes_the_limit_reading_no_further(tmp_path, monkeypatch):
    class Endless(io.RawIOBase):
        """Blank lines without end: an unbounded reader never returns."""

        served = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            if self.served > 1024 * 1024:
                raise AssertionError("read on past the limit")
            chunk = (json.dumps(HEADER) + "\n").encode() if not self.served else b" " * 63 + b"\n"
            n = min(len(buffer), len(chunk))
            buffer[:n] = chunk[:n]
            self.served += n
            return n

    stdin = io.TextIOWrapper(io.BufferedReader(Endless()))
    monkeypatch.setattr(sys, "stdin", stdin)
    with pytest.raises(CommandError, match=r"^\[INVALID_ARGUMENT\] .*the input is longer, more than the 4096 bytes"):
        call_command("import", tenant="tenant-c", max_bytes=4096, stdout=io.StringIO())
    assert not Tenant.objects.filter(slug="tenant-c").exists()


def test_a_file_within_the_limit_is_imported(tmp_path):
    path = export_file(tmp_path)
    out = io.StringIO()
    call_command("import", tenant="tenant-c", input=str(path), max_bytes=path.stat().st_size, stdout=out)
    assert Tenant.objects.filter(slug="tenant-c").exists()
    assert out.getvalue().startswith("imported 0 principals")


def test_a_limit_below_one_byte_is_refused(tmp_path):
    with pytest.raises(CommandError, match=r"\[INVALID_ARGUMENT\] .*--max-bytes must be at least 1"):
        call_command("import", tenant="tenant-c", input=str(export_file(tmp_path)), max_bytes=0, stdout=io.StringIO())
