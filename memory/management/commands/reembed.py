from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory.management.commands._pipeline import drain, tenant_by_slug
from memory.services.reembedding import memories_failed_requeue, memories_mark_stale, memories_reembed


class Command(BaseCommand):
    help = (
        "Re-embed memories whose vector came from another embedding model than the configured one "
        "(run after changing MEMPROJ_EMBEDDER / MEMPROJ_EMBEDDING_MODEL / MEMPROJ_EMBEDDER_PRECISION). "
        "--all re-embeds everything, "
        "--failed gives memories whose embedding finally failed another round."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", help="tenant slug (default: every tenant)")
        parser.add_argument("--all", action="store_true", help="re-embed every memory, not only stale ones")
        parser.add_argument("--failed", action="store_true", help="re-queue memories whose embedding failed")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant_id = tenant_by_slug(options["tenant"]).pk if options["tenant"] else None
        if options["failed"]:
            self.stdout.write(f"{memories_failed_requeue(tenant_id=tenant_id)} failed embeddings re-queued")
        if options["all"]:
            memories_mark_stale(tenant_id=tenant_id)
        failed = 0

        def sweep() -> Any:
            nonlocal failed
            result = memories_reembed(tenant_id=tenant_id)
            failed += result.failed
            if result.failed:  # embedder down: stop, the retry sweep finishes the pending ones
                result.more = False
            return result

        done = drain(sweep, lambda r: r.processed)
        self.stdout.write(f"{done} memories re-embedded")
        if failed:
            self.stderr.write(f"{failed} memories left pending: the embedder is unavailable; the worker retries them")
