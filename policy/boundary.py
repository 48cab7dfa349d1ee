"""Boundary-first (pce-memory v0.14.0): which boundary classes a read may see, and which
of them come back redacted, decided from the tenant policy and the read's use
tags, before any retrieval runs.

A read declares what it will use the memories for with use tags (pce-memory's
``answer:task``, ``tool:*``, ``tool:contact-lookup``). A read that declares
none uses ``DEFAULT_USE_TAGS`` = ``("answer:task",)``: answering the task at
hand, which is what every dialect's search / recall / context / get does. A class
is visible when any of the read's tags matches one of the class's ``allow``
patterns (``*`` matches everything, ``tool:*`` every ``tool:...`` tag), unless
its ``escalation`` is ``deny``, which hides it from every read whatever its
allow list says. With the default policy that means: public and internal are
returned, pii only to ``tool:contact-lookup`` (with e-mail addresses and phone
numbers redacted), secret to nobody.

The memory side turns ``visible`` into one SQL condition on
``memory_memory.boundary_class`` in the one retrieval path and in every read
selector, and applies ``redact_content`` to what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from policy import redaction
from policy.document import BOUNDARY_CLASSES, USE_TAG, PolicyDocument, excerpt
from policy.errors import InvalidUseTag

DEFAULT_USE_TAGS: tuple[str, ...] = ("answer:task",)
MAX_USE_TAGS = 16


def use_tags_validate(tags: Iterable[str] | None) -> tuple[str, ...]:
    """The read's use tags, checked; None or empty means ``DEFAULT_USE_TAGS``."""
    if tags is None:
        return DEFAULT_USE_TAGS
    if isinstance(tags, str):
        raise InvalidUseTag("allow must be a list of use tags, e.g. ['answer:task'].")
    listed = list(tags)
    for tag in listed:
        if not isinstance(tag, str):  # before the set below: a list in the list is not hashable
            raise _invalid(tag)
    out = tuple(dict.fromkeys(listed))
    if not out:
        return DEFAULT_USE_TAGS
    if len(out) > MAX_USE_TAGS:
        raise InvalidUseTag(f"at most {MAX_USE_TAGS} use tags per read.")
    for tag in out:
        # A wildcard describes what a policy allows, not what a read does: a read
        # that could claim '*' would see every class the policy opens to anything.
        if not USE_TAG.fullmatch(tag) or "*" in tag:
            raise _invalid(tag)
    return out


def _invalid(tag: object) -> InvalidUseTag:
    # The tag is the client's, of any length and kind: quoted as a plain excerpt.
    return InvalidUseTag(
        f"use tag {excerpt(tag)} is not valid: use concrete tags such as answer:task or tool:contact-lookup."
    )


def tag_allowed(pattern: str, tag: str) -> bool:
    if pattern == "*" or pattern == tag:
        return True
    return pattern.endswith("*") and tag.startswith(pattern[:-1])


@dataclass(frozen=True)
class BoundaryDecision:
    use_tags: tuple[str, ...]
    visible: frozenset[str]
    # visible class -> redaction rules applied to its content (empty: returned as is)
    redact: Mapping[str, tuple[str, ...]]

    @property
    def visible_sorted(self) -> list[str]:
        """For the SQL parameter: a stable order keeps query plans and logs comparable."""
        return sorted(self.visible)

    def redacted_classes(self) -> frozenset[str]:
        return frozenset(name for name, rules in self.redact.items() if rules)

    def status(self, boundary_class: str) -> str:
        """'denied', 'redacted' or 'visible': what a read sees of this class."""
        if boundary_class not in self.visible:
            return "denied"
        return "redacted" if self.redact.get(boundary_class) else "visible"


def boundary_for(policy: PolicyDocument, use_tags: Sequence[str] | None = None) -> BoundaryDecision:
    tags = use_tags_validate(use_tags)
    visible: set[str] = set()
    redact: dict[str, tuple[str, ...]] = {}
    for name in BOUNDARY_CLASSES:
        rules = policy.boundary_classes[name]
        if rules.escalation == "deny":
            continue
        if any(tag_allowed(pattern, tag) for pattern in rules.allow for tag in tags):
            visible.add(name)
            redact[name] = rules.redact
    return BoundaryDecision(use_tags=tags, visible=frozenset(visible), redact=MappingProxyType(redact))


def redact_content(decision: BoundaryDecision, boundary_class: str, text: str) -> str:
    """The text a read may return for a memory of ``boundary_class``. A class the
    decision does not make visible never reaches here (the SQL filter removed it);
    if it does anyway, nothing of it is returned."""
    if boundary_class not in decision.visible:
        return ""
    rules = decision.redact.get(boundary_class, ())
    return redaction.redact(text, rules).text if rules else text


# --- redact-before-send (pce-memory's boundary.validate) ----------------------------------------
# What a payload's findings make it: secrets (keys, tokens, card numbers) are the
# `secret` class, personal data the `pii` class, anything else `internal`.
SECRET_RULES = frozenset(
    {"pem_private_key", "jwt", "github_token", "slack_token", "api_key", "aws_access_key", "card_number"}
)
PII_RULES = frozenset({"email", "phone"})


@dataclass(frozen=True)
class BoundaryCheck:
    allowed: bool
    reason: str
    redacted: str
    boundary_class: str
    findings: Mapping[str, int]


def boundary_validate(policy: PolicyDocument, payload: str, use_tags: Sequence[str] | None = None) -> BoundaryCheck:
    """Classify a payload about to leave (generation, a tool call), decide whether
    these use tags may send it, and give the redacted text to send instead."""
    decision = boundary_for(policy, use_tags)
    found = redaction.redact(payload, redaction.ALL_RULES)
    kinds = set(found.counts)
    boundary_class = "secret" if kinds & SECRET_RULES else "pii" if kinds & PII_RULES else "internal"
    tags = ", ".join(decision.use_tags)
    described = ", ".join(f"{name} x{count}" for name, count in sorted(found.counts.items())) or "nothing sensitive"
    if boundary_class not in decision.visible:
        return BoundaryCheck(
            allowed=False,
            reason=f"the payload is {boundary_class} ({described}); use tags [{tags}] may not send it. "
            "Send the redacted text instead, or ask for the use tag the policy allows.",
            redacted=found.text,
            boundary_class=boundary_class,
            findings=found.counts,
        )
    rules = decision.redact.get(boundary_class, ())
    return BoundaryCheck(
        allowed=True,
        reason=f"the payload is {boundary_class} ({described}); use tags [{tags}] may send it"
        + (f", redacted by {', '.join(rules)}." if rules else "."),
        redacted=redaction.redact(payload, rules).text if rules else payload,
        boundary_class=boundary_class,
        findings=found.counts,
    )
