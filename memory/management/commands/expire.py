from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory.management.commands._pipeline import drain
from memory.services.sweeps import memories_expire


class Command(BaseCommand):
    help = (
        "Delete memories (episodes, and facts and rules of a scope with a TTL) whose TTL passed more than "
        "MEMPROJ_EXPIRED_RETENTION_DAYS ago (they already left retrieval; this removes their rows, keeping an "
        "audit event each). Same as the beat task."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = drain(memories_expire, lambda r: r.processed)
        self.stdout.write(f"deleted {deleted} expired memories")
