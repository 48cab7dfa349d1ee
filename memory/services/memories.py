"""Writes: storing, superseding, confirming, outcome feedback, forgetting and
reference bumps. One transaction per write, with its audit event inside it."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DataError, connection, transaction
from django.db.models import Field, Value
from django.db.models.expressions import DatabaseDefault
from django.utils import timezone

from memory import embedtext, scoring, validation
from memory.embeddings import get_embedder
from memory.errors import EmbeddingUnavailable, InvalidArgument, NotFound, PermissionDenied
from memory.models import (
    EMBEDDING_DIM,
    EmbeddingStatus,
    Kind,
    Maturity,
    Memory,
    Validity,
)
from memory.selectors.aliases import memory_pk
from memory.selectors.memories import boundary_view, exchange_parts, read_boundary
from memory.services.events import EventType, NewEvent, caller_event, event_append, events_append
from memory.services.followups import followups_for_writes
from memory.services.locks import memory_rows_lock, memory_rows_update, tenant_write_lock
from memory.services.quotas import quota_memories_check
from memory.services.vectors import turns_unembed
from policy.caller import Caller
from policy.document import BOUNDARY_CLASSES, DEFAULT_BOUNDARY_CLASS


def require_write(caller: Caller) -> None:
    if not caller.has_scope("write"):
        raise PermissionDenied("this token is read-only; ask an admin for a token with the 'write' scope.")


@dataclass
class _Embedding:
    vector: list[float] | None
    status: str
    model: str
    error: str = ""


_PENDING = _Embedding(None, EmbeddingStatus.PENDING, "")


def _embed_for_store(content: str, *, kind: str, text: str | None = None, session_id: str = "") -> _Embedding:
    """Embed before the transaction opens. A failure never loses the write: the
    memory is stored keyword-searchable and marked pending for the worker.
    What is embedded is memory.embedtext's text: ``text`` (an episode of a
    session with its previous turn under a contextual text version,
    ``_episode_text``), else the content as that kind is embedded."""
    if settings.MEMPROJ["EMBED_MODE"] == "async":
        return _Embedding(None, EmbeddingStatus.PENDING, "")
    embedder = get_embedder()
    try:
        # Any failure (load error, bad JSON, timeout, open breaker) arrives as
        # EmbeddingUnavailable with a bounded wait: the write is kept pending.
        return _Embedding(
            embedder.embed_document(text if text is not None else embedtext.embedding_text(content, kind=kind)),
            EmbeddingStatus.READY,
            embedtext.embedding_identity(embedder.model_name, in_session=embedtext.in_session(kind, session_id)),
        )
    except EmbeddingUnavailable as exc:
        return _Embedding(None, EmbeddingStatus.PENDING, "", str(exc)[:2000])


def _episode_text(caller: Caller, content: str, session_id: str) -> str:
    """The text to embed for a new episode of the caller, of the class its
    rows default to (one index probe for an episode of a session)."""
    return embedtext.texts_for_new_episodes(tenant_id=caller.tenant_id, episodes=[(content, session_id)])[0]


def _embeddings_still_current(
    caller: Caller,
    episodes: Sequence[tuple[str, str]],
    texts: Sequence[str],
    embeddings: Sequence[_Embedding],
) -> list[_Embedding]:
    """Under the tenant's write lock, for new episodes given as (content,
    session_id) in the order they are stored and the texts their vectors were
    made from before it: a vector whose text is no longer the episode's (its
    previous turn was forgotten, replaced or expired meanwhile) is dropped,
    the episode stored pending for the worker, which embeds it from what is
    visible then. Nothing is asked when no episode of a session has a vector;
    else one index probe per session."""
    ready = [e.status == EmbeddingStatus.READY for e in embeddings]
    if not any(session and vector for (_, session), vector in zip(episodes, ready, strict=True)):
        return list(embeddings)
    current = embedtext.texts_still_current(tenant_id=caller.tenant_id, episodes=episodes, texts=texts)
    return [e if same else _PENDING for e, same in zip(embeddings, current, strict=True)]


def _after_commit(memory: Memory) -> None:
    """Record the write's follow-up in its own transaction (the outbox): the
    write answers success once committed, even with the broker down."""
    followups_for_writes([memory])


def _memory_row(*, caller: Caller, kind: str, content: str, embedding: _Embedding, **fields: Any) -> Memory:
    """A new memory of the caller's tenant, not saved yet."""
    # The TTLs of pce-memory v0.14.0's scopes (session / project / principle) come from the
    # tenant policy; other scopes (a butler's scope, 'global') have none.
    if fields.get("expires_at") is None and fields.get("scope") in caller.policy.scopes:
        ttl = caller.policy.ttl_for(fields["scope"])
        fields["expires_at"] = timezone.now() + ttl if ttl is not None else None
    return Memory(
        tenant_id=caller.tenant_id,
        principal_id=caller.principal_id if caller.elevated_from is None else None,
        kind=kind,
        content=content,
        content_hash=validation.content_hash(content),
        embedding=embedding.vector,
        embedding_model=embedding.model,
        embedding_status=embedding.status,
        embedding_error=embedding.error,
        embedding_attempts=1 if embedding.error else 0,
        **fields,
    )


def _new_memory(
    *, caller: Caller, kind: str, content: str, embedding: _Embedding, created_at: datetime | None = None, **fields: Any
) -> Memory:
    """Insert a new memory; ``created_at`` dates it in the past (what it was derived from), else now."""
    memory = _memory_row(caller=caller, kind=kind, content=content, embedding=embedding, **fields)
    tenant_write_lock(caller.tenant_id)  # before the insert's term-statistics triggers (memory/services/locks.py)
    quota_memories_check(caller=caller, adding=1)
    # The bulk writes' COPY, for one row: the ORM's INSERT spent more of a
    # store's Python time building its statement than anything but the embedding.
    dated = {memory.pk: (created_at, timezone.now())} if created_at is not None else {}
    _memories_copy([memory], _copy_values([memory], dated))
    return memory


def memory_pending_row(*, caller: Caller, kind: str, content: str, **fields: Any) -> Memory:
    """A new memory of the caller's tenant, not saved yet, whose vector the
    worker adds after it is stored (a book's chunk, a long exchange's part)."""
    return _memory_row(
        caller=caller, kind=kind, content=content, embedding=_Embedding(None, EmbeddingStatus.PENDING, ""), **fields
    )


def _episode_values(
    caller: Caller,
    *,
    content: object,
    butler: object,
    session_id: object = None,
    importance: object = 5.0,
    scope: object = "global",
    tags: Iterable[object] | None = None,
    metadata: object = None,
    ttl: timedelta | None = None,
) -> dict[str, Any]:
    """An episode's validated columns (one set of rules for one and for many)."""
    metadata = validation.metadata(metadata)
    if ttl is None:
        # Episodes expire as pce-memory's session scope does: the tenant policy's session TTL
        # decides their expiry (7 d by default); 'inf' keeps them 100 years, since
        # an episode always carries an expiry.
        ttl = caller.policy.ttl_for("session") or timedelta(days=36500)
    return {
        "content": validation.text(content, field="content"),
        "butler": validation.label(butler, field="butler"),
        "session_id": validation.label(session_id, field="session_id") if session_id else "",
        "importance": validation.number(importance, field="importance", low=0, high=10),
        "scope": validation.label(scope, field="scope"),
        "tags": validation.tags(tags),
        "metadata": metadata or {},
        "expires_at": timezone.now() + ttl,
    }


def episode_store(
    *,
    caller: Caller,
    content: str,
    butler: str,
    session_id: str | None = None,
    importance: float = 5.0,
    scope: str = "global",
    tags: Iterable[str] | None = None,
    metadata: dict[str, Any] | None = None,
    ttl: timedelta | None = None,
    collection: str = "",
    outcome_score: float = scoring.UNSCORED_OUTCOME_SCORE,
) -> Memory:
    require_write(caller)
    values = _episode_values(
        caller,
        content=content,
        butler=butler,
        session_id=session_id,
        importance=importance,
        scope=scope,
        tags=tags,
        metadata=metadata,
        ttl=ttl,
    )
    episode = (values["content"], values["session_id"])
    text = values["content"] if settings.MEMPROJ["EMBED_MODE"] == "async" else _episode_text(caller, *episode)
    embedding = _embed_for_store(values["content"], kind=Kind.EPISODE, text=text, session_id=values["session_id"])
    with transaction.atomic():
        tenant_write_lock(caller.tenant_id)  # taken by _new_memory too: the text is checked under it
        (embedding,) = _embeddings_still_current(caller, [episode], [text], [embedding])
        memory = _new_memory(
            caller=caller,
            kind=Kind.EPISODE,
            embedding=embedding,
            collection=collection,
            outcome_score=outcome_score,
            **values,
        )
        event_append(caller=caller, tenant_id=caller.tenant_id, memory=memory, event_type=EventType.STORED)
        _after_commit(memory)
    return memory


# What one item of a bulk store may hold: episode_store's own arguments.
BULK_EPISODE_FIELDS = ("content", "butler", "session_id", "importance", "scope", "tags", "metadata")
BULK_EPISODES_MAX = 1000
# Texts per embedder call of a bulk store (the micro-batcher's largest forward pass).
BULK_EMBED_CHUNK = 64


def _embed_many_for_store(texts: Sequence[str], session_ids: Sequence[str]) -> list[_Embedding]:
    """The vectors of the new episodes of a bulk store, given as the texts to
    embed (``embedtext.texts_for_new_episodes``) and their sessions, before
    their transaction opens, so each row is written once, with its vector (a vector added later
    is an UPDATE: a second version of the row, inserted again into every index
    of the table). One embedder call per chunk, texts of similar length
    together (less padding in a forward pass). Touches no database (it may run
    in another thread). What cannot be embedded now is stored pending for the
    worker, never lost: after a failure the rest of the batch, with the error,
    as one store records it."""
    out = [_Embedding(None, EmbeddingStatus.PENDING, "") for _ in texts]
    todo = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    if not todo:
        return out
    embedder = get_embedder()
    of_session = embedtext.embedding_identity(embedder.model_name, in_session=True)
    alone = embedtext.embedding_identity(embedder.model_name, in_session=False)
    for start in range(0, len(todo), BULK_EMBED_CHUNK):
        chunk = todo[start : start + BULK_EMBED_CHUNK]
        try:
            vectors = embedder.embed([texts[i] for i in chunk])
        except EmbeddingUnavailable as exc:
            failed = _Embedding(None, EmbeddingStatus.PENDING, "", str(exc)[:2000])
            for i in todo[start:]:
                out[i] = failed
            break
        for i, vector in zip(chunk, vectors, strict=True):
            out[i] = _Embedding(vector, EmbeddingStatus.READY, of_session if session_ids[i] else alone)
    return out


def _episodes_validated(caller: Caller, episodes: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each episode's columns, checked as ``episode_store`` checks one (the
    error names the episode's index)."""
    if isinstance(episodes, (str, bytes, Mapping)) or not isinstance(episodes, Sequence):
        raise InvalidArgument("episodes must be a list of objects.")
    if not episodes:
        raise InvalidArgument("send at least one episode.")
    if len(episodes) > BULK_EPISODES_MAX:
        raise InvalidArgument(f"at most {BULK_EPISODES_MAX} episodes per call; split the list.")
    validated = []
    for index, item in enumerate(episodes):
        where = f"episodes[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidArgument(f"{where} must be an object.")
        unknown = sorted(set(item) - set(BULK_EPISODE_FIELDS))
        if unknown:
            raise InvalidArgument(f"{where} has unknown fields {unknown}; allowed: {', '.join(BULK_EPISODE_FIELDS)}.")
        missing = [name for name in ("content", "butler") if name not in item]
        if missing:
            raise InvalidArgument(f"{where} needs {' and '.join(missing)}.")
        try:
            validated.append(_episode_values(caller, **item))
        except InvalidArgument as exc:
            raise InvalidArgument(f"{where}: {exc}") from exc
    return validated


def _episode_texts(caller: Caller, validated: Sequence[Mapping[str, Any]], latest: dict[str, str]) -> list[str]:
    return embedtext.texts_for_new_episodes(
        tenant_id=caller.tenant_id, episodes=[(v["content"], v["session_id"]) for v in validated], latest=latest
    )


def _episodes_embed(texts: Sequence[str], session_ids: Sequence[str], *, embed: bool) -> list[_Embedding]:
    if not embed:
        return [_PENDING for _ in session_ids]
    return _embed_many_for_store(texts, session_ids)


def _episodes_write(
    caller: Caller, validated: Sequence[Mapping[str, Any]], embeddings: Sequence[_Embedding], texts: Sequence[str]
) -> list[Memory]:
    rows = [
        _memory_row(caller=caller, kind=Kind.EPISODE, embedding=embedding, **values)
        for values, embedding in zip(validated, embeddings, strict=True)
    ]
    # A microsecond apart in the list's order: a session's turns stay in the
    # order they were sent, as the worker's previous-turn look-up reads them
    # (by created_at) when it embeds or re-embeds one.
    now = timezone.now()
    dated = {row.pk: (now + timedelta(microseconds=index), None) for index, row in enumerate(rows)}
    new = memories_new(caller=caller, rows=rows, dated=dated)
    with transaction.atomic():
        tenant_write_lock(caller.tenant_id)  # taken by memories_insert too: the texts are checked under it
        checked = _embeddings_still_current(
            caller, [(v["content"], v["session_id"]) for v in validated], texts, embeddings
        )
        for index, (made, kept) in enumerate(zip(embeddings, checked, strict=True)):
            if kept is not made:  # rare: its values were built before the lock
                row = rows[index]
                row.embedding, row.embedding_status, row.embedding_model = None, kept.status, kept.model
                new.values[index] = _copy_values([row], dated)[0]
        memories_insert(caller=caller, new=new)
    return rows


def episodes_store_bulk(*, caller: Caller, episodes: Sequence[Mapping[str, Any]], embed: bool = True) -> list[Memory]:
    """Many episodes in one transaction (an import of past conversations): each
    validated as ``episode_store`` validates one, all stored or none, and
    keyword-searchable once it returns. They are embedded first, one model
    call per chunk, and each row is written once with its vector; what cannot
    be embedded now (or everything, with ``embed=False``) is stored pending and
    the worker embeds it through the outbox. Storing costs one INSERT per
    table, not one transaction per episode."""
    require_write(caller)
    validated = _episodes_validated(caller, episodes)
    texts = _episode_texts(caller, validated, {}) if embed else []
    sessions = [v["session_id"] for v in validated]
    return _episodes_write(caller, validated, _episodes_embed(texts, sessions, embed=embed), texts)


def episodes_store_batches(
    *, caller: Caller, batches: Iterable[Sequence[Mapping[str, Any]]], embed: bool = True
) -> Iterator[list[Memory]]:
    """``episodes_store_bulk`` over a stream of batches (``manage.py
    ingest_episodes``), yielding each batch's memories once committed. The
    next batch is read, validated and embedded while this one is written
    (the model runs in its own thread and releases the GIL), so the model
    does not wait for the database. A batch that cannot be read or is invalid
    stores nothing of itself: the batches before it are stored, then its error
    is raised."""
    require_write(caller)
    source = iter(batches)
    # Each session's last turn so far in this stream: the next batch's texts
    # are made while this one is still being written.
    latest: dict[str, str] = {}
    ahead: tuple[list[dict[str, Any]], Future[list[_Embedding]], list[str]] | None = None
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bulk-embed") as pool:
        while True:
            error: Exception | None = None
            following = None
            try:
                episodes = next(source, None)
                if episodes is not None:
                    validated = _episodes_validated(caller, episodes)
                    texts = _episode_texts(caller, validated, latest) if embed else []
                    following = (
                        validated,
                        pool.submit(_episodes_embed, texts, [v["session_id"] for v in validated], embed=embed),
                        texts,
                    )
            except Exception as exc:  # noqa: BLE001 - raised once the batch before it is stored
                error = exc
            if ahead is not None:
                yield _episodes_write(caller, ahead[0], ahead[1].result(), ahead[2])
            if error is not None:
                raise error
            if following is None:
                return
            ahead = following


# pgvector's binary form of a vector (what COPY ... FORMAT BINARY hands to its receive function).
_VECTOR_BINARY = struct.Struct(f">HH{EMBEDDING_DIM}f")
_BYTEA_OID = 17
# smallint, integer and bigint by type oid: the values each column holds.
_INTEGER_BOUNDS = {21: (-(2**15), 2**15 - 1), 23: (-(2**31), 2**31 - 1), 20: (-(2**63), 2**63 - 1)}
_COPY_COLUMNS: dict[str, list[tuple[Field[Any, Any], int]]] = {}


def _copy_columns() -> list[tuple[Field[Any, Any], int]]:
    """The columns a COPY of new memories writes (every stored column but the
    generated one) with the type each is sent as, once per database."""
    key = str(connection.settings_dict["NAME"])
    if key not in _COPY_COLUMNS:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT attname, atttypid::int FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
                "AND NOT attisdropped",
                [Memory._meta.db_table],
            )
            oids = dict(cursor.fetchall())
        # The vector goes as its binary form already packed (as bytea: sent verbatim).
        _COPY_COLUMNS[key] = [
            (f, _BYTEA_OID if f.column == "embedding" else oids[f.column])
            for f in Memory._meta.local_concrete_fields
            if not f.generated
        ]
    return _COPY_COLUMNS[key]


@dataclass
class NewMemories:
    """New memories as ``memories_insert`` writes them: each row's column values
    and its 'stored' audit event. Built before the write's transaction takes the
    tenant's write lock (``memories_new``), so that a large batch (a book's
    chunks, an import) holds the lock only while it is written, not while
    thousands of values are prepared."""

    rows: Sequence[Memory]
    values: list[list[Any]]
    events: list[NewEvent]


def memories_new(
    *,
    caller: Caller,
    rows: Sequence[Memory],
    payloads: Sequence[dict[str, Any]] | None = None,
    dated: Mapping[uuid.UUID, tuple[datetime | None, datetime | None]] | None = None,
) -> NewMemories:
    """``rows`` ready for ``memories_insert``: the values each field gives the
    ORM's INSERT (defaults, auto timestamps, the database default of a field
    left unset), the vector in pgvector's binary form; ``payloads``: one per
    row, for its 'stored' event; ``dated``: by id, a row's own (created_at,
    updated_at), either None for now (an import keeps upstream's; updated_at
    defaults to created_at), instead of now."""
    events = [
        caller_event(
            caller=caller,
            tenant_id=caller.tenant_id,
            event_type=EventType.STORED,
            memory_id=row.pk,
            memory_kind=row.kind,
            payload=payloads[index] if payloads is not None else None,
        )
        for index, row in enumerate(rows)
    ]
    return NewMemories(rows=rows, values=_copy_values(rows, dated or {}), events=events)


def _copy_values(
    rows: Sequence[Memory], dated: Mapping[uuid.UUID, tuple[datetime | None, datetime | None]]
) -> list[list[Any]]:
    """Each row's values for ``_memories_copy``, in ``_copy_columns`` order."""
    columns = _copy_columns()
    data = []
    for row in rows:
        created, updated = dated.get(row.pk, (None, None))
        updated = updated or created
        values: list[Any] = []
        for f, oid in columns:
            value: Any
            if f.attname == "created_at" and created is not None:
                value = row.created_at = created
            elif f.attname == "updated_at" and updated is not None:
                value = row.updated_at = updated
            else:
                value = f.pre_save(row, True)
            if isinstance(value, DatabaseDefault):  # a field left unset: its database default, if a value
                value = f.db_default.value if isinstance(f.db_default, Value) else f.db_default
                setattr(row, f.attname, value)
            if hasattr(value, "resolve_expression"):
                raise TypeError(f"memories_insert takes values, not SQL expressions ({f.name})")
            if f.column == "embedding":
                values.append(None if value is None else _VECTOR_BINARY.pack(EMBEDDING_DIM, 0, *value))
                continue
            value = f.get_db_prep_save(value, connection)
            bounds = _INTEGER_BOUNDS.get(oid)
            # COPY's binary integers wrap where an INSERT is refused: refuse as the database would.
            if bounds is not None and isinstance(value, int) and not bounds[0] <= value <= bounds[1]:
                raise DataError(f"integer out of range for column {f.column}: {value}")
            values.append(value)
        data.append(values)
    return data


def _memories_copy(rows: Sequence[Memory], values: Sequence[Sequence[Any]]) -> None:
    """Write new memories (``values``: ``_copy_values`` of them) with one binary COPY. An INSERT of many rows spends
    most of its time building, quoting and parsing SQL text (about 48
    placeholders a row, a vector as 384 decimal numbers); COPY fires the same
    triggers and fills the same indexes."""
    columns = _copy_columns()
    names = ", ".join(connection.ops.quote_name(f.column) for f, _ in columns)
    # The driver's own cursor: its errors become Django's, as the ORM's would.
    with (
        connection.wrap_database_errors,
        connection.cursor() as cursor,
        cursor.cursor.copy(
            f"COPY {Memory._meta.db_table} ({names}) FROM STDIN (FORMAT BINARY)"  # noqa: S608 - column names only
        ) as copy,
    ):
        copy.set_types([oid for _, oid in columns])
        for row_values in values:
            copy.write_row(row_values)
    for row in rows:
        row._state.adding = False
        row._state.db = connection.alias


def memories_insert(*, caller: Caller, new: NewMemories) -> None:
    """Insert many new memories (``memories_new``) inside the caller's
    transaction: one COPY for the rows, one INSERT for their 'stored' audit
    events, one per follow-up kind (the outbox). The bulk writes (an episode
    import, an import from another system, a book's chunks) share it."""
    tenant_write_lock(caller.tenant_id)
    quota_memories_check(caller=caller, adding=len(new.rows))
    _memories_copy(new.rows, new.values)
    events_append(new.events)
    followups_for_writes(new.rows)


@dataclass
class FactStoreResult:
    memory: Memory
    # The replaced facts the caller's reads can see: an answer that named a
    # fact of a hidden boundary class would confirm that its key (for a claim,
    # the hash of its text) is held, which a read of it would not.
    superseded_ids: list[uuid.UUID] = field(default_factory=list)
    # Every replaced fact, whatever its class (the admin shows them all).
    superseded_all_ids: list[uuid.UUID] = field(default_factory=list)


def _lock_fact_key(tenant_id: uuid.UUID, namespace: Sequence[str], subject: str, predicate: str) -> None:
    """Serialise writers of one subject+predicate: an advisory lock taken inside
    the transaction, released at commit. The partial unique index is the backstop."""
    tenant_write_lock(tenant_id)
    key = "\x1f".join([str(tenant_id), "\x1e".join(namespace), subject, predicate])
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])


def _supersede(*, caller: Caller, old: Sequence[Memory], new_id: uuid.UUID, reason: str) -> None:
    """The one supersession write: one UPDATE for the replaced rows, and an audit
    event each. ``new_id`` may name a row inserted later in the same transaction
    (Django's foreign keys are DEFERRABLE INITIALLY DEFERRED in PostgreSQL)."""
    Memory.objects.filter(pk__in=[m.pk for m in old]).update(
        validity=Validity.SUPERSEDED, superseded_by_id=new_id, updated_at=timezone.now()
    )
    for memory in old:
        memory.validity, memory.superseded_by_id = Validity.SUPERSEDED, new_id
        event_append(
            caller=caller,
            tenant_id=caller.tenant_id,
            memory=memory,
            event_type=EventType.SUPERSEDED,
            payload={"superseded_by": str(new_id), "reason": reason},
        )


def _fact_key(subject: str | None, predicate: str | None) -> tuple[str, str]:
    """A fact's supersession key: subject + predicate (the butlers memory module), a subject
    alone (a LangGraph store key) or nothing (a memento memory, never
    superseded automatically). A given part must not be blank. A store key is
    kept exactly as given (LangGraph compares keys exactly, and a get looks it up
    as sent); a subject and predicate, free text an agent wrote, are trimmed."""
    if subject is not None and predicate is None:
        return validation.identifier(subject, field="subject", max_chars=200), ""
    subject_value = validation.text(subject, field="subject", max_chars=200) if subject is not None else ""
    predicate_value = validation.text(predicate, field="predicate", max_chars=200) if predicate is not None else ""
    if predicate_value and not subject_value:
        raise InvalidArgument("a fact with a predicate needs a subject too.")
    return subject_value, predicate_value


def fact_key(subject: str | None, predicate: str | None) -> tuple[str, str]:
    """A fact's supersession key as ``fact_store`` stores it (``_fact_key``)."""
    return _fact_key(subject, predicate)


def fact_store(
    *,
    caller: Caller,
    subject: str | None,
    predicate: str | None,
    content: str,
    importance: float = 5.0,
    permanence: str = scoring.DEFAULT_PERMANENCE,
    scope: str = "global",
    tags: Iterable[str] | None = None,
    namespace: Sequence[str] = (),
    confidence: float = 1.0,
    source: str = "",
    metadata: dict[str, Any] | None = None,
    collection: str = "",
    boundary_class: str = DEFAULT_BOUNDARY_CLASS,
    replaces: uuid.UUID | None = None,
    keep_confidence: bool = False,
    stated_at: datetime | None = None,
) -> FactStoreResult:
    """Store a fact; a keyed one supersedes the active fact of its subject and
    predicate. ``replaces`` makes it an update of that memory: it must still be
    the key's active holder when the key is locked (the embedding is computed
    before, so a forget or another update can commit in between), else
    NotFound and nothing is stored. Without it a text whose key had just been
    forgotten would come back as a fresh active fact. ``keep_confidence``
    (with ``replaces``): the new version takes the confidence of the one it
    replaces as that row is under the lock, not ``confidence``: an outcome
    that moved it after the caller read the row (feedback changes a live
    fact's confidence in place) is kept, not overwritten by the value read.

    ``stated_at``: when what the fact says was said (a consolidated fact: its
    newest source episode), which dates it. An active fact of its key dated
    later is newer knowledge: it stays active, and this one is stored as its
    superseded past version, as an import of an older fact is."""
    require_write(caller)
    boundary_class = validation.choice(boundary_class, field="boundary_class", allowed=BOUNDARY_CLASSES)
    subject, predicate = _fact_key(subject, predicate)
    content = validation.text(content, field="content")
    source = validation.text(source, field="source", max_chars=32) if source else ""
    importance = validation.number(importance, field="importance", low=0, high=10)
    confidence = validation.number(confidence, field="confidence", low=0, high=1)
    permanence = validation.choice(permanence, field="permanence", allowed=scoring.DECAY_RATES)
    scope = validation.label(scope, field="scope")
    tag_list = validation.tags(tags)
    namespace = validation.namespace(namespace)
    metadata = validation.metadata(metadata)
    embedding = _embed_for_store(content, kind=Kind.FACT)
    now = timezone.now()
    stated_at = min(stated_at, now) if stated_at is not None else None
    with transaction.atomic():
        previous: list[Memory] = []
        active_facts = (
            Memory.objects.for_caller(caller)
            .filter(kind=Kind.FACT, validity=Validity.ACTIVE, namespace=namespace)
            .without_vectors()
            .select_for_update()
        )
        if subject:
            _lock_fact_key(caller.tenant_id, namespace, subject, predicate)
            previous = list(active_facts.filter(subject=subject, predicate=predicate))
        elif replaces is not None:
            # A fact without a key (a memento memory) has no key lock to serialise
            # its updates: the row it replaces is locked instead (after the
            # tenant's write lock, the one lock order) and must still be active.
            tenant_write_lock(caller.tenant_id)
            previous = list(active_facts.filter(subject="", pk=replaces))
        if replaces is not None and replaces not in {p.pk for p in previous}:
            raise NotFound(
                f"memory {replaces} is no longer the active fact of its subject and predicate "
                "(forgotten or replaced meanwhile); search to find the current one."
            )
        if keep_confidence and replaces is not None:
            confidence = next(p.confidence for p in previous if p.pk == replaces)
        state, state_changes_at = scoring.fact_state_schedule(
            confidence=confidence, decay_rate=scoring.DECAY_RATES[permanence], confirmed_at=now, now=now
        )
        new_id = uuid.uuid4()
        newer = [p for p in previous if stated_at is not None and p.created_at > stated_at]
        if newer:
            previous = []
        else:
            # Retire the old row before inserting, so the partial unique index only
            # ever sees one active fact; it already points at the id the new row gets.
            _supersede(caller=caller, old=previous, new_id=new_id, reason="same subject and predicate")
        memory = _new_memory(
            caller=caller,
            id=new_id,
            created_at=stated_at,
            validity=Validity.SUPERSEDED if newer else Validity.ACTIVE,
            superseded_by_id=max(newer, key=lambda p: p.created_at).pk if newer else None,
            kind=Kind.FACT,
            content=content,
            embedding=embedding,
            subject=subject,
            predicate=predicate,
            importance=importance,
            confidence=confidence,
            permanence=permanence,
            decay_rate=scoring.DECAY_RATES[permanence],
            last_confirmed_at=now,
            fact_state=state,
            fact_state_changes_at=state_changes_at,
            scope=scope,
            tags=tag_list,
            namespace=namespace,
            source=source,
            metadata=metadata or {},
            collection=collection,
            boundary_class=boundary_class,
        )
        event_append(
            caller=caller,
            tenant_id=caller.tenant_id,
            memory=memory,
            event_type=EventType.STORED,
            payload={"supersedes": [str(p.id) for p in previous]}
            | ({"superseded_by": str(memory.superseded_by_id)} if newer else {}),
        )
        _after_commit(memory)
    visible = read_boundary(caller).visible if previous else frozenset()
    return FactStoreResult(
        memory=memory,
        superseded_ids=[p.id for p in previous if p.boundary_class in visible],
        superseded_all_ids=[p.id for p in previous],
    )


def rule_store(
    *,
    caller: Caller,
    content: str,
    scope: str = "global",
    tags: Iterable[str] | None = None,
    metadata: dict[str, Any] | None = None,
    source: str = "",
    boundary_class: str = DEFAULT_BOUNDARY_CLASS,
) -> Memory:
    require_write(caller)
    content = validation.text(content, field="content")
    boundary_class = validation.choice(boundary_class, field="boundary_class", allowed=BOUNDARY_CLASSES)
    scope = validation.label(scope, field="scope")
    tag_list = validation.tags(tags)
    metadata = validation.metadata(metadata)
    embedding = _embed_for_store(content, kind=Kind.RULE)
    with transaction.atomic():
        memory = _new_memory(
            caller=caller,
            kind=Kind.RULE,
            content=content,
            embedding=embedding,
            scope=scope,
            tags=tag_list,
            maturity=Maturity.CANDIDATE,
            confidence=scoring.RULE_CANDIDATE_CONFIDENCE,
            permanence=scoring.DEFAULT_PERMANENCE,
            decay_rate=scoring.DECAY_RATES[scoring.DEFAULT_PERMANENCE],
            last_confirmed_at=timezone.now(),
            source=source,
            metadata=metadata or {},
            boundary_class=boundary_class,
        )
        event_append(caller=caller, tenant_id=caller.tenant_id, memory=memory, event_type=EventType.STORED)
        _after_commit(memory)
    return memory


def memory_lock(*, caller: Caller, memory_id: object, kinds: Iterable[str]) -> Memory:
    """Load one of the caller's memories FOR UPDATE (inside a transaction),
    after the tenant's write lock."""
    kinds = list(kinds)
    pk = memory_pk(caller, memory_id)
    tenant_write_lock(caller.tenant_id)
    memory = (
        Memory.objects.for_caller(caller).filter(pk=pk, kind__in=kinds).without_vectors().select_for_update().first()
    )
    if memory is None:
        raise NotFound(f"no {' or '.join(kinds)} with id {pk} in this tenant; use memory_search to find ids.")
    return memory


def memory_require_live(memory: Memory, now: datetime, *, refusal: str, redirect: str) -> None:
    """An outcome or a confirmation applies only to a memory a read can find:
    active and not past its TTL (``models.retrievable_q``; the expiry sweep
    deletes an expired row later). Checked on the row ``memory_lock`` holds, so
    a forget that commits first wins. Anything else is NOT_FOUND, as a read
    answers, naming the successor of a superseded memory. ``refusal`` ends the
    message; ``redirect`` ends it for a superseded one (``{successor}`` is its id)."""
    named = f"{memory.kind} {memory.pk}"
    if memory.validity == Validity.RETRACTED:
        message = f"{named} was forgotten (retracted){refusal}"
    elif memory.validity != Validity.ACTIVE and memory.superseded_by_id is not None:
        message = f"{named} was superseded by {memory.superseded_by_id}" + redirect.format(
            successor=memory.superseded_by_id
        )
    elif memory.validity != Validity.ACTIVE:
        message = f"{named} is {memory.validity}{refusal}"
    elif memory.expires_at is not None and memory.expires_at <= now:
        message = f"{named} expired at {memory.expires_at.isoformat()}{refusal}"
    else:
        return
    raise NotFound(message, memory_id=memory.pk)


def memory_confirm(*, caller: Caller, kind: str, memory_id: object) -> Memory:
    require_write(caller)
    kind = validation.kind(kind)
    if kind == Kind.EPISODE:
        raise InvalidArgument("episodes have no confidence decay, so they cannot be confirmed; confirm a fact or rule.")
    with transaction.atomic():
        memory = memory_lock(caller=caller, memory_id=memory_id, kinds=[kind])
        now = timezone.now()
        # Confirming would answer success and restore nothing a read can find.
        memory_require_live(
            memory,
            now,
            refusal=f", so it cannot be confirmed; only an active {kind} can be.",
            redirect=", so it cannot be confirmed; confirm {successor}.",
        )
        memory.last_confirmed_at = now
        fields = ["last_confirmed_at", "updated_at"]
        if memory.kind == Kind.FACT:
            # The decay sweep re-evaluates it now and records the transition back.
            memory.fact_state_changes_at = memory.last_confirmed_at
            fields.append("fact_state_changes_at")
        memory.save(update_fields=fields)
        event_append(caller=caller, tenant_id=caller.tenant_id, memory=memory, event_type=EventType.CONFIRMED)
    return boundary_view(caller, memory)  # the answer shows content: boundary rules apply (issue 11)


def memory_forget(*, caller: Caller, kind: str, memory_id: object) -> Memory:
    """Soft delete: the row stays for audit and the dashboard, retrieval skips it.
    Facts, rules and episodes all use the canonical validity ``retracted``. A
    memory stored in parts (an exchange longer than one memory holds) is
    forgotten with the parts that continue it: none of its text stays findable.
    The parts are the memories that name it back (``exchange_parts``), wherever
    roampal's lifecycle has moved them or it since (history episodes, patterns
    rules): promotion changes a memory's collection and kind, not its text."""
    require_write(caller)
    kind = validation.kind(kind)
    with transaction.atomic():
        pk = memory_pk(caller, memory_id)
        parts = exchange_parts(caller.tenant_id, pk)
        part_ids = list(parts.values_list("pk", flat=True))
        tenant_write_lock(caller.tenant_id)
        # The turns after it and its parts, whose vectors hold their text as a
        # previous turn's: under the tenant's write lock no turn is stored,
        # forgotten or replaced until this commits.
        following = embedtext.following_turns(
            memory_ids=[pk, *part_ids], now=timezone.now(), tenant_id=caller.tenant_id
        )
        if part_ids or following:
            # Every row it changes locked in primary-key order, as a vector write locks them.
            memory_rows_lock([pk, *part_ids, *(turn for turn, _ in following)])
        memory = memory_lock(caller=caller, memory_id=memory_id, kinds=[kind])
        # The parts it locked, read again under the locks: those not yet retracted or replaced.
        continuing = parts.filter(pk__in=part_ids, validity=Validity.ACTIVE) if part_ids else []
        # Forgetting a forgotten memory (a retry, a second delete) answers the
        # same and records no second retraction.
        head = [] if memory.validity == Validity.RETRACTED else [memory]
        for each in [*head, *continuing]:
            _retract(caller, each)
        turns_unembed(following)
    return memory


def _retract(caller: Caller, memory: Memory, **payload: str) -> None:
    """Retract a locked memory, with its audit event."""
    previous = memory.validity
    memory.validity = Validity.RETRACTED
    memory.save(update_fields=["validity", "updated_at"])
    event_append(
        caller=caller,
        tenant_id=caller.tenant_id,
        memory=memory,
        event_type=EventType.RETRACTED,
        payload={"previous_validity": previous, **payload},
    )


def memory_references_bump(*, caller: Caller, memory_ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, tuple[int, datetime]]:
    """Recall and get bump reference counts, as in the butlers memory module
    (atomic increments). A reference is an access too. Returns each bumped
    memory's new count and reference time."""
    now = timezone.now()
    rows = memory_rows_update(
        tenant_id=caller.tenant_id,
        memory_ids=memory_ids,
        assignments="reference_count = m.reference_count + 1, last_referenced_at = %s, accessed_at = %s",
        params=[now, now],
        returning="m.id, m.reference_count, m.last_referenced_at",
    )
    return {memory_id: (count, at) for memory_id, count, at in rows}


# ``accessed_at`` is stored to this granularity: a memory returned again within
# it is not written again (the answer still shows the time of the read). Reads
# that return the same memories over and over then write nothing, and hold no
# row locks that concurrent reads of those rows would wait for.
ACCESSED_AT_GRANULARITY = timedelta(minutes=1)


def memory_accessed_mark(*, caller: Caller, memories: Sequence[Memory]) -> None:
    """Memento MCP's ``accessed_at`` moves whenever a search or list returns a
    memory (to ``ACCESSED_AT_GRANULARITY``). At most one UPDATE, none when every
    memory was marked within it; ``updated_at`` is left alone (reading is not
    editing). The loaded rows get the read's time so the answer shows it."""
    if not memories:
        return
    now = timezone.now()
    stale_before = now - ACCESSED_AT_GRANULARITY
    stale = [
        memory.pk
        for memory in memories
        if "accessed_at" in memory.get_deferred_fields()
        or memory.accessed_at is None
        or memory.accessed_at < stale_before
    ]
    if stale:
        memory_rows_update(
            tenant_id=caller.tenant_id,
            memory_ids=stale,
            assignments="accessed_at = %s",
            params=[now],
            only_if="m.accessed_at IS NULL OR m.accessed_at < %s",
            only_if_params=[stale_before],
        )
    for memory in memories:
        memory.accessed_at = now


def fact_retract_by_key(
    *, caller: Caller, namespace: Sequence[str], subject: str, predicate: str = ""
) -> Memory | None:
    """Retract the active fact held under a key in a namespace (a LangGraph
    store delete). None when nothing holds the key: deleting twice is fine."""
    require_write(caller)
    namespace = validation.namespace(namespace)
    subject, predicate = _fact_key(subject, predicate or None)
    with transaction.atomic():
        _lock_fact_key(caller.tenant_id, namespace, subject, predicate)
        memory = (
            Memory.objects.for_caller(caller)
            .filter(kind=Kind.FACT, validity=Validity.ACTIVE, namespace=namespace, subject=subject, predicate=predicate)
            .without_vectors()
            .select_for_update()
            .first()
        )
        if memory is None:
            return None
        _retract(caller, memory, key=subject)
    return memory


def memory_supersede(
    *,
    caller: Caller,
    old_id: object,
    new_id: object,
    reason: str = "explicit",
    kinds: Iterable[str] | None = None,
) -> Memory:
    """Mark ``old`` as replaced by ``new`` (the one supersession mechanism, used by
    fact_store's automatic path, memento's supersede_memory and admin review).
    ``kinds``: the kinds the caller's tool knows (memento's are facts); a
    memory of another kind is not found, as its reads would not find it."""
    require_write(caller)
    old_pk, new_pk = memory_pk(caller, old_id), memory_pk(caller, new_id)
    if old_pk == new_pk:
        raise InvalidArgument("a memory cannot supersede itself; pass two different ids.")
    with transaction.atomic():
        tenant_write_lock(caller.tenant_id)
        # A replaced turn leaves retrieval as a forgotten one does: the turn
        # after it is embedded again without it (``memory_forget``).
        following = embedtext.following_turns(memory_ids=[old_pk], now=timezone.now(), tenant_id=caller.tenant_id)
        if following:
            memory_rows_lock([old_pk, new_pk, *(turn for turn, _ in following)])
        # Lock both rows in a stable order so two opposite supersessions cannot deadlock.
        candidates = Memory.objects.for_caller(caller).filter(pk__in=[old_pk, new_pk])
        if kinds is not None:
            candidates = candidates.filter(kind__in=list(kinds))
        rows = {m.pk: m for m in candidates.without_vectors().order_by("pk").select_for_update()}
        if old_pk not in rows or new_pk not in rows:
            missing = old_pk if old_pk not in rows else new_pk
            raise NotFound(f"no memory with id {missing} in this tenant; use search to find ids.", memory_id=missing)
        old, new = rows[old_pk], rows[new_pk]
        if old.validity == Validity.RETRACTED:
            # Superseding it would overwrite the retraction (the forgotten row
            # would then lead to its replacement, and the replacement's id back
            # to it): a forget that committed first wins, in every dialect and
            # in the worker's merges alike.
            raise InvalidArgument(
                f"the memory {old_pk} was forgotten (retracted); only a memory that was not forgotten can be "
                "superseded."
            )
        if new.validity != Validity.ACTIVE:
            raise InvalidArgument(
                f"the replacing memory {new_pk} is {new.validity}; only an active memory can replace another."
            )
        if new.expires_at is not None and new.expires_at <= timezone.now():
            # Past its TTL no read finds it: the memory it replaced would vanish with it.
            raise InvalidArgument(
                f"the replacing memory {new_pk} expired at {new.expires_at.isoformat()}; only an active memory "
                "can replace another."
            )
        if old.validity == Validity.SUPERSEDED and old.superseded_by_id == new.pk:
            return old  # already done: idempotent
        _supersede(caller=caller, old=[old], new_id=new.pk, reason=reason)
        turns_unembed(following)
    return old


def memory_restore(*, caller: Caller, memory_id: object) -> Memory:
    """Undo a retraction or supersession (admin review). A fact comes back only
    if no other active fact holds its subject+predicate."""
    require_write(caller)
    with transaction.atomic():
        memory = memory_lock(caller=caller, memory_id=memory_id, kinds=Kind.values)
        if memory.validity == Validity.ACTIVE:
            return memory
        if memory.kind == Kind.FACT and memory.subject:
            _lock_fact_key(caller.tenant_id, memory.namespace, memory.subject, memory.predicate)
            holder = (
                Memory.objects.for_caller(caller)
                .filter(
                    kind=Kind.FACT,
                    validity=Validity.ACTIVE,
                    namespace=memory.namespace,
                    subject=memory.subject,
                    predicate=memory.predicate,
                )
                .values_list("pk", flat=True)
                .first()
            )
            if holder is not None:
                raise InvalidArgument(
                    f"fact {holder} is active for the same subject and predicate; supersede or retract it first."
                )
        previous = memory.validity
        memory.validity = Validity.ACTIVE
        memory.superseded_by = None
        fields = ["validity", "superseded_by", "updated_at"]
        if memory.kind == Kind.FACT:
            memory.fact_state_changes_at = timezone.now()  # decay went on while it was inactive
            fields.append("fact_state_changes_at")
        memory.save(update_fields=fields)
        event_append(
            caller=caller,
            tenant_id=caller.tenant_id,
            memory=memory,
            event_type=EventType.RESTORED,
            payload={"previous_validity": previous},
        )
    return memory
