"""The audit log against the tampering attempts of issue 15, made from the
service's own database role (the tests connect as it), and from the owner's.
Each is refused, or - for an INSERT, which the service role may do - detected
by ``manage.py audit_verify``."""

from __future__ import annotations

import io
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from memory.errors import PermissionDenied
from memory.models import MemoryEvent
from memory.services.events import EventType, chain_verify
from memory.services.memories import episode_store, fact_store, memory_forget
from memory.services.purge import principal_purge, tenant_purge
from memproj.dbroles import as_owner, separate_roles

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "append-only|permission denied|must be owner"


def refused(sql: str, params: list | None = None) -> None:
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


def verify(tenant: str | None = None) -> str:
    out = io.StringIO()
    call_command("audit_verify", *(["--tenant", tenant] if tenant else []), stdout=out)
    return out.getvalue()


@pytest.fixture
def owner_connection() -> Iterator[psycopg.Connection]:
    """A second connection as the schema owner (what migrations use)."""
    if not separate_roles():
        pytest.skip("no separate owner role configured")
    db = connection.settings_dict
    conn = psycopg.connect(
        dbname=db["NAME"],
        host=db["HOST"] or None,
        port=db["PORT"] or None,
        user=settings.MEMPROJ_DB_OWNER["USER"],
        password=settings.MEMPROJ_DB_OWNER.get("PASSWORD") or None,
        autocommit=True,
    )
    yield conn
    conn.close()


def test_the_service_connects_as_a_role_that_owns_nothing():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = current_user",
        )
        assert cursor.fetchone() == (False, False, False)
        cursor.execute(
            "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)"
        )
        assert cursor.fetchone()[0] == 0


def test_every_tampering_attempt_is_refused(member):
    episode_store(caller=member.caller, content="something happened", butler="general")
    event = MemoryEvent.objects.get(event_type=EventType.STORED)
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        MemoryEvent.objects.filter(pk=event.pk).update(event_type="tampered")
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic():
        MemoryEvent.objects.filter(pk=event.pk).delete()
    refused("DELETE FROM memory_memoryevent")
    refused("TRUNCATE memory_memoryevent")
    refused("TRUNCATE memory_memoryevent CASCADE")
    # The old purge flag opens nothing any more.
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL memproj.allow_event_purge = 'on'")
        cursor.execute("DELETE FROM memory_memoryevent")
    refused("ALTER TABLE memory_memoryevent DISABLE TRIGGER memory_event_append_only")
    refused("ALTER TABLE memory_memoryevent DISABLE TRIGGER ALL")
    refused("SET session_replication_role = replica")
    refused("DROP TABLE memory_memoryevent")
    refused(
        "CREATE OR REPLACE FUNCTION memproj_memory_event_append_only() RETURNS trigger"
        " AS $$ BEGIN RETURN OLD; END; $$ LANGUAGE plpgsql"
    )
    assert MemoryEvent.objects.get(pk=event.pk).event_type == EventType.STORED
    assert "chain intact" in verify()


def test_even_the_owner_cannot_delete_or_truncate_outside_the_purge(member, owner_connection):
    episode_store(caller=member.caller, content="something happened", butler="general")
    for sql in [
        "DELETE FROM memory_memoryevent",
        "TRUNCATE memory_memoryevent",
        "UPDATE memory_memoryevent SET payload = '{}'",
    ]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            owner_connection.execute(sql)
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"), owner_connection.transaction():
        owner_connection.execute("SET LOCAL memproj.allow_event_purge = 'on'")
        owner_connection.execute("DELETE FROM memory_memoryevent")
    assert MemoryEvent.objects.count() == 1


def test_a_back_dated_insert_is_detected(member, outsider):
    fact_store(caller=member.caller, subject="user", predicate="city", content="User lives in Berlin")
    fact_store(caller=outsider.caller, subject="user", predicate="city", content="User lives in Rome")
    assert "problems" not in verify()
    # The service role may append, so an INSERT that bypasses the writer succeeds ...
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memory_memoryevent (tenant_id, memory_kind, event_type, payload, created_at, prev_hash, hash)"
            " VALUES (%s, 'fact', 'retracted', '{}', '2020-01-01T00:00:00Z', '', '')",
            [member.caller.tenant_id],
        )
    # ... and breaks the tenant's chain, which the command reports (the other tenant's stays intact).
    with pytest.raises(CommandError, match="tampered"):
        verify()
    [broken, intact] = chain_verify(tenant_ids=[member.caller.tenant_id, outsider.caller.tenant_id])
    assert not broken.ok and intact.ok
    assert any("does not follow" in p for p in broken.problems)


def test_an_altered_or_removed_row_is_detected(member, owner_connection):
    for n in range(3):
        episode_store(caller=member.caller, content=f"note {n}", butler="general")
    first, middle, _ = MemoryEvent.objects.order_by("id")
    # The owner can switch the guard off (it owns the table): the chain still tells.
    owner_connection.execute("ALTER TABLE memory_memoryevent DISABLE TRIGGER memory_event_append_only")
    try:
        owner_connection.execute("UPDATE memory_memoryevent SET payload = '{\"x\": 1}' WHERE id = %s", [first.pk])
        [report] = chain_verify(tenant_ids=[member.caller.tenant_id])
        assert any(f"event {first.pk}: its hash" in p for p in report.problems)
        owner_connection.execute("UPDATE memory_memoryevent SET payload = '{}' WHERE id = %s", [first.pk])
        assert chain_verify(tenant_ids=[member.caller.tenant_id])[0].ok
        owner_connection.execute("DELETE FROM memory_memoryevent WHERE id = %s", [middle.pk])
    finally:
        owner_connection.execute("ALTER TABLE memory_memoryevent ENABLE TRIGGER memory_event_append_only")
    [report] = chain_verify(tenant_ids=[member.caller.tenant_id])
    assert any("does not follow" in p for p in report.problems)


def test_purges_go_through_the_function_keep_the_chain_and_leave_their_mark(owner, member):
    kept = fact_store(caller=owner.caller, subject="team", predicate="lead", content="Ana leads the team").memory
    gone = fact_store(caller=member.caller, subject="me", predicate="diagnosis", content="I have asthma").memory
    memory_forget(caller=owner.caller, kind="fact", memory_id=gone.id)
    episode_store(caller=owner.caller, content="after the member's writes", butler="general")

    with as_owner():
        result = principal_purge(principal_id=member.caller.principal_id, reason="ticket 7")
    assert result.events == 2 and not MemoryEvent.objects.filter(memory_id=gone.id).exists()
    assert MemoryEvent.objects.filter(memory_id=kept.id).exists()
    # The events after the removed ones were re-chained by the purge function.
    assert "chain intact" in verify("tenant-a")
    assert MemoryEvent.objects.order_by("-id").first().event_type == EventType.PRINCIPAL_PURGED

    with as_owner():
        tenant_purge(tenant_id=owner.caller.tenant_id, reason="ticket 8")
    assert list(MemoryEvent.objects.values_list("event_type", "prev_hash")) == [(EventType.TENANT_PURGED, "")]
    assert "chain intact" in verify("tenant-a")


def test_the_service_role_cannot_call_the_purge_function(member):
    """A purge is the operator's act: the service's role (what a compromised web
    process holds) may not execute the purge function, and the purge services
    say how to purge instead."""
    if not separate_roles():
        pytest.skip("no separate owner role configured")
    episode_store(caller=member.caller, content="something happened", butler="general")
    refused(
        "SELECT memproj_purge_events(%s, 'tenant_purged', NULL, '{}'::jsonb, NULL, NULL)", [member.caller.tenant_id]
    )
    with pytest.raises(PermissionDenied, match="manage.py purge"):
        tenant_purge(tenant_id=member.caller.tenant_id)
    with pytest.raises(PermissionDenied, match="manage.py purge"):
        principal_purge(principal_id=member.caller.principal_id)
    assert list(MemoryEvent.objects.values_list("event_type", flat=True)) == [EventType.STORED]


def test_the_purge_function_called_by_the_owner_is_on_the_record(member, owner_connection):
    """Even the owner's direct call deletes nothing without a chained purge event after it."""
    episode_store(caller=member.caller, content="something happened", butler="general")
    owner_connection.execute(
        "SELECT memproj_purge_events(%s, 'tenant_purged', NULL, '{}'::jsonb, NULL, NULL)", [member.caller.tenant_id]
    )
    [event] = MemoryEvent.objects.all()
    assert (event.event_type, event.payload) == (EventType.TENANT_PURGED, {"events": 1})
    with pytest.raises(psycopg.Error, match="unknown purge event type"):
        owner_connection.execute(
            "SELECT memproj_purge_events(%s, 'stored', NULL, '{}'::jsonb, NULL, NULL)", [member.caller.tenant_id]
        )
    assert "chain intact" in verify()


def test_forgotten_is_an_alias_of_retracted():
    from memory import validation
    from memory.errors import InvalidArgument

    assert validation.validity("forgotten") == "retracted"
    assert validation.validity("retracted") == "retracted"
    with pytest.raises(InvalidArgument):
        validation.validity("deleted")
