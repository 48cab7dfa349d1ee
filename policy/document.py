"""The tenant policy document (pce-memory v0.14.0's policy): YAML in, one frozen internal form out.

Two shapes are accepted and normalised into the same ``PolicyDocument``:

- the shape of pce-memory's example policy, as written: top-level ``version`` (YAML reads ``0.1`` as a
  number), ``scopes``, ``boundary_classes``, ``retrieval.hybrid`` (alpha, k_txt,
  k_vec, k_final) and ``retrieval.rerank`` (use_quality, recency_half_life_days,
  recency.half_life_days_by_kind);
- the shape the published pce-memory code validates: ``version`` a string,
  ``boundary: {scopes, boundary_classes}``, ``retrieval.hybrid`` with
  ``threshold`` and ``recency_half_life_days``.

memproj adds two optional sections, ``rate_limit: {limit, window_seconds,
algorithm}`` and ``quotas: {max_memories, ingest_bytes_per_call,
ingest_bytes_per_day}`` (what one tenant may store, enforced by
``memory.services.quotas``; ``QUOTA_BOUNDS`` is the most a policy may allow).
A key left out takes the default policy's value (``DEFAULT_POLICY``: the
example policy's values, upstream's threshold and rate limit, memproj's quotas), so a
partial policy never leaves a class or scope unconfigured. Unknown keys and values out of
range are refused; each problem names its key path (``retrieval.hybrid.alpha``).

The YAML is untrusted input parsed in the web process, so it is bounded before
anything is built from it: its size, its nesting depth, and no anchors or
aliases (a few hundred bytes of aliases expand to gigabytes once walked). An
error names the key path and line, and quotes at most a short excerpt of a
value, never the input itself.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from types import MappingProxyType
from typing import Any

import yaml

from policy import redaction
from policy.errors import PolicyInvalid

BOUNDARY_CLASSES: tuple[str, ...] = ("public", "internal", "pii", "secret")
DEFAULT_BOUNDARY_CLASS = "internal"
POLICY_SCOPES: tuple[str, ...] = ("session", "project", "principle")
ESCALATIONS: tuple[str, ...] = ("deny", "human_review")
# pce-memory v0.14.0's claim kinds, plus memproj's own kinds (episode / fact / rule) so one
# policy can set a half-life for every kind stored.
HALF_LIFE_KINDS: tuple[str, ...] = ("fact", "task", "preference", "policy_hint", "episode", "rule")
RATE_LIMIT_ALGORITHMS: tuple[str, ...] = ("fixed", "sliding")
MIB = 1024 * 1024
# The largest quotas a tenant's policy may set. One ingested document is at most
# 10 MB (roampal's own ingest limit), whatever the policy says.
QUOTA_BOUNDS: dict[str, int] = {
    "max_memories": 10_000_000,
    "ingest_bytes_per_call": 10 * MIB,
    "ingest_bytes_per_day": 1024 * MIB,
}
MAX_YAML_BYTES = 128 * 1024  # pce-memory v0.14.0's policy payload limit
# The deepest key of a valid policy is retrieval.rerank.recency.half_life_days_by_kind.<kind>
# (five mappings); a list adds one. Deeper nesting is refused before it is built.
MAX_YAML_DEPTH = 8
# An error quotes at most this much of an offending value or key, and lists at most
# MAX_PROBLEMS problems: an error text never grows with the input.
EXCERPT_CHARS = 40
MAX_PROBLEMS = 20

# ASCII digits: \d also takes "٣" or "３", which int() reads as 3.
_SEMVER = re.compile(r"^(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?(?:\.(0|[1-9][0-9]*))?(?:-([0-9A-Za-z.-]+))?$")
# ASCII digits only, as the version takes: float() also reads "١" or "７" as a digit.
_TTL = re.compile(r"^([0-9]+(?:\.[0-9]+)?)[ \t]*([smhdw])$")
MIN_TTL_SECONDS, MAX_TTL_SECONDS = 1, 100 * 365 * 86400
_TTL_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_NEVER = ("inf", "never", "infinite")
# Use tags: '*', 'answer:task', 'tool:*', 'tool:contact-lookup' (pce-memory v0.14.0).
USE_TAG = re.compile(r"^(\*|[a-z][a-z0-9_.-]{0,63}(:(\*|[a-z0-9][a-z0-9_.-]{0,63}\*?))?)$")


def _plain_text(text: str) -> str:
    """Text as a reader sees it, capped: characters that do not print (controls,
    tabs, right-to-left overrides, zero-width marks, lone surrogates) as U+XXXX,
    so an error can neither hide nor reorder what it quotes."""
    shown = ""
    for ch in text:  # stops after at most EXCERPT_CHARS + 1 characters
        part = ch if ch.isprintable() else f"U+{ord(ch):04X}"
        if len(shown) + len(part) > EXCERPT_CHARS:
            return shown + "..."
        shown += part
    return shown


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _shown(value: object) -> str:
    """An offending value for an error, in the policy's own terms (YAML's words
    for what it read: text as written, true/false, null, numbers, dates, a list
    or mapping by its size), never Python's repr (``'foo'``, ``None``,
    ``b'...'``), and never more than a short excerpt."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        # YAML's hex and octal literals build integers Python will not print
        # (past its 4,300-digit limit); say how long one is instead.
        return f"an integer of {value.bit_length()} bits" if value.bit_length() > 128 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        return repr(value) if math.isfinite(value) else (".inf" if value > 0 else "-.inf")
    if isinstance(value, str):
        return _plain_text(value) if value.strip() else f"blank text of {_count(len(value), 'character')}"
    if isinstance(value, bytes | bytearray):
        return f"binary data of {_count(len(value), 'byte')}"
    if isinstance(value, datetime | date):
        return f"the date {value.isoformat()}"
    if isinstance(value, Mapping):
        return f"a mapping of {_count(len(value), 'key')}"
    if isinstance(value, set | frozenset):
        return f"a set of {_count(len(value), 'item')}"
    if isinstance(value, list | tuple):
        return f"a list of {_count(len(value), 'item')}"
    return "a value of another kind"


def excerpt(value: object) -> str:
    """``_shown`` for the rest of the policy engine: a client's value in an error."""
    return _shown(value)


def _shown_items(values: list[Any]) -> str:
    """The first few offending entries of a list, each as ``_shown`` says it."""
    shown = ", ".join(_shown(v) for v in values[:4])
    return shown if len(values) <= 4 else f"{shown} and {len(values) - 4} more"


def _bound(number: float) -> str:
    """A bound as the documentation writes it: 1000, 10,000,000 (not 1e+07)."""
    if not float(number).is_integer():
        return f"{number:g}"
    return f"{int(number):,}" if abs(number) >= 10_000 else str(int(number))


def _key_text(key: object) -> str:
    """A key as it appears in a key path, capped like any excerpt."""
    return _plain_text(key) if isinstance(key, str) else _shown(key)


# A quoted literal in PyYAML's own problem text (``found character '\\t'``,
# ``the tag '!foo'``): Python's repr of what it found.
_PYTHON_LITERAL = re.compile(r"'(?:[^'\\\n]|\\.){0,400}'")


def _yaml_problem(text: str) -> str:
    """PyYAML's description of a syntax error, with the Python literals it quotes
    given as the plain text they stand for (a tab as U+0009, a tag without
    Python's quotes and escapes); a printable character keeps its quotes."""

    def plain(match: re.Match[str]) -> str:
        try:
            value = ast.literal_eval(match.group(0))
        except (ValueError, SyntaxError):
            return match.group(0)
        if not isinstance(value, str) or (len(value) == 1 and value.isprintable()):
            return match.group(0)  # "expected ':'" reads as it is
        return _plain_text(value)

    return _PYTHON_LITERAL.sub(plain, text[:4000])


# --- versions -------------------------------------------------------------------------------
def _prerelease_precedence(prerelease: str) -> tuple[tuple[int, int, str], ...]:
    """Semver's order of pre-release identifiers: numeric ones compare as numbers
    and before alphanumeric ones, which compare as text; more identifiers rank
    higher when the ones before are equal (rc.9 < rc.10, 1 < alpha, alpha < alpha.1).
    Compared as one string, rc.10 came before rc.9 and could never follow it."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in prerelease.split(".") if prerelease)


@dataclass(frozen=True, order=True)
class SemVer:
    major: int
    minor: int
    patch: int
    # A pre-release sorts before its release (1.0.0-rc.1 < 1.0.0), as semver says.
    release_rank: int = 1
    prerelease: str = field(default="", compare=False)
    precedence: tuple[tuple[int, int, str], ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "precedence", _prerelease_precedence(self.prerelease))

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return f"{base}-{self.prerelease}" if self.prerelease else base

    def bump_patch(self) -> SemVer:
        return SemVer(self.major, self.minor, self.patch + 1)


# A version part fits a 64-bit integer, as every store and client can hold it.
_VERSION_PART_DIGITS = 18
_VERSION_PRERELEASE_CHARS = 64


def parse_version(value: object, *, path: str = "version") -> SemVer:
    """'0.1.3', '0.1' and YAML's number 0.1 all name semver 0.1.x; missing parts are 0."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PolicyInvalid([(path, f"must be a semver string such as '0.1.3' (got {_shown(value)})")])
    if isinstance(value, int) and abs(value) >= 10**_VERSION_PART_DIGITS:
        # Python refuses to print an int of more than 4300 digits: refuse it before.
        raise PolicyInvalid([(path, f"has a part over {_VERSION_PART_DIGITS} digits")])
    text = repr(value) if isinstance(value, float) else str(value)
    match = _SEMVER.match(text.strip())
    if not match:
        raise PolicyInvalid([(path, f"must be a semver string MAJOR.MINOR.PATCH such as '0.1.3' (got {_shown(text)})")])
    major, minor, patch, pre = match.groups()
    if any(part and len(part) > _VERSION_PART_DIGITS for part in (major, minor, patch)):
        raise PolicyInvalid([(path, f"has a part over {_VERSION_PART_DIGITS} digits (got {_shown(text)})")])
    if pre and len(pre) > _VERSION_PRERELEASE_CHARS:
        raise PolicyInvalid([(path, f"has a pre-release over {_VERSION_PRERELEASE_CHARS} characters")])
    return SemVer(int(major), int(minor or 0), int(patch or 0), 0 if pre else 1, pre or "")


# --- the frozen form ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ScopePolicy:
    ttl: timedelta | None  # None: never expires
    ttl_text: str
    max_tokens: int


@dataclass(frozen=True)
class BoundaryClassPolicy:
    allow: tuple[str, ...]
    redact: tuple[str, ...] = ()
    escalation: str | None = None


@dataclass(frozen=True)
class RetrievalPolicy:
    alpha: float
    k_txt: int
    k_vec: int
    k_final: int
    threshold: float
    use_quality: bool
    recency_half_life_days: float
    half_life_days_by_kind: Mapping[str, float]

    def half_life_days(self, kind: str) -> float:
        return self.half_life_days_by_kind.get(kind, self.recency_half_life_days)


@dataclass(frozen=True)
class RateLimitPolicy:
    limit: int
    window_seconds: int
    algorithm: str


@dataclass(frozen=True)
class QuotaPolicy:
    """What one tenant may store. ``max_memories`` counts every stored memory,
    whatever its validity, until it is deleted (expiry, purge): a forgotten or
    superseded memory still takes its row. Ingest volume counts the documents
    ingested as books, per call and over any 24 hours."""

    max_memories: int
    ingest_bytes_per_call: int
    ingest_bytes_per_day: int


@dataclass(frozen=True)
class PolicyDocument:
    version: str
    scopes: Mapping[str, ScopePolicy]
    boundary_classes: Mapping[str, BoundaryClassPolicy]
    retrieval: RetrievalPolicy
    rate_limit: RateLimitPolicy
    quotas: QuotaPolicy
    # Which input shape it came from ("seed" or "upstream"), for the admin only.
    source_shape: str = field(default="seed", compare=False)

    @property
    def semver(self) -> SemVer:
        return parse_version(self.version)

    def ttl_for(self, scope: str) -> timedelta | None:
        """The TTL of a policy scope (session / project / principle); None never expires.
        Scopes outside the policy (a butler's scope, 'global') have no policy TTL."""
        entry = self.scopes.get(scope)
        return entry.ttl if entry is not None else None

    def max_tokens_for(self, scope: str | None) -> int:
        """The token bound of a context answer for ``scope``; a scope the policy does
        not name is bounded by the largest of the policy's scopes."""
        entry = self.scopes.get(scope or "")
        if entry is not None:
            return entry.max_tokens
        return max(s.max_tokens for s in self.scopes.values())

    def to_dict(self) -> dict[str, Any]:
        """The canonical JSON form (the example policy's shape), stored with every version and diffed."""
        return {
            "version": self.version,
            "scopes": {
                name: {"ttl": s.ttl_text, "max_tokens": s.max_tokens} for name, s in sorted(self.scopes.items())
            },
            "boundary_classes": {
                name: {
                    "allow": list(c.allow),
                    "redact": list(c.redact),
                    **({"escalation": c.escalation} if c.escalation else {}),
                }
                for name, c in self.boundary_classes.items()
            },
            "retrieval": {
                "hybrid": {
                    "alpha": self.retrieval.alpha,
                    "k_txt": self.retrieval.k_txt,
                    "k_vec": self.retrieval.k_vec,
                    "k_final": self.retrieval.k_final,
                    "threshold": self.retrieval.threshold,
                },
                "rerank": {
                    "use_quality": self.retrieval.use_quality,
                    "recency_half_life_days": self.retrieval.recency_half_life_days,
                    "recency": {"half_life_days_by_kind": dict(sorted(self.retrieval.half_life_days_by_kind.items()))},
                },
            },
            "rate_limit": {
                "limit": self.rate_limit.limit,
                "window_seconds": self.rate_limit.window_seconds,
                "algorithm": self.rate_limit.algorithm,
            },
            "quotas": {
                "max_memories": self.quotas.max_memories,
                "ingest_bytes_per_call": self.quotas.ingest_bytes_per_call,
                "ingest_bytes_per_day": self.quotas.ingest_bytes_per_day,
            },
        }

    def with_version(self, version: str) -> PolicyDocument:
        return replace(self, version=version)


# --- parsing -------------------------------------------------------------------------------------
class _Problems:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def refused(self) -> PolicyInvalid:
        """The error for these problems: the first ``MAX_PROBLEMS``, then a count."""
        shown = self.items[:MAX_PROBLEMS]
        if len(self.items) > MAX_PROBLEMS:
            shown.append(("", f"and {len(self.items) - MAX_PROBLEMS} more problems"))
        return PolicyInvalid(shown)


def _join(path: str, key: object) -> str:
    text = _key_text(key)
    return f"{path}.{text}" if path else text


def _mapping(value: object, path: str, problems: _Problems) -> Mapping[str, Any] | None:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(path, f"must be a mapping (got {_shown(value)})")
        return None
    return value


def _known(value: Mapping[str, Any], allowed: tuple[str, ...], path: str, problems: _Problems) -> None:
    for key in value:
        if not isinstance(key, str) or key not in allowed:
            problems.add(_join(path, key), f"unknown key; allowed here: {', '.join(allowed)}")


def _number(
    value: object,
    path: str,
    problems: _Problems,
    *,
    low: float,
    high: float,
    integer: bool = False,
    low_open: bool = False,
) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        kind = "an integer" if integer else "a number"
        problems.add(path, f"must be {kind} (got {_shown(value)})")
        return None
    # An int compares with the float bounds exactly, however large; math.isfinite
    # would convert it to a float and overflow.
    not_finite = isinstance(value, float) and not math.isfinite(value)
    if not_finite or value > high or value < low or (low_open and value == low):
        low_text = f"above {_bound(low)}" if low_open else f"at least {_bound(low)}"
        problems.add(path, f"must be {low_text} and at most {_bound(high)} (got {_shown(value)})")
        return None
    return int(value) if integer else float(value)


def _ttl(value: object, path: str, problems: _Problems) -> tuple[timedelta | None, str] | None:
    if isinstance(value, str) and value.strip().lower() in _NEVER:
        return None, "inf"
    if isinstance(value, str):
        match = _TTL.match(value.strip())
        if match:
            seconds = float(match.group(1)) * _TTL_UNITS[match.group(2)]
            # At least a second: '0.0000001s' passed a "more than 0" check and
            # became a zero timedelta, so every memory of the scope was born expired.
            if MIN_TTL_SECONDS <= seconds <= MAX_TTL_SECONDS:
                return timedelta(seconds=seconds), value.strip()
    problems.add(
        path,
        "must be a duration such as '7d', '12h', '30m' (at least 1 second, at most 100 years) or 'inf' "
        f"(got {_shown(value)})",
    )
    return None


def _scopes(raw: Mapping[str, Any], path: str, problems: _Problems, base: PolicyDocument) -> dict[str, ScopePolicy]:
    _known(raw, POLICY_SCOPES, path, problems)
    out = dict(base.scopes)
    for name in POLICY_SCOPES:
        if name not in raw:
            continue
        entry_path = _join(path, name)
        entry = _mapping(raw[name], entry_path, problems)
        if entry is None:
            continue
        _known(entry, ("ttl", "max_tokens"), entry_path, problems)
        ttl: tuple[timedelta | None, str] | None = (out[name].ttl, out[name].ttl_text)
        if "ttl" in entry:
            ttl = _ttl(entry["ttl"], _join(entry_path, "ttl"), problems)
        max_tokens = out[name].max_tokens
        if "max_tokens" in entry:
            max_tokens = _number(
                entry["max_tokens"], _join(entry_path, "max_tokens"), problems, low=1, high=1_000_000, integer=True
            )
        if ttl is not None and max_tokens is not None:
            out[name] = ScopePolicy(ttl=ttl[0], ttl_text=ttl[1], max_tokens=max_tokens)
    return out


def _string_list(value: object, path: str, problems: _Problems) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.add(path, f"must be a list of strings (got {_shown(value)})")
        return None
    if len(value) > 64:
        problems.add(path, "at most 64 entries")
        return None
    return value


def _classes(
    raw: Mapping[str, Any], path: str, problems: _Problems, base: PolicyDocument
) -> dict[str, BoundaryClassPolicy]:
    _known(raw, BOUNDARY_CLASSES, path, problems)
    out = dict(base.boundary_classes)
    for name in BOUNDARY_CLASSES:
        if name not in raw:
            continue
        entry_path = _join(path, name)
        entry = _mapping(raw[name], entry_path, problems)
        if entry is None:
            continue
        _known(entry, ("allow", "redact", "escalation"), entry_path, problems)
        previous = out[name]
        allow: tuple[str, ...] | None = previous.allow
        if "allow" in entry:
            tags = _string_list(entry["allow"], _join(entry_path, "allow"), problems)
            allow = None
            if tags is not None:
                bad = [t for t in tags if not USE_TAG.fullmatch(t)]
                if bad:
                    problems.add(
                        _join(entry_path, "allow"),
                        "use tags look like '*', 'answer:task', 'tool:*' or 'tool:contact-lookup' "
                        f"(got {_shown_items(bad)})",
                    )
                else:
                    allow = tuple(dict.fromkeys(tags))
        redact: tuple[str, ...] | None = previous.redact if "allow" not in entry else ()
        if "redact" in entry:
            names = _string_list(entry["redact"], _join(entry_path, "redact"), problems)
            redact = None
            if names is not None:
                unknown = [n for n in names if redaction.rule_name(n) is None]
                if unknown:
                    problems.add(
                        _join(entry_path, "redact"),
                        f"unknown redaction rules {_shown_items(unknown)}; known: {', '.join(redaction.ALL_RULES)}",
                    )
                else:
                    redact = tuple(dict.fromkeys(redaction.rule_name(n) or n for n in names))
        escalation = previous.escalation if "allow" not in entry else None
        if "escalation" in entry:
            value = entry["escalation"]
            if value is None or value in ESCALATIONS:
                escalation = value
            else:
                problems.add(
                    _join(entry_path, "escalation"), f"must be one of {', '.join(ESCALATIONS)} (got {_shown(value)})"
                )
        if allow is not None and redact is not None:
            out[name] = BoundaryClassPolicy(allow=allow, redact=redact, escalation=escalation)
    return out


def _retrieval(raw: Mapping[str, Any], path: str, problems: _Problems, base: RetrievalPolicy) -> RetrievalPolicy:
    _known(raw, ("hybrid", "rerank"), path, problems)
    values: dict[str, Any] = {
        "alpha": base.alpha,
        "k_txt": base.k_txt,
        "k_vec": base.k_vec,
        "k_final": base.k_final,
        "threshold": base.threshold,
        "use_quality": base.use_quality,
        "recency_half_life_days": base.recency_half_life_days,
        "half_life_days_by_kind": dict(base.half_life_days_by_kind),
    }
    bounds: dict[str, dict[str, Any]] = {
        "alpha": {"low": 0, "high": 1},
        "threshold": {"low": 0, "high": 1},
        "k_txt": {"low": 0, "high": 1000, "integer": True},
        "k_vec": {"low": 0, "high": 1000, "integer": True},
        "k_final": {"low": 1, "high": 200, "integer": True},
        "recency_half_life_days": {"low": 0, "high": 36500, "low_open": True},
    }

    def take(section: Mapping[str, Any], key: str, section_path: str) -> None:
        if key in section:
            value = _number(section[key], _join(section_path, key), problems, **bounds[key])
            if value is not None:
                values[key] = value

    hybrid_path = _join(path, "hybrid")
    hybrid = _mapping(raw.get("hybrid"), hybrid_path, problems) or {}
    # Upstream's code keeps threshold and the recency half-life under hybrid; its
    # example policy keeps the half-life under rerank. Both land in the same field.
    _known(hybrid, ("alpha", "k_txt", "k_vec", "k_final", "threshold", "recency_half_life_days"), hybrid_path, problems)
    for key in ("alpha", "k_txt", "k_vec", "k_final", "threshold", "recency_half_life_days"):
        take(hybrid, key, hybrid_path)

    rerank_path = _join(path, "rerank")
    rerank = _mapping(raw.get("rerank"), rerank_path, problems) or {}
    _known(rerank, ("use_quality", "recency_half_life_days", "recency"), rerank_path, problems)
    if "recency_half_life_days" in hybrid and "recency_half_life_days" in rerank:
        problems.add(
            _join(rerank_path, "recency_half_life_days"),
            "also given as retrieval.hybrid.recency_half_life_days; keep one",
        )
    take(rerank, "recency_half_life_days", rerank_path)
    if "use_quality" in rerank:
        if isinstance(rerank["use_quality"], bool):
            values["use_quality"] = rerank["use_quality"]
        else:
            problems.add(
                _join(rerank_path, "use_quality"), f"must be true or false (got {_shown(rerank['use_quality'])})"
            )
    recency_path = _join(rerank_path, "recency")
    recency = _mapping(rerank.get("recency"), recency_path, problems) or {}
    _known(recency, ("half_life_days_by_kind",), recency_path, problems)
    by_kind_path = _join(recency_path, "half_life_days_by_kind")
    by_kind = _mapping(recency.get("half_life_days_by_kind"), by_kind_path, problems) or {}
    _known(by_kind, HALF_LIFE_KINDS, by_kind_path, problems)
    for kind in HALF_LIFE_KINDS:
        if kind in by_kind:
            value = _number(by_kind[kind], _join(by_kind_path, kind), problems, low=0, high=36500, low_open=True)
            if value is not None:
                values["half_life_days_by_kind"][kind] = value
    if values["k_txt"] == 0 and values["k_vec"] == 0:
        problems.add(hybrid_path, "k_txt and k_vec cannot both be 0: retrieval would find nothing")
    values["half_life_days_by_kind"] = MappingProxyType(dict(sorted(values["half_life_days_by_kind"].items())))
    return RetrievalPolicy(**values)


def _rate_limit(raw: Mapping[str, Any], path: str, problems: _Problems, base: RateLimitPolicy) -> RateLimitPolicy:
    _known(raw, ("limit", "window_seconds", "algorithm"), path, problems)
    limit, window, algorithm = base.limit, base.window_seconds, base.algorithm
    if "limit" in raw:
        limit = _number(raw["limit"], _join(path, "limit"), problems, low=1, high=10_000_000, integer=True) or limit
    if "window_seconds" in raw:
        window = (
            _number(raw["window_seconds"], _join(path, "window_seconds"), problems, low=1, high=86400, integer=True)
            or window
        )
    if "algorithm" in raw:
        if raw["algorithm"] in RATE_LIMIT_ALGORITHMS:
            algorithm = raw["algorithm"]
        else:
            problems.add(
                _join(path, "algorithm"),
                f"must be one of {', '.join(RATE_LIMIT_ALGORITHMS)} (got {_shown(raw['algorithm'])})",
            )
    return RateLimitPolicy(limit=limit, window_seconds=window, algorithm=algorithm)


def _quotas(raw: Mapping[str, Any], path: str, problems: _Problems, base: QuotaPolicy) -> QuotaPolicy:
    _known(raw, tuple(QUOTA_BOUNDS), path, problems)
    values = {name: getattr(base, name) for name in QUOTA_BOUNDS}
    for name, high in QUOTA_BOUNDS.items():
        if name in raw:
            value = _number(raw[name], _join(path, name), problems, low=1, high=high, integer=True)
            values[name] = value if value is not None else values[name]
    return QuotaPolicy(**values)


TOP_LEVEL_KEYS = ("version", "scopes", "boundary_classes", "boundary", "retrieval", "rate_limit", "quotas")


def parse_mapping(raw: object, *, base: PolicyDocument | None = None) -> PolicyDocument:
    """Validate a decoded policy and normalise it. Keys left out take ``base``'s
    values (the default policy). The version is optional here: a policy without
    one gets its number from the apply service (the current version, patch + 1)."""
    base = base or DEFAULT_POLICY
    problems = _Problems()
    top = _mapping(raw, "", problems)
    if top is None or not top:
        if not problems.items:
            problems.add("", "the policy is empty; give at least a version and one section")
        raise problems.refused()
    _known(top, TOP_LEVEL_KEYS, "", problems)

    version = ""
    if "version" in top:
        try:
            version = str(parse_version(top["version"]))
        except PolicyInvalid as exc:
            problems.items.extend(exc.problems)

    shape = "seed"
    scopes_raw, classes_raw = top.get("scopes"), top.get("boundary_classes")
    scopes_path, classes_path = "scopes", "boundary_classes"
    if "boundary" in top:
        shape = "upstream"
        boundary = _mapping(top["boundary"], "boundary", problems) or {}
        _known(boundary, ("scopes", "boundary_classes"), "boundary", problems)
        for key in ("scopes", "boundary_classes"):
            if key in boundary and key in top:
                problems.add(key, f"given both at the top level and under boundary.{key}; keep one")
        scopes_raw = boundary.get("scopes", scopes_raw)
        classes_raw = boundary.get("boundary_classes", classes_raw)
        scopes_path = "boundary.scopes" if "scopes" in boundary else "scopes"
        classes_path = "boundary.boundary_classes" if "boundary_classes" in boundary else "boundary_classes"

    scopes_map = _mapping(scopes_raw, scopes_path, problems)
    scopes = _scopes(scopes_map, scopes_path, problems, base) if scopes_map is not None else dict(base.scopes)
    classes_map = _mapping(classes_raw, classes_path, problems)
    classes = (
        _classes(classes_map, classes_path, problems, base) if classes_map is not None else dict(base.boundary_classes)
    )
    retrieval_map = _mapping(top.get("retrieval"), "retrieval", problems)
    retrieval = (
        _retrieval(retrieval_map, "retrieval", problems, base.retrieval)
        if retrieval_map is not None
        else base.retrieval
    )
    rate_map = _mapping(top.get("rate_limit"), "rate_limit", problems)
    rate_limit = (
        _rate_limit(rate_map, "rate_limit", problems, base.rate_limit) if rate_map is not None else base.rate_limit
    )
    quota_map = _mapping(top.get("quotas"), "quotas", problems)
    quotas = _quotas(quota_map, "quotas", problems, base.quotas) if quota_map is not None else base.quotas
    if problems.items:
        raise problems.refused()
    return PolicyDocument(
        version=version,
        scopes=MappingProxyType({name: scopes[name] for name in POLICY_SCOPES}),
        boundary_classes=MappingProxyType({name: classes[name] for name in BOUNDARY_CLASSES}),
        retrieval=retrieval,
        rate_limit=rate_limit,
        quotas=quotas,
        source_shape=shape,
    )


class _Refused(yaml.YAMLError):
    """A policy refused while it is composed, before anything is built from it."""

    def __init__(self, path: str, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.path, self.problem, self.problem_mark = path, problem, mark


class _PolicyLoader(yaml.SafeLoader):
    """SafeLoader for untrusted policies. It refuses anchors and aliases (an alias
    is a reference, so a few bytes can stand for an exponentially large value once
    anything walks it), nesting deeper than ``MAX_YAML_DEPTH`` (composing recurses),
    and a key given twice (PyYAML keeps the last silently). It keeps the key path
    being composed, so each refusal names it."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._path: list[str | int] = []
        self._depth = 0

    def _where(self) -> str:
        path = ""
        for part in self._path:
            path = f"{path}[{part}]" if isinstance(part, int) else _join(path, part)
        return path

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if isinstance(index, yaml.ScalarNode):  # a mapping's value, under its key
            self._path.append(str(index.value))
        elif isinstance(index, yaml.Node):
            self._path.append("(a complex key)")
        elif isinstance(index, int) and isinstance(parent, yaml.SequenceNode):
            self._path.append(index)
        else:  # the document, or a mapping's key: the path of the mapping itself
            self._path.append("")
        try:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.AliasEvent):
                raise _Refused(
                    self._where(),
                    "YAML aliases (*name) are not accepted in a policy; repeat the value instead",
                    event.start_mark,
                )
            if getattr(event, "anchor", None) is not None:
                raise _Refused(
                    self._where(),
                    "YAML anchors (&name) are not accepted in a policy; repeat the value instead",
                    event.start_mark,
                )
            nests = isinstance(event, yaml.SequenceStartEvent | yaml.MappingStartEvent)
            if nests and self._depth >= MAX_YAML_DEPTH:
                raise _Refused(
                    self._where(),
                    f"nested deeper than {MAX_YAML_DEPTH} levels; a policy is shallower",
                    event.start_mark,
                )
            self._depth += nests
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth -= nests
        finally:
            self._path.pop()


def _construct_mapping(loader: _PolicyLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
        if isinstance(key, list | dict | set):
            raise yaml.constructor.ConstructorError(
                None, None, "a key must be a plain value, not a list or mapping", key_node.start_mark
            )
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"the key {_key_text(key)} appears twice in one mapping", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_PolicyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)  # type: ignore[arg-type]

# What a scalar of each tag is read as, in an error's words.
_SCALAR_TAGS = {
    "tag:yaml.org,2002:bool": "true or false",
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:timestamp": "a date",
    "tag:yaml.org,2002:binary": "base64 binary data",
}


def _scalar_constructor(tag: str, words: str) -> Any:
    """SafeLoader's constructor for ``tag``, with its failures as a YAML error
    at the value's line. Written with an explicit tag, a text that is not of the
    kind reaches these constructors as it is: ``!!bool maybe`` raised KeyError,
    ``!!timestamp x`` AttributeError, ``!!int ''`` IndexError; and a plain value
    can resolve to a kind Python cannot build (an integer past its digit limit,
    2001-02-30). The value is not quoted: it may be thousands of digits."""
    construct = yaml.SafeLoader.yaml_constructors[tag]

    def build(loader: _PolicyLoader, node: yaml.ScalarNode) -> Any:
        try:
            return construct(loader, node)
        except (ValueError, OverflowError, LookupError, AttributeError, TypeError):
            raise yaml.constructor.ConstructorError(
                None, None, f"this value cannot be read as {words}", node.start_mark
            ) from None

    return build


for _tag, _words in _SCALAR_TAGS.items():
    _PolicyLoader.add_constructor(_tag, _scalar_constructor(_tag, _words))


def _at(mark: Any) -> str:
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _capped(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_yaml(text: str, *, base: PolicyDocument | None = None) -> PolicyDocument:
    """Parse an untrusted policy: its size is bounded before the parser sees it,
    its shape while it is composed (``_PolicyLoader``), its values by ``parse_mapping``."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyInvalid([("", "yaml is empty; send the policy document as a YAML string")])
    # A character is at least one byte: the length alone refuses most oversized input unencoded.
    if len(text) > MAX_YAML_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_YAML_BYTES:
        raise PolicyInvalid([("", f"the policy is larger than {MAX_YAML_BYTES // 1024} KB")])
    try:
        raw = yaml.load(text, Loader=_PolicyLoader)  # noqa: S506 - a SafeLoader subclass
    except _Refused as exc:
        raise PolicyInvalid([(exc.path, f"{exc.problem}{_at(exc.problem_mark)}")]) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        where = _at(getattr(exc, "problem_mark", None))
        raise PolicyInvalid([("", f"the YAML does not parse{where}: {_capped(_yaml_problem(str(problem)))}")]) from None
    except (ValueError, OverflowError, TypeError, RecursionError):
        # A scalar YAML resolves but Python cannot build: an integer past the digit
        # limit, a timestamp out of range. Python's own text would give advice that
        # does not apply here.
        raise PolicyInvalid([("", "a value cannot be read: a number too long or a date out of range")]) from None
    return parse_mapping(raw, base=base)


def from_dict(data: Mapping[str, Any]) -> PolicyDocument:
    """Rebuild a stored (canonical) document. Stored documents were validated
    when applied; parsing again keeps one code path and catches a hand-edited row."""
    return parse_mapping(dict(data), base=_BUILTIN)


# --- the default ---------------------------------------------------------------------------------
def _builtin() -> PolicyDocument:
    day = timedelta(days=1)
    return PolicyDocument(
        version="0.0.0",
        scopes=MappingProxyType(
            {
                "session": ScopePolicy(ttl=7 * day, ttl_text="7d", max_tokens=20000),
                "project": ScopePolicy(ttl=120 * day, ttl_text="120d", max_tokens=50000),
                "principle": ScopePolicy(ttl=None, ttl_text="inf", max_tokens=100000),
            }
        ),
        boundary_classes=MappingProxyType(
            {
                "public": BoundaryClassPolicy(allow=("*",)),
                "internal": BoundaryClassPolicy(allow=("answer:task", "tool:*")),
                "pii": BoundaryClassPolicy(
                    allow=("tool:contact-lookup",), redact=("email", "phone"), escalation="human_review"
                ),
                "secret": BoundaryClassPolicy(allow=(), escalation="deny"),
            }
        ),
        retrieval=RetrievalPolicy(
            alpha=0.65,
            k_txt=48,
            k_vec=96,
            k_final=12,
            threshold=0.15,  # upstream's default; the example policy does not set one
            use_quality=False,
            recency_half_life_days=30.0,
            half_life_days_by_kind=MappingProxyType(
                {"fact": 120.0, "policy_hint": 365.0, "preference": 90.0, "task": 14.0}
            ),
        ),
        # Upstream pce-memory: 1,000 calls per 10 s per bucket.
        rate_limit=RateLimitPolicy(limit=1000, window_seconds=10, algorithm="fixed"),
        # Far above what a team's agents store, low enough that one tenant cannot
        # fill the disk alone: a million memories, ten full-size documents a day.
        quotas=QuotaPolicy(max_memories=1_000_000, ingest_bytes_per_call=10 * MIB, ingest_bytes_per_day=100 * MIB),
    )


_BUILTIN = _builtin()

# pce-memory v0.14.0's example policy, as written: the policy every tenant starts with.
SEED_EXAMPLE_YAML = """\
# policy with retrieval parameters
version: 0.1
scopes:
  session:   { ttl: '7d',    max_tokens: 20000 }
  project:   { ttl: '120d',  max_tokens: 50000 }
  principle: { ttl: 'inf',   max_tokens: 100000 }
boundary_classes:
  public:   { allow: ['*'] }
  internal: { allow: ['answer:task','tool:*'] }
  pii:      { allow: ['tool:contact-lookup'], redact: ['email','phone'], escalation: 'human_review' }
  secret:   { allow: [], escalation: 'deny' }
retrieval:
  hybrid:
    alpha: 0.65
    k_txt: 48
    k_vec: 96
    k_final: 12
  rerank:
    use_quality: false
    recency_half_life_days: 30
    recency:
      half_life_days_by_kind:
        fact: 120
        task: 14
        preference: 90
        policy_hint: 365
"""

# A tenant's first policy has the example's values under version 0.0.0, so
# that the example itself (version 0.1) still applies as a newer version.
DEFAULT_POLICY: PolicyDocument = parse_mapping(yaml.safe_load(SEED_EXAMPLE_YAML), base=_BUILTIN).with_version("0.0.0")
DEFAULT_POLICY_YAML = SEED_EXAMPLE_YAML.replace("version: 0.1\n", "version: '0.0.0'\n", 1)


# --- comparing versions --------------------------------------------------------------------------
def flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'retrieval': {'hybrid': {'alpha': 0.65}}} -> {'retrieval.hybrid.alpha': 0.65}; lists stay values."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path))
        else:
            out[path] = value
    return out


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Key paths whose value differs between two canonical documents (``version`` excluded)."""
    old, new = flatten(before), flatten(after)
    return [
        {"path": path, "before": old.get(path), "after": new.get(path)}
        for path in sorted(set(old) | set(new))
        if path != "version" and old.get(path) != new.get(path)
    ]
