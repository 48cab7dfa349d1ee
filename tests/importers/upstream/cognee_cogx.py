"""cognee's migration module (PyPI ``cognee``, ``cognee/modules/migration``)
writing and reading COGX, run by tests/importers/test_cogx_cognee.py with
.venv-import's python.

``write DIR``: cognee's own sources turn a mem0 ``get_all()`` result
(``Mem0Source``) and a Zep / Graphiti graph export (``ZepSource``: episodes,
entities, facts with their validity) into COGX records, and cognee's
``COGXArchiveWriter`` (the writer its dataset export uses) writes them into
DIR; ``pack_archive`` makes DIR.cogx.tar.gz of it.

``read DIR``: cognee's ``read_manifest`` and ``read_archive`` read a COGX
archive (memproj's export), validating every record against cognee's record
models, as cognee's import of an archive does before it loads anything.

These parts of cognee convert and (de)serialise records; they call no LLM and
no network. cognee's datasets themselves (``cognee.add`` / ``cognify``, and the
export of a dataset built by them) need an LLM and are not used.

cognee is installed without its dependencies (Makefile: ``pip install
--no-deps``): given cognee together with the other upstream systems' pins
(roampal, chromadb, mem0ai), pip's resolver was still backtracking after 500 s.
Importing ``cognee`` runs its package initialiser, which imports all of
them (structlog, litellm, lancedb, sqlalchemy, fastapi-users...), so
``cognee_migration()`` registers cognee's packages without running their
``__init__``: the COGX modules loaded are cognee's own files, whose imports
are pydantic and each other.

The last line printed is JSON."""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import importlib.util
import json
import sys
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

USERS = ("alice", "bob")
TOPICS = ("green tea", "night trains", "the Lisbon trip", "Rust", "chess openings", "sourdough")


def mem0_items() -> list[dict[str, Any]]:
    """A mem0 get_all() result: two dozen memories of two users, with dates and categories."""
    start = datetime(2025, 1, 3, 9, 0, tzinfo=UTC)
    items = []
    for n in range(24):
        created = start + timedelta(days=7 * n, hours=n)
        items.append(
            {
                "id": f"7f1c0e2a-0000-4000-8000-{n:012d}",
                "memory": f"{USERS[n % 2].capitalize()} talked about {TOPICS[n % len(TOPICS)]} (note {n})",
                "user_id": USERS[n % 2],
                "categories": ["hobby" if n % 3 else "food"],
                "created_at": created.isoformat(),
                "updated_at": (created + timedelta(days=1)).isoformat(),
                "metadata": {"n": n},
            }
        )
    return items


def zep_export() -> dict[str, Any]:
    """A Zep / Graphiti graph export: episodes, entity nodes and relation edges."""
    episodes = [
        {
            "uuid": f"ep-{n}",
            "name": f"chat {n}",
            "content": f"Alice said she moved to {'Paris' if n else 'Berlin'} for work (chat {n})",
            "created_at": f"2024-0{n + 1}-10T10:00:00+00:00",
            "valid_at": f"2024-0{n + 1}-09T18:30:00+00:00",
            "group_id": "session-1",
        }
        for n in range(6)
    ]
    entities = [
        {"uuid": "node-alice", "name": "Alice", "labels": ["Entity", "Person"], "summary": "the user"},
        {"uuid": "node-berlin", "name": "Berlin", "labels": ["Entity", "Location"]},
        {"uuid": "node-paris", "name": "Paris", "labels": ["Entity", "Location"]},
        {"uuid": "node-acme", "name": "Acme", "labels": ["Entity", "Organization"]},
    ]
    facts = [
        {
            "uuid": "edge-berlin",
            "source_node_uuid": "node-alice",
            "target_node_uuid": "node-berlin",
            "name": "LIVES_IN",
            "fact": "Alice lives in Berlin",
            "valid_at": "2023-05-01T00:00:00+00:00",
            "invalid_at": "2024-02-01T00:00:00+00:00",
            "episodes": ["ep-0"],
        },
        {
            "uuid": "edge-paris",
            "source_node_uuid": "node-alice",
            "target_node_uuid": "node-paris",
            "name": "LIVES_IN",
            "fact": "Alice lives in Paris",
            "valid_at": "2024-02-01T00:00:00+00:00",
            "episodes": ["ep-1"],
        },
        {
            "uuid": "edge-acme",
            "source_node_uuid": "node-alice",
            "target_node_uuid": "node-acme",
            "name": "WORKS_AT",
            "fact": "Alice works at Acme",
            "valid_at": "2024-03-01T00:00:00+00:00",
        },
    ]
    return {"episodes": episodes, "entities": entities, "facts": facts}


def cognee_migration() -> dict[str, Any]:
    """cognee's COGX modules, from the installed package, without its package initialisers."""
    spec = importlib.util.find_spec("cognee")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("cognee is not installed in this environment")
    root = Path(next(iter(spec.submodule_search_locations)))
    for name, folder in (
        ("cognee", root),
        ("cognee.modules", root / "modules"),
        ("cognee.modules.migration", root / "modules" / "migration"),
        ("cognee.modules.migration.sources", root / "modules" / "migration" / "sources"),
    ):
        package = types.ModuleType(name)
        package.__path__ = [str(folder)]
        sys.modules.setdefault(name, package)
    cogx = importlib.import_module("cognee.modules.migration.cogx")
    archive = importlib.import_module("cognee.modules.migration.archive")
    mem0 = importlib.import_module("cognee.modules.migration.sources.mem0")
    zep = importlib.import_module("cognee.modules.migration.sources.zep")
    return {
        "COGXArchiveWriter": cogx.COGXArchiveWriter,
        "read_archive": cogx.read_archive,
        "read_manifest": cogx.read_manifest,
        "pack_archive": archive.pack_archive,
        "Mem0Source": mem0.Mem0Source,
        "ZepSource": zep.ZepSource,
        "version": importlib.metadata.version("cognee"),
        "module": cogx.__file__,
    }


async def write(directory: Path) -> dict[str, Any]:
    cognee = cognee_migration()
    COGXArchiveWriter, pack_archive = cognee["COGXArchiveWriter"], cognee["pack_archive"]
    Mem0Source, ZepSource = cognee["Mem0Source"], cognee["ZepSource"]

    records = []
    for source in (Mem0Source(mem0_items()), ZepSource(zep_export())):
        records += [record async for record in source.records()]
    with COGXArchiveWriter(directory, source_system="cognee") as writer:
        writer.add_note("mem0 get_all() and a Zep graph export, converted by cognee's migration sources.")
        for record in records:
            writer.write(record)
    tarball = pack_archive(directory, directory.with_name(directory.name + ".cogx.tar.gz"))
    return {
        "cognee": cognee["version"],
        "module": cognee["module"],
        "counts": writer.counts,
        "tarball": str(tarball),
        "records": [json.loads(record.model_dump_json(exclude_none=True)) for record in records],
    }


def read(directory: Path) -> dict[str, Any]:
    cognee = cognee_migration()
    read_archive, read_manifest = cognee["read_archive"], cognee["read_manifest"]
    manifest = read_manifest(directory)
    records = [json.loads(record.model_dump_json(exclude_none=True)) for record in read_archive(directory)]
    return {
        "cognee": cognee["version"],
        "module": cognee["module"],
        "manifest": json.loads(manifest.model_dump_json()) if manifest is not None else None,
        "records": records,
    }


def main() -> None:
    command, location = sys.argv[1], Path(sys.argv[2])
    if command == "write":
        result = asyncio.run(write(location))
    elif command == "read":
        result = read(location)
    else:
        raise SystemExit(f"unknown command {command!r}: write DIR | read DIR")
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
