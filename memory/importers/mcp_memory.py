"""The official MCP memory server (npm ``@modelcontextprotocol/server-memory``):
its ``memory.jsonl`` (``$MEMORY_FILE_PATH``), one JSON object a line:
``{"type": "entity", "name", "entityType", "observations": [...]}`` and
``{"type": "relation", "from", "to", "relationType"}``. It records no ids and
no times.

Each observation becomes a keyless fact (its entity's name and type in the
metadata, the type as a tag), each entity a knowledge-graph entity linked to
its observations (the entity type kept as an attribute), each relation a typed
relation between two entities. An observation's alias is its entity's name and
a digest of its text, so a re-run skips what is already there and an edited
observation comes in as a new fact. The dates are the import's: the file has none."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memory.importers.base import (
    ImportedEntity,
    ImportedMemory,
    ImportedRelation,
    ImportSourceError,
    Record,
    Skipped,
)

SYSTEM = "mcp-memory"


def observation_id(entity: str, text: str) -> str:
    return f"{entity}#{hashlib.sha256(text.encode('utf-8')).hexdigest()[:16]}"


class MemoryJsonl:
    system = SYSTEM

    def __init__(self, path: Path) -> None:
        if path.is_dir():
            path = path / "memory.jsonl"
        if not path.is_file():
            raise ImportSourceError(f"no file {path}; give the server's MEMORY_FILE_PATH (memory.jsonl).")
        self.lines: list[dict[str, Any]] = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                self.lines.append(json.loads(line))
            except ValueError as exc:
                raise ImportSourceError(f"{path}:{number}: not JSON ({exc}).") from exc

    def estimate(self) -> int | None:
        return sum(len(line.get("observations") or []) + 1 for line in self.lines)

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        for line in self.lines:
            if line.get("type") == "entity":
                name, entity_type = str(line.get("name", "")), str(line.get("entityType", ""))
                if not name:
                    yield Skipped("", "an entity without a name")
                    continue
                claims = []
                for text in line.get("observations") or []:
                    if not isinstance(text, str) or not text.strip():
                        continue
                    source_id = observation_id(name, text)
                    claims.append(source_id)
                    yield ImportedMemory(
                        source_id=source_id,
                        kind="fact",
                        content=text,
                        tags=[entity_type] if entity_type else [],
                        metadata={"entity": name, "entity_type": entity_type},
                        source=SYSTEM,
                        keep_id=False,
                    )
                yield ImportedEntity(
                    source_id=name,
                    name=name,
                    type="Concept",
                    attrs={"entityType": entity_type} if entity_type else {},
                    claims=claims,
                )
            elif line.get("type") == "relation":
                src, dst, kind = str(line.get("from", "")), str(line.get("to", "")), str(line.get("relationType", ""))
                yield ImportedRelation(source_id=f"{src} -{kind}-> {dst}", src=src, dst=dst, type=kind)
            else:
                yield Skipped(str(line.get("name", "")), f"a line of type {line.get('type')!r}")


def open_source(location: str, **_: Any) -> MemoryJsonl:
    return MemoryJsonl(Path(location))
