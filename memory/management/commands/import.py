from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from memory.errors import InvalidArgument
from memory.services.export import export_lines, tenant_import


class Command(BaseCommand):
    help = (
        "Import a JSONL export into a tenant (created if missing), keeping ids and timestamps. "
        "All or nothing: one bad line imports nothing."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", required=True, help="target tenant slug")
        parser.add_argument("--input", "-i", default="-", help="file path, or - for stdin (default)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["input"] == "-":
                counts = tenant_import(tenant_slug=options["tenant"], lines=export_lines(sys.stdin.buffer))
            else:
                with open(options["input"], "rb") as handle:
                    counts = tenant_import(tenant_slug=options["tenant"], lines=export_lines(handle))
        except (InvalidArgument, ValueError, KeyError, IntegrityError) as exc:
            raise CommandError(f"import failed, nothing was imported: {exc}") from exc
        self.stdout.write("imported " + ", ".join(f"{n} {kind}s" for kind, n in counts.items()))
