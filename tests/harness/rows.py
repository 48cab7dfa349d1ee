"""Views of the database's rows (Django must be set up by the caller): a digest
per table and tenant, memory ids by tenant, and consistency checks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable


def tenant_tables() -> list[tuple[str, str, list[str]]]:
    """Every table with a tenant column: (table, primary key, columns to compare).
    Found from the model registry, so tables added later are covered too; vector
    and tsvector columns are derived and left out."""
    from django.apps import apps
    from django.db import connection

    found = []
    with connection.cursor() as cursor:
        for model in apps.get_models():
            fields = {f.name: f for f in model._meta.concrete_fields}
            tenant = fields.get("tenant")
            if tenant is None or not tenant.is_relation:
                continue
            table = model._meta.db_table
            cursor.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND udt_name NOT IN ('vector', 'tsvector') ORDER BY ordinal_position",
                [table],
            )
            columns = [row[0] for row in cursor.fetchall()]
            found.append((table, model._meta.pk.column, columns))
    return found


class Digests:
    """One md5 per (table, tenant) over every compared column of every row."""

    def __init__(self) -> None:
        from django.db import connection

        parts = []
        for table, pk, columns in tenant_tables():
            cols = ", ".join(f"{connection.ops.quote_name(c)}::text" for c in columns)
            parts.append(
                f"SELECT '{table}' AS t, tenant_id::text, count(*), "  # noqa: S608 - names from the model registry
                f"md5(string_agg(concat_ws('|', {cols}), E'\\n' ORDER BY {connection.ops.quote_name(pk)})) "
                f"FROM {connection.ops.quote_name(table)} GROUP BY tenant_id"
            )
        self.sql = " UNION ALL ".join(parts)

    def take(self) -> dict[tuple[str, str], tuple[int, str]]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(self.sql)
            return {(t, tenant): (n, digest) for t, tenant, n, digest in cursor.fetchall()}


def memory_ids_by_tenant(kinds: dict[str, str] | None = None) -> dict[str, set[str]]:
    """tenant id -> its memory ids (and, into ``kinds``, id -> kind)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT tenant_id::text, id::text, kind FROM memory_memory")
        out: dict[str, set[str]] = defaultdict(set)
        for tenant, pk, kind in cursor.fetchall():
            out[tenant].add(pk)
            if kinds is not None:
                kinds[pk] = kind
    return out


CONSISTENCY_CHECKS = {
    "memory rows without their 'stored' audit event": (
        "SELECT count(*) FROM memory_memory m WHERE NOT EXISTS (SELECT 1 FROM memory_memoryevent e "
        "WHERE e.memory_id = m.id AND e.event_type = 'stored')"
    ),
    "rows marked embedded without a vector": (
        "SELECT count(*) FROM memory_memory WHERE embedding_status = 'ready' AND embedding IS NULL"
    ),
    "superseded facts without a successor": (
        "SELECT count(*) FROM memory_memory WHERE validity = 'superseded' AND superseded_by_id IS NULL"
    ),
    "rows with NUL or an empty content": "SELECT count(*) FROM memory_memory WHERE btrim(content) = ''",
    "rows whose tenant differs from their principal's": (
        "SELECT count(*) FROM memory_memory m JOIN policy_principal p ON p.id = m.principal_id "
        "WHERE p.tenant_id <> m.tenant_id"
    ),
}


def consistency_problems(run_sql: Callable[[str], int] | None = None) -> dict[str, int]:
    if run_sql is None:
        from django.db import connection

        def run_sql(sql: str) -> int:
            with connection.cursor() as cursor:
                cursor.execute(sql)
                return int(cursor.fetchone()[0])

    return {label: run_sql(sql) for label, sql in CONSISTENCY_CHECKS.items()}
