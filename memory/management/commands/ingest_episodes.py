from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import api
from memory.management.commands._pipeline import tenant_by_slug
from memory.services.memories import BULK_EPISODE_FIELDS, BULK_EPISODES_MAX
from memory.services.system import system_caller


class Command(BaseCommand):
    help = (
        "Import past conversations as episodes: a JSON Lines file, one episode per line with "
        f"{', '.join(BULK_EPISODE_FIELDS)} (content and butler required). Stored in transactions of "
        f"up to {BULK_EPISODES_MAX} (a bad line stores nothing of its batch and stops the import), "
        "keyword-searchable at once; the worker embeds them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--batch", type=int, default=BULK_EPISODES_MAX, help="episodes per transaction")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        tenant = tenant_by_slug(options["tenant"])
        if not path.is_file():
            raise CommandError(f"no file {path}")
        batch_size = options["batch"]
        if not 1 <= batch_size <= BULK_EPISODES_MAX:
            raise CommandError(f"--batch must be between 1 and {BULK_EPISODES_MAX}")
        caller = system_caller(tenant.id)
        stored = 0
        batch: list[dict[str, Any]] = []
        first_line = 1
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    batch.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise CommandError(
                        f"{path}:{number}: not JSON ({exc.msg}); {stored} episodes stored before it"
                    ) from exc
                if len(batch) == batch_size:
                    stored += self._store(caller, batch, path, first_line, stored)
                    batch, first_line = [], number + 1
        if batch:
            stored += self._store(caller, batch, path, first_line, stored)
        self.stdout.write(f"stored {stored} episodes in tenant {tenant.slug!r}; the worker embeds them")

    def _store(self, caller: Any, batch: list[dict[str, Any]], path: Path, first_line: int, stored: int) -> int:
        try:
            return len(api.episodes_store_bulk(caller=caller, episodes=batch))
        except api.DomainError as exc:
            raise CommandError(
                f"{path}: the batch from line {first_line}: {exc} (indexes count from that line's episode); "
                f"{stored} episodes stored before it"
            ) from exc
