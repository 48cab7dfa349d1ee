from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory.management.commands._pipeline import tenant_by_slug
from memory.services.imports import tenant_export_cogx


class Command(BaseCommand):
    help = (
        "Export a tenant's memories, entities and relations as a COGX archive (cognee's portable format), "
        "which cognee and `import_memories --from cogx` read. `manage.py export` writes memproj's own format."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--to", dest="format", choices=["cogx"], default="cogx")
        parser.add_argument("directory", type=Path, help="the archive directory (created; its COGX files replaced)")
        parser.add_argument("--tenant", required=True, help="tenant slug")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_by_slug(options["tenant"])
        counts = tenant_export_cogx(tenant_id=tenant.id, directory=options["directory"])
        summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())) or "nothing"
        self.stdout.write(f"wrote {summary} to {options['directory']}")
