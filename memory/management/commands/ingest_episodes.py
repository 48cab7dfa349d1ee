from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import api
from memory.management.commands._pipeline import tenant_by_slug
from memory.models import EmbeddingStatus
from memory.services.memories import BULK_EPISODE_FIELDS, BULK_EPISODES_MAX, episodes_store_batches
from memory.services.system import system_caller

# Episodes per transaction by default: small enough that the next batch is embedded
# while this one is written for most of an import, large enough to keep the
# statements per episode few.
BATCH_DEFAULT = 250


class _NotJson(Exception):
    def __init__(self, number: int, msg: str) -> None:
        super().__init__(msg)
        self.number, self.msg = number, msg


class Command(BaseCommand):
    help = (
        "Import past conversations as episodes: a JSON Lines file, one episode per line with "
        f"{', '.join(BULK_EPISODE_FIELDS)} (content and butler required). Stored in transactions of "
        f"{BATCH_DEFAULT} (--batch, up to {BULK_EPISODES_MAX}; a bad line stores nothing of its batch and "
        "stops the import), "
        "each episode embedded before it is stored (the next batch is embedded while one is written); "
        "what cannot be embedded now is stored pending and the worker embeds it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument(
            "--batch", type=int, default=BATCH_DEFAULT, help=f"episodes per transaction (<= {BULK_EPISODES_MAX})"
        )
        parser.add_argument("--no-embed", action="store_true", help="leave embedding to the worker")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        tenant = tenant_by_slug(options["tenant"])
        if not path.is_file():
            raise CommandError(f"no file {path}")
        batch_size = options["batch"]
        if not 1 <= batch_size <= BULK_EPISODES_MAX:
            raise CommandError(f"--batch must be between 1 and {BULK_EPISODES_MAX}")
        caller = system_caller(tenant.id)
        first_lines: list[int] = []  # of each batch read
        stored = embedded = written = 0
        try:
            for rows in episodes_store_batches(
                caller=caller, batches=self._batches(path, batch_size, first_lines), embed=not options["no_embed"]
            ):
                written += 1
                stored += len(rows)
                embedded += sum(1 for row in rows if row.embedding_status == EmbeddingStatus.READY)
        except _NotJson as exc:
            raise CommandError(
                f"{path}:{exc.number}: not JSON ({exc.msg}); {stored} episodes stored before it"
            ) from exc
        except api.DomainError as exc:
            # The batches are stored in order: the one that failed follows the last one stored.
            raise CommandError(
                f"{path}: the batch from line {first_lines[written]}: {exc} (indexes count from that line's "
                f"episode); {stored} episodes stored before it"
            ) from exc
        self.stdout.write(
            f"stored {stored} episodes in tenant {tenant.slug!r}; embedded {embedded} now, "
            f"{stored - embedded} left to the worker"
        )

    @staticmethod
    def _batches(path: Path, batch_size: int, first_lines: list[int]) -> Iterator[list[dict[str, Any]]]:
        batch: list[dict[str, Any]] = []
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                if not batch:
                    first_lines.append(number)
                try:
                    batch.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise _NotJson(number, exc.msg) from exc
                if len(batch) == batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch
