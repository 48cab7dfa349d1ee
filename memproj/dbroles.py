"""The two database roles: the owner runs migrations and owns the
schema; the app role (DATABASE_URL) is what the service connects as and owns
nothing, so the audit log's guards cannot be switched off from a service
connection. See memproj/settings/base.py for how the two URLs are given."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from psycopg import sql

# The audit log and the refused-call log: the app role may read and append, nothing else.
APPEND_ONLY_TABLES = ("memory_memoryevent", "memory_refusedcall")

# Serialises concurrent re-grants (two hosts migrating at once): GRANT ON ALL
# TABLES rewrites every table's catalog row, and two sessions doing that side by
# side fail with "tuple concurrently updated". An arbitrary constant key.
_GRANTS_LOCK_KEY = 0x6D656D70_67726E74


def app_user() -> str:
    return str(settings.MEMPROJ_DB_APP_USER or "")


def owner_user() -> str:
    return str(settings.MEMPROJ_DB_OWNER.get("USER", ""))


def separate_roles() -> bool:
    return bool(owner_user()) and owner_user() != app_user()


@contextmanager
def as_owner(alias: str = "default") -> Iterator[None]:
    """Reconnect ``alias`` as the schema owner for the duration (migrations,
    the test database's set-up). A no-op when no owner role is configured."""
    if not separate_roles():
        yield
        return
    connection = connections[alias]
    saved = {key: connection.settings_dict.get(key) for key in settings.MEMPROJ_DB_OWNER}
    connection.close()
    connection.settings_dict.update(settings.MEMPROJ_DB_OWNER)
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.update(saved)


def grant_app_privileges(*, using: str = "default", **_: Any) -> None:
    """Run by the owner after every migrate (post_migrate): the app role reads
    and writes every table, appends to the audit log and seals what it
    appended (its ``mac`` column); it owns nothing, so it
    cannot TRUNCATE, ALTER, DISABLE TRIGGER or DROP. Nor may it call the purge
    function: a purge is an operator's act (`manage.py purge`, which connects as
    the owner), never something a compromised service connection could do; an
    EXECUTE granted by an older version is revoked here. Idempotent.

    One transaction: a migrate runs while web processes serve (an upgrade), and
    one statement at a time the role briefly had no UPDATE (mac) on the audit
    log (revoked with UPDATE, then granted again), failing every store meanwhile."""
    if not separate_roles():
        return
    app = sql.Identifier(app_user())
    statements = [
        sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(app),
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {}").format(app),
        sql.SQL("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {}").format(app),
        sql.SQL("REVOKE TRUNCATE, REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA public FROM {}").format(app),
    ]
    # Each only once its migration made it (a database migrated back is granted too).
    for table in APPEND_ONLY_TABLES:
        statements.append(
            sql.SQL(
                "DO $$ BEGIN IF to_regclass({}) IS NOT NULL "
                "THEN EXECUTE format('REVOKE UPDATE, DELETE ON %I FROM %I', {}, {}); END IF; END $$"
            ).format(sql.Literal(f"public.{table}"), sql.Literal(table), sql.Literal(app_user()))
        )
    # The writer seals each event it appends (memory/services/events.py): the
    # one column the service's role may update, once (the trigger checks that).
    statements.append(
        sql.SQL(
            "DO $$ BEGIN IF EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' "
            "AND table_name = 'memory_memoryevent' AND column_name = 'mac') "
            "THEN EXECUTE format('GRANT UPDATE (mac) ON memory_memoryevent TO %I', {}); END IF; END $$"
        ).format(sql.Literal(app_user()))
    )
    statements.append(
        sql.SQL(
            "DO $$ BEGIN IF to_regprocedure('memproj_purge_events(uuid,text,uuid,jsonb,uuid[],uuid)') IS NOT NULL "
            "THEN EXECUTE format('REVOKE EXECUTE ON FUNCTION memproj_purge_events(uuid,text,uuid,jsonb,uuid[],uuid) "
            "FROM PUBLIC, %I', {}); END IF; END $$"
        ).format(sql.Literal(app_user()))
    )
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_GRANTS_LOCK_KEY])
        for statement in statements:
            cursor.execute(statement)
