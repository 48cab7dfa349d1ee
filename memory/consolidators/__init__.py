"""Consolidators turn a batch of episodes into candidate facts and rules.
They only propose; ``memory.services.consolidation`` stores the proposals
through the same services every other write uses."""

from __future__ import annotations

from django.conf import settings

from memory.consolidators.base import (
    Consolidator,
    ConsolidatorUnavailable,
    EpisodeView,
    Plan,
    Proposal,
)


def get_consolidator(name: str | None = None) -> Consolidator:
    """The configured consolidator: the LLM one when MEMPROJ_LLM_BASE_URL is set
    (or MEMPROJ_CONSOLIDATOR=llm), else the offline one."""
    name = name or settings.MEMPROJ_CONSOLIDATOR
    if name == "llm":
        from memory.consolidators.llm import LLMConsolidator

        return LLMConsolidator.from_settings()
    if name == "offline":
        from memory.consolidators.offline import OfflineConsolidator

        return OfflineConsolidator.from_settings()
    raise ValueError(f"unknown consolidator {name!r}; use 'offline' or 'llm'")


__all__ = ["Consolidator", "ConsolidatorUnavailable", "EpisodeView", "Plan", "Proposal", "get_consolidator"]
