"""`manage.py migrate` as the schema owner (DATABASE_OWNER_URL, or the embedded
owner role): the service's own role owns nothing and cannot alter the schema."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.migrate import Command as DjangoMigrate

from memproj.dbroles import as_owner


class Command(DjangoMigrate):
    def handle(self, *args: Any, **options: Any) -> None:
        with as_owner(options["database"]):
            super().handle(*args, **options)
