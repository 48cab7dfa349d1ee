"""The lifecycle sweeps Celery beat runs (TTL expiry, confidence decay, rule
maturity by age) and the machinery every sweep shares (the re-embedding
sweeps in ``memory.services.reembedding`` use it too).

Every sweep is bounded (a batch per run, a cap per tenant, tenants served
round-robin so one tenant's backlog cannot starve another), single-flight (a
transaction-scoped advisory lock: a second concurrent run does nothing) and
idempotent (it only selects rows whose stored state differs from the computed
one, so a second run finds nothing to do)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection, models, transaction
from django.db.models import F, Window
from django.db.models.functions import Random, RowNumber
from django.utils import timezone

from memory import embedtext, scoring
from memory.models import ActiveContext, IdempotencyKey, Kind, Maturity, Memory, Validity
from memory.outcomes import maturity_set
from memory.services.events import EventType, NewEvent, events_append
from memory.services.locks import memories_tenant_write_lock, memory_rows_lock
from memory.services.system import pipeline_setting
from memory.services.vectors import turns_unembed

logger = logging.getLogger(__name__)


@dataclass
class SweepResult:
    processed: int = 0
    more: bool = False
    failed: int = 0
    skipped: bool = False  # another run of the same sweep holds the lock
    ids: list[uuid.UUID] = field(default_factory=list)


def _lock_key(name: str) -> str:
    return f"memproj.sweep.{name}"


def sweep_lock(name: str) -> bool:
    """Single-flight per sweep: the lock is released when the transaction ends."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))", [_lock_key(name)])
        return bool(cursor.fetchone()[0])


@contextmanager
def sweep_claim(name: str) -> Iterator[bool]:
    """Single-flight for work that spans transactions (consolidation holds it
    across LLM calls made outside any): whether this run holds ``name`` until
    the block ends. A session-level lock, which PostgreSQL also releases with
    the connection of a worker that dies mid-run."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [_lock_key(name)])
        claimed = bool(cursor.fetchone()[0])
    try:
        yield claimed
    finally:
        if claimed:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [_lock_key(name)])
            except DatabaseError:  # a broken connection took the lock with it
                logger.warning("could not release the sweep claim %s", name)


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


def sweep_sizes(batch_size: int | None, per_tenant: int | None) -> tuple[int, int]:
    return (batch_size or pipeline_setting("SWEEP_BATCH"), per_tenant or pipeline_setting("SWEEP_PER_TENANT"))


def audit_rows(
    rows: Iterable[tuple[uuid.UUID, uuid.UUID, str]], event_type: EventType, payloads: Iterable[dict]
) -> None:
    """Many audit events in one INSERT (sweeps act as the system: no actor)."""
    events_append(
        [
            NewEvent(tenant_id=tenant_id, memory_id=pk, memory_kind=kind, event_type=event_type, payload=payload)
            for (pk, tenant_id, kind), payload in zip(rows, payloads, strict=True)
        ]
    )


# --- TTL expiry --------------------------------------------------------------------------


def memories_expire(
    *, now: datetime | None = None, batch_size: int | None = None, per_tenant: int | None = None
) -> SweepResult:
    """Every memory with a TTL, whatever its kind: episodes (7 days by default, as in
    the butlers memory module), and facts and rules of a policy scope with a TTL (pce-memory v0.14.0's
    ``session`` 7 d, ``project`` 120 d). Each left retrieval when its
    ``expires_at`` passed (every read filters on it); its row stays for audit
    and the dashboard for the retention period, then this sweep deletes it,
    with an audit event per memory (the event log outlives the row).

    A deleted memory takes with it the older versions it superseded (they are
    out of retrieval already and only make sense as its history), each with its
    own event; a superseded row is never left pointing at nothing."""
    now = now or timezone.now()
    batch_size, per_tenant = sweep_sizes(batch_size, per_tenant)
    turns = expired_turns_unembed(now=now, batch_size=batch_size)
    cutoff = now - timedelta(days=pipeline_setting("EXPIRED_RETENTION_DAYS"))
    due = Memory.objects.filter(expires_at__lte=cutoff)
    with transaction.atomic():
        if not sweep_lock("memories_expire"):
            return SweepResult(skipped=True)
        ids = fair_batch(due, order_by=["expires_at", "id"], batch_size=batch_size, per_tenant=per_tenant)
        fields = ("pk", "tenant_id", "kind", "expires_at", "content_hash", "validity", "superseded_by_id")
        memories_tenant_write_lock(ids)  # a successor's history is always in its own tenant
        # Every writer that sets an expiry or a supersession holds its tenant's
        # write lock, held now: what expired and the history behind it cannot
        # change, so they are read first and then locked all at once in
        # primary-key order (a history row below an expired one is never
        # waited for while the expired one is held).
        expired = list(Memory.objects.filter(pk__in=ids, expires_at__lte=cutoff).values_list("pk", flat=True))
        history: list[Any] = []
        successors = set(expired)
        while successors:
            older = list(
                Memory.objects.filter(superseded_by_id__in=successors)
                .exclude(pk__in=expired + history)
                .values_list("pk", flat=True)
            )
            history += older
            successors = set(older)
        # The turns after expired turns whose vectors were made before those
        # expired and that an earlier run did not get to (``expired_turns_unembed``
        # looks back a day): locked with the rows deleted, in one order.
        following = embedtext.expired_turns_following(memory_ids=expired, now=now)
        memory_rows_lock([*expired, *history, *(turn for turn, _ in following)])
        deleted = list(
            Memory.objects.filter(pk__in=expired + history).order_by("pk").select_for_update().values_list(*fields)
        )
        audit_rows(
            [(pk, tenant_id, kind) for pk, tenant_id, kind, *_ in deleted],
            EventType.EXPIRED_DELETED,
            [
                {
                    "expires_at": expires_at.isoformat() if expires_at else None,
                    "content_hash": digest,
                    "validity": validity,
                    **({"superseded_by": str(successor)} if pk not in expired else {}),
                }
                for pk, _, _, expires_at, digest, validity, successor in deleted
            ],
        )
        turns_unembed(following)
        Memory.objects.filter(pk__in=[row[0] for row in deleted]).delete()
        more = due.exists()
    return SweepResult(processed=len(deleted), more=more or turns.more, ids=[row[0] for row in deleted])


# How far back ``expired_turns_unembed`` looks for turns whose TTL passed: a
# day of runs the beat missed. A turn that expired before that is found when
# the sweep deletes it (``memories_expire``).
EXPIRED_TURNS_LOOKBACK = timedelta(days=1)


def expired_turns_unembed(*, now: datetime | None = None, batch_size: int | None = None) -> SweepResult:
    """A turn of a session leaves retrieval when its TTL passes; the turn after
    it, if still retrievable, was embedded with its text (memory/embedtext.py)
    and would still be found by it. That turn loses its vector and is embedded
    again without it (``vectors.turns_unembed``), a bounded batch per run, in
    a transaction of its own before the deletions (it takes memory rows only,
    no tenant lock). Part of the expiry sweep's run."""
    now = now or timezone.now()
    batch_size, _ = sweep_sizes(batch_size, None)
    with transaction.atomic():
        if not sweep_lock("expired_turns_unembed"):
            return SweepResult(skipped=True)
        turns = embedtext.turns_after_expired(since=now - EXPIRED_TURNS_LOOKBACK, now=now, limit=batch_size)
        turns_unembed(turns)
    return SweepResult(processed=len(turns), more=len(turns) >= batch_size, ids=[pk for pk, _ in turns])


# --- Confidence decay ----------------------------------------------------------------------

FACT_STATE_EVENT = EventType.FACT_STATE_CHANGED
# When a fact whose schedule cannot be computed is visited again.
FAILED_FACT_RETRY = timedelta(days=1)


def facts_decay(
    *, now: datetime | None = None, batch_size: int | None = None, per_tenant: int | None = None
) -> SweepResult:
    """Record each active fact's state (active / fading / expired by effective
    confidence, as the butlers memory module's memory_stats counts them) when it changes: one
    ``fact_state_changed`` event per transition. Only facts whose precomputed
    ``fact_state_changes_at`` has come are read (an index range scan, however
    many facts there are); confirming a fact makes it due at once, so the next
    sweep records it active again. Facts are not deleted or hidden by decay:
    retrieval weighs effective confidence itself."""
    now = now or timezone.now()
    batch_size, per_tenant = sweep_sizes(batch_size, per_tenant)
    due = Memory.objects.filter(kind=Kind.FACT, validity=Validity.ACTIVE, fact_state_changes_at__lte=now)
    with transaction.atomic():
        if not sweep_lock("facts_decay"):
            return SweepResult(skipped=True)
        ids = fair_batch(due, order_by=["fact_state_changes_at", "id"], batch_size=batch_size, per_tenant=per_tenant)
        changes = []
        failed = 0
        memories_tenant_write_lock(ids)
        facts = list(due.filter(pk__in=ids).without_vectors().select_for_update().order_by("pk"))
        for fact in facts:
            confirmed_at = fact.last_confirmed_at or fact.created_at
            try:
                state, next_change = scoring.fact_state_schedule(
                    confidence=fact.confidence, decay_rate=fact.decay_rate, confirmed_at=confirmed_at, now=now
                )
                effective = scoring.effective_confidence(fact.confidence, fact.decay_rate, confirmed_at, now)
            except (ArithmeticError, ValueError, TypeError):
                # One fact whose values defeat the arithmetic must not roll back
                # the batch (every other tenant's due facts with it): it keeps
                # its state and is tried again a day later, not on every run.
                logger.exception("facts_decay: cannot schedule fact %s; retrying it in a day", fact.pk)
                failed += 1
                fact.fact_state_changes_at = now + FAILED_FACT_RETRY
                continue
            previous = fact.fact_state or "active"
            if state != previous:
                changes.append(
                    (
                        (fact.pk, fact.tenant_id, Kind.FACT),
                        {"from": previous, "to": state, "effective_confidence": round(effective, 6)},
                    )
                )
            fact.fact_state, fact.fact_state_changes_at = state, next_change
        Memory.objects.bulk_update(facts, ["fact_state", "fact_state_changes_at"])
        audit_rows([c[0] for c in changes], FACT_STATE_EVENT, [c[1] for c in changes])
        more = due.exists()
    return SweepResult(processed=len(changes), more=more, failed=failed, ids=[c[0][0] for c in changes])


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
    only time changes (a proven rule needs 30 days of age)."""
    now = now or timezone.now()
    batch_size, per_tenant = sweep_sizes(batch_size, per_tenant)
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
        if not sweep_lock("rules_maturity"):
            return SweepResult(skipped=True)
        memories_tenant_write_lock(due)
        for rule in Memory.objects.filter(pk__in=due).without_vectors().select_for_update().order_by("pk"):
            before = rule.maturity or Maturity.CANDIDATE
            after = _settled_maturity(rule, now)
            if after == before:
                continue
            rule.save(update_fields=[*maturity_set(rule, after, now), "updated_at"])
            audit_rows(
                [(rule.pk, rule.tenant_id, Kind.RULE)],
                EventType.MATURITY_CHANGED,
                [{"from": before, "to": after, "reason": "maturity sweep (age)"}],
            )
            changed.append(rule.pk)
    return SweepResult(processed=len(changed), more=more, ids=changed)


# --- Rows that only live until they expire ----------------------------------------------------


def _expired_delete(model: Any, sweep: str, now: datetime | None, batch_size: int | None) -> SweepResult:
    """Delete ``model`` rows whose ``expires_at`` has passed, oldest first, one
    bounded batch per run. No read serves an expired row, so deleting one
    changes no answer and is not audited. Locks only the rows it deletes and
    takes no tenant lock, so it stands outside the tenant lock order."""
    now = now or timezone.now()
    batch_size, _ = sweep_sizes(batch_size, None)
    due = model.objects.filter(expires_at__lte=now)
    with transaction.atomic():
        if not sweep_lock(sweep):
            return SweepResult(skipped=True)
        ids = list(due.order_by("expires_at", "id").values_list("pk", flat=True)[:batch_size])
        deleted, _ = model.objects.filter(pk__in=ids, expires_at__lte=now).delete()
        more = due.exists()
    return SweepResult(processed=deleted, more=more, ids=ids)


def active_contexts_expire(*, now: datetime | None = None, batch_size: int | None = None) -> SweepResult:
    """pce active contexts: a snapshot of a ranking that a cursor pages
    through, answered Gone once expired (before and after this sweep)."""
    return _expired_delete(ActiveContext, "active_contexts_expire", now, batch_size)


def idempotency_keys_expire(*, now: datetime | None = None, batch_size: int | None = None) -> SweepResult:
    """Idempotency keys of writes: an expired key replays nothing (the next
    write with it takes it over)."""
    return _expired_delete(IdempotencyKey, "idempotency_keys_expire", now, batch_size)
