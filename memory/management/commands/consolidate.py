from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memory.consolidators import ConsolidatorUnavailable, get_consolidator
from memory.management.commands._pipeline import drain, tenant_by_slug
from memory.services.consolidation import consolidation_sweep, episodes_consolidate


class Command(BaseCommand):
    help = (
        "Consolidate unconsolidated episodes into candidate facts and rules, for one tenant or all "
        "(fairly, a batch per tenant per round), until none is left that can be consolidated now."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")
        parser.add_argument(
            "--consolidator", choices=["offline", "llm"], help="default: MEMPROJ_CONSOLIDATOR (llm if an LLM is set)"
        )
        parser.add_argument("--batch", type=int, help="episodes per tenant per round")

    def handle(self, *args: Any, **options: Any) -> None:
        consolidator = get_consolidator(options["consolidator"])
        batch = options["batch"]
        if options["tenant"]:
            tenant = tenant_by_slug(options["tenant"])

            def sweep() -> Any:
                return episodes_consolidate(tenant_id=tenant.pk, consolidator=consolidator, batch_size=batch)
        else:

            def sweep() -> Any:
                return consolidation_sweep(consolidator=consolidator, batch_size=batch)

        created = 0

        def count(result: Any) -> int:
            nonlocal created
            created += len(result.created)
            return int(result.consumed)

        try:
            consumed = drain(sweep, count)
        except ConsolidatorUnavailable as exc:
            raise CommandError(f"the {consolidator.name} consolidator is unavailable: {exc}") from exc
        self.stdout.write(f"{consolidator.name}: {consumed} episodes consolidated, {created} facts/rules created")
