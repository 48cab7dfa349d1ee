from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import api
from memory.management.commands._pipeline import tenant_by_slug
from memory.services.system import system_caller


class Command(BaseCommand):
    help = (
        "Ingest a text or Markdown file into a tenant's roampal `books` collection: the file is "
        "chunked and stored at once (keyword-searchable), the worker embeds the chunks; progress is shown "
        "until every chunk is embedded or --wait seconds pass."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--title", default="", help="document title (default: the file name)")
        parser.add_argument("--tags", default="", help="comma-separated tags")
        parser.add_argument("--wait", type=float, default=600.0, help="seconds to wait for the embeddings (0: none)")

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        tenant = tenant_by_slug(options["tenant"])
        if not path.is_file():
            raise CommandError(f"no file {path}")
        if path.stat().st_size > api.BOOK_MAX_BYTES:
            raise CommandError(f"{path} is over the limit of {api.BOOK_MAX_BYTES} bytes (10 MB); split it.")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise CommandError(f"{path} is not UTF-8 text or Markdown") from exc
        caller = system_caller(tenant.id)
        tags = [t.strip() for t in options["tags"].split(",") if t.strip()]
        try:
            result = api.book_ingest(
                caller=caller, title=options["title"] or path.name, text=text, tags=tags, source=str(path)
            )
        except api.DomainError as exc:
            raise CommandError(str(exc)) from exc
        total = len(result.chunk_ids)
        self.stdout.write(f"stored {total} chunks of {result.title!r} in books")
        deadline = time.monotonic() + options["wait"]
        last = -1
        while True:
            done, _ = api.book_progress(caller=caller, chunk_ids=result.chunk_ids)
            if done != last:
                self.stdout.write(f"embedded {done}/{total} chunks")
                last = done
            if done >= total:
                break
            if time.monotonic() >= deadline:
                self.stdout.write(
                    f"{total - done} chunks still waiting for the worker; they are keyword-searchable now"
                )
                break
            time.sleep(1.0)
        self.stdout.write(
            "ids: " + " ".join(f"books_{pk.hex[:12]}" for pk in result.chunk_ids[:5]) + (" ..." if total > 5 else "")
        )
