from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory.management.commands._pipeline import tenant_by_slug
from memory.services.export import tenant_export


class Command(BaseCommand):
    help = (
        "Export one tenant as JSONL: every principal, memory (all columns, vectors included), link, "
        "conflict candidate and audit event. API tokens are not exported."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--output", "-o", default="-", help="file path, or - for stdout (default)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_by_slug(options["tenant"])
        if options["output"] == "-":
            counts = tenant_export(tenant_id=tenant.pk, out=self.stdout)  # type: ignore[arg-type]
        else:
            with open(options["output"], "w", encoding="utf-8") as out:
                counts = tenant_export(tenant_id=tenant.pk, out=out)
        self.stderr.write("exported " + ", ".join(f"{n} {kind}s" for kind, n in counts.items()))
