from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory.management.commands._pipeline import drain
from memory.services.sweeps import episodes_expire


class Command(BaseCommand):
    help = (
        "Delete episodes whose TTL passed more than MEMPROJ_EPISODE_RETENTION_DAYS ago (expired episodes "
        "already left retrieval; this removes their rows, keeping an audit event). Same as the beat task."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = drain(episodes_expire, lambda r: r.processed)
        self.stdout.write(f"deleted {deleted} expired episodes")
