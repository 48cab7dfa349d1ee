from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memory.management.commands._pipeline import tenant_by_slug
from memory.services.events import chain_verify
from policy.models import Tenant

MAX_PROBLEMS_SHOWN = 20


class Command(BaseCommand):
    help = (
        "Verify the audit log's hash chain of every tenant (or one): each event must follow its tenant's "
        "previous event and match its own content. Exits 1 if any chain is broken."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["tenant"]
        tenants = [tenant_by_slug(slug)] if slug else list(Tenant.objects.order_by("slug"))
        slugs = {t.pk: t.slug for t in tenants}
        broken = 0
        for report in chain_verify(tenant_ids=[t.pk for t in tenants]):
            name = slugs[report.tenant_id]
            if report.ok:
                self.stdout.write(f"{name}: {report.events} events, chain intact")
                continue
            broken += 1
            self.stdout.write(f"{name}: {report.events} events, {len(report.problems)} problems")
            for problem in report.problems[:MAX_PROBLEMS_SHOWN]:
                self.stdout.write(f"  {problem}")
        if broken:
            raise CommandError(f"the audit log of {broken} tenant(s) was tampered with (see above).")
