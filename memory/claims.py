"""What a claim is in the core (pce-memory v0.14.0's claims): its kinds and
scopes, and how a stored fact or rule shows as one. Plain functions over
memories, shared by the claim writes (memory/services/claims.py) and the claim
reads (memory/selectors/activation.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory import validation
from memory.models import Kind, Memory

CLAIM_KINDS = ("fact", "preference", "task", "policy_hint")
CLAIM_SCOPES = ("session", "project", "principle")
# The core kinds that are claims (what a claim read ranks, what feedback may name).
CLAIM_MEMORY_KINDS = (Kind.FACT, Kind.RULE)
# A claim's core kind: policy hints are rules; the rest are facts keyed by
# their content, so two different claims never supersede each other.
CLAIM_SUBJECT = "claim"


# A read may also name the memory dialect's own scope: a fact stored there with
# `global` shows as a `project` claim, and `global` finds exactly those.
CLAIM_FILTER_SCOPES = (*CLAIM_SCOPES, "global")


def claim_scope_of(scope: str) -> str:
    """A core scope as a claim shows it: the three claim scopes are themselves;
    any other (`global`, a butler's scope) is knowledge of the project."""
    return scope if scope in CLAIM_SCOPES else "project"


@dataclass(frozen=True)
class ClaimScopes:
    """The core scopes a claim read's scope filter selects: ``include`` (any of)
    or ``exclude`` (none of); neither means every scope."""

    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None

    def matches(self, scope: str) -> bool:
        if self.include is not None:
            return scope in self.include
        return self.exclude is None or scope not in self.exclude


def claim_scopes(scopes: Sequence[str] | None) -> ClaimScopes:
    """The inverse of ``claim_scope_of`` for a read's filter, so that every claim
    a read shows with a scope is found by filtering on that scope: `project`
    selects every core scope that shows as `project` (all but the unchosen
    `session` / `principle`); `global` selects the core scope `global` only."""
    chosen = {validation.choice(s, field="scope", allowed=CLAIM_FILTER_SCOPES) for s in scopes or ()}
    if not chosen:
        return ClaimScopes()
    if "project" in chosen:
        return ClaimScopes(exclude=tuple(sorted(set(CLAIM_SCOPES) - chosen)))
    return ClaimScopes(include=tuple(sorted(chosen)))


def claim_kind_from(stored: object, kind: str) -> str:
    """A claim's kind: the one pce stored (``metadata.claim_kind``), else by its
    core kind. Another dialect's metadata (a LangGraph item's attributes, an
    imported store's column) may carry any ``claim_kind``: only one of
    CLAIM_KINDS counts, for what a claim shows and for its half-life."""
    if isinstance(stored, str) and stored in CLAIM_KINDS:
        return stored
    return "policy_hint" if kind == Kind.RULE else "fact"


def claim_kind_of(memory: Memory) -> str:
    return claim_kind_from(memory.metadata.get("claim_kind"), memory.kind)
