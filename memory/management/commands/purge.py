from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memory.management.commands._pipeline import principal_by_name, tenant_by_slug
from memory.services.purge import principal_purge, tenant_purge
from memproj.dbroles import as_owner


class Command(BaseCommand):
    help = (
        "Right to be forgotten: delete every memory and audit event of one tenant, or of one principal "
        "(and the principal with its tokens). Irreversible; a purge event records that it happened."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--principal", help="principal name inside the tenant (default: the whole tenant)")
        parser.add_argument("--reason", default="", help="recorded in the purge event (e.g. a ticket number)")
        parser.add_argument("--yes", action="store_true", help="confirm: this cannot be undone")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = tenant_by_slug(options["tenant"])
        target = (
            f"principal {options['principal']!r} of tenant {tenant.slug!r}"
            if options["principal"]
            else (f"tenant {tenant.slug!r}")
        )
        if not options["yes"]:
            raise CommandError(f"this deletes every memory and audit event of {target}; pass --yes to confirm.")
        # The purge function is the owner's alone (memproj/dbroles.py): the whole
        # purge runs on an owner connection (DATABASE_OWNER_URL), in one transaction.
        with as_owner():
            if options["principal"]:
                principal = principal_by_name(tenant, options["principal"])
                result = principal_purge(principal_id=principal.pk, reason=options["reason"])
            else:
                result = tenant_purge(tenant_id=tenant.pk, reason=options["reason"])
        self.stdout.write(
            f"purged {target}: {result.memories} memories, {result.events} events, "
            f"{result.conflicts} conflict candidates, {result.links} links"
        )
