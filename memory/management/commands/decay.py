from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from memory.management.commands._pipeline import drain
from memory.services.sweeps import facts_decay, rules_maturity


class Command(BaseCommand):
    help = (
        "Record fact state changes (active / fading / expired by effective confidence) and promote rules "
        "whose age now qualifies them. Same as the facts-decay and rules-maturity beat tasks."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        facts = drain(facts_decay, lambda r: r.processed)
        rules = drain(rules_maturity, lambda r: r.processed)
        self.stdout.write(f"{facts} fact state changes recorded, {rules} rule maturities changed")
