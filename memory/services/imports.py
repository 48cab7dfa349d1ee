"""Imports from other memory systems (``manage.py import_memories``, the admin).

A reader (memory.importers.<system>) turns an upstream store into neutral
records; this module writes them as memproj memories, keeping what the user's
history is made of: the upstream id as an alias every dialect accepts
(memory.selectors.aliases), the upstream timestamps (``created_at`` and
``occurred_at``, when it happened), outcome counters and scores, the outcome
history (as the audit events the dialects read it from), supersession chains,
boundary classes, namespaces and scopes, and the knowledge graph.

One import is one bounded, resumable job. Records are written in batches, each
batch one transaction with its aliases, so an interrupted run leaves whole
batches behind and a second run skips every record whose alias is already
there: re-running is how an import resumes, and re-running a finished import
creates nothing. A dry run reads the same records and reports what would be
created and what would be skipped, and why, without writing anything.

Vectors: each batch is embedded before it is stored, one model call per chunk
(a vector computed upstream with memproj's own model is kept as it is); what
cannot be embedded now is stored pending and the worker embeds it through the
outbox."""

from __future__ import annotations

import logging
import math
import struct
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DataError, IntegrityError, InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone

from memory import embedtext, scoring, validation
from memory.embeddings import get_embedder
from memory.errors import EmbeddingUnavailable, InvalidArgument, QuotaExceeded, StorageUnavailable
from memory.importers import open_source, systems
from memory.importers.base import (
    ID_MAX_CHARS,
    OUTCOME_SIGNALS,
    SYSTEM_MAX_CHARS,
    ImportedEntity,
    ImportedMemory,
    ImportedRelation,
    ImportSourceError,
    Skipped,
)
from memory.importers.cogx import CogxWriter
from memory.models import (
    EMBEDDING_DIM,
    Collection,
    EmbeddingStatus,
    Entity,
    EntityType,
    Kind,
    Maturity,
    Memory,
    MemoryAlias,
    MemoryEvent,
    Relation,
    Validity,
)
from memory.selectors.aliases import alias_targets
from memory.services.events import EventType, NewEvent, caller_event, events_append
from memory.services.graph import EntityInput, canonical_key_for
from memory.services.locks import memory_rows_lock, tenant_write_lock
from memory.services.memories import memories_insert, memories_new, require_write
from memory.services.quotas import tenant_memory_count
from memory.services.vectors import turns_unembed
from policy.caller import Caller
from policy.document import BOUNDARY_CLASSES, DEFAULT_BOUNDARY_CLASS

BATCH_DEFAULT = 200
BATCH_MAX = 1000
EMBED_CHUNK = 64
EXAMPLES_PER_REASON = 5

Progress = Callable[[int, int | None], None]
# harmful_count, applied_count and reference_count are PostgreSQL integers.
INT_COLUMN_MAX = 2**31 - 1
# The vector indexes hold half-precision copies (halfvec), whose largest value is this.
HALFVEC_MAX = 65504.0
# Imported times are kept between this and the import's own time: a time past
# now (a "last confirmed" in year 9999) would make decay, recency and every
# schedule computed from it run past the calendar, and nothing was stored,
# confirmed or used in the future.
EARLIEST_TIME = datetime(1900, 1, 1, tzinfo=UTC)
CLAMPED_TIMES = (
    "created_at",
    "updated_at",
    "occurred_at",
    "last_confirmed_at",
    "last_applied_at",
    "last_referenced_at",
    "accessed_at",
)
ALIAS_MAX_CHARS = ID_MAX_CHARS
# Entities (and relations) stored per transaction of an import's graph step.
GRAPH_CHUNK = 500

logger = logging.getLogger(__name__)


@dataclass
class ImportReport:
    system: str
    location: str
    dry_run: bool
    read: int = 0
    created: Counter[str] = field(default_factory=Counter)  # by kind
    skipped: Counter[str] = field(default_factory=Counter)  # by reason
    examples: dict[str, list[str]] = field(default_factory=dict)  # reason -> a few source ids
    superseded_links: int = 0
    entities: int = 0
    relations: int = 0
    embedded: int = 0
    pending_embeddings: int = 0
    stopped_at_limit: bool = False
    # Memories created (or that would be) with a change, by reason: a vector
    # not kept, a time moved into range.
    noted: Counter[str] = field(default_factory=Counter)
    # A dry run's forecast of the tenant's quota: (memories a real run would
    # store before the quota stops it, memories the tenant holds, its quota).
    quota_stop: tuple[int, int, int] | None = None

    def skip(self, reason: str, source_id: str) -> None:
        self.skipped[reason] += 1
        self._example(reason, source_id)

    def note(self, reason: str, source_id: str) -> None:
        self.noted[reason] += 1
        self._example(reason, source_id)

    def _example(self, reason: str, source_id: str) -> None:
        shown = self.examples.setdefault(reason, [])
        if len(shown) < EXAMPLES_PER_REASON:
            shown.append(source_id)

    @property
    def created_total(self) -> int:
        return sum(self.created.values())

    def lines(self) -> list[str]:
        """The report as a person reads it (the command prints these)."""
        verb = "would create" if self.dry_run else "created"
        kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.created.items())) or "nothing"
        out = [f"{self.system} import of {self.location}: read {self.read} records; {verb} {kinds}"]
        if self.entities or self.relations:
            out.append(f"  {verb} {self.entities} entities and {self.relations} relations")
        if self.superseded_links:
            out.append(f"  {'would link' if self.dry_run else 'linked'} {self.superseded_links} supersessions")
        for reason, count in self.skipped.most_common():
            out.append(f"  skipped {count}: {reason} (e.g. {', '.join(self.examples.get(reason, []))})")
        for reason, count in self.noted.most_common():
            out.append(f"  changed {count}: {reason} (e.g. {', '.join(self.examples.get(reason, []))})")
        if self.quota_stop is not None:
            would_store, used, limit = self.quota_stop
            out.append(
                f"  the tenant's quota would stop it: the tenant holds {used} memories and its policy allows "
                f"{limit} (quotas.max_memories), so the import would store {would_store} and then stop; "
                "ask a tenant admin to raise quotas.max_memories first"
            )
        if not self.dry_run:
            out.append(f"  embedded {self.embedded} now; {self.pending_embeddings} left to the worker")
        if self.stopped_at_limit:
            out.append("  stopped at the limit: run the same command again to go on")
        return out


def clamp_time(value: datetime | None, *, now: datetime) -> datetime | None:
    """An imported time kept between ``EARLIEST_TIME`` and ``now``."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return min(max(value, EARLIEST_TIME), now)


def _clamp_times(record: ImportedMemory, now: datetime) -> list[str]:
    """Move the record's times into range (``clamp_time``); what moved, as report notes."""
    notes = []
    for name in CLAMPED_TIMES:
        value = getattr(record, name)
        clamped = clamp_time(value, now=now)
        if clamped != value:
            setattr(record, name, clamped)
            where = "before 1900" if clamped == EARLIEST_TIME else "later than the import"
            notes.append(f"{name} {where}, moved to {'1900' if clamped == EARLIEST_TIME else 'the import time'}")
    record.outcomes = [(signal, clamp_time(when, now=now)) for signal, when in record.outcomes]
    return notes


def _count(value: object, name: str) -> int:
    """A counter for an integer column: a whole number, negative read as 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(f"{name} must be a number.")
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidArgument(f"{name} must be a finite number.")
    if value > INT_COLUMN_MAX:
        raise InvalidArgument(f"{name} is larger than {INT_COLUMN_MAX}, the most a memory holds.")
    return max(0, int(value))


def _finite(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgument(f"{name} must be a finite number.")
    return float(value)


def _short_text(value: object, name: str, max_chars: int) -> str:
    """A short text column, cut to its length (as the readers always have)."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be text.")
    return validation.encodable(value[:max_chars], field=name)


def _is_text(value: object) -> bool:
    """A string PostgreSQL can hold (and look up): no NUL, no lone surrogate."""
    if not isinstance(value, str):
        return False
    try:
        validation.encodable(value, field="id")
    except InvalidArgument:
        return False
    return True


def _choice(value: object, name: str, allowed: Sequence[str]) -> str:
    """One of a column's values, or empty."""
    if value != "" and value not in allowed:
        raise InvalidArgument(f"{name} must be empty or one of {', '.join(v for v in allowed if v)}.")
    return str(value)


def storable_id(value: object) -> bool:
    """An upstream id memproj can keep as an alias and look up."""
    return isinstance(value, str) and 0 < len(value) <= ALIAS_MAX_CHARS and _is_text(value)


def _validated(record: ImportedMemory, namespace: Sequence[str], now: datetime) -> tuple[dict[str, Any], list[str]]:
    """The memory's columns, checked as the store services check a write
    (InvalidArgument says which field is wrong), and the changes made to fit
    (times moved into range), as report notes."""
    kind = validation.kind(record.kind)
    content = validation.text(record.content, field="content")
    boundary = record.boundary_class if _is_text(record.boundary_class) else ""
    boundary = boundary if boundary in BOUNDARY_CLASSES else DEFAULT_BOUNDARY_CLASS
    full_namespace = validation.namespace([*namespace, *record.namespace])
    limits = validation.limits()
    if isinstance(record.tags, str) or not isinstance(record.tags, list | tuple):
        raise InvalidArgument("tags must be a list of strings.")
    tags = validation.tags(
        [t[: limits["MAX_TAG_CHARS"]] if isinstance(t, str) else t for t in record.tags[: limits["MAX_TAGS"]]]
    )
    subject = _short_text(record.subject, "subject", 200)
    predicate = _short_text(record.predicate, "predicate", 200) if subject else ""
    if kind == Kind.FACT and predicate and not subject:
        raise InvalidArgument("a fact with a predicate needs a subject too.")
    if record.superseded_by is not None and not storable_id(record.superseded_by):
        raise InvalidArgument("superseded_by is not an id this import can look up.")
    permanence = record.permanence if isinstance(record.permanence, str) else ""
    permanence = permanence if permanence in scoring.DECAY_RATES else ""
    if kind in (Kind.FACT, Kind.RULE) and not permanence:
        permanence = "permanent" if kind == Kind.FACT and record.collection == "memory_bank" else "standard"
    decay_rate = scoring.DECAY_RATES[permanence] if permanence else 0.0
    confidence = min(1.0, max(0.0, _finite(record.confidence, "confidence")))
    notes = _clamp_times(record, now)
    confirmed_at = record.last_confirmed_at or (record.created_at if kind != Kind.EPISODE else None)
    values = {
        "kind": kind,
        "content": content,
        "content_hash": validation.content_hash(content),
        "namespace": full_namespace,
        "scope": validation.label(record.scope or "global", field="scope"),
        "butler": validation.label(record.butler, field="butler") if record.butler else "",
        "session_id": _short_text(record.session_id, "session_id", 200),
        "subject": subject if kind == Kind.FACT else "",
        "predicate": predicate if kind == Kind.FACT else "",
        "collection": _choice(record.collection, "collection", Collection.values),
        "boundary_class": boundary,
        "tags": tags,
        "metadata": validation.metadata(record.metadata),
        "source": _short_text(record.source, "source", 32),
        "importance": min(10.0, max(0.0, _finite(record.importance, "importance"))),
        "confidence": confidence,
        "permanence": permanence,
        "decay_rate": decay_rate,
        "validity": validation.validity(record.validity),
        "expires_at": record.expires_at,
        "maturity": (_choice(record.maturity, "maturity", Maturity.values) if kind == Kind.RULE else ""),
        "success_count": max(0.0, _finite(record.success_count, "success_count")),
        "harmful_count": _count(record.harmful_count, "harmful_count"),
        "applied_count": _count(record.applied_count, "applied_count"),
        "effectiveness_score": _finite(record.effectiveness_score, "effectiveness_score"),
        "outcome_score": min(1.0, max(0.0, _finite(record.outcome_score, "outcome_score"))),
        "utility": _finite(record.utility, "utility"),
        "last_applied_at": record.last_applied_at,
        "reference_count": _count(record.reference_count, "reference_count"),
        "last_referenced_at": record.last_referenced_at,
        "accessed_at": record.accessed_at,
        "last_confirmed_at": confirmed_at,
    }
    if kind == Kind.FACT:
        # The state and schedule fact_store gives a new fact, from the time it
        # was last confirmed, so the decay sweep visits it when its state is due.
        values["fact_state"], values["fact_state_changes_at"] = scoring.fact_state_schedule(
            confidence=confidence, decay_rate=decay_rate, confirmed_at=confirmed_at or now, now=now
        )
    return values, notes


def _checked_vector(record: ImportedMemory) -> tuple[list[float] | None, str]:
    """Upstream's vector, if it comes from the model memproj embeds with and
    memproj can store it: of memproj's dimension, every value a finite number
    within half precision (the vector indexes keep it so), not all zeros;
    scaled to unit length as memproj's own vectors are (the search compares
    directions only). Else None, with why not (empty when upstream used
    another model: its vectors are recomputed, as documented)."""
    if not record.embedding or not record.embedding_model:
        return None, ""
    ours = get_embedder().model_name.rsplit("/", 1)[-1].lower()
    theirs = record.embedding_model.rsplit("/", 1)[-1].lower()
    if theirs != ours:
        return None, ""
    if not isinstance(record.embedding, list | tuple) or len(record.embedding) != EMBEDDING_DIM:
        return None, f"a vector that is not of {EMBEDDING_DIM} dimensions"
    values = []
    for x in record.embedding:
        if isinstance(x, bool) or not isinstance(x, int | float):
            return None, "a vector with values that are not numbers"
        if isinstance(x, float) and not math.isfinite(x):
            return None, "a vector with values that are not finite (NaN or infinity)"
        if abs(x) > HALFVEC_MAX:
            return None, f"a vector with values beyond {HALFVEC_MAX:g}, the most a vector index holds"
        values.append(float(x))
    norm = math.hypot(*values)
    if norm == 0:
        return None, "a vector of zeros"
    return [x / norm for x in values], ""


@dataclass
class _Planned:
    record: ImportedMemory
    values: dict[str, Any]
    pk: uuid.UUID
    vector: list[float] | None = None  # upstream's, checked (``_checked_vector``)


class _Importer:
    def __init__(
        self,
        *,
        caller: Caller,
        system: str,
        namespace: Sequence[str],
        dry_run: bool,
        batch_size: int,
        limit: int | None,
        embed: bool,
        report: ImportReport,
    ) -> None:
        self.caller, self.system, self.namespace = caller, system, list(namespace)
        self.dry_run, self.batch_size, self.limit, self.embed = dry_run, batch_size, limit, embed
        self.report = report
        self.seen: set[str] = set()
        self.created_ids: set[str] = set()  # source ids of memories this run created (or would)
        self.pending_links: dict[str, str] = {}  # source id -> its successor's source id
        self.stored = 0  # memories this run has committed
        # A dry run forecasts the quota a real run meets batch by batch.
        self.quota: tuple[int, int] | None = None  # (memories held, the policy's max_memories)
        self.would_store = 0
        if dry_run:
            self.quota = (tenant_memory_count(tenant_id=caller.tenant_id), caller.policy.quotas.max_memories)

    # --- memories ----------------------------------------------------------------------

    def batch(self, records: list[ImportedMemory]) -> None:
        known = alias_targets(
            tenant_id=self.caller.tenant_id, aliases=[r.source_id for r in records], system=self.system
        )
        # An id that is the UUID of a memory this tenant holds (its own export
        # imported back, a store whose ids are UUIDs) names that memory already:
        # kept as an alias of a new memory it would take that id over, since an
        # id is looked up among the aliases first (memory_pk).
        here = self._tenant_memories(
            {u for r in records if r.source_id not in known and (u := _uuid_or_none(r.source_id)) is not None}
        )
        planned: list[_Planned] = []
        now = timezone.now()
        for record in records:
            if record.source_id in known:
                self.report.skip("already imported (its id is an alias of a memory here)", record.source_id)
                if record.superseded_by and storable_id(record.superseded_by):
                    self.pending_links[record.source_id] = record.superseded_by
                continue
            if _uuid_or_none(record.source_id) in here:
                self.report.skip("already here (its id names a memory of this tenant)", record.source_id)
                continue
            try:
                values, notes = _validated(record, self.namespace, now)
            except InvalidArgument as exc:
                self.report.skip(f"not storable: {exc}", record.source_id)
                continue
            if self.limit is not None and self.report.created_total >= self.limit:
                # Stop reading, but write what this batch planned (and counted) already.
                self.report.stopped_at_limit = True
                break
            vector, problem = _checked_vector(record)
            if problem:
                notes.append(f"{problem} was not kept: memproj embeds the text instead")
            notes.extend(record.notes)
            for note in notes:
                self.report.note(note, record.source_id)
            planned.append(_Planned(record, values, uuid.uuid4(), vector))
            self.report.created[values["kind"]] += 1
            self.created_ids.add(record.source_id)
            if record.superseded_by:
                self.pending_links[record.source_id] = record.superseded_by
        if self.dry_run:
            self._forecast_quota(len(planned))
        elif planned:
            self._write(planned)

    def _tenant_memories(self, ids: set[uuid.UUID]) -> set[uuid.UUID]:
        """The ones of ``ids`` that are memories of the caller's tenant."""
        if not ids:
            return set()
        return set(
            Memory.objects.filter(tenant_id=self.caller.tenant_id, pk__in=list(ids)).values_list("pk", flat=True)
        )

    def _forecast_quota(self, adding: int) -> None:
        """The dry run's side of the quota check every batch of a real run meets."""
        if self.quota is None or self.report.quota_stop is not None or not adding:
            return
        used, limit = self.quota
        if used + self.would_store + adding > limit:
            self.report.quota_stop = (self.would_store, used, limit)
        else:
            self.would_store += adding

    def _quota_stop(self, used: int, limit: int, adding: int) -> QuotaExceeded:
        """The quota refused a batch: what this run stored before it, and how to go on."""
        done = (
            f"This import stored {self.stored} memories before it stopped, and they stay"
            if self.stored
            else "Nothing of this import was stored"
        )
        return QuotaExceeded(
            f"this tenant holds {used} memories and its policy allows {limit} (quotas.max_memories); storing "
            f"the next {adding} of this import would pass it. {done}: ask a tenant admin to raise "
            "quotas.max_memories (or to purge memories no longer needed), then run the same import again, "
            "which goes on where it stopped.",
            {"quota": "max_memories", "limit": limit, "used": used, "requested": adding, "stored": self.stored},
        )

    def _write(self, planned: list[_Planned]) -> None:
        """Store a batch. Should the database still refuse a record the checks
        let through, the batch is stored record by record and only the refused
        one is skipped (its detail goes to the server log, not the report)."""
        try:
            self._write_batch(planned)
        except (DataError, IntegrityError, OverflowError, struct.error):
            if len(planned) > 1:
                for item in planned:
                    self._write([item])
                return
            (item,) = planned
            logger.warning("the database refused %s record %r", self.system, item.record.source_id, exc_info=True)
            self.pending_links.pop(item.record.source_id, None)
            self._uncount(item, "not storable: the database refused it (the server log has the detail)")

    def _uncount(self, item: _Planned, reason: str) -> None:
        """A planned memory that was not stored after all, skipped with ``reason``."""
        self.report.created[item.values["kind"]] -= 1
        if not self.report.created[item.values["kind"]]:
            del self.report.created[item.values["kind"]]
        self.created_ids.discard(item.record.source_id)
        self.report.skip(reason, item.record.source_id)

    def _write_batch(self, planned: list[_Planned]) -> None:
        wanted: dict[uuid.UUID, _Planned] = {}
        for p in planned:
            candidate = _uuid_or_none(p.record.own_id or p.record.source_id) if p.record.keep_id else None
            if candidate is not None:
                wanted.setdefault(candidate, p)
        limit = self.caller.policy.quotas.max_memories
        used = tenant_memory_count(tenant_id=self.caller.tenant_id)
        if used + len(planned) > limit:
            # Before embedding a batch the quota refuses (checked again under the lock).
            raise self._quota_stop(used, limit, len(planned))
        taken = set(Memory.objects.filter(pk__in=list(wanted)).values_list("pk", flat=True))
        for pk, item in wanted.items():
            if pk not in taken:
                item.pk = pk
        # An alias never names another memory of the tenant by its own UUID
        # (one already here, or one of this batch): that memory would answer
        # to it no more.
        batch_pks = {p.pk for p in planned}
        alias_uuids = {
            u
            for p in planned
            for alias in (p.record.source_id, *p.record.extra_aliases, *(a for _, a in p.record.other_aliases))
            if isinstance(alias, str) and (u := _uuid_or_none(alias)) is not None
        }
        named = self._tenant_memories(alias_uuids - batch_pks) | batch_pks

        def shadows(alias: str, pk: uuid.UUID) -> bool:
            target = _uuid_or_none(alias)
            return target is not None and target != pk and target in named

        vectors = self._vectors(planned)
        late: list[_Planned] = []
        model = get_embedder().model_name
        rows = []
        for item, vector in zip(planned, vectors, strict=True):
            row = Memory(
                id=item.pk,
                tenant_id=self.caller.tenant_id,
                principal_id=None,
                embedding=vector,
                embedding_model=embedtext.embedding_identity(
                    model, in_session=embedtext.in_session(item.values["kind"], item.values.get("session_id", ""))
                )
                if vector is not None
                else "",
                embedding_status=EmbeddingStatus.READY if vector is not None else EmbeddingStatus.PENDING,
                **item.values,
            )
            # None lets the field default to the row's created_at.
            row.occurred_at = item.record.occurred_at or item.record.created_at  # type: ignore[assignment]
            rows.append(row)
        try:
            with transaction.atomic():
                # The tenant's write lock before the key holders are read: a
                # fact_store of the same key (which takes it first, too) then
                # waits for this batch instead of inserting the key's active
                # fact between this read and the insert (memory/services/locks.py).
                tenant_write_lock(self.caller.tenant_id)
                # Another run of this import (the admin's Import clicked twice,
                # the command started again) may have stored some of this batch
                # since it was planned: under the lock they are skipped, as a
                # re-run skips them, instead of being stored a second time.
                done = alias_targets(
                    tenant_id=self.caller.tenant_id, aliases=[p.record.source_id for p in planned], system=self.system
                )
                if done:
                    fresh = [i for i, p in enumerate(planned) if p.record.source_id not in done]
                    late = [planned[i] for i in range(len(planned)) if planned[i].record.source_id in done]
                    planned, rows, vectors = (
                        [planned[i] for i in fresh],
                        [rows[i] for i in fresh],
                        [vectors[i] for i in fresh],
                    )
                # Settled before the rows' values are built: it retires some of them.
                self._settle_fact_keys(rows, planned)
                new = memories_new(
                    caller=self.caller,
                    rows=rows,
                    payloads=[{"imported_from": self.system, "source_id": p.record.source_id} for p in planned],
                    # created_at / updated_at as upstream recorded them, written with the row.
                    dated={p.pk: (p.record.created_at, p.record.updated_at) for p in planned},
                )
                memories_insert(caller=self.caller, new=new)
                MemoryAlias.objects.bulk_create(
                    [
                        MemoryAlias(tenant_id=self.caller.tenant_id, memory_id=p.pk, system=self.system, alias=alias)
                        for p in planned
                        for alias in dict.fromkeys([p.record.source_id, *p.record.extra_aliases])
                        if storable_id(alias) and not shadows(alias, p.pk)
                    ]
                    + [
                        MemoryAlias(tenant_id=self.caller.tenant_id, memory_id=p.pk, system=system, alias=alias)
                        for p in planned
                        for system, alias in p.record.other_aliases
                        if system
                        and system != self.system
                        and storable_id(system)
                        and len(system) <= SYSTEM_MAX_CHARS
                        and storable_id(alias)
                        and not shadows(alias, p.pk)
                    ],
                    ignore_conflicts=True,
                )
                self._outcome_events(planned)
        except QuotaExceeded as exc:
            details = exc.details
            raise self._quota_stop(
                int(details.get("used", used)), int(details.get("limit", limit)), len(planned)
            ) from None
        for item in late:
            self._uncount(item, "already imported (its id is an alias of a memory here)")
        self.stored += len(planned)
        self.report.embedded += sum(1 for v in vectors if v is not None)
        self.report.pending_embeddings += sum(1 for v in vectors if v is None)

    def _outcome_events(self, planned: Sequence[_Planned]) -> None:
        """The outcome history as the audit events every dialect reads it from
        (``marked_<signal>``, dated when the outcome was recorded upstream)."""
        events = [
            NewEvent(
                tenant_id=self.caller.tenant_id,
                event_type=f"marked_{signal}",
                memory_id=p.pk,
                memory_kind=p.values["kind"],
                payload={"imported_from": self.system},
                created_at=when,
            )
            for p in planned
            for signal, when in p.record.outcomes
            if signal in OUTCOME_SIGNALS
        ]
        if events:
            events_append(events)

    def _settle_fact_keys(self, rows: list[Memory], planned: Sequence[_Planned]) -> None:
        """At most one active fact per namespace + subject + predicate: among the
        imported ones and the tenant's own, the newest stays active and the
        others are superseded by it, as a later store would have done."""
        created = {p.pk: p.record.created_at or timezone.now() for p in planned}
        keyed: dict[tuple[tuple[str, ...], str, str], list[Memory]] = defaultdict(list)
        for row in rows:
            if row.kind == Kind.FACT and row.validity == Validity.ACTIVE and row.subject:
                keyed[(tuple(row.namespace), row.subject, row.predicate)].append(row)
        for (namespace, subject, predicate), group in keyed.items():
            holder = (
                Memory.objects.for_caller(self.caller)
                .filter(
                    kind=Kind.FACT,
                    validity=Validity.ACTIVE,
                    namespace=list(namespace),
                    subject=subject,
                    predicate=predicate,
                )
                .without_vectors()
                .select_for_update()
                .first()
            )
            group.sort(key=lambda r: created[r.pk])
            newest = group[-1]
            if holder is not None and holder.created_at > created[newest.pk]:
                winner_id = holder.pk
                losers: list[Memory] = group
            else:
                winner_id = newest.pk
                losers = group[:-1]
                if holder is not None:
                    Memory.objects.filter(pk=holder.pk).update(
                        validity=Validity.SUPERSEDED, superseded_by_id=newest.pk, updated_at=timezone.now()
                    )
                    events_append(
                        [
                            caller_event(
                                caller=self.caller,
                                tenant_id=self.caller.tenant_id,
                                event_type=EventType.SUPERSEDED,
                                memory_id=holder.pk,
                                memory_kind=holder.kind,
                                payload={"superseded_by": str(newest.pk), "reason": f"newer {self.system} import"},
                            )
                        ]
                    )
            for loser in losers:
                loser.validity, loser.superseded_by_id = Validity.SUPERSEDED, winner_id

    def _vectors(self, planned: Sequence[_Planned]) -> list[list[float] | None]:
        """Each memory's vector before it is stored: upstream's own where it is
        memproj's model, else the bulk embedding path (one model call per
        chunk). Stored with its vector, a memory keeps its upstream updated_at
        (a later embedding would stamp it). If the embedder is unavailable the
        rest is left pending for the worker; so are the episodes of a session
        under a contextual text version (their previous turn is read from the
        stored rows, in upstream's order, which a batch need not follow)."""
        contextual = embedtext.text_version() != "plain"
        later = [contextual and embedtext.in_session(p.values["kind"], p.values.get("session_id", "")) for p in planned]
        vectors: list[list[float] | None] = [None if wait else p.vector for p, wait in zip(planned, later, strict=True)]
        if not self.embed:
            return vectors
        todo = [i for i, v in enumerate(vectors) if v is None and not later[i]]
        embedder = get_embedder()
        for start in range(0, len(todo), EMBED_CHUNK):
            chunk = todo[start : start + EMBED_CHUNK]
            texts = [
                embedtext.embedding_text(planned[i].values["content"], kind=planned[i].values["kind"]) for i in chunk
            ]
            try:
                for i, vector in zip(chunk, embedder.embed(texts), strict=True):
                    vectors[i] = [float(x) for x in vector]
            except EmbeddingUnavailable:
                self.embed = False
                break
        return vectors

    # --- after every batch -------------------------------------------------------------

    def link_supersessions(self) -> None:
        """Each superseded memory points at its successor (which may have come
        in a later batch, or in an earlier run of an interrupted import)."""
        if not self.pending_links:
            return
        ids = set(self.pending_links) | set(self.pending_links.values())
        targets = alias_targets(tenant_id=self.caller.tenant_id, aliases=ids, system=self.system)
        if self.dry_run:
            self.report.superseded_links = sum(
                1
                for old, new in self.pending_links.items()
                if (old in targets or old in self.created_ids) and (new in targets or new in self.created_ids)
            )
            return
        pairs = [
            (targets[old], targets[new])
            for old, new in self.pending_links.items()
            if old in targets and new in targets and targets[old] != targets[new]
        ]
        with transaction.atomic():
            # A replaced turn leaves retrieval as a forgotten one does: the
            # turns after the active ones it replaces are embedded again
            # without them (``memory_supersede``). Under the tenant's write
            # lock no turn is stored, forgotten or replaced until this commits;
            # they are locked with the replaced rows, in primary-key order.
            tenant_write_lock(self.caller.tenant_id)
            following = embedtext.following_turns(
                memory_ids=[old for old, _ in pairs], now=timezone.now(), tenant_id=self.caller.tenant_id
            )
            if following:
                memory_rows_lock([*(old for old, _ in pairs), *(turn for turn, _ in following)])
            for old_pk, new_pk in pairs:
                changed = (
                    Memory.objects.for_caller(self.caller)
                    .filter(pk=old_pk)
                    .filter(Q(superseded_by__isnull=True) | ~Q(superseded_by_id=new_pk))
                    .exclude(validity=Validity.RETRACTED)
                    .update(validity=Validity.SUPERSEDED, superseded_by_id=new_pk)
                )
                self.report.superseded_links += changed
            turns_unembed(following)

    def _graph_checked(
        self, entities: Sequence[ImportedEntity], relations: Sequence[ImportedRelation]
    ) -> tuple[list[ImportedEntity], list[ImportedRelation]]:
        """The entities and relations that can be stored; the others skipped
        with their reason (the same in a dry run)."""
        kept: list[ImportedEntity] = []
        for item in entities:
            try:
                if not isinstance(item.name, str) or not item.name.strip() or not _is_text(item.name):
                    raise InvalidArgument("an entity's name must be text without NUL characters.")
                if not _is_text(item.canonical_key) or not _is_text(item.type):
                    raise InvalidArgument("an entity's key and type must be text without NUL characters.")
                validation.metadata(item.attrs, field="attributes")
            except InvalidArgument as exc:
                self.report.skip(f"not storable: {exc}", item.source_id if _is_text(item.source_id) else "?")
                continue
            item.claims = [claim for claim in item.claims if storable_id(claim)]
            kept.append(item)
        ends = {item.source_id for item in kept}
        good: list[ImportedRelation] = []
        for rel in relations:
            shown = rel.source_id if _is_text(rel.source_id) else "?"
            if rel.src not in ends or rel.dst not in ends:
                self.report.skip("relation end is not an imported entity", shown)
                continue
            try:
                if not isinstance(rel.type, str) or not rel.type.strip() or not _is_text(rel.type):
                    raise InvalidArgument("a relation's type must be text without NUL characters.")
                validation.metadata(rel.props, field="the relation's properties")
            except InvalidArgument as exc:
                self.report.skip(f"not storable: {exc}", shown)
                continue
            if rel.evidence is not None and not storable_id(rel.evidence):
                rel.evidence = None
            good.append(rel)
        return kept, good

    def graph(self, entities: Sequence[ImportedEntity], relations: Sequence[ImportedRelation]) -> None:
        if not entities and not relations:
            return
        entities, relations = self._graph_checked(entities, relations)
        if self.dry_run:
            self.report.entities = len(entities)
            self.report.relations = len(relations)
            return
        claims = alias_targets(
            tenant_id=self.caller.tenant_id,
            aliases=[c for e in entities for c in e.claims] + [r.evidence for r in relations if r.evidence],
            system=self.system,
        )
        by_source: dict[str, Entity] = {}
        # A chunk at a time, each one transaction under the tenant's write lock
        # (memory/services/locks.py), as claim_upsert takes it before it merges
        # entities (graph_merge): another import's graph step or a claim's merge
        # then waits for the chunk instead of holding entity rows in the other
        # order (a deadlock, which ended one import as a lost database) or
        # inserting the same key meanwhile; and the tenant's other writes wait
        # for one chunk at most, not the whole graph.
        for start in range(0, len(entities), GRAPH_CHUNK):
            with transaction.atomic():
                tenant_write_lock(self.caller.tenant_id)
                created = sum(self._entity(item, claims, by_source) for item in entities[start : start + GRAPH_CHUNK])
            self.report.entities += created
        for start in range(0, len(relations), GRAPH_CHUNK):
            with transaction.atomic():
                tenant_write_lock(self.caller.tenant_id)
                created = sum(self._relation(rel, claims, by_source) for rel in relations[start : start + GRAPH_CHUNK])
            self.report.relations += created

    def _entity(self, item: ImportedEntity, claims: dict[str, uuid.UUID], by_source: dict[str, Entity]) -> bool:
        """Store one entity (merged into the tenant's entity of its key); True when it is new."""
        entity_type = item.type if item.type in EntityType.values else EntityType.CONCEPT
        attrs = dict(item.attrs)
        if entity_type != item.type:
            attrs.setdefault("type", item.type)
        name = item.name[:500]
        key = (item.canonical_key or canonical_key_for(EntityInput(ref="", type=entity_type, name=name)))[:500]
        entity, created = Entity.objects.get_or_create(
            tenant_id=self.caller.tenant_id,
            canonical_key=key,
            defaults={"type": entity_type, "name": name, "attrs": attrs},
        )
        if not created and attrs:
            merged = {**attrs, **entity.attrs}
            if merged != entity.attrs:
                entity.attrs = merged
                entity.save(update_fields=["attrs", "updated_at"])
        linked = [claims[c] for c in item.claims if c in claims]
        if linked:
            entity.claims.add(*Memory.objects.filter(pk__in=linked))
        by_source[item.source_id] = entity
        return created

    def _relation(self, rel: ImportedRelation, claims: dict[str, uuid.UUID], by_source: dict[str, Entity]) -> bool:
        """Store one relation (unless the tenant has it); True when it is new."""
        src, dst = by_source.get(rel.src), by_source.get(rel.dst)
        if src is None or dst is None:
            self.report.skip("relation end is not an imported entity", rel.source_id)
            return False
        _, created = Relation.objects.get_or_create(
            tenant_id=self.caller.tenant_id,
            src=src,
            dst=dst,
            type=rel.type[:200],
            defaults={
                "props": dict(rel.props),
                "evidence_id": claims.get(rel.evidence) if rel.evidence else None,
            },
        )
        return created


def _uuid_or_none(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except (ValueError, TypeError):
        return None


def memories_import(
    *,
    caller: Caller,
    system: str,
    location: str,
    namespace: Sequence[str] = (),
    dry_run: bool = False,
    batch_size: int = BATCH_DEFAULT,
    limit: int | None = None,
    embed: bool = True,
    progress: Progress | None = None,
    options: dict[str, Any] | None = None,
) -> ImportReport:
    """Import the store at ``location`` written by ``system`` (one of
    ``memory.importers.systems()``) into the caller's tenant; see the module
    docstring. ``limit`` bounds how many memories one run creates (run again to
    go on); ``embed`` embeds each batch right after it commits (else the worker
    does); ``progress(done, total)`` is called as records are read."""
    if not dry_run:
        require_write(caller)
    if system not in systems():
        raise InvalidArgument(f"unknown system {system!r}; one of: {', '.join(systems())}.")
    if not 1 <= batch_size <= BATCH_MAX:
        raise InvalidArgument(f"the batch size must be between 1 and {BATCH_MAX}.")
    if limit is not None and limit < 1:
        raise InvalidArgument("the limit must be at least 1.")
    namespace = validation.namespace(list(namespace))
    try:
        source = open_source(system, location, **(options or {}))
    except ImportSourceError as exc:
        _log_refusal(system, exc)
        raise InvalidArgument(str(exc)) from exc
    report = ImportReport(system=system, location=location, dry_run=dry_run)
    job = _Importer(
        caller=caller,
        system=system,
        namespace=namespace,
        dry_run=dry_run,
        batch_size=batch_size,
        limit=limit,
        embed=embed and settings.MEMPROJ.get("EMBED_MODE") != "async",
        report=report,
    )
    entities: list[ImportedEntity] = []
    relations: list[ImportedRelation] = []
    batch: list[ImportedMemory] = []
    total = source.estimate()
    failed: list[InvalidArgument] = []
    try:
        for record in _records(source, system, failed):
            report.read += 1
            if isinstance(record, Skipped):
                report.skip(record.reason, record.source_id)
            elif isinstance(record, ImportedEntity):
                entities.append(record)
            elif isinstance(record, ImportedRelation):
                relations.append(record)
            elif not _is_text(record.source_id):
                report.skip("its id is not text memproj can keep (a NUL character or broken Unicode)", "?")
            elif record.source_id in job.seen:
                report.skip("the source holds this id twice (the first is kept)", record.source_id)
            else:
                job.seen.add(record.source_id)
                batch.append(record)
                if len(batch) >= batch_size:
                    job.batch(batch)
                    batch = []
            if progress is not None:
                progress(report.read, total)
            if report.stopped_at_limit:
                break
        if batch and not report.stopped_at_limit:
            job.batch(batch)
        job.link_supersessions()
        if failed:
            raise failed[0]
        if not report.stopped_at_limit:
            job.graph(entities, relations)
    except (OperationalError, InterfaceError) as exc:
        # The database went away: the batches committed before stay whole,
        # and a re-run skips them (their aliases are there) and goes on.
        logger.warning("the %s import lost its database", system, exc_info=True)
        done = (
            f"This import stored {job.stored} memories before it stopped, and they stay"
            if job.stored
            else "Nothing of this import was stored"
        )
        raise StorageUnavailable(
            f"the database could not be reached during the import. {done}: run the same import again once "
            "the database is back, and it goes on where it stopped."
        ) from exc
    finally:
        source.close()
    return report


def _log_refusal(system: str, exc: ImportSourceError) -> None:
    """A reader's refusal names the problem in our words; the library's own
    exception behind it (its text may hold server paths or versions) is logged."""
    if exc.__cause__ is not None:
        cause = exc.__cause__
        logger.warning("the %s reader refused its store: %s (%s: %s)", system, exc, type(cause).__name__, cause)


def _records(source: Any, system: str, failed: list[InvalidArgument]) -> Iterable[Any]:
    """The reader's records. A reader skips a row it cannot read with its
    reason; should one still fail on a row, the records end there and
    ``failed`` gets the error to raise once the records before it are
    imported (a re-run goes on from them): a message, never the reader's
    traceback, which goes to the log."""
    try:
        yield from source.records()
    except ImportSourceError as exc:
        _log_refusal(system, exc)
        failed.append(InvalidArgument(str(exc)))
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, OverflowError):
        logger.warning("the %s reader failed on a record", system, exc_info=True)
        failed.append(
            InvalidArgument(
                f"a record of this {system} store could not be read; the import stopped there, after what it "
                "had read before it (the server log has the detail)."
            )
        )


# --- leaving: memproj -> COGX ------------------------------------------------------------------


def tenant_export_cogx(*, tenant_id: uuid.UUID, directory: Path) -> dict[str, int]:
    """Every memory, entity and relation of one tenant as a COGX archive (see
    memory.importers.cogx for the mapping); returns the count per record kind."""
    aliases: dict[uuid.UUID, list[list[str]]] = defaultdict(list)
    for memory_id, system, alias in (
        MemoryAlias.objects.filter(tenant_id=tenant_id).order_by("id").values_list("memory_id", "system", "alias")
    ):
        aliases[memory_id].append([system, alias])
    outcomes: dict[uuid.UUID, list[list[str | None]]] = defaultdict(list)
    marked = MemoryEvent.objects.filter(tenant_id=tenant_id, event_type__startswith="marked_", memory_id__isnull=False)
    for event_memory, event_type, at in marked.order_by("id").values_list("memory_id", "event_type", "created_at"):
        if event_memory is not None:
            outcomes[event_memory].append([event_type[len("marked_") :], at.isoformat() if at else None])
    writer = CogxWriter(directory, embedding_model=get_embedder().model_name)
    try:
        rows = Memory.objects.filter(tenant_id=tenant_id).without_vectors().order_by("created_at", "id")
        for memory in rows.iterator(chunk_size=500):
            writer.write(_cogx_memory(memory, aliases.get(memory.pk, []), outcomes.get(memory.pk, [])))
        claims: dict[uuid.UUID, list[str]] = defaultdict(list)
        for entity_id, memory_id in Entity.claims.through.objects.filter(entity__tenant_id=tenant_id).values_list(
            "entity_id", "memory_id"
        ):
            claims[entity_id].append(str(memory_id))
        for entity in Entity.objects.filter(tenant_id=tenant_id).order_by("created_at", "id").iterator(chunk_size=500):
            writer.write(
                {
                    "kind": "entity",
                    "external_system": "memproj",
                    "external_id": str(entity.pk),
                    "name": entity.name,
                    "entity_type": entity.type,
                    "attributes": entity.attrs,
                    "created_at": entity.created_at,
                    "updated_at": entity.updated_at,
                    "metadata": {
                        "memproj": {
                            "type": entity.type,
                            "canonical_key": entity.canonical_key,
                            "claims": claims.get(entity.pk, []),
                        }
                    },
                }
            )
        for relation in Relation.objects.filter(tenant_id=tenant_id).order_by("created_at", "id").iterator(500):
            writer.write(
                {
                    "kind": "fact",
                    "external_system": "memproj",
                    "external_id": str(relation.pk),
                    "subject_ref": str(relation.src_id),
                    "predicate": relation.type,
                    "object_ref": str(relation.dst_id),
                    "created_at": relation.created_at,
                    "metadata": {
                        **relation.props,
                        "memproj": {
                            "relation": True,
                            "evidence": str(relation.evidence_id) if relation.evidence_id else None,
                        },
                    },
                }
            )
    finally:
        writer.close()
    return dict(writer.counts)


def _cogx_memory(memory: Memory, aliases: list[list[str]], outcomes: list[list[str | None]]) -> dict[str, Any]:
    own: dict[str, Any] = {
        "kind": memory.kind,
        "validity": memory.validity,
        "scope": memory.scope,
        "namespace": list(memory.namespace),
        "tags": list(memory.tags),
        "butler": memory.butler,
        "subject": memory.subject,
        "predicate": memory.predicate,
        "collection": memory.collection,
        "boundary_class": memory.boundary_class,
        "source": memory.source,
        "importance": memory.importance,
        "confidence": memory.confidence,
        "permanence": memory.permanence,
        "maturity": memory.maturity,
        "success_count": memory.success_count,
        "harmful_count": memory.harmful_count,
        "applied_count": memory.applied_count,
        "effectiveness_score": memory.effectiveness_score,
        "outcome_score": memory.outcome_score,
        "utility": memory.utility,
        "reference_count": memory.reference_count,
        "superseded_by": str(memory.superseded_by_id) if memory.superseded_by_id else None,
        "aliases": aliases,
        "outcomes": outcomes,
    }
    for name in ("occurred_at", "expires_at", "last_applied_at", "last_referenced_at", "accessed_at"):
        value = getattr(memory, name)
        own[name] = value.isoformat() if value else None
    if memory.last_confirmed_at:
        own["last_confirmed_at"] = memory.last_confirmed_at.isoformat()
    record: dict[str, Any] = {
        "external_system": "memproj",
        "external_id": str(memory.pk),
        "scope": {"session_id": memory.session_id or None},
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
        "metadata": {**memory.metadata, "memproj": own},
    }
    if memory.kind == Kind.EPISODE:
        role = memory.metadata.get("role") if isinstance(memory.metadata.get("role"), str) else "user"
        return {
            **record,
            "kind": "episode",
            "turns": [{"role": role, "content": memory.content, "occurred_at": memory.occurred_at}],
        }
    if memory.kind == Kind.DOCUMENT:
        title = memory.metadata.get("title")
        return {
            **record,
            "kind": "document",
            "content": memory.content,
            "title": title if isinstance(title, str) else None,
        }
    if memory.kind == Kind.FACT and memory.subject:
        return {
            **record,
            "kind": "fact",
            "subject_ref": memory.subject,
            "predicate": memory.predicate or "is",
            "object_ref": memory.content,
            "fact_text": memory.content,
            "confidence": memory.confidence,
            "valid_at": memory.occurred_at,
        }
    return {**record, "kind": "memory", "content": memory.content, "categories": list(memory.tags)}
