"""The audit log against the tampering attempts of issue 15, made from the
service's own database role (the tests connect as it), and from the owner's.
Each is refused, or - for an INSERT, which the service role may do - detected
by ``manage.py audit_verify``."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from memory.errors import PermissionDenied
from memory.models import MemoryEvent
from memory.services.events import EventType, chain_verify, events_seal_unkeyed
from memory.services.memories import episode_store, fact_store, memory_forget
from memory.services.purge import principal_purge, tenant_purge
from memproj.dbroles import as_owner, separate_roles

pytestmark = pytest.mark.django_db(transaction=True)

REFUSED = "append-only|permission denied|must be owner|must be member"


def refused(sql: str, params: list | None = None) -> None:
    with pytest.raises(DatabaseError, match=REFUSED), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)


def verify(tenant: str | None = None) -> str:
    out = io.StringIO()
    call_command("audit_verify", *(["--tenant", tenant] if tenant else []), stdout=out)
    return out.getvalue()


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
    last = MemoryEvent.objects.order_by("-id").first()
    assert last is not None and last.event_type == EventType.PRINCIPAL_PURGED

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
    """Even the owner's direct call deletes nothing without a chained purge event
    after it; called in SQL (not through `manage.py purge`, which holds the
    key), its event has no MAC, and the check says so."""
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
    [report] = chain_verify(tenant_ids=[member.caller.tenant_id])
    assert report.problems == [f"event {event.pk}: has no MAC (written or re-chained without the audit key)"]


# --- the keyed chain (issue 23): a rewrite made with the database alone ------------------------


def rechain(conn: psycopg.Connection, tenant_id: uuid.UUID) -> None:
    """Recompute a tenant's sha256 chain in SQL, as anyone who may write the
    table can (the recipe is public: migrations 0028, 0040)."""
    conn.execute(
        f"""DO $$ DECLARE ev record; prev text := ''; BEGIN
        FOR ev IN SELECT * FROM memory_memoryevent WHERE tenant_id = '{tenant_id}' ORDER BY id LOOP
            UPDATE memory_memoryevent SET prev_hash = prev,
                hash = memproj_event_hash(ev.hash_version, prev, ev.tenant_id, ev.event_type, ev.memory_id,
                                          ev.memory_kind, ev.actor_principal_id, ev.actor_token_id, ev.payload,
                                          ev.created_at)
             WHERE id = ev.id RETURNING hash INTO prev;
        END LOOP; END $$"""
    )


@pytest.fixture
def superuser_connection() -> Iterator[psycopg.Connection]:
    """The embedded server's superuser, with its password (what the service's OS user may read)."""
    if not settings.MEMPROJ_EMBEDDED_POSTGRES:
        pytest.skip("the superuser's password is known only for the embedded server")
    from memproj.embedded import VAR_DIR

    db = connection.settings_dict
    secret = VAR_DIR / "secrets" / "pg-postgres.password"
    password = secret.read_text().strip() if secret.exists() else None
    conn = psycopg.connect(dbname=db["NAME"], host=db["HOST"], user="postgres", password=password, autocommit=True)
    yield conn
    conn.close()


@pytest.mark.parametrize("role", ["owner", "superuser"])
def test_a_rewrite_that_recomputes_the_chain_in_sql_is_detected(role, member, outsider, request):
    """Issue 23, point 5: as the owner or the superuser, switch the guard off,
    edit an event, recompute the tenant's unkeyed chain: every hash matches
    again, but the MACs (keyed outside the database) do not."""
    conn = request.getfixturevalue(f"{role}_connection")
    for n in range(3):
        episode_store(caller=member.caller, content=f"note {n}", butler="general")
    episode_store(caller=outsider.caller, content="elsewhere", butler="general")
    first, second, third = MemoryEvent.objects.filter(tenant_id=member.caller.tenant_id).order_by("id")
    assert "problems" not in verify()

    conn.execute("ALTER TABLE memory_memoryevent DISABLE TRIGGER memory_event_append_only")
    try:
        conn.execute(
            """UPDATE memory_memoryevent SET payload = '{"content": "rewritten"}' WHERE id = %s""", [second.pk]
        )
        rechain(conn, member.caller.tenant_id)
        [report] = chain_verify(tenant_ids=[member.caller.tenant_id])
        # The unkeyed chain is whole again: only the MACs tell, from the edited row on.
        assert not any("hash" in p or "follow" in p for p in report.problems)
        assert report.problems == [
            f"event {pk}: its MAC does not match (it, or the chain before it, was rewritten without the audit key)"
            for pk in (second.pk, third.pk)
        ]
        with pytest.raises(CommandError, match="tampered"):
            verify()
        # Clearing the MACs does not pass for an event from before the key either.
        conn.execute("UPDATE memory_memoryevent SET mac = '' WHERE tenant_id = %s", [member.caller.tenant_id])
        [report] = chain_verify(tenant_ids=[member.caller.tenant_id])
        assert len(report.problems) == 3 and all("has no MAC" in p for p in report.problems)
    finally:
        conn.execute("ALTER TABLE memory_memoryevent ENABLE TRIGGER memory_event_append_only")
    # The other tenant's chain is untouched.
    assert chain_verify(tenant_ids=[outsider.caller.tenant_id])[0].ok


def test_the_service_role_may_seal_an_event_once_and_change_nothing_else(member):
    episode_store(caller=member.caller, content="something happened", butler="general")
    event = MemoryEvent.objects.get()
    assert event.mac and chain_verify(tenant_ids=[member.caller.tenant_id])[0].ok
    refused("UPDATE memory_memoryevent SET mac = %s WHERE id = %s", ["0" * 64, event.pk])
    refused("UPDATE memory_memoryevent SET mac = '' WHERE id = %s", [event.pk])
    refused("UPDATE memory_memoryevent SET hash = '' WHERE id = %s", [event.pk])
    assert MemoryEvent.objects.get().mac == event.mac


def test_events_from_before_the_key_are_keyed_once_up_to_the_first_break(member, owner_connection):
    """What migration 0035 does with the events an older version wrote: key
    those whose chain verifies, never one after a break (that would launder
    an earlier edit)."""
    for n in range(4):
        episode_store(caller=member.caller, content=f"note {n}", butler="general")
    events = list(MemoryEvent.objects.order_by("id"))
    owner_connection.execute("ALTER TABLE memory_memoryevent DISABLE TRIGGER memory_event_append_only")
    try:
        owner_connection.execute("UPDATE memory_memoryevent SET mac = ''")
        owner_connection.execute("""UPDATE memory_memoryevent SET payload = '{"x": 1}' WHERE id = %s""", [events[2].pk])
    finally:
        owner_connection.execute("ALTER TABLE memory_memoryevent ENABLE TRIGGER memory_event_append_only")

    assert events_seal_unkeyed() == 2
    [report] = chain_verify(tenant_ids=[member.caller.tenant_id])
    assert report.problems == [
        f"event {events[2].pk}: its hash does not match its content (the row was altered)",
        f"event {events[2].pk}: has no MAC (written or re-chained without the audit key)",
        f"event {events[3].pk}: has no MAC (written or re-chained without the audit key)",
    ]
    assert events_seal_unkeyed() == 0


def test_a_purge_keeps_the_chain_keyed_but_never_seals_an_earlier_rewrite(owner, member, owner_connection):
    kept = episode_store(caller=owner.caller, content="the owner's note", butler="general")
    episode_store(caller=member.caller, content="the member's note", butler="general")
    later = episode_store(caller=owner.caller, content="a later note", butler="general")
    last = episode_store(caller=owner.caller, content="the last note", butler="general")
    rewritten = MemoryEvent.objects.get(memory_id=later.id)
    # Someone with the database alone rewrites an event after the member's, and re-chains.
    owner_connection.execute("ALTER TABLE memory_memoryevent DISABLE TRIGGER memory_event_append_only")
    try:
        owner_connection.execute(
            """UPDATE memory_memoryevent SET payload = '{"content": "rewritten"}' WHERE id = %s""", [rewritten.pk]
        )
        rechain(owner_connection, owner.caller.tenant_id)
    finally:
        owner_connection.execute("ALTER TABLE memory_memoryevent ENABLE TRIGGER memory_event_append_only")

    with as_owner():
        principal_purge(principal_id=member.caller.principal_id, reason="ticket 9")
    [report] = chain_verify(tenant_ids=[owner.caller.tenant_id])
    # The purge re-chained and sealed what it could vouch for; the rewritten rows stay reported.
    last_event = MemoryEvent.objects.get(memory_id=last.id)
    assert report.problems == [
        f"event {pk}: has no MAC (written or re-chained without the audit key)" for pk in (rewritten.pk, last_event.pk)
    ]
    assert MemoryEvent.objects.get(memory_id=kept.id).mac
    purge_event = MemoryEvent.objects.order_by("-id").first()
    assert purge_event is not None and purge_event.mac


def test_the_owner_and_the_superuser_need_their_passwords(member):
    """The embedded server authenticates every role: the service's OS user,
    connecting as the owner or the superuser without a password, is refused,
    and the service's role cannot become either."""
    if not settings.MEMPROJ_EMBEDDED_POSTGRES:
        pytest.skip("the embedded server's authentication")
    db = connection.settings_dict
    for role in ("memproj_owner", "postgres"):
        with pytest.raises(psycopg.OperationalError, match="password"):
            psycopg.connect(dbname=db["NAME"], host=db["HOST"], user=role, password="")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(dbname=db["NAME"], host=db["HOST"], user=role, password="guess")
        refused(f"SET ROLE {role}")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_auth_members WHERE member = current_user::regrole")
        assert cursor.fetchone()[0] == 0


def test_forgotten_is_an_alias_of_retracted():
    from memory import validation
    from memory.errors import InvalidArgument

    assert validation.validity("forgotten") == "retracted"
    assert validation.validity("retracted") == "retracted"
    with pytest.raises(InvalidArgument):
        validation.validity("deleted")
