from __future__ import annotations

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memory import validation
from memory.errors import DomainError
from memory.importers import READERS
from memory.management.commands._pipeline import tenant_by_slug
from memory.services.imports import BATCH_DEFAULT, BATCH_MAX, memories_import
from memory.services.system import system_caller


class _Progress:
    """A progress bar on stderr (tqdm when it is installed, else a counter)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.last = 0.0

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            try:
                from tqdm import tqdm
            except ImportError:
                self.bar = False
            else:
                self.bar = tqdm(total=total, unit="record", file=sys.stderr)
        if self.bar:
            self.bar.update(done - self.bar.n)
        elif time.monotonic() - self.last > 1 or done == total:
            self.last = time.monotonic()
            sys.stderr.write(f"\r{done}/{total if total is not None else '?'} records")
            sys.stderr.flush()

    def close(self) -> None:
        if self.bar:
            self.bar.close()
        elif self.enabled and self.bar is False:
            sys.stderr.write("\n")


class Command(BaseCommand):
    help = (
        "Import another memory system's store into a tenant, keeping upstream ids (as aliases every dialect "
        "accepts), timestamps, outcome counters and scores, supersession, boundary classes, namespaces and "
        "scopes. Re-running skips what is already imported (an interrupted import resumes); --dry-run "
        "reports what would be created and skipped, and why."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--from", dest="system", required=True, choices=sorted(READERS), help="upstream system")
        parser.add_argument(
            "location",
            help="the store: a file or directory (roampal data folder or backup zip, pce DuckDB file or "
            ".pce-shared, memory.jsonl, JSON export, COGX archive) or a postgresql:// URL (mem0, LangGraph, butlers)",
        )
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument(
            "--namespace",
            default="",
            help="a namespace path (segments separated by /) put in front of every imported memory's namespace",
        )
        parser.add_argument("--dry-run", action="store_true", help="read and report; write nothing")
        parser.add_argument(
            "--batch", type=int, default=BATCH_DEFAULT, help=f"memories per transaction (<= {BATCH_MAX})"
        )
        parser.add_argument("--limit", type=int, default=None, help="create at most this many memories in this run")
        parser.add_argument("--no-embed", action="store_true", help="leave embedding to the worker")
        parser.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="a reader option, e.g. table=mem0, history=/path/history.db, profile=work",
        )
        parser.add_argument("--quiet", action="store_true", help="no progress bar")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_by_slug(options["tenant"])
        namespace = validation.typed_namespace(options["namespace"])
        reader_options: dict[str, Any] = {}
        for item in options["option"]:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CommandError(f"--option takes KEY=VALUE (got {item!r})")
            reader_options[key.strip()] = value
        progress = _Progress(enabled=not options["quiet"])
        try:
            report = memories_import(
                caller=system_caller(tenant.id),
                system=options["system"],
                location=options["location"],
                namespace=namespace,
                dry_run=options["dry_run"],
                batch_size=options["batch"],
                limit=options["limit"],
                embed=not options["no_embed"],
                progress=progress,
                options=reader_options,
            )
        except DomainError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            progress.close()
        for line in report.lines():
            self.stdout.write(line)
