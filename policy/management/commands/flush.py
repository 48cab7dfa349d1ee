"""`manage.py flush` as the schema owner. The audit log refuses TRUNCATE to
everyone (migration 0026), so flushing fails on it unless the settings say
this database may lose its log: only the test settings do (transactional
tests flush between tests)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.commands.flush import Command as DjangoFlush
from django.db import connections

from memproj.dbroles import APPEND_ONLY_TABLES, as_owner


class Command(DjangoFlush):
    def handle(self, **options: Any) -> None:
        alias = options["database"]
        with as_owner(alias):
            if not getattr(settings, "MEMPROJ_FLUSH_AUDIT_LOG", False):
                super().handle(**options)
                return
            tables = set(connections[alias].introspection.table_names())
            guarded = [t for t in APPEND_ONLY_TABLES if t in tables]
            self._triggers(alias, guarded, "DISABLE")
            try:
                super().handle(**options)
            finally:
                self._triggers(alias, guarded, "ENABLE")

    @staticmethod
    def _triggers(alias: str, tables: list[str], action: str) -> None:
        with connections[alias].cursor() as cursor:
            for table in tables:
                cursor.execute(f'ALTER TABLE "{table}" {action} TRIGGER USER')  # constants of this project
