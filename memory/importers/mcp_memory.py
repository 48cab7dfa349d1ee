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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memory.importers.base import (
    GRAPH_RECORDS_MAX,
    ImportedEntity,
    ImportedMemory,
    ImportedRelation,
    ImportSourceError,
    Record,
    Skipped,
)
from memory.importers.bounded_json import RECORDS_MAX, json_lines

SYSTEM = "mcp-memory"


def observation_id(entity: str, text: str) -> str:
    # surrogatepass: a lone surrogate gets a digest here, and the import service skips its text.
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{entity}#{digest[:16]}"


class MemoryJsonl:
    system = SYSTEM

    def __init__(self, path: Path) -> None:
        if path.is_dir():
            path = path / "memory.jsonl"
        if not path.is_file():
            raise ImportSourceError(f"no file {path}; give the server's MEMORY_FILE_PATH (memory.jsonl).")
        self.path = path
        # Read through once here, a line at a time: a file an import cannot
        # read is refused before anything of it is written. An observation
        # becomes a memory and its id stays in its entity's claims until the
        # end, so the records are counted (an entity line may hold thousands of
        # observations), and the entities and relations the import holds too.
        self.total = graph = 0
        for _, line in json_lines(path):
            self.total += len(_observations(line)) + 1
            if self.total > RECORDS_MAX:
                raise ImportSourceError(
                    f"{path.name} holds more than {RECORDS_MAX} records, more than an import reads."
                )
            if isinstance(line, dict) and line.get("type") in ("entity", "relation"):
                graph += 1
                if graph > GRAPH_RECORDS_MAX:
                    raise ImportSourceError(
                        f"{path.name} holds more than {GRAPH_RECORDS_MAX} entities and relations, "
                        "more than an import reads."
                    )

    def estimate(self) -> int | None:
        return self.total

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        for number, line in json_lines(self.path):
            if not isinstance(line, dict):
                yield Skipped(f"line {number}", "a line that is not a JSON object")
            elif line.get("type") == "entity":
                yield from _entity(line)
            elif line.get("type") == "relation":
                src, dst, kind = line.get("from"), line.get("to"), line.get("relationType")
                if not all(isinstance(part, str) and part for part in (src, dst, kind)):
                    yield Skipped(f"line {number}", "a relation whose from, to and relationType are not all text")
                    continue
                assert isinstance(src, str) and isinstance(dst, str) and isinstance(kind, str)
                yield ImportedRelation(source_id=f"{src} -{kind}-> {dst}", src=src, dst=dst, type=kind)
            else:
                yield Skipped(str(line.get("name", "")), f"a line of type {line.get('type')!r}")


def _observations(line: Any) -> list[Any]:
    """An entity's observations: a list (as the server writes them); a lone
    string is one observation (not one per character); anything else none."""
    observations = line.get("observations") if isinstance(line, dict) else None
    if isinstance(observations, str):
        return [observations]
    return observations if isinstance(observations, list) else []


def _entity(line: dict[str, Any]) -> Iterator[Record]:
    name, entity_type = line.get("name"), line.get("entityType") or ""
    if not isinstance(name, str) or not name:
        yield Skipped("", "an entity without a name (or whose name is not text)")
        return
    if not isinstance(entity_type, str):
        yield Skipped(name, "an entity whose entityType is not text")
        return
    observations = line.get("observations")
    if observations is not None and not isinstance(observations, list | str):
        yield Skipped(name, "an entity's observations that are not a list of strings (the entity is kept)")
    claims = []
    for text in _observations(line):
        if not isinstance(text, str):
            yield Skipped(name, "an observation that is not text")
            continue
        if not text.strip():
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


def open_source(location: str, **_: Any) -> MemoryJsonl:
    return MemoryJsonl(Path(location))
