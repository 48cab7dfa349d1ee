"""Background maintenance: the sweeps Celery beat runs (TTL expiry, confidence
decay, rule maturity, pending-embedding retry, re-embedding after a model
change) and the operator's tools (purge, export, import).

Every sweep is bounded (a batch per run, a cap per tenant, tenants served
round-robin so one tenant's backlog cannot starve another), single-flight (a
transaction-scoped advisory lock: a second concurrent run does nothing) and
idempotent (it only selects rows whose stored state differs from the computed
one, so a second run finds nothing to do)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TextIO, TypeVar, cast

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import F, Window
from django.db.models.functions import Random, RowNumber
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from memory import scoring, validation
from memory.embeddings import get_embedder
from memory.errors import EmbeddingUnavailable, InvalidArgument, NotFound
from memory.models import (
    ConflictCandidate,
    EmbeddingStatus,
    FollowUp,
    Kind,
    Maturity,
    Memory,
    MemoryEvent,
    MemoryLink,
    Validity,
)
from memory.outcomes import maturity_set
from memory.services.events import EventType, NewEvent, events_append
from memory.services.followups import followups_embedded
from memory.services.memories import memory_embed_batch
from policy.caller import Caller
from policy.models import Principal, Tenant

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=models.Model)


def pipeline_setting(name: str) -> Any:
    return settings.MEMPROJ_PIPELINE[name]


def system_caller(tenant_id: uuid.UUID) -> Caller:
    """The caller background work acts as: inside one tenant, no principal (so
    audit events show no human actor), allowed to write."""
    return Caller(tenant_id=tenant_id, principal_id=None, role="admin", scopes=frozenset({"read", "write"}))


@dataclass
class SweepResult:
    processed: int = 0
    more: bool = False
    failed: int = 0
    skipped: bool = False  # another run of the same sweep holds the lock
    ids: list[uuid.UUID] = field(default_factory=list)


def _sweep_lock(name: str) -> bool:
    """Single-flight per sweep: the lock is released when the transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", [f"memproj.sweep.{name}"])
        return bool(cursor.fetchone()[0])


def fair_batch(
    queryset: models.QuerySet[Memory], *, order_by: Sequence[Any], batch_size: int, per_tenant: int
) -> list[uuid.UUID]:
    """Round-robin over tenants: every tenant's first row, then every tenant's
    second row, ... at most ``per_tenant`` each and ``batch_size`` in all. Inside
    one round the tenant order is random, so when there are more tenants than
    room in the batch no tenant is always last."""
    ranked = (
        queryset.order_by()
        .annotate(turn=Window(RowNumber(), partition_by=[F("tenant_id")], order_by=list(order_by)))
        .filter(turn__lte=per_tenant)
    )
    return list(ranked.order_by("turn", Random()).values_list("pk", flat=True)[:batch_size])


def _sizes(batch_size: int | None, per_tenant: int | None) -> tuple[int, int]:
    return (batch_size or pipeline_setting("SWEEP_BATCH"), per_tenant or pipeline_setting("SWEEP_PER_TENANT"))


def _audit_rows(
    rows: Iterable[tuple[uuid.UUID, uuid.UUID, str]], event_type: EventType, payloads: Iterable[dict]
) -> None:
    """Many audit events in one call of the writer (sweeps act as the system: no actor)."""
    events_append(
        [
            NewEvent(tenant_id=tenant_id, memory_id=pk, memory_kind=kind, event_type=event_type, payload=payload)
            for (pk, tenant_id, kind), payload in zip(rows, payloads, strict=True)
        ]
    )


# --- TTL expiry --------------------------------------------------------------------------


def episodes_expire(
    *, now: datetime | None = None, batch_size: int | None = None, per_tenant: int | None = None
) -> SweepResult:
    """Expired episodes already left retrieval when their ``expires_at`` passed
    (every read filters on it). Their rows stay for audit and the dashboard for
    the retention period; this sweep deletes them after it, with an audit event
    per episode (the event log outlives the row)."""
    now = now or timezone.now()
    batch_size, per_tenant = _sizes(batch_size, per_tenant)
    cutoff = now - timedelta(days=pipeline_setting("EPISODE_RETENTION_DAYS"))
    due = Memory.objects.filter(kind=Kind.EPISODE, expires_at__lte=cutoff)
    with transaction.atomic():
        if not _sweep_lock("episodes_expire"):
            return SweepResult(skipped=True)
        ids = fair_batch(due, order_by=["expires_at", "id"], batch_size=batch_size, per_tenant=per_tenant)
        rows = list(
            Memory.objects.filter(pk__in=ids, expires_at__lte=cutoff)
            .select_for_update()
            .values_list("pk", "tenant_id", "kind", "expires_at", "content_hash", "validity")
        )
        _audit_rows(
            [(pk, tenant_id, kind) for pk, tenant_id, kind, *_ in rows],
            EventType.EXPIRED_DELETED,
            [
                {
                    "expires_at": expires_at.isoformat() if expires_at else None,
                    "content_hash": digest,
                    "validity": validity,
                }
                for _, _, _, expires_at, digest, validity in rows
            ],
        )
        Memory.objects.filter(pk__in=[row[0] for row in rows]).delete()
        more = due.exists()
    return SweepResult(processed=len(rows), more=more, ids=[row[0] for row in rows])


# --- Confidence decay ----------------------------------------------------------------------

FACT_STATE_EVENT = EventType.FACT_STATE_CHANGED


def facts_decay(
    *, now: datetime | None = None, batch_size: int | None = None, per_tenant: int | None = None
) -> SweepResult:
    """Record each active fact's state (active / fading / expired by effective
    confidence, seed 000 memory_stats) when it changes: one
    ``fact_state_changed`` event per transition. Only facts whose precomputed
    ``fact_state_changes_at`` has come are read (an index range scan, however
    many facts there are); confirming a fact makes it due at once, so the next
    sweep records it active again. Facts are not deleted or hidden by decay:
    retrieval weighs effective confidence itself."""
    now = now or timezone.now()
    batch_size, per_tenant = _sizes(batch_size, per_tenant)
    due = Memory.objects.filter(kind=Kind.FACT, validity=Validity.ACTIVE, fact_state_changes_at__lte=now)
    with transaction.atomic():
        if not _sweep_lock("facts_decay"):
            return SweepResult(skipped=True)
        ids = fair_batch(due, order_by=["fact_state_changes_at", "id"], batch_size=batch_size, per_tenant=per_tenant)
        changes = []
        facts = list(due.filter(pk__in=ids).without_vectors().select_for_update().order_by("pk"))
        for fact in facts:
            confirmed_at = fact.last_confirmed_at or fact.created_at
            state, next_change = scoring.fact_state_schedule(
                confidence=fact.confidence, decay_rate=fact.decay_rate, confirmed_at=confirmed_at, now=now
            )
            previous = fact.fact_state or "active"
            if state != previous:
                effective = scoring.effective_confidence(fact.confidence, fact.decay_rate, confirmed_at, now)
                changes.append(
                    (
                        (fact.pk, fact.tenant_id, Kind.FACT),
                        {"from": previous, "to": state, "effective_confidence": round(effective, 6)},
                    )
                )
            fact.fact_state, fact.fact_state_changes_at = state, next_change
        Memory.objects.bulk_update(facts, ["fact_state", "fact_state_changes_at"])
        _audit_rows([c[0] for c in changes], FACT_STATE_EVENT, [c[1] for c in changes])
        more = due.exists()
    return SweepResult(processed=len(changes), more=more, ids=[c[0][0] for c in changes])


# --- Rule maturity -------------------------------------------------------------------------


def _settled_maturity(rule: Memory, now: datetime) -> str:
    """Apply scoring.rule_maturity until it stops moving (it steps one level at
    a time), so a second sweep never finds another step to take."""
    maturity = rule.maturity or Maturity.CANDIDATE
    for _ in range(len(Maturity.values)):
        following = scoring.rule_maturity(
            maturity=maturity,
            success=rule.success_count,
            harmful=rule.harmful_count,
            age_days=scoring.days_between(rule.created_at, now),
        )
        if following == maturity:
            break
        maturity = following
    return maturity


def rules_maturity(
    *, now: datetime | None = None, batch_size: int | None = None, per_tenant: int | None = None
) -> SweepResult:
    """Outcomes re-evaluate maturity when they arrive; this sweep catches what
    only time changes (seed 000: proven needs 30 days of age)."""
    now = now or timezone.now()
    batch_size, per_tenant = _sizes(batch_size, per_tenant)
    # Below these counts scoring.rule_maturity cannot move a rule anywhere.
    could_move = models.Q(success_count__gte=scoring.ESTABLISHED_MIN_SUCCESS) | models.Q(
        harmful_count__gte=scoring.ANTI_PATTERN_MIN_HARMFUL
    )
    candidates = (
        Memory.objects.filter(kind=Kind.RULE, validity=Validity.ACTIVE)
        .exclude(maturity=Maturity.ANTI_PATTERN)
        .filter(could_move)
        .only("pk", "tenant_id", "maturity", "success_count", "harmful_count", "created_at")
        .order_by("created_at", "id")
    )
    due: list[uuid.UUID] = []
    per: dict[uuid.UUID, int] = {}
    more = False
    for rule in candidates.iterator(chunk_size=1000):
        if _settled_maturity(rule, now) == (rule.maturity or Maturity.CANDIDATE):
            continue
        if len(due) >= batch_size or per.get(rule.tenant_id, 0) >= per_tenant:
            more = True
            continue
        per[rule.tenant_id] = per.get(rule.tenant_id, 0) + 1
        due.append(rule.pk)
    changed: list[uuid.UUID] = []
    with transaction.atomic():
        if not _sweep_lock("rules_maturity"):
            return SweepResult(skipped=True)
        for rule in Memory.objects.filter(pk__in=due).without_vectors().select_for_update().order_by("pk"):
            before = rule.maturity or Maturity.CANDIDATE
            after = _settled_maturity(rule, now)
            if after == before:
                continue
            rule.save(update_fields=[*maturity_set(rule, after, now), "updated_at"])
            _audit_rows(
                [(rule.pk, rule.tenant_id, Kind.RULE)],
                EventType.MATURITY_CHANGED,
                [{"from": before, "to": after, "reason": "maturity sweep (age)"}],
            )
            changed.append(rule.pk)
    return SweepResult(processed=len(changed), more=more, ids=changed)


# --- Embeddings ------------------------------------------------------------------------------


def embeddings_retry(
    *, now: datetime | None = None, batch_size: int | None = None, per_tenant: int | None = None
) -> SweepResult:
    """Embed memories still pending: the embedder was down at write time (and the
    write-time task gave up), or async mode. A memory that keeps failing is
    marked failed after EMBED_MAX_ATTEMPTS, with its last error kept; the
    ``reembed`` command puts it back in line."""
    now = now or timezone.now()
    batch_size, per_tenant = _sizes(batch_size, per_tenant)
    max_attempts = pipeline_setting("EMBED_MAX_ATTEMPTS")
    # Young pending rows belong to the task enqueued at write time.
    due = Memory.objects.filter(
        embedding_status=EmbeddingStatus.PENDING,
        created_at__lte=now - timedelta(seconds=pipeline_setting("EMBED_RETRY_GRACE_SECONDS")),
    )
    with transaction.atomic():
        if not _sweep_lock("embeddings_retry"):
            return SweepResult(skipped=True)
        ids = fair_batch(due, order_by=["created_at", "id"], batch_size=batch_size, per_tenant=per_tenant)
        failed = 0
        done_ids: list[uuid.UUID] = []
        if ids:
            try:
                memory_embed_batch(memory_ids=ids)
            except EmbeddingUnavailable as exc:
                logger.warning("embedding retry: embedder unavailable for %d memories: %s", len(ids), exc)
                failed = Memory.objects.filter(
                    pk__in=ids, embedding_status=EmbeddingStatus.PENDING, embedding_attempts__gte=max_attempts
                ).update(embedding_status=EmbeddingStatus.FAILED)
                return SweepResult(processed=0, failed=failed, more=False)
            done_ids = list(
                Memory.objects.filter(pk__in=ids, embedding_status=EmbeddingStatus.READY).values_list("pk", flat=True)
            )
            followups_embedded(memory_ids=done_ids)
        more = due.exclude(pk__in=ids).exists()
    return SweepResult(processed=len(done_ids), more=more, ids=done_ids)


def memories_reembed(
    *,
    tenant_id: uuid.UUID | None = None,
    batch_size: int | None = None,
    per_tenant: int | None = None,
) -> SweepResult:
    """Re-embed memories whose vector came from another model than the current
    embedder's. Each batch first drops the stale vectors (the memory is then
    keyword-searchable only, never compared across two models' vector spaces),
    then embeds the batch; if the embedder fails the rows stay pending and the
    retry sweep finishes them."""
    batch_size, per_tenant = _sizes(batch_size, per_tenant)
    current = get_embedder().model_name
    stale = Memory.objects.filter(embedding_status=EmbeddingStatus.READY).exclude(embedding_model=current)
    if tenant_id is not None:
        stale = stale.filter(tenant_id=tenant_id)
    with transaction.atomic():
        if not _sweep_lock("memories_reembed"):
            return SweepResult(skipped=True)
        ids = fair_batch(stale, order_by=["created_at", "id"], batch_size=batch_size, per_tenant=per_tenant)
        rows = list(
            stale.filter(pk__in=ids).select_for_update().values_list("pk", "tenant_id", "kind", "embedding_model")
        )
        Memory.objects.filter(pk__in=[r[0] for r in rows]).update(
            embedding=None, embedding_status=EmbeddingStatus.PENDING, embedding_error="", embedding_attempts=0
        )
        _audit_rows(
            [r[:3] for r in rows],
            EventType.REEMBED_REQUESTED,
            [{"from_model": r[3], "to_model": current} for r in rows],
        )
    if not rows:
        return SweepResult()
    try:
        done = memory_embed_batch(memory_ids=[r[0] for r in rows])
    except EmbeddingUnavailable as exc:
        logger.warning("re-embedding: embedder unavailable, %d memories left pending: %s", len(rows), exc)
        return SweepResult(processed=0, failed=len(rows), more=stale.exists())
    return SweepResult(processed=done, more=stale.exists(), ids=[r[0] for r in rows])


def memories_mark_stale(*, tenant_id: uuid.UUID | None = None) -> int:
    """Operator's 'embed everything again' (same model, e.g. a fixed
    preprocessing step): forget which model made each vector, so the re-embed
    sweep treats every memory as stale. Vectors stay until each is replaced."""
    qs = Memory.objects.filter(embedding_status=EmbeddingStatus.READY)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    return qs.update(embedding_model="")


def memories_failed_requeue(*, tenant_id: uuid.UUID | None = None) -> int:
    """Give memories whose embedding finally failed another round of retries."""
    qs = Memory.objects.filter(embedding_status=EmbeddingStatus.FAILED)
    if tenant_id is not None:
        qs = qs.filter(tenant_id=tenant_id)
    return qs.update(embedding_status=EmbeddingStatus.PENDING, embedding_attempts=0)


# --- Purge (right to be forgotten) -------------------------------------------------------------


@dataclass
class PurgeResult:
    memories: int
    events: int
    conflicts: int
    links: int


def _purge_events(
    *,
    tenant_id: uuid.UUID,
    event_type: EventType,
    actor_principal_id: uuid.UUID | None,
    payload: dict[str, Any],
    memory_ids: list[uuid.UUID] | None = None,
    principal_id: uuid.UUID | None = None,
) -> int:
    """The audit log refuses every UPDATE, DELETE and TRUNCATE (migration 0025)
    except inside ``memproj_purge_events``, a function that runs as the table's
    owner, re-chains what remains and appends the purge event itself."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT memproj_purge_events(%s, %s, %s, %s::jsonb, %s::uuid[], %s)",
            [tenant_id, event_type.value, actor_principal_id, json.dumps(payload), memory_ids or [], principal_id],
        )
        return int(cursor.fetchone()[0])


def _delete_memories(memory_ids: list[uuid.UUID]) -> tuple[int, int, int]:
    conflicts = ConflictCandidate.objects.filter(
        models.Q(memory_id__in=memory_ids) | models.Q(other_id__in=memory_ids)
    ).delete()[0]
    links = MemoryLink.objects.filter(
        models.Q(from_memory_id__in=memory_ids) | models.Q(to_memory_id__in=memory_ids)
    ).delete()[0]
    Memory.objects.filter(superseded_by_id__in=memory_ids).update(superseded_by=None)
    FollowUp.objects.filter(memory_id__in=memory_ids).delete()
    deleted = 0
    for start in range(0, len(memory_ids), 1000):
        deleted += Memory.objects.filter(pk__in=memory_ids[start : start + 1000]).delete()[0]
    return deleted, conflicts, links


def tenant_purge(*, tenant_id: uuid.UUID, reason: str = "", actor_principal_id: uuid.UUID | None = None) -> PurgeResult:
    """Delete every memory and audit event of one tenant. The tenant, its
    principals and tokens stay (it may keep using the service); one
    ``tenant_purged`` event records that a purge happened, with counts only."""
    if not Tenant.objects.filter(pk=tenant_id).exists():
        raise NotFound(f"no tenant with id {tenant_id}.")
    with transaction.atomic():
        memory_ids = list(Memory.objects.filter(tenant_id=tenant_id).values_list("pk", flat=True))
        memories, conflicts, links = _delete_memories(memory_ids)
        conflicts += ConflictCandidate.objects.filter(tenant_id=tenant_id).delete()[0]
        links += MemoryLink.objects.filter(tenant_id=tenant_id).delete()[0]
        FollowUp.objects.filter(tenant_id=tenant_id).delete()
        counts = {"memories": memories, "conflicts": conflicts, "links": links}
        events = _purge_events(
            tenant_id=tenant_id,
            event_type=EventType.TENANT_PURGED,
            actor_principal_id=actor_principal_id,
            payload={"reason": reason, **counts},
        )
        result = PurgeResult(events=events, **counts)
    logger.warning("purged tenant %s: %s", tenant_id, result)
    return result


def principal_purge(
    *, principal_id: uuid.UUID, reason: str = "", actor_principal_id: uuid.UUID | None = None
) -> PurgeResult:
    """Right to be forgotten for one principal: their memories, every audit
    event about those memories or acted by them, and the principal itself
    (with its tokens). One ``principal_purged`` event in the tenant's log
    records the purge, with counts and the principal's opaque id only."""
    principal = Principal.objects.filter(pk=principal_id).first()
    if principal is None:
        raise NotFound(f"no principal with id {principal_id}.")
    tenant_id = principal.tenant_id
    with transaction.atomic():
        memory_ids = list(Memory.objects.filter(principal_id=principal_id).values_list("pk", flat=True))
        memories, conflicts, links = _delete_memories(memory_ids)
        principal.delete()
        counts = {"memories": memories, "conflicts": conflicts, "links": links}
        events = _purge_events(
            tenant_id=tenant_id,
            event_type=EventType.PRINCIPAL_PURGED,
            actor_principal_id=actor_principal_id,
            payload={"principal_id": str(principal_id), "reason": reason, **counts},
            memory_ids=memory_ids,
            principal_id=principal_id,
        )
        result = PurgeResult(events=events, **counts)
    logger.warning("purged principal %s of tenant %s: %s", principal_id, tenant_id, result)
    return result


# --- Export / import (JSONL) -------------------------------------------------------------------

EXPORT_FORMAT = "memproj-export/1"
# search_vector is generated by PostgreSQL from content; an event's chain hashes
# are recomputed when it is imported (it joins the importing tenant's chain).
_SKIP_FIELDS = {"search_vector", "prev_hash", "hash"}


def _fields(model: type[models.Model]) -> list[models.Field]:
    return [f for f in model._meta.concrete_fields if f.name not in _SKIP_FIELDS]


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if hasattr(value, "tolist"):  # pgvector hands back numpy arrays
        return [float(x) for x in value.tolist()]
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    raise TypeError(f"cannot export {type(value).__name__}")


def _row(kind: str, obj: models.Model) -> str:
    body = {f.attname: _jsonable(f.value_from_object(obj)) for f in _fields(type(obj))}
    return json.dumps({"type": kind, **body}, sort_keys=True, ensure_ascii=False)


def tenant_export(*, tenant_id: uuid.UUID, out: TextIO) -> dict[str, int]:
    """Every principal, memory (every column, vectors included), link,
    conflict candidate and audit event of one tenant, one JSON object a line."""
    tenant = Tenant.objects.filter(pk=tenant_id).first()
    if tenant is None:
        raise NotFound(f"no tenant with id {tenant_id}.")
    counts = {"principal": 0, "memory": 0, "link": 0, "conflict": 0, "event": 0}
    out.write(json.dumps({"type": "header", "format": EXPORT_FORMAT, "tenant": _row("tenant", tenant)}) + "\n")
    sources: list[tuple[str, models.QuerySet]] = [
        ("principal", Principal.objects.filter(tenant_id=tenant_id).order_by("created_at", "id")),
        ("memory", Memory.objects.filter(tenant_id=tenant_id).order_by("created_at", "id")),
        ("link", MemoryLink.objects.filter(tenant_id=tenant_id).order_by("id")),
        ("conflict", ConflictCandidate.objects.filter(tenant_id=tenant_id).order_by("created_at", "id")),
        ("event", MemoryEvent.objects.filter(tenant_id=tenant_id).order_by("id")),
    ]
    for kind, queryset in sources:
        for obj in queryset.iterator(chunk_size=500):
            out.write(_row(kind, obj) + "\n")
            counts[kind] += 1
    return counts


@contextmanager
def _keep_timestamps() -> Iterator[None]:
    """Imported rows keep their recorded timestamps: auto_now/auto_now_add are
    switched off for the duration (commands run single-threaded)."""
    switched = []
    for model in (Principal, Memory, MemoryLink, ConflictCandidate, MemoryEvent):
        for concrete in model._meta.concrete_fields:
            f = cast(Any, concrete)  # only DateField has auto_now*
            if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
                switched.append((f, f.auto_now, f.auto_now_add))
                f.auto_now = f.auto_now_add = False
    try:
        yield
    finally:
        for f, auto_now, auto_now_add in switched:
            f.auto_now, f.auto_now_add = auto_now, auto_now_add


def _build(model: type[M], row: dict[str, Any], **override: Any) -> M:
    values: dict[str, Any] = {}
    for f in _fields(model):
        if f.attname not in row:
            continue
        value = row[f.attname]
        if isinstance(f, models.DateTimeField) and isinstance(value, str):
            value = parse_datetime(value)
        values[f.attname] = value
    values.update(override)
    return model(**values)


def tenant_import(*, tenant_slug: str, lines: Iterable[str]) -> dict[str, int]:
    """Load an export into ``tenant_slug`` (created if missing), keeping every
    id and timestamp, so export -> purge -> import gives back the same tenant.
    One transaction: a bad line imports nothing. Event ids are assigned anew
    (the log is shared by all tenants); their order is kept."""
    parsed = [json.loads(line) for line in lines if line.strip()]
    if not parsed or parsed[0].get("type") != "header" or parsed[0].get("format") != EXPORT_FORMAT:
        raise InvalidArgument(f"not a {EXPORT_FORMAT} file: the first line must be its header.")
    by_type: dict[str, list[dict[str, Any]]] = {}
    for row in parsed[1:]:
        by_type.setdefault(row.pop("type"), []).append(row)
    counts = {kind: len(by_type.get(kind, [])) for kind in ("principal", "memory", "link", "conflict", "event")}
    with transaction.atomic(), _keep_timestamps():
        tenant, _ = Tenant.objects.get_or_create(
            slug=tenant_slug, defaults={"name": json.loads(parsed[0]["tenant"]).get("name", "")}
        )
        for row in by_type.get("principal", []):
            existing = Principal.objects.filter(pk=row["id"]).first()
            if existing is None:
                _build(Principal, row, tenant_id=tenant.pk, user_id=None).save(force_insert=True)
            elif existing.tenant_id != tenant.pk:
                raise InvalidArgument(f"principal {row['id']} already exists in another tenant.")
        memories = [
            # A legacy 'forgotten' validity comes in as the canonical 'retracted'.
            _build(
                Memory,
                row,
                tenant_id=tenant.pk,
                superseded_by_id=None,
                validity=validation.validity(row.get("validity", "active")),
            )
            for row in by_type.get("memory", [])
        ]
        Memory.objects.bulk_create(memories, batch_size=500)
        for row in by_type.get("memory", []):
            if row.get("superseded_by_id"):
                Memory.objects.filter(pk=row["id"]).update(superseded_by_id=row["superseded_by_id"])
        MemoryLink.objects.bulk_create([_build(MemoryLink, r, tenant_id=tenant.pk) for r in by_type.get("link", [])])
        ConflictCandidate.objects.bulk_create(
            [_build(ConflictCandidate, r, tenant_id=tenant.pk) for r in by_type.get("conflict", [])]
        )
        events = [
            _build(MemoryEvent, {k: v for k, v in r.items() if k != "id"}, tenant_id=tenant.pk)
            for r in by_type.get("event", [])
        ]
        for start in range(0, len(events), 1000):
            events_append(
                [
                    NewEvent(
                        tenant_id=tenant.pk,
                        event_type=e.event_type,  # kept as recorded, even a legacy type
                        memory_id=e.memory_id,
                        memory_kind=e.memory_kind,
                        actor_principal_id=e.actor_principal_id,
                        payload=e.payload,
                        created_at=e.created_at,
                    )
                    for e in events[start : start + 1000]
                ]
            )
    return counts
