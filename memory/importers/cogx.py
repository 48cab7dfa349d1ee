"""COGX, cognee's portable memory format (cognee's migration module, version 0.1),
both ways: a reader for an archive another system wrote (cognee exports, and
what cognee translated from mem0, Zep / Graphiti, Letta or LangMem), and a
writer for memproj's own memories, so a user can leave as easily as arrive.

An archive is a directory (or a ``.cogx.tar.gz`` of one) with ``manifest.json``
and one JSON Lines file per record kind: ``documents``, ``episodes``,
``entities``, ``facts``, ``memories``, ``memory_blocks`` (and ``nodes`` for raw
graph nodes). Every record has ``external_system``, ``external_id``, ``scope``
(user / agent / session / run ids), ``created_at``, ``updated_at``, ``metadata``.

How records become memproj memories:
- ``memory`` -> a keyless fact (categories become tags);
- ``episode`` -> an episode (its turns, one ``role: text`` line each), dated by its
  first turn;
- ``document`` -> a document chunk (``title`` in metadata);
- ``fact`` -> a relation when both ends are entities of the archive, and a fact
  keyed by subject + predicate when it has text; ``invalid_at`` marks it superseded;
- ``memory_block`` -> a fact keyed by its label (Letta's named blocks);
- ``entity`` -> a knowledge-graph entity; raw graph nodes are reported and skipped.

memproj writes each memory's own columns under ``metadata.memproj`` (kind,
validity, scope, namespace, boundary class, counters, supersession, aliases), so
memproj -> COGX -> memproj keeps them; another reader sees plain COGX."""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memory.importers.base import (
    ImportedEntity,
    ImportedMemory,
    ImportedRelation,
    ImportSourceError,
    Record,
    Skipped,
    number,
    parse_position,
    parse_time,
    string_list,
)
from memory.importers.bounded_json import ENCODING, RECORD_MAX_CHARS, json_lines

COGX_VERSION = "0.1"
SYSTEM = "cogx"
RECORD_FILES = {
    "document": "documents.jsonl",
    "episode": "episodes.jsonl",
    "entity": "entities.jsonl",
    "fact": "facts.jsonl",
    "memory": "memories.jsonl",
    "memory_block": "memory_blocks.jsonl",
}
RAW_NODES_FILE = "nodes.jsonl"
MANIFEST_FILE = "manifest.json"
# An archive is unpacked with limits (a .cogx.tar.gz is someone else's file, an
# admin upload among them): a few times what an admin upload may be (64 MB), as
# JSON Lines pack a few times over. gzip packs a run of one byte about a
# thousandfold, so a small upload could otherwise fill the disk; a larger
# archive is unpacked by its owner and given as a directory.
UNPACK_MAX_MEMBERS = 10_000
UNPACK_MAX_BYTES = 256 * 1024 * 1024
# A record is one line: far longer than any record memproj stores (its text is
# bounded by MEMPROJ_MAX_CONTENT_CHARS, a vector by its dimensions). A longer
# line is refused as soon as this much of it is read, never held whole.
LINE_MAX_CHARS = RECORD_MAX_CHARS
MANIFEST_MAX_BYTES = 1024 * 1024


def _namespace(scope: dict[str, Any] | None) -> tuple[str, ...]:
    scope = scope or {}
    parts: list[str] = []
    for key, label in (("user_id", "user"), ("agent_id", "agent"), ("run_id", "run")):
        if scope.get(key):
            parts += [label, str(scope[key])]
    return tuple(parts)


def _unpack(path: Path, into: Path) -> Path:
    """The archive unpacked into ``into``, member by member as it streams:
    refused at the first member past the bounds, before its bytes are written
    (a member's header gives its size, and no more is written for it)."""
    too_large = ImportSourceError(
        f"{path.name} unpacks to more than {UNPACK_MAX_BYTES // (1024 * 1024)} MB "
        f"(or {UNPACK_MAX_MEMBERS} files), more than an import unpacks; unpack it and give the directory "
        "to manage.py import_memories."
    )
    try:
        with tarfile.open(path, "r:gz") as archive:
            unpacked = 0
            for members, member in enumerate(archive, start=1):
                unpacked += max(member.size, 0)
                if members > UNPACK_MAX_MEMBERS or unpacked > UNPACK_MAX_BYTES:
                    raise too_large
                archive.extract(member, into, filter="data")
    except tarfile.FilterError as exc:
        raise ImportSourceError(
            f"{path.name} holds a member an import does not unpack: links out of the archive, "
            "absolute paths and devices are refused."
        ) from exc
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise ImportSourceError(f"{path.name} is not a .cogx.tar.gz an import can unpack.") from exc
    manifests = sorted(into.rglob(MANIFEST_FILE))
    if not manifests:
        raise ImportSourceError(f"{path.name} holds no {MANIFEST_FILE}: not a COGX archive.")
    return manifests[0].parent


class CogxArchive:
    system = SYSTEM

    def __init__(self, location: Path) -> None:
        self._scratch: Path | None = None
        try:
            self._open(location)
        except BaseException:
            # Nobody can close an archive that failed to open: its unpacked
            # scratch directory goes now.
            self.close()
            raise

    def _open(self, location: Path) -> None:
        if location.is_file() and location.name.endswith((".tar.gz", ".tgz")):
            self._scratch = Path(tempfile.mkdtemp(prefix="memproj-cogx-"))
            location = _unpack(location, self._scratch)
        if not location.is_dir():
            raise ImportSourceError(f"no COGX archive at {location}: give its directory or its .cogx.tar.gz.")
        manifest_path = location / MANIFEST_FILE
        if not manifest_path.is_file():
            raise ImportSourceError(f"{location} has no {MANIFEST_FILE}: not a COGX archive.")
        if manifest_path.stat().st_size > MANIFEST_MAX_BYTES:
            raise ImportSourceError(f"{MANIFEST_FILE} is over {MANIFEST_MAX_BYTES} bytes: not a COGX manifest.")
        try:
            manifest = json.loads(manifest_path.read_text(encoding=ENCODING))
        except (ValueError, RecursionError) as exc:
            raise ImportSourceError(f"{MANIFEST_FILE} is not JSON{parse_position(exc)}.") from exc
        if not isinstance(manifest, dict):
            raise ImportSourceError(f"{MANIFEST_FILE} is not a JSON object: not a COGX manifest.")
        version = str(manifest.get("cogx_version", ""))
        try:
            major = int(version.split(".")[0])
        except ValueError as exc:
            raise ImportSourceError(f"unrecognised COGX version {version[:40]!r}.") from exc
        if major > int(COGX_VERSION.split(".")[0]):
            raise ImportSourceError(f"COGX version {version[:40]} is newer than this reader ({COGX_VERSION}).")
        self.directory = location
        self.manifest = manifest

    def estimate(self) -> int | None:
        counts = self.manifest.get("counts") or {}
        return sum(int(v) for v in counts.values() if isinstance(v, int)) or None

    def close(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def _lines(self, name: str) -> Iterator[Any]:
        """Each line's JSON value, a line read no further than ``LINE_MAX_CHARS``
        (memory.importers.bounded_json)."""
        path = self.directory / name
        if not path.is_file():
            return
        for _, value in json_lines(path, name, max_chars=LINE_MAX_CHARS, max_lines=None):
            yield value

    def records(self) -> Iterator[Record]:
        entity_ids: set[str] = set()
        names: dict[str, str] = {}
        for row in self._lines(RECORD_FILES["entity"]):
            if isinstance(row, dict):
                entity_ids.add(str(row.get("external_id", "")))
                names[str(row.get("name", ""))] = str(row.get("external_id", ""))
        for kind, file_name in RECORD_FILES.items():
            for row in self._lines(file_name):
                if not isinstance(row, dict):
                    yield Skipped("", f"a line of {file_name} that is no JSON object")
                    continue
                yield from _records(kind, row, entity_ids, names)
        for row in self._lines(RAW_NODES_FILE):
            yield Skipped(
                str(row.get("id", "")) if isinstance(row, dict) else "", "raw graph nodes carry no memory text"
            )


def _base(row: dict[str, Any], kind: str, content: str) -> ImportedMemory:
    """The shared COGX fields, and memproj's own columns when memproj wrote the archive."""
    metadata = dict(row.get("metadata") or {})
    own = metadata.pop("memproj", None)
    scope = row.get("scope") or {}
    created = parse_time(row.get("created_at"))
    record = ImportedMemory(
        source_id=str(row.get("external_id", "")),
        kind=kind,
        content=content,
        created_at=created,
        updated_at=parse_time(row.get("updated_at")),
        occurred_at=created,
        namespace=_namespace(scope),
        session_id=str(scope.get("session_id") or ""),
        metadata=metadata,
        source=str(row.get("external_system") or "")[:32],
    )
    if row.get("external_system") and row.get("external_system") not in ("memproj", "unknown"):
        record.metadata.setdefault("external_system", row["external_system"])
    if isinstance(own, dict):
        _restore(record, own)
    return record


_OWN_FLOATS = ("importance", "confidence", "success_count", "effectiveness_score", "outcome_score", "utility")
_OWN_INTS = ("harmful_count", "applied_count", "reference_count")
_OWN_TEXTS = (
    "kind",
    "scope",
    "butler",
    "subject",
    "predicate",
    "collection",
    "boundary_class",
    "source",
    "permanence",
    "validity",
    "maturity",
)
_OWN_TIMES = ("occurred_at", "expires_at", "last_applied_at", "last_referenced_at", "accessed_at", "last_confirmed_at")


def _restore(record: ImportedMemory, own: dict[str, Any]) -> None:
    for name in _OWN_TEXTS:
        if isinstance(own.get(name), str):
            setattr(record, name, own[name])
    for name in _OWN_FLOATS:
        if name in own:
            setattr(record, name, number(own[name], getattr(record, name)))
    for name in _OWN_INTS:
        if name in own:
            setattr(record, name, int(number(own[name], getattr(record, name))))
    for name in _OWN_TIMES:
        if own.get(name):
            setattr(record, name, parse_time(own[name]))
    if isinstance(own.get("namespace"), list):
        record.namespace = tuple(str(p) for p in own["namespace"])
    if isinstance(own.get("tags"), list):
        record.tags = [str(t) for t in own["tags"]]
    if own.get("superseded_by"):
        record.superseded_by = str(own["superseded_by"])
    if isinstance(own.get("aliases"), list):
        record.other_aliases = tuple(
            (str(a[0]), str(a[1])) for a in own["aliases"] if isinstance(a, list | tuple) and len(a) == 2
        )
    if isinstance(own.get("outcomes"), list):
        record.outcomes = [
            (str(o[0]), parse_time(o[1])) for o in own["outcomes"] if isinstance(o, list | tuple) and len(o) == 2
        ]


def _records(kind: str, row: dict[str, Any], entity_ids: set[str], names: dict[str, str]) -> Iterable[Record]:
    source_id = str(row.get("external_id", ""))
    if not source_id:
        yield Skipped("", f"a COGX {kind} without an external_id")
        return
    if kind == "memory":
        record = _base(row, "fact", str(row.get("content", "")))
        record.tags = record.tags or string_list(row.get("categories"))
        yield record
    elif kind == "document":
        record = _base(row, "document", str(row.get("content", "")))
        if row.get("title"):
            record.metadata.setdefault("title", row["title"])
        yield record
    elif kind == "episode":
        turns = [t for t in row.get("turns") or [] if isinstance(t, dict) and str(t.get("content", "")).strip()]
        if not turns:
            yield Skipped(source_id, "an episode without turns")
            return
        if len(turns) == 1 and isinstance((row.get("metadata") or {}).get("memproj"), dict):
            content = str(turns[0]["content"])
        else:
            content = "\n".join(f"{t.get('role') or 'user'}: {t['content']}" for t in turns)
        record = _base(row, "episode", content)
        first = parse_time(turns[0].get("occurred_at"))
        if first is not None and not (row.get("metadata") or {}).get("memproj"):
            record.occurred_at = first
        if row.get("title"):
            record.metadata.setdefault("title", row["title"])
        yield record
    elif kind == "memory_block":
        record = _base(row, "fact", str(row.get("value", "")))
        if not (row.get("metadata") or {}).get("memproj"):
            record.subject = str(row.get("label", ""))[:200]
            if row.get("limit") is not None:
                record.metadata.setdefault("limit", row["limit"])
        yield record
    elif kind == "entity":
        attrs = dict(row.get("attributes") or {})
        if row.get("description"):
            attrs.setdefault("description", row["description"])
        if row.get("aliases"):
            attrs.setdefault("aliases", row["aliases"])
        own = (row.get("metadata") or {}).get("memproj") or {}
        yield ImportedEntity(
            source_id=source_id,
            name=str(row.get("name", "")),
            type=str(own.get("type") or row.get("entity_type") or "Concept"),
            canonical_key=str(own.get("canonical_key") or ""),
            attrs=attrs,
            claims=[str(c) for c in own.get("claims", [])] if isinstance(own.get("claims"), list) else [],
        )
    elif kind == "fact":
        yield from _fact(row, entity_ids, names)


def _fact(row: dict[str, Any], entity_ids: set[str], names: dict[str, str]) -> Iterable[Record]:
    source_id = str(row["external_id"])
    subject, predicate, obj = (
        str(row.get("subject_ref", "")),
        str(row.get("predicate", "")),
        str(row.get("object_ref", "")),
    )
    own = (row.get("metadata") or {}).get("memproj")
    src = subject if subject in entity_ids else names.get(subject)
    dst = obj if obj in entity_ids else names.get(obj)
    if src and dst:
        evidence = (own or {}).get("evidence") if isinstance(own, dict) else None
        props = {k: v for k, v in (row.get("metadata") or {}).items() if k != "memproj"}
        for name in ("valid_at", "invalid_at", "confidence"):
            if row.get(name) is not None:
                props.setdefault(name, row[name])
        yield ImportedRelation(
            source_id=source_id,
            src=src,
            dst=dst,
            type=predicate,
            props=props,
            evidence=str(evidence) if evidence else None,
        )
        if isinstance(own, dict) and own.get("relation"):
            return
    text = row.get("fact_text")
    if not text and not isinstance(own, dict):
        if not (src and dst):
            text = f"{subject} {predicate} {obj}".strip()
        else:
            return
    record = _base(row, "fact", str(text or obj))
    if not isinstance(own, dict):
        record.subject, record.predicate = subject[:200], predicate[:200]
        record.confidence = number(row.get("confidence"), 1.0, low=0, high=1)
        valid = parse_time(row.get("valid_at"))
        if valid is not None:
            record.occurred_at = valid
        invalid = parse_time(row.get("invalid_at"))
        if invalid is not None:
            record.metadata.setdefault("invalid_at", invalid.isoformat())
            if invalid <= datetime.now(tz=UTC):
                record.validity = "superseded"
        if row.get("provenance"):
            record.metadata.setdefault("provenance", row["provenance"])
    yield record


# --- writing ---------------------------------------------------------------------------------


class CogxWriter:
    """Writes a COGX archive directory; ``close`` writes the manifest."""

    def __init__(self, directory: Path, *, source_system: str = "memproj", embedding_model: str | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name in (*RECORD_FILES.values(), RAW_NODES_FILE, MANIFEST_FILE):
            (directory / name).unlink(missing_ok=True)
        self.directory = directory
        self.source_system = source_system
        self.embedding_model = embedding_model
        self.counts: dict[str, int] = {}
        self._handles: dict[str, Any] = {}

    def write(self, record: dict[str, Any]) -> None:
        kind = record["kind"]
        handle = self._handles.get(kind)
        if handle is None:
            handle = self._handles[kind] = (self.directory / RECORD_FILES[kind]).open("a", encoding="utf-8")
        body = {k: v for k, v in record.items() if v is not None}
        handle.write(json.dumps(body, ensure_ascii=False, default=_json_default) + "\n")
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        manifest = {
            "cogx_version": COGX_VERSION,
            "source_system": self.source_system,
            "exported_at": datetime.now(tz=UTC).isoformat(),
            "counts": self.counts,
            "embedding_model": self.embedding_model,
            "notes": ["metadata.memproj holds memproj's own columns of each record"],
        }
        (self.directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2), encoding="utf-8")


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def open_source(location: str, **_: Any) -> CogxArchive:
    return CogxArchive(Path(location))
