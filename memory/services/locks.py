"""The one lock order of every write path (web, worker, beat, admin, purge).

A write transaction takes, in this order and never the other way round:

0. when the write carries an idempotency key, that key's row
   (``memory.services.idempotency``): claimed first, so a duplicate waits on it
   holding nothing else;
1. the tenant write lock of each tenant it will change (``tenant_write_lock``),
   tenants in ascending id order;
2. a fact key's advisory lock (``memories._lock_fact_key``);
3. memory rows ``FOR UPDATE``, in primary-key order where there are several;
4. the rows that hang off memories (follow-ups, conflict candidates, entities);
5. the term-statistics rows, which the INSERT/DELETE triggers of
   ``memory_memory`` upsert in (tenant, term) order (migration 0011).

The tenant write lock is the same advisory lock the audit writer
(``memproj_events_append``) takes to chain a tenant's events, so a write that
reaches its audit append already holds it (advisory locks are re-entrant).
Taking it first is what keeps two writers of one tenant from holding steps
2-5 in opposite orders: an insert that took the term-statistics rows and then
waited for the audit lock, against a duplicate merge that held the audit lock
and then waited for a term-statistics or memory row, was a deadlock.

The primitives that lock (``memory_lock``, ``_lock_fact_key``, the inserts,
``memory_supersede``) take it themselves; a service that locks rows of its own
calls ``tenant_write_lock`` before it does. Writes that append nothing (a
vector, an access time, a reference count) need not take it: they take only
memory rows, and ``memory_rows_lock`` takes several in primary-key order first,
so such a write never holds one row while waiting for a row a writer holds
(one multi-row UPDATE locks in its plan's order, which is no order at all).
``memory_rows_update`` does both in one statement, for a read's bookkeeping."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from memory.models import Memory

# The key memproj_events_append locks (migration 0028): keep the two in step.
_TENANT_LOCK_PREFIX = "memproj.events."


def tenant_write_lock(tenant_ids: uuid.UUID | Iterable[uuid.UUID]) -> None:
    """Take the write lock of one or more tenants, inside the caller's
    transaction (released at commit or rollback), in ascending id order."""
    ids = [tenant_ids] if isinstance(tenant_ids, uuid.UUID) else list(tenant_ids)
    ordered = sorted({str(tenant_id) for tenant_id in ids})
    if not ordered:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            # unnest keeps the array's (sorted) order.
            "SELECT pg_advisory_xact_lock(hashtextextended(%s::text || t, 0)) FROM unnest(%s::text[]) AS t",
            [_TENANT_LOCK_PREFIX, ordered],
        )


def memories_tenant_write_lock(memory_ids: Iterable[uuid.UUID]) -> None:
    """A sweep's form: the write locks of every tenant owning one of the
    memories it is about to lock, before it locks any of them."""
    ids = list(memory_ids)
    if ids:
        tenant_write_lock(Memory.objects.filter(pk__in=ids).values_list("tenant_id", flat=True).distinct())


def memory_rows_lock(memory_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """Step 3 for a multi-row UPDATE that appends nothing: lock the rows
    ``FOR NO KEY UPDATE`` in primary-key order, inside the caller's transaction,
    before the UPDATE that follows takes them again. Returns the ids found."""
    ids = sorted({str(memory_id) for memory_id in memory_ids})
    if not ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT id FROM memory_memory WHERE id = ANY(%s::uuid[]) ORDER BY id FOR NO KEY UPDATE", [ids])
        return [row[0] for row in cursor.fetchall()]


# A read's bookkeeping commits without waiting for its WAL to reach the disk:
# the read would otherwise wait on a flush for a write whose loss in a server
# crash (the marks of the last few hundred milliseconds, up to three times
# wal_writer_delay) leaves nothing inconsistent, only an older access time or
# count. Inside a caller's transaction the caller's commit decides, so a write
# that bumps a count keeps its own durability.
_ASYNC_COMMIT = "SET LOCAL synchronous_commit = off;\n"


def memory_rows_update(
    *,
    tenant_id: uuid.UUID,
    memory_ids: Iterable[uuid.UUID],
    assignments: str,
    params: Sequence[Any],
    only_if: str = "TRUE",
    only_if_params: Sequence[Any] = (),
    returning: str = "",
) -> list[tuple[Any, ...]]:
    """Lock a tenant's rows ``FOR NO KEY UPDATE`` in primary-key order and
    update them, as one statement: the lock order of ``memory_rows_lock``
    without a transaction of its own, so a read's bookkeeping (an access time,
    a reference count) is one round trip instead of BEGIN, lock, UPDATE and
    COMMIT. ``only_if`` is checked again on a row that changed while this
    statement waited for it; ``assignments``, ``only_if`` and ``returning`` are
    fixed SQL of the caller (columns of ``m``), never input. Outside a
    transaction it commits asynchronously (``_ASYNC_COMMIT``)."""
    ids = sorted({str(memory_id) for memory_id in memory_ids})
    if not ids:
        return []
    with connection.cursor() as cursor:
        sql = (
            "WITH locked AS (SELECT m.id FROM memory_memory AS m"  # noqa: S608 - fixed SQL of the caller
            f" WHERE m.id = ANY(%s::uuid[]) AND m.tenant_id = %s AND ({only_if})"
            " ORDER BY m.id FOR NO KEY UPDATE OF m)"
            f" UPDATE memory_memory AS m SET {assignments} FROM locked WHERE m.id = locked.id"
        )
        if returning:
            sql += f" RETURNING {returning}"
        if not connection.in_atomic_block:
            # Client-side binding sends the string with the simple query
            # protocol: both statements run as one transaction.
            sql = _ASYNC_COMMIT + sql
        cursor.execute(sql, [ids, str(tenant_id), *only_if_params, *params])
        while cursor.nextset():
            pass
        return cursor.fetchall() if returning else []


def memory_group_lock(memory_ids: Iterable[uuid.UUID]) -> None:
    """Step 3 for a write that will change several memories one call after
    another (a duplicate group merged pair by pair): lock them all ``FOR
    UPDATE`` in primary-key order first, inside the caller's transaction, so
    the per-call locks that follow only take rows already held."""
    ids = sorted({str(memory_id) for memory_id in memory_ids})
    if ids:
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM memory_memory WHERE id = ANY(%s::uuid[]) ORDER BY id FOR UPDATE", [ids])
