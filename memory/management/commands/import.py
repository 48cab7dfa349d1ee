from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError

from memory.errors import InvalidArgument
from memory.services.export import TENANT_IMPORT_MAX_BYTES, export_lines, tenant_import, tenant_import_too_large


class Command(BaseCommand):
    help = (
        "Import a JSONL export into a tenant (created if missing), keeping ids and timestamps. "
        "All or nothing: one bad line imports nothing. The whole file is held in memory, so a file "
        f"larger than --max-bytes (default {TENANT_IMPORT_MAX_BYTES}) is refused before it is read."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", required=True, help="target tenant slug")
        parser.add_argument("--input", "-i", default="-", help="file path, or - for stdin (default)")
        parser.add_argument(
            "--max-bytes",
            type=int,
            default=TENANT_IMPORT_MAX_BYTES,
            help=f"refuse a file larger than this (default {TENANT_IMPORT_MAX_BYTES}, 256 MiB); "
            "the import needs a few times the file's size in memory",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        limit = options["max_bytes"]
        try:
            if limit < 1:
                raise InvalidArgument("--max-bytes must be at least 1.")
            if options["input"] == "-":
                lines = export_lines(sys.stdin.buffer, max_bytes=limit)
                counts = tenant_import(tenant_slug=options["tenant"], lines=lines)
            else:
                with open(options["input"], "rb") as handle:
                    # Refused before a byte is read: the import holds the whole file.
                    size = os.fstat(handle.fileno()).st_size
                    if size > limit:
                        raise tenant_import_too_large(limit, size)
                    # A file that grows while it is read is still bounded.
                    counts = tenant_import(tenant_slug=options["tenant"], lines=export_lines(handle, max_bytes=limit))
        except InvalidArgument as exc:
            raise CommandError(f"[{exc.code}] import failed, nothing was imported: {exc}") from exc
        except (ValueError, KeyError, IntegrityError) as exc:
            raise CommandError(f"import failed, nothing was imported: {exc}") from exc
        self.stdout.write("imported " + ", ".join(f"{n} {kind}s" for kind, n in counts.items()))
