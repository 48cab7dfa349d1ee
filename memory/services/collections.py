"""Writes for roampal v0.3.5's collections: working memories, memory_bank
facts, books (ingested documents), the hooked conversation's exchanges, the
lifecycle sweep and the transcript retention sweep.

Every collection rides on a core kind (a collection is a property of a memory,
not a kind of its own) and the core's own store,
supersession, forget, feedback and expiry: working/history are episodes with a
24 h / 30 d TTL, patterns rules, memory_bank permanent facts, books document
chunks. The lifecycle rules are ``scoring.collection_next`` and
``outcomes.collection_apply``; this module only runs them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from memory import embedtext, scoring, validation
from memory.errors import InvalidArgument, NotFound
from memory.models import Collection, EmbeddingStatus, Exchange, Kind, Memory, Validity, collection_of
from memory.outcomes import collection_apply
from memory.selectors.collections import collection_get
from memory.selectors.memories import CONTINUED_IN, CONTINUES, exchange_parts
from memory.services.events import EventType, event_append
from memory.services.feedback import collection_event, memory_feedback
from memory.services.locks import memories_tenant_write_lock, memory_rows_lock, tenant_write_lock
from memory.services.memories import (
    episode_store,
    fact_store,
    memories_insert,
    memories_new,
    memory_forget,
    memory_pending_row,
    require_write,
)
from memory.services.quotas import quota_ingest_check
from memory.services.sweeps import SweepResult
from memory.services.system import system_caller
from memory.services.vectors import turns_unembed
from policy.caller import Caller

BUTLER = "roampal"
MEMORY_BANK_SUBJECT = "memory_bank"
BOOK_MAX_BYTES = 10 * 1024 * 1024  # 10 MB per ingested document (upstream v0.3.5)
BOOK_CHUNK_CHARS = 1500
BOOK_CHUNK_OVERLAP = 200
BOOK_CHUNK_MIN, BOOK_CHUNK_MAX = 200, 8000  # a chunk is one memory's content
TRANSCRIPT_RETENTION = timedelta(days=7)  # roampal v0.3.5: transcripts are kept 7 days
# An exchange longer than one memory holds is stored in parts; each part starts
# this many characters back into the one before, so a phrase cut at a boundary
# is whole in one of them (as a book's chunks overlap).
EXCHANGE_PART_OVERLAP = 200
# Metadata of an exchange stored in parts: every part has its number and their
# count; the first (the memory the Exchange row names and scoring applies to)
# lists the ids of the others, each of which names the first.
EXCHANGE_PART, EXCHANGE_PARTS = "exchange_part", "exchange_parts"
NO_ACTIVE_MEMORY = "no active memory with that id; use search_memory to find it."


def _working_session(conversation_id: str | None, metadata: dict[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    """A conversation id as a working memory carries it: its session when it is
    a label, else in the metadata."""
    session = conversation_id if conversation_id and validation.is_label(conversation_id) else None
    meta = dict(metadata or {})
    if conversation_id and session is None:
        meta["conversation_id"] = conversation_id[:200]
    return session, meta


def working_store(
    *,
    caller: Caller,
    content: str,
    conversation_id: str | None = None,
    outcome_score: float = scoring.UNSCORED_OUTCOME_SCORE,
    tags: Iterable[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Memory:
    """A new working memory (24 h): an exchange, a key takeaway, a summary."""
    session, meta = _working_session(conversation_id, metadata)
    return episode_store(
        caller=caller,
        content=content,
        butler=BUTLER,
        session_id=session,
        tags=tags,
        metadata=meta,
        ttl=scoring.WORKING_TTL,
        collection=Collection.WORKING,
        outcome_score=outcome_score,
    )


# roampal v0.3.5: a key takeaway starts at 0.7, as after one good scoring from history.
TAKEAWAY_OUTCOME_SCORE = 0.7
TAKEAWAY_MAX_CHARS = 2000


def takeaway_store(*, caller: Caller, takeaway: str) -> Memory:
    """roampal's record_response: a key takeaway as a working memory. The
    takeaway itself is checked as text (stored after a prefix, a blank one
    would pass the check of the whole)."""
    takeaway = validation.text(takeaway, field="key_takeaway", max_chars=TAKEAWAY_MAX_CHARS)
    return working_store(caller=caller, content=f"Key takeaway: {takeaway}", outcome_score=TAKEAWAY_OUTCOME_SCORE)


def memory_bank_store(
    *,
    caller: Caller,
    content: str,
    tags: Iterable[str] | None = None,
    importance: float = 0.7,
    confidence: float = 0.7,
    always_inject: bool = False,
) -> Memory:
    """A permanent fact in memory_bank. Each entry is its own supersession key
    (subject ``memory_bank``, predicate ``entry:<hex>``), so an update supersedes
    exactly the entry it names. Importance is roampal's 0-1 scale, stored on the
    core's 0-10 scale."""
    importance = validation.number(importance, field="importance", low=0, high=1)
    result = fact_store(
        caller=caller,
        subject=MEMORY_BANK_SUBJECT,
        predicate=f"entry:{uuid.uuid4().hex}",
        content=content,
        importance=importance * 10,
        confidence=confidence,
        permanence="permanent",
        tags=tags,
        source=BUTLER,
        metadata={"always_inject": bool(always_inject)},
        collection=Collection.MEMORY_BANK,
    )
    return result.memory


def memory_bank_update(
    *,
    caller: Caller,
    memory_id: uuid.UUID,
    content: str,
    tags: Iterable[str] | None = None,
    importance: float | None = None,
    confidence: float | None = None,
) -> tuple[Memory, Memory]:
    """Replace a memory_bank fact: the new text supersedes the old one through
    the fact's own subject+predicate (the core's supersession, audited), so a
    fact another dialect stored is corrected the same way. ``memory_id`` is any
    version of the memory (the id a client holds keeps working after any number
    of updates): its current version is the one replaced. Returns (the version
    replaced, the new one).

    fact_store checks, under the fact key's lock (which serialises the writers
    of the memory's version chain), that the version it replaces is still the
    key's active holder: the embedding is computed before, and another update
    or a delete may commit meanwhile. When another update got there first the
    chain has a newer current version, read again here after that writer's
    commit, and this update applies to it in turn (the last one wins, as in
    langmem's and the memory dialect's keyed updates); when a delete did, the
    chain ends in a forgotten version: not found, nothing stored. Each attempt
    names a version no attempt named before, so the loop ends."""
    require_write(caller)
    # Roampal's 0-1 scale, the core's 0-10 one; checked once, whatever the attempts.
    scaled = None if importance is None else validation.number(importance, field="importance", low=0, high=1) * 10
    tried: set[uuid.UUID] = set()
    while True:
        try:
            old = collection_get(caller, str(memory_id))
        except NotFound as gone:
            raise NotFound(NO_ACTIVE_MEMORY) from gone
        if old.pk in tried:
            raise NotFound(NO_ACTIVE_MEMORY)
        tried.add(old.pk)
        if collection_of(old) != Collection.MEMORY_BANK:
            raise InvalidArgument(
                f"update_memory changes memory_bank entries; {collection_of(old)} memories are "
                "shaped by scoring instead (score it 'failed' if it is wrong)."
            )
        try:
            new = fact_store(
                caller=caller,
                replaces=old.pk,
                # The key as stored: a part it has not is None (a memento memory has
                # none, a LangGraph store key no predicate), not a blank text.
                subject=old.subject or None,
                predicate=old.predicate or None,
                namespace=old.namespace,
                content=content,
                importance=old.importance if scaled is None else scaled,
                # Unless given, the confidence of the version replaced as it is under the
                # key's lock: an outcome may have moved it since ``old`` was read.
                confidence=old.confidence if confidence is None else confidence,
                keep_confidence=confidence is None,
                permanence=old.permanence or "permanent",
                scope=old.scope,
                tags=old.tags if tags is None else tags,
                source=old.source,
                metadata=old.metadata,
                collection=old.collection,
                boundary_class=old.boundary_class,
            ).memory
        except NotFound:
            continue  # replaced or forgotten meanwhile: the chain's current version, read again, decides
        old.refresh_from_db(fields=["validity", "superseded_by"])
        return old, new


def collection_score(
    caller: Caller, memory_id: str, looked_up: Memory, signal: str, *, already: set[uuid.UUID]
) -> uuid.UUID | None:
    """Apply an outcome (roampal's scoring) to the current version of the
    memory ``memory_id`` names (``looked_up``: that version when the caller
    looked the id up) and return the version scored. The feedback checks, under
    the memory's lock, that the version is still live: one an update or a
    merge replaced since the look-up is refused, and the id is looked up again
    (its chain and the row in one statement) and its version current now
    scored in turn, as ``memory_bank_update`` applies after another update.
    Each attempt names a version no attempt named before, so the loop ends.
    None, and nothing scored, for a memory forgotten or expired meanwhile, a
    book (reference material, never scored) or one in ``already`` (scored in
    this call under another of its ids)."""
    memory = looked_up
    tried: set[uuid.UUID] = set()
    while memory.id not in tried:
        if collection_of(memory) == Collection.BOOKS or memory.id in already:
            return None
        tried.add(memory.id)
        try:
            memory_feedback(caller=caller, memory_id=memory.id, signal=signal)
            return memory.id
        except NotFound:
            try:
                memory = collection_get(caller, memory_id)
            except (NotFound, InvalidArgument):
                return None  # forgotten or expired since the look-up: skipped like an unknown id
    return None


def collection_forget(*, caller: Caller, memory_id: str) -> Memory:
    """Forget the current version of the memory an id names (roampal's
    delete_memory). The id is resolved again after the tenant's write lock,
    which every write that supersedes takes first, so the version forgotten is
    still the current one: an update committing after the caller looked the
    memory up would otherwise leave its new version active while the delete
    retracted the version it had replaced. ``memory_id`` is the id the client
    sent, so a delete that finds the memory already forgotten (another delete
    committed first) answers as a lookup of a missing memory does, naming it."""
    require_write(caller)
    with transaction.atomic():
        tenant_write_lock(caller.tenant_id)
        target = collection_get(caller, memory_id)
        return memory_forget(caller=caller, kind=target.kind, memory_id=target.pk)


# --- Books ---------------------------------------------------------------------------------


def overlapping_parts(text: str, *, size: int, overlap: int) -> list[str]:
    """``text`` in parts of at most ``size`` characters, cut at a line break (or
    else a space) in the second half of a part; each part after the first starts
    ``overlap`` characters back, at a word. Surrounding whitespace is dropped, and
    so are parts that are only whitespace. A text that fits is one part."""
    parts: list[str] = []
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = text.rfind("\n", start + size // 2, end)
        if cut < 0:
            cut = text.rfind(" ", start + size // 2, end)
        if cut < 0:
            cut = end
        parts.append(text[start:cut])
        back = max(start + 1, cut - overlap)
        word = re.search(r"\s", text[back:cut])
        start = back + word.end() if word else back
    parts.append(text[start:])
    return [part.strip() for part in parts if part.strip()]


def book_chunks(text: str, *, size: int = BOOK_CHUNK_CHARS, overlap: int = BOOK_CHUNK_OVERLAP) -> list[str]:
    """Split a text or Markdown document into chunks of about ``size`` characters
    on paragraph boundaries (a Markdown heading starts a new chunk), with a
    tail of the previous chunk carried over so a sentence cut at a boundary is
    still findable."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n|\n(?=#{1,6} )", text.replace("\r\n", "\n")) if p.strip()]
    chunks: list[str] = []
    current = ""
    for paragraph in paragraphs:
        if len(paragraph) > size:  # a paragraph longer than a chunk: its parts, the last one carried on
            *whole, paragraph = overlapping_parts(paragraph, size=size, overlap=overlap)
            if current:
                chunks.append(current)
                current = ""
            chunks.extend(whole)
        heading = paragraph.startswith("#")
        if current and (heading or len(current) + len(paragraph) + 2 > size):
            chunks.append(current)
            # current[-0:] is all of it: with no overlap nothing is carried over.
            tail = current[-overlap:] if overlap > 0 and not heading else ""
            tail = tail[tail.find(" ") + 1 :] if " " in tail else tail
            current = (tail + "\n\n" + paragraph).strip() if tail else paragraph
        else:
            current = f"{current}\n\n{paragraph}" if current else paragraph
    if current:
        chunks.append(current)
    return chunks


@dataclass
class BookIngestResult:
    title: str
    chunk_ids: list[uuid.UUID] = field(default_factory=list)


def book_ingest(
    *,
    caller: Caller,
    title: str,
    text: str,
    tags: Iterable[str] | None = None,
    source: str = "",
    chunk_size: int = BOOK_CHUNK_CHARS,
    chunk_overlap: int = BOOK_CHUNK_OVERLAP,
) -> BookIngestResult:
    """Store a document as ``books`` chunks in one transaction, keyword-searchable
    at once; the worker embeds them in batches (enqueued on commit). The chunk
    size and overlap are upstream's ingest parameters; the overlap stays under
    half a chunk so a long paragraph is always cut forward."""
    require_write(caller)
    title = validation.text(title, field="title", max_chars=200)
    chunk_size = int(validation.number(chunk_size, field="chunk_size", low=BOOK_CHUNK_MIN, high=BOOK_CHUNK_MAX))
    if (
        isinstance(chunk_overlap, bool)
        or not isinstance(chunk_overlap, int)
        or not (0 <= chunk_overlap < chunk_size // 2)
    ):
        raise InvalidArgument(f"chunk_overlap must be an integer from 0 to {chunk_size // 2 - 1} (under half a chunk).")
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("the document is empty; send UTF-8 text or Markdown.")
    validation.encodable(text, field="the document")
    if not isinstance(source, str):
        raise InvalidArgument("source must be a string.")
    # Stored in the chunks' metadata and the event: checked as text is, not left to the database's refusal.
    source = validation.encodable(source, field="source")
    if len(text.encode("utf-8")) > BOOK_MAX_BYTES:
        raise InvalidArgument(f"the document is over the limit of {BOOK_MAX_BYTES} bytes (10 MB); split it.")
    tag_list = validation.tags(tags)
    chunks = book_chunks(text, size=chunk_size, overlap=chunk_overlap)
    rows = [
        memory_pending_row(
            caller=caller,
            kind=Kind.DOCUMENT,
            content=chunk,
            collection=Collection.BOOKS,
            butler=BUTLER,
            tags=tag_list,
            source="book",
            metadata={"title": title, "chunk": index, "chunks": len(chunks), "source": source[:200]},
        )
        for index, chunk in enumerate(chunks)
    ]
    # Every chunk has its own 'stored' event (the audit trail of a chunk does not
    # depend on its title) and goes through the outbox like every write: its
    # embedding survives a broker outage.
    new = memories_new(
        caller=caller,
        rows=rows,
        payloads=[{"collection": Collection.BOOKS.value, "title": title, "chunk": index} for index in range(len(rows))],
    )
    with transaction.atomic():
        quota_ingest_check(caller=caller, size=len(text.encode("utf-8")))
        event_append(
            caller=caller,
            tenant_id=caller.tenant_id,
            event_type=EventType.BOOK_INGESTED,
            payload={"title": title, "chunks": len(rows), "bytes": len(text.encode("utf-8")), "source": source[:200]},
        )
        memories_insert(caller=caller, new=new)
    return BookIngestResult(title=title, chunk_ids=[row.pk for row in rows])


def book_progress(*, caller: Caller, chunk_ids: Sequence[uuid.UUID]) -> tuple[int, int]:
    """(embedded, total) for an ingestion, for the command's progress line."""
    done = Memory.objects.for_caller(caller).filter(pk__in=list(chunk_ids), embedding_status=EmbeddingStatus.READY)
    return done.count(), len(chunk_ids)


# --- Hooked conversations --------------------------------------------------------------------


def exchange_open(
    *,
    caller: Caller,
    conversation_id: str,
    user_message: str,
    surfaced_ids: Sequence[uuid.UUID],
    scores: Exchange | None = None,
) -> Exchange:
    """The UserPromptSubmit side of a turn: what was asked, what KNOWN CONTEXT
    showed, and which earlier turn the prompt asked the model to score."""
    require_write(caller)
    conversation_id = validation.identifier(conversation_id, field="conversation_id")
    user_message = validation.encodable(user_message, field="user_message")
    return Exchange.objects.create(
        tenant_id=caller.tenant_id,
        principal_id=caller.principal_id,
        conversation_id=conversation_id,
        user_message=user_message,
        surfaced_ids=list(surfaced_ids),
        scores=scores,
    )


def exchange_pending_scoring(*, caller: Caller, conversation_id: str) -> Exchange | None:
    """The conversation's last completed turn, if the model has not scored it yet."""
    conversation_id = validation.identifier(conversation_id, field="conversation_id")
    last = (
        Exchange.objects.for_caller(caller)
        .filter(principal_id=caller.principal_id, conversation_id=conversation_id, completed_at__isnull=False)
        .order_by("-id")
        .first()
    )
    if last is None or last.scored_at is not None or not (last.surfaced_ids or last.memory_id):
        return None
    return last


@dataclass
class ExchangeCompleted:
    exchange: Exchange
    memory: Memory  # the exchange's memory: the one its row names, scored next turn
    scoring_complete: bool  # the turn before was scored (or needed no scoring)
    # Every memory the exchange was stored as, ``memory`` first (one unless the
    # exchange is longer than one memory holds).
    memories: list[Memory] = field(default_factory=list)


def _exchange_continuation(
    *, caller: Caller, parts: Sequence[str], session: str | None, metadata: dict[str, Any]
) -> list[Memory]:
    """The working memories (not saved yet) that hold the parts of an exchange
    after its first: keyword-searchable once stored, embedded by the worker (as
    a book's chunks are), so the model does not run while the tenant's write
    lock is held."""
    now = timezone.now()
    return [
        memory_pending_row(
            caller=caller,
            kind=Kind.EPISODE,
            content=part,
            collection=Collection.WORKING,
            butler=BUTLER,
            session_id=session or "",
            metadata={**metadata, EXCHANGE_PART: number, EXCHANGE_PARTS: len(parts) + 1},
            expires_at=now + scoring.WORKING_TTL,
            outcome_score=scoring.UNSCORED_OUTCOME_SCORE,
        )
        for number, part in enumerate(parts, start=2)
    ]


def exchange_part_ids(memory: Memory) -> list[str]:
    """The ids of the memories that continue an exchange's memory (none unless
    the exchange was longer than one memory holds), in their order: its parts
    as forgetting finds them (``exchange_parts``), so that an id its metadata
    lists gets the exchange's outcome only if it is a part of that exchange."""
    parts = exchange_parts(memory.tenant_id, memory.pk).order_by(f"metadata__{EXCHANGE_PART}", "pk")
    return [str(pk) for pk in parts.values_list("pk", flat=True)]


def exchange_complete(
    *, caller: Caller, conversation_id: str, user_message: str, assistant_response: str, transcript: str = ""
) -> ExchangeCompleted:
    """The Stop side of a turn: the exchange is stored as a working memory (so
    it can be scored next turn and earn its way to history) and its row is
    completed, in one transaction. An exchange longer than a memory holds
    (MEMPROJ_MAX_CONTENT_CHARS, the limit of every memory, which imports and
    every dialect's tools keep too) is stored whole, in parts: the first is the
    exchange's memory, the others continue it, each findable by its own text;
    the exchange's outcome applies to all of them."""
    require_write(caller)
    conversation_id = validation.identifier(conversation_id, field="conversation_id")
    # An exchange is a question and its answer: a blank answer was stored as
    # "User: ...\n\nAssistant:", a memory of nothing the next turn asked to score.
    validation.present(assistant_response, field="assistant_response")
    for name, value in (
        ("user_message", user_message),
        ("assistant_response", assistant_response),
        ("transcript", transcript),
    ):
        validation.encodable(value, field=name)
    content = f"User: {user_message}\n\nAssistant: {assistant_response}"
    first, *rest = overlapping_parts(content, size=settings.MEMPROJ["MAX_CONTENT_CHARS"], overlap=EXCHANGE_PART_OVERLAP)
    session, meta = _working_session(conversation_id, None)
    continuation = _exchange_continuation(caller=caller, parts=rest, session=session, metadata=meta)
    head_meta = (
        {EXCHANGE_PART: 1, EXCHANGE_PARTS: len(rest) + 1, CONTINUED_IN: [str(m.pk) for m in continuation]}
        if continuation
        else None
    )
    with transaction.atomic():
        memory = working_store(caller=caller, content=first, conversation_id=conversation_id, metadata=head_meta)
        if continuation:
            for part in continuation:
                part.metadata[CONTINUES] = str(memory.pk)
            payloads = [
                {"collection": Collection.WORKING.value, CONTINUES: str(memory.pk), EXCHANGE_PART: number}
                for number in range(2, len(continuation) + 2)
            ]
            memories_insert(caller=caller, new=memories_new(caller=caller, rows=continuation, payloads=payloads))
        exchange = (
            Exchange.objects.for_caller(caller)
            .filter(principal_id=caller.principal_id, conversation_id=conversation_id, completed_at__isnull=True)
            .select_for_update()
            .order_by("-id")
            .first()
        )
        if exchange is None:
            exchange = Exchange(
                tenant_id=caller.tenant_id, principal_id=caller.principal_id, conversation_id=conversation_id
            )
        exchange.user_message = exchange.user_message or user_message
        exchange.assistant_response = assistant_response
        exchange.transcript = transcript
        exchange.memory_id = memory.pk
        exchange.completed_at = timezone.now()
        exchange.save()
        scored = (
            exchange.scores_id is None
            or Exchange.objects.filter(pk=exchange.scores_id, scored_at__isnull=False).exists()
        )
    return ExchangeCompleted(
        exchange=exchange, memory=memory, scoring_complete=scored, memories=[memory, *continuation]
    )


def exchange_mark_scored(*, caller: Caller) -> Exchange | None:
    """score_response was called: the turn the caller's latest prompt asked to
    have scored is scored now. Returns it (the exchange outcome applies to its
    stored working memory), or None when nothing was waiting. A read-only
    caller is refused before anything is marked."""
    require_write(caller)
    with transaction.atomic():
        latest = (
            Exchange.objects.for_caller(caller)
            .filter(principal_id=caller.principal_id, scores__isnull=False)
            .order_by("-id")
            .first()
        )
        if latest is None or latest.scores_id is None:
            return None
        if not Exchange.objects.filter(pk=latest.scores_id, scored_at__isnull=True).update(scored_at=timezone.now()):
            return None
        return Exchange.objects.get(pk=latest.scores_id)


def transcripts_retention(*, now: datetime | None = None, batch_size: int = 1000) -> SweepResult:
    """roampal v0.3.5 keeps exchange transcripts 7 days; what they taught
    lives on in the memories."""
    cutoff = (now or timezone.now()) - TRANSCRIPT_RETENTION
    due = Exchange.objects.filter(created_at__lt=cutoff)
    ids = list(due.order_by("id").values_list("pk", flat=True)[:batch_size])
    deleted, _ = Exchange.objects.filter(pk__in=ids).delete()
    return SweepResult(processed=deleted, more=due.exists())


# --- Lifecycle -----------------------------------------------------------------------------------


def _due_for_lifecycle(now: datetime) -> models.Q:
    """Exactly the rows scoring.collection_next would move (so a second run finds nothing)."""
    Q = models.Q
    young_cutoff = now - timedelta(days=scoring.YOUNG_DAYS)
    return (
        Q(outcome_score__lt=scoring.DELETE_YOUNG_BELOW)
        | Q(outcome_score__lt=scoring.DELETE_BELOW, created_at__lt=young_cutoff)
        | Q(
            collection=Collection.WORKING,
            outcome_score__gte=scoring.HISTORY_MIN_SCORE,
            applied_count__gte=scoring.HISTORY_MIN_USES,
        )
        | Q(
            collection=Collection.HISTORY,
            outcome_score__gte=scoring.PATTERNS_MIN_SCORE,
            applied_count__gte=scoring.PATTERNS_MIN_USES,
            success_count__gte=scoring.PATTERNS_MIN_SUCCESS,
        )
        | Q(collection=Collection.PATTERNS, outcome_score__lt=scoring.DEMOTE_BELOW)
    )


def collections_lifecycle(*, now: datetime | None = None, batch_size: int | None = None) -> SweepResult:
    """The beat side of the lifecycle. Scoring moves a memory at once (feedback
    service); this sweep catches what time changes (the deletion threshold
    after 7 days) and anything scored while the rules differed."""
    now = now or timezone.now()
    batch_size = batch_size or settings.MEMPROJ_PIPELINE["SWEEP_BATCH"]
    # Only what a read can find (active, TTL not passed): a promotion sets a new
    # TTL or none, so a memory that already left retrieval by its TTL would come
    # back with it. The expiry sweep deletes such rows later.
    due = (
        Memory.objects.retrievable(now)
        .filter(collection__in=scoring.SCORED_COLLECTIONS)
        .filter(_due_for_lifecycle(now))
    )
    moved: list[uuid.UUID] = []
    with transaction.atomic():
        ids = list(due.order_by("created_at", "id").values_list("pk", flat=True)[:batch_size])
        memories_tenant_write_lock(ids)
        # The turns after them, whose vectors hold their text as a previous
        # turn's (those after the ones deleted lose them below): under the
        # tenant locks no turn is stored, forgotten or replaced until this
        # commits, so they are read first and locked with the memories, in one
        # primary-key order, as memory_forget locks them.
        memory_rows_lock([*ids, *(turn for turn, _ in embedtext.following_turns(memory_ids=ids, now=now))])
        # Read again under the locks: a forget may have committed meanwhile.
        changed: list[tuple[Memory, list[str], str]] = []
        for memory in due.filter(pk__in=ids).without_vectors().select_for_update().order_by("pk"):
            fields, before = collection_apply(memory, now, unembed_next_turn=False)
            if before is not None:
                changed.append((memory, fields, before))
        # Deletion is a forget (memory_forget): the turns after the deleted
        # ones are embedded again without them. Read before the rows are saved
        # retracted; one statement each, for the whole batch.
        deleted = [memory.pk for memory, _, _ in changed if memory.validity == Validity.RETRACTED]
        turns_unembed(embedtext.following_turns(memory_ids=deleted, now=now))
        for memory, fields, before in changed:
            memory.save(update_fields=[*fields, "updated_at"])
            collection_event(
                caller=system_caller(memory.tenant_id), memory=memory, before=before, reason="lifecycle sweep"
            )
            moved.append(memory.pk)
    return SweepResult(processed=len(moved), more=due.exists(), ids=moved)
