"""A JSON or JSON Lines store is someone else's file (an admin upload among
them): decoded whole, a few MB of tiny objects take hundreds of MB. Each file
here is read a record at a time: a record past the bounds is refused before
it is decoded, with a coded error and nothing written, and a file of many
small records is read through without holding them. The memory each import
takes is measured (tracemalloc's peak), never its time."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from memory.errors import InvalidArgument
from memory.importers.base import GRAPH_RECORDS_MAX
from memory.models import Entity, Memory, MemoryAlias
from memory.services.imports import memories_import
from tests.conftest import make_identity

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]

MB = 1024 * 1024
# What decoding the hostile files below whole takes is many times this.
PEAK_MAX = 24 * MB


def _peak(run: Callable[[], Any]) -> tuple[Any, int]:
    """What ``run`` returned (or raised), and the most memory it held at once."""
    tracemalloc.start()
    try:
        try:
            result: Any = run()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _tiny_objects(count: int) -> str:
    """``count`` empty objects in one list: three characters each as text,
    a dict and a pointer each decoded."""
    return "[" + ",".join(["{}"] * count) + "]"


GOOD_MEM0 = {"id": "4b3d4b37-6f1e-4c3a-9d5e-000000000001", "memory": "The user drinks oat milk"}
GOOD_NODE = {"id": "4b3d4b37-6f1e-4c3a-9d5e-000000000002", "content": "The user keeps bikes at home"}


def _hostile(system: str, tmp_path: Path) -> Path:
    """A good record, then one whose metadata is 1.4 million empty objects (4 MB)."""
    bloated = _tiny_objects(1_400_000)
    if system == "mem0":
        path = tmp_path / "get_all.json"
        text = '{"results": [' + json.dumps(GOOD_MEM0) + ', {"id": "m2", "memory": "x", "metadata": {"a": '
        path.write_text(text + bloated + "}}]}")
    elif system == "memento":
        path = tmp_path / "memento.json"
        path.write_text(
            "[" + json.dumps({"m": GOOD_NODE}) + ', {"m": {"id": "n2", "content": "x", "e": ' + bloated + "}}]"
        )
    else:
        path = tmp_path / "memory.jsonl"
        entity = {"type": "entity", "name": "Ada", "entityType": "person", "observations": ["Ada likes tea"]}
        path.write_text(json.dumps(entity) + '\n{"type": "entity", "name": "Bob", "observations": ' + bloated + "}\n")
    return path


@pytest.mark.parametrize("system", ["mem0", "memento", "mcp-memory"])
def test_a_record_of_millions_of_tiny_objects_is_refused_before_it_is_decoded(tmp_path, system):
    owner = make_identity("hostile-json", "owner", role="admin")
    path = _hostile(system, tmp_path)

    refused, peak = _peak(lambda: memories_import(caller=owner.caller, system=system, location=str(path), embed=False))

    assert isinstance(refused, InvalidArgument), refused
    assert refused.code == "INVALID_ARGUMENT"
    assert "holds more than 100000 values" in str(refused), str(refused)
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"
    # Refused before the good record before it was written.
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()
    assert not MemoryAlias.objects.filter(tenant_id=owner.caller.tenant_id).exists()
    with pytest.raises(CommandError, match="holds more than 100000 values"):
        call_command("import_memories", "--from", system, "--tenant", "hostile-json", str(path), "--quiet")


@pytest.mark.parametrize("system", ["mem0", "memento"])
def test_a_json_nested_past_any_memory_is_a_coded_refusal(tmp_path, system):
    owner = make_identity("hostile-json", "owner", role="admin")
    path = tmp_path / "deep.json"
    path.write_text("[" + "[" * 50_000 + "]" * 50_000 + "]")

    with pytest.raises(InvalidArgument, match="deep.json: the record at line 1, column 2") as refused:
        memories_import(caller=owner.caller, system=system, location=str(path))

    assert refused.value.code == "INVALID_ARGUMENT"


def test_memory_jsonl_is_read_a_line_at_a_time(tmp_path):
    """Half a million lines the import skips: none of them is held."""
    owner = make_identity("hostile-json", "owner", role="admin")
    path = tmp_path / "memory.jsonl"
    entity = {"type": "entity", "name": "Ada", "entityType": "person", "observations": ["Ada likes tea"]}
    path.write_text(json.dumps(entity) + "\n" + "{}\n" * 500_000)

    report, peak = _peak(lambda: memories_import(caller=owner.caller, system="mcp-memory", location=str(path)))

    assert not isinstance(report, Exception), report
    assert report.read == 500_002 and report.created_total == 1, report.lines()
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"


def _graph_past_the_bound(path: Path) -> None:
    """An entity, then as many relations again as the entities and relations
    an import holds (12 MB): their ends are not both entities, so an import
    that held them all would write none of them."""
    entity = {"type": "entity", "name": "Ada", "entityType": "person", "observations": ["Ada likes tea"]}
    relation = '{"type":"relation","from":"Ada","to":"Bob","relationType":"r%06d"}\n'
    with path.open("w") as out:
        out.write(json.dumps(entity) + "\n")
        out.writelines(relation % i for i in range(GRAPH_RECORDS_MAX))


def _observations_past_the_bound(path: Path) -> None:
    """Eleven entities of 99,000 observations each (5 MB): each observation
    a memory, and its id held in its entity's claims until the end."""
    with path.open("w") as out:
        for i in range(11):
            out.write(json.dumps({"type": "entity", "name": f"e{i}", "observations": ["x"] * 99_000}) + "\n")


@pytest.mark.parametrize(
    ("write", "refusal"),
    [
        (_graph_past_the_bound, "holds more than 200000 entities and relations"),
        (_observations_past_the_bound, "holds more than 1000000 records"),
    ],
)
def test_a_memory_jsonl_of_more_than_an_import_holds_is_refused_before_anything_is_written(tmp_path, write, refusal):
    owner = make_identity("hostile-json", "owner", role="admin")
    path = tmp_path / "memory.jsonl"
    write(path)

    refused, peak = _peak(lambda: memories_import(caller=owner.caller, system="mcp-memory", location=str(path)))

    assert isinstance(refused, InvalidArgument), refused
    assert refused.code == "INVALID_ARGUMENT"
    assert f"memory.jsonl {refusal}, more than an import reads" in str(refused), str(refused)
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()
    assert not Entity.objects.filter(tenant_id=owner.caller.tenant_id).exists()


def test_a_mem0_export_is_read_a_memory_at_a_time(tmp_path):
    """A bare list of half a million memories the import skips (no id): none of them is held."""
    owner = make_identity("hostile-json", "owner", role="admin")
    path = tmp_path / "get_all.json"
    path.write_text("[" + json.dumps(GOOD_MEM0) + "," + ",".join(['{"memory": "x"}'] * 500_000) + "]")

    report, peak = _peak(lambda: memories_import(caller=owner.caller, system="mem0", location=str(path)))

    assert not isinstance(report, Exception), report
    assert report.read == 500_001 and report.created_total == 1, report.lines()
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"


def test_a_small_duckdb_file_holding_hundreds_of_mb_of_text_is_refused_unread(tmp_path):
    import duckdb

    owner = make_identity("hostile-json", "owner", role="admin")
    path = tmp_path / "pce.duckdb"
    db = duckdb.connect(str(path))
    db.execute("SET enable_progress_bar = false")
    # The same 15,000 characters in 20,000 rows: 300 MB of text in a file of a few MB.
    db.execute(
        "CREATE TABLE claims AS SELECT 'clm_' || i AS id, repeat('x', 15000) AS text, 'fact' AS kind, "
        "'project' AS scope, '2024-01-01' AS created_at FROM range(20000) t(i)"
    )
    db.close()
    assert path.stat().st_size < 16 * MB

    refused, peak = _peak(lambda: memories_import(caller=owner.caller, system="pce", location=str(path)))

    assert isinstance(refused, InvalidArgument), refused
    assert "holds more than 128 MB of text" in str(refused), str(refused)
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()


def test_a_pce_shared_file_past_a_records_bounds_is_refused(tmp_path):
    owner = make_identity("hostile-json", "owner", role="admin")
    shared = tmp_path / ".pce-shared"
    (shared / "claims" / "project").mkdir(parents=True)
    (shared / "manifest.json").write_text("{}")
    (shared / "claims" / "project" / "a.json").write_text(json.dumps({"text": "Stripe is the payment provider"}))
    (shared / "claims" / "project" / "b.json").write_text(
        '{"text": "x", "provenance": ' + _tiny_objects(1_400_000) + "}"
    )

    refused, peak = _peak(lambda: memories_import(caller=owner.caller, system="pce", location=str(shared)))

    assert isinstance(refused, InvalidArgument), refused
    assert "b.json: the record at line 1, column 1 holds more than 100000 values" in str(refused), str(refused)
    assert peak < PEAK_MAX, f"{peak / MB:.0f} MB"
    assert not Memory.objects.filter(tenant_id=owner.caller.tenant_id).exists()
