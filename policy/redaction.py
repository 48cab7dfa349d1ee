"""Redact-before-send (pce-memory v0.14.0): one table of patterns for what agents leak
most. Used by the boundary filter of every read (classes whose policy names
``redact`` rules), by ``pce.memory.boundary.validate`` and by the admin preview.

pce-memory names ``email`` and ``phone`` in its example policy; the other rules are
the secrets the upstream observation path catches. Every pattern bounds its
match with ASCII look-arounds instead of ``\\b``: in Python ``\\w`` includes
Japanese characters, so ``連絡先foo@example.com`` has no word boundary before
``foo`` and a ``\\b`` pattern would miss it.

A match is replaced by ``[REDACTED:<rule>]`` (upstream writes a bare
``[REDACTED]``; naming the rule tells an agent what kind of value was there).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

_NOT_ALNUM_BEFORE = r"(?<![0-9A-Za-z])"
_NOT_ALNUM_AFTER = r"(?![0-9A-Za-z])"


def luhn_valid(digits: str) -> bool:
    """The Luhn check every payment card number passes (ISO/IEC 7812)."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        value = int(char)
        if position % 2 == 1:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def _card_number(match: re.Match[str]) -> bool:
    digits = re.sub(r"\D", "", match.group(0))
    # A run of one repeated digit passes Luhn for some lengths but is never a card.
    return 13 <= len(digits) <= 19 and luhn_valid(digits) and len(set(digits)) > 1


@dataclass(frozen=True)
class RedactionRule:
    name: str
    description: str
    pattern: re.Pattern[str]
    # Extra check on a regex match (e.g. Luhn); False keeps the text as it is.
    accept: Callable[[re.Match[str]], bool] | None = None

    def matches(self, text: str) -> list[re.Match[str]]:
        return [m for m in self.pattern.finditer(text) if self.accept is None or self.accept(m)]


def _rule(
    name: str, description: str, pattern: str, accept: Callable[[re.Match[str]], bool] | None = None, flags: int = 0
) -> RedactionRule:
    return RedactionRule(name, description, re.compile(pattern, flags), accept)


# Order matters: the longer, more specific secrets first, so a JWT or a PEM
# block is replaced whole before the phone or card rule could see digits in it.
RULES: dict[str, RedactionRule] = {
    rule.name: rule
    for rule in (
        _rule(
            "pem_private_key",
            "PEM private key blocks (RSA, EC, OPENSSH, PKCS#8, encrypted), also cut short before their END line",
            # The search for the END line stops at the next BEGIN line: searched
            # to the end of the text from every BEGIN, a text of BEGIN lines took
            # time quadratic in its length. A key pasted without its END line is
            # still the key: then the block runs over its header lines
            # ("Proc-Type: 4,ENCRYPTED") and base64 lines, whitespace-separated
            # tokens that cannot be split two ways.
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
            r"(?:(?:(?!-----BEGIN )[\s\S])*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"
            r"|(?:\s+(?:[A-Za-z][A-Za-z-]*: [^\n]*|[A-Za-z0-9+/=]{16,}))*(?:\s+[A-Za-z0-9+/=]+(?=\s*$))?)",
        ),
        _rule(
            "jwt",
            "JSON Web Tokens (three base64url parts, header and payload starting eyJ)",
            r"(?<![0-9A-Za-z_-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}",
        ),
        _rule(
            "github_token",
            "GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_)",
            r"(?<![0-9A-Za-z_])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})" + _NOT_ALNUM_AFTER,
        ),
        _rule(
            "slack_token",
            "Slack tokens (xoxb-, xoxp-, xoxa-, xoxr-, xoxs-, xoxo-) and incoming-webhook URLs",
            r"(?<![0-9A-Za-z_-])(?:xox[abposr]-[A-Za-z0-9-]{10,}"
            r"|https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]+)",
        ),
        _rule(
            "api_key",
            "sk-... secret API keys (OpenAI sk-, sk-proj-, Anthropic sk-ant-) and Stripe sk_live_/sk_test_",
            r"(?<![0-9A-Za-z_-])(?:sk-[A-Za-z0-9_-]{20,}|sk_(?:live|test)_[A-Za-z0-9]{16,})" + _NOT_ALNUM_AFTER,
        ),
        _rule(
            "aws_access_key",
            "AWS access key ids (AKIA... long-term, ASIA... temporary)",
            r"(?<![0-9A-Z])(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Z])",
        ),
        _rule(
            "email",
            "e-mail addresses",
            r"(?<![0-9A-Za-z._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![0-9A-Za-z-])",
        ),
        _rule(
            "card_number",
            "payment card numbers: 13-19 digits, optionally grouped by spaces or dashes, passing the Luhn check",
            _NOT_ALNUM_BEFORE + r"\d(?:[ -]?\d){12,18}" + _NOT_ALNUM_AFTER,
            _card_number,
        ),
        _rule(
            "phone",
            "telephone numbers: +country codes, (area) codes, grouped digits, Japanese 0X0-XXXX-XXXX and 0XXXXXXXXX",
            # Grouped: optional +CC, then 2-3 groups joined by space/dot/dash. Not
            # preceded or followed by more digit groups, so dates (2026-11-22),
            # versions (1.2.3) and IP addresses (192.168.100.200) stay untouched.
            r"(?<![0-9A-Za-z+.-])(?<!\d[ .-])(?:"
            r"(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?|\d{1,4}[ .-])\d{1,4}[ .-]\d{3,4}"
            r"|\+\d{10,14}"
            r"|0\d{9,10}"
            r")(?![0-9A-Za-z]|[ .-]\d)",
        ),
    )
}

# pce-memory's example policy writes ``redact: ['email','phone']``; these aliases let a
# policy use the obvious other spellings.
ALIASES: dict[str, str] = {
    "card": "card_number",
    "credit_card": "card_number",
    "pem": "pem_private_key",
    "private_key": "pem_private_key",
    "openai_key": "api_key",
    "sk_key": "api_key",
    "github": "github_token",
    "slack": "slack_token",
    "aws_key": "aws_access_key",
    "aws": "aws_access_key",
}

ALL_RULES: tuple[str, ...] = tuple(RULES)


def rule_name(name: str) -> str | None:
    """The canonical rule name for ``name`` (an alias or a rule), or None."""
    if name in RULES:
        return name
    return ALIASES.get(name)


@dataclass(frozen=True)
class Redaction:
    text: str
    # rule name -> how many values it replaced
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.counts)


def redact(text: str, rules: Iterable[str] | None = None) -> Redaction:
    """Replace every match of the named rules (all rules when None) in table order."""
    wanted = set(ALL_RULES if rules is None else (rule_name(r) or r for r in rules))
    unknown = wanted - set(RULES)
    if unknown:
        raise ValueError(f"unknown redaction rules: {', '.join(sorted(unknown))}")
    counts: dict[str, int] = {}
    for name, rule in RULES.items():
        if name not in wanted:
            continue
        found = rule.matches(text)
        if not found:
            continue
        counts[name] = len(found)
        # Replace right to left so earlier spans keep their offsets.
        for match in reversed(found):
            text = text[: match.start()] + f"[REDACTED:{name}]" + text[match.end() :]
    return Redaction(text, counts)
