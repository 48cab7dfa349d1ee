"""Idempotency keys of writes: a client that lost the answer to a write (the
connection dropped, the web process died) sends it again with the same key and
gets the first answer back instead of a second row.

The design follows Stripe's. A key is scoped to (tenant, principal, surface and
tool): the same string sent to another tool, by another token's principal or in
another tenant is another key. It is stored with a fingerprint of the request
(SHA-256 of its canonical JSON, or of its bytes) and the answer the client got:

- same key, same request: the stored answer, flagged as a replay; nothing runs;
- same key, another request: ``KeyReused`` (CONFLICT), nothing runs;
- same key while the first request still runs: the duplicate waits for it (on
  the key's unique index) and then replays its answer; after
  ``IDEMPOTENCY_WAIT_SECONDS`` it gets ``KeyInFlight`` (TIMEOUT, retryable);
- a failed write stores no key (its transaction rolled back): a retry runs again.

The key is claimed, the write runs and its answer is recorded in one
transaction, so a write and its key commit together or not at all: there is no
window in which the write is stored and its key is not. Lock order: the key is
claimed first, before any tenant write lock (memory.services.locks); a
duplicate waits on it holding nothing, so the wait cannot close a cycle.

Keys live ``IDEMPOTENCY_TTL_SECONDS`` (24 h by default); an expired key is
free again at once and the idempotency-keys-expire sweep
(``memory.services.sweeps.idempotency_keys_expire``) deletes its row."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from memory.errors import DomainError, InvalidArgument
from memory.models import IdempotencyKey
from policy.caller import Caller

KEY_MAX_CHARS = 255
# Stored for a caller without a principal (a key must still be unique).
NO_PRINCIPAL = uuid.UUID(int=0)
# PostgreSQL's lock_not_available: the wait for the first request ran out.
_LOCK_NOT_AVAILABLE = "55P03"

J = TypeVar("J")


class KeyReused(DomainError):
    """The key was already used for a different request."""

    code = "CONFLICT"


class KeyInFlight(DomainError):
    """The first request with this key is still running; retry shortly."""

    code = "TIMEOUT"


@dataclass(frozen=True)
class IdempotentAnswer:
    answer: Any
    replayed: bool


def idempotency_key_problem(key: object) -> str | None:
    """Why ``key`` cannot be an idempotency key, or None."""
    if not isinstance(key, str) or not key.strip():
        return "the idempotency key must be a non-empty string."
    if len(key) > KEY_MAX_CHARS:
        return f"the idempotency key is over the limit of {KEY_MAX_CHARS} characters."
    if not key.isprintable():
        return "the idempotency key must be printable text (no control characters)."
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return "the idempotency key is not valid Unicode text."
    return None


def request_fingerprint(request: Any) -> str:
    """SHA-256 of a request: its bytes as sent, or the canonical JSON of its arguments."""
    if isinstance(request, bytes):
        data = request
    else:
        data = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str).encode()
    return hashlib.sha256(data).hexdigest()


def idempotent(*, caller: Caller, scope: str, key: str | None, request: Any, run: Callable[[], J]) -> IdempotentAnswer:
    """Run the write ``run`` at most once per ``key``. ``run`` returns the answer
    the client gets, as JSON-serialisable data; ``request`` is what identifies
    the write (its arguments, or its body's bytes). Without a key ``run`` runs
    as it always did, in no transaction of ours."""
    if key is None:
        return IdempotentAnswer(run(), replayed=False)
    problem = idempotency_key_problem(key)
    if problem:
        raise InvalidArgument(problem)
    fingerprint = request_fingerprint(request)
    with transaction.atomic():
        claimed = _claim(caller, scope, key, fingerprint)
        if claimed is None:
            return _replay(caller, scope, key, fingerprint)
        answer = run()
        IdempotencyKey.objects.filter(pk=claimed).update(answer=json.dumps(answer))
    return IdempotentAnswer(answer, replayed=False)


def _principal(caller: Caller) -> uuid.UUID:
    return caller.principal_id or NO_PRINCIPAL


def _claim(caller: Caller, scope: str, key: str, fingerprint: str) -> int | None:
    """Insert the key (answer pending) and return its id, or None when a live
    key holds it. An expired key is taken over. A key another transaction is
    claiming makes the insert wait for that transaction, at most
    IDEMPOTENCY_WAIT_SECONDS."""
    now = timezone.now()
    expires = now + timedelta(seconds=settings.MEMPROJ["IDEMPOTENCY_TTL_SECONDS"])
    wait_ms = max(1, int(settings.MEMPROJ["IDEMPOTENCY_WAIT_SECONDS"] * 1000))
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)", [f"{wait_ms}ms"])
        previous = cursor.fetchone()[0]
        try:
            cursor.execute(
                """
                INSERT INTO memory_idempotencykey AS k
                    (tenant_id, principal_id, scope, key, fingerprint, answer, created_at, expires_at)
                VALUES (%s, %s, %s, %s, %s, '', %s, %s)
                ON CONFLICT (tenant_id, principal_id, scope, key) DO UPDATE
                    SET fingerprint = EXCLUDED.fingerprint, answer = '',
                        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
                    WHERE k.expires_at <= EXCLUDED.created_at
                RETURNING k.id
                """,
                [caller.tenant_id, _principal(caller), scope, key, fingerprint, now, expires],
            )
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
                raise _in_flight() from exc
            raise
        row = cursor.fetchone()
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])
    return None if row is None else int(row[0])


def _replay(caller: Caller, scope: str, key: str, fingerprint: str) -> IdempotentAnswer:
    stored = (
        IdempotencyKey.objects.filter(tenant_id=caller.tenant_id, principal_id=_principal(caller), scope=scope, key=key)
        .values("fingerprint", "answer")
        .first()
    )
    if stored is None or not stored["answer"]:
        raise _in_flight()
    if stored["fingerprint"] != fingerprint:
        raise KeyReused(
            "this idempotency key was already used with different arguments; use a new key for a different request."
        )
    return IdempotentAnswer(json.loads(stored["answer"]), replayed=True)


def _in_flight() -> KeyInFlight:
    return KeyInFlight("a request with this idempotency key is still in progress; retry in a few seconds.")
