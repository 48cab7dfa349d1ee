"""Memento (rigrergl/memento, the Memento MCP server): its memories live in Neo4j
as ``(:Memory {id, content, embedding, confidence, created_at, updated_at,
accessed_at, source, supersedes, superseded_by})`` nodes, embedded with
all-MiniLM-L6-v2 (384 dimensions, memproj's own model).

Read from a JSON export of those nodes, in any of the shapes Neo4j's tools
write: APOC's ``apoc.export.json`` lines (``{"type": "node", "labels":
["Memory"], "properties": {...}}``), a JSON list of nodes or of their property
maps (``MATCH (m:Memory) RETURN m`` from cypher-shell or the browser, with or
without an ``m`` wrapper), or ``{"memories": [...]}``. Times may be ISO strings,
epoch seconds or milliseconds, or Neo4j's ``{year, month, day, ...}`` maps.

Each memory becomes a keyless fact (as memproj's memento dialect stores one),
its UUID kept as its id where free, with its confidence, dates (accessed_at
too) and source; ``superseded_by`` chains become supersessions. The vector is
kept when it has memproj's dimension (the same model), else recomputed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory.importers.base import (
    BadRecord,
    ImportedMemory,
    ImportSourceError,
    Record,
    Skipped,
    number,
    parse_time,
    text_field,
)
from memory.importers.bounded_json import JsonReader, RecordTooLarge, open_json

SYSTEM = "memento"
MODEL = "all-MiniLM-L6-v2"


def _time(value: Any) -> datetime | None:
    if isinstance(value, dict) and "year" in value:  # a Neo4j temporal value as a map
        try:
            return datetime(
                int(value["year"]),
                int(value.get("month", 1)),
                int(value.get("day", 1)),
                int(value.get("hour", 0)),
                int(value.get("minute", 0)),
                int(value.get("second", 0)),
                int(value.get("nanosecond", 0)) // 1000,
                tzinfo=UTC,
            )
        except (TypeError, ValueError, OverflowError):
            return None
    return parse_time(value)


def _node(item: Any) -> dict[str, Any] | None:
    """A Memory node's property map, from one item of the export (None: not a Memory node)."""
    if not isinstance(item, dict):
        return None
    if len(item) == 1 and isinstance(next(iter(item.values())), dict):
        item = next(iter(item.values()))  # a RETURN m row: {"m": {...}}
    if item.get("type") == "node" or "labels" in item:
        labels = item.get("labels")
        if not isinstance(labels, list) or "Memory" not in labels:
            return None
        item = item.get("properties") or {}
    elif isinstance(item.get("properties"), dict) and "content" not in item:
        item = item["properties"]
    return item


def _items(path: Path) -> Iterator[Any]:
    """The export's items, whatever its shape, read one at a time
    (memory.importers.bounded_json): a list's elements, the nodes of one
    ``{"memories": [...]}`` object, or one object a line (APOC)."""
    handle, reader = open_json(path)
    with handle:
        first = reader.peek()
        if first == "[":
            yield from reader.elements()
            reader.finish()
            return
        if first != "{":
            for value in reader.values():
                if isinstance(value, list):
                    yield from value
            return
        try:
            reader.check()
        except RecordTooLarge as too_large:
            # One object larger than a record: {"memories": [...]}, its list read an item at a time.
            handle.seek(0)
            reader = JsonReader(handle, path.name)
            members = reader.members()
            nodes = next((value for key, value in members if key == "memories"), None)
            if not isinstance(nodes, Iterator):
                raise too_large from None
            yield from nodes
            for _ in members:  # what follows the list, read past
                pass
            reader.finish()
            return
        for value in reader.values():  # one object, or one a line
            if isinstance(value, dict) and isinstance(value.get("memories"), list):
                yield from value["memories"]
            else:
                yield value


def _nodes(path: Path) -> Iterator[dict[str, Any]]:
    """Property maps of Memory nodes, whatever the export's shape."""
    for item in _items(path):
        node = _node(item)
        if node is not None:
            yield node


class MementoExport:
    system = SYSTEM

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise ImportSourceError(f"no file {path}; give a JSON export of Memento's Memory nodes.")
        self.path = path
        # Read through once here, a node at a time: a file an import cannot
        # read is refused before anything of it is written.
        self.count = sum(1 for _ in _nodes(path))

    def estimate(self) -> int | None:
        return self.count

    def close(self) -> None:
        return None

    def records(self) -> Iterator[Record]:
        for node in _nodes(self.path):
            if not isinstance(node, dict):
                yield Skipped("", "a Memory node whose properties are not an object")
                continue
            try:
                memory_id = text_field(node.get("id"), "id")
            except BadRecord:
                memory_id = ""
            if not memory_id:
                yield Skipped("", "a Memory node without an id")
                continue
            try:
                yield _record(memory_id, node)
            except BadRecord as exc:
                yield Skipped(memory_id, f"not storable: {exc}")


def _record(memory_id: str, node: dict[str, Any]) -> ImportedMemory:
    created = _time(node.get("created_at"))
    # Checked (finite, in range, of memproj's dimension) by the import service,
    # which embeds the text instead of a vector it cannot keep.
    embedding = node.get("embedding") if isinstance(node.get("embedding"), list) else None
    record = ImportedMemory(
        source_id=memory_id,
        kind="fact",
        content=text_field(node.get("content"), "content"),
        created_at=created,
        updated_at=_time(node.get("updated_at")) or created,
        occurred_at=created,
        accessed_at=_time(node.get("accessed_at")),
        confidence=number(node.get("confidence"), 1.0, low=0, high=1),
        source=(text_field(node.get("source"), "source") or "memento")[:32],
        embedding=embedding or None,
        embedding_model=MODEL if embedding else "",
    )
    if node.get("superseded_by"):
        record.validity = "superseded"
        record.superseded_by = text_field(node["superseded_by"], "superseded_by")
    if node.get("supersedes"):
        record.metadata["supersedes"] = node["supersedes"]
    return record


def open_source(location: str, **_: Any) -> MementoExport:
    return MementoExport(Path(location))
