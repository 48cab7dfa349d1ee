"""Arguments a caller may send, generated from a tool's JSON schema: valid-looking
values steered by parameter names (ids from known pools, content carrying the
tenant's secret marker), and the mutations the fuzzer applies to them."""

from __future__ import annotations

import itertools
import math
import random
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.harness.surfaces.in_process import ToolSpec

# Arguments that would pick a tenant: refused for everyone without explicit elevation.
TENANT_SELECTORS = ("tenant", "tenant_id", "tenantId", "tenant_slug")
NOT_GENERATED = {*TENANT_SELECTORS, "elevate"}

WORDS = [
    "coffee",
    "deploy",
    "staging",
    "allergy",
    "shellfish",
    "meeting",
    "invoice",
    "python",
    "editor",
    "neovim",
    "garden",
    "budget",
    "travel",
    "berlin",
    "friday",
    "release",
    "rollback",
    "backup",
    "password",
    "dentist",
    "birthday",
]
SCOPES = ["global", "health", "ops", "work"]

# Each tenant's content carries its own secret marker; any other tenant's answer
# that contains it is a leak. Queries never contain markers (they may be echoed).
SECRET_RE = re.compile(r"S3CR3T(\d+)K\d+")
UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

NASTY_STRINGS: dict[str, str] = {
    "empty": "",
    "spaces": "   \t\n ",
    "huge": "memory " * 12_000,
    "nul": "before\x00after",
    "lone_surrogate": "broken \ud800 surrogate",
    "control": "\x01\x02\x07\x1b[31mred\x1b[0m\x7f",
    "rtl": "\u202eevil\u202c \u200f\u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    "zero_width": "a\u200bb\u200dc\ufeff",
    "emoji": "\U0001f9e0\U0001f468\u200d\U0001f469\u200d\U0001f467 memory",
    "combining": "Z\u0351\u0360\u0324a\u0352l\u0350g\u0346o",
    "sql": "'; DROP TABLE memory_memory; --",
    "sql_union": "x' UNION SELECT content FROM memory_memory WHERE '1'='1",
    "tsquery": "foo & !bar | (baz:* <-> qux) & !!",
    "tsquery_broken": "((( & | ! :* <2>",
    "like": "%_%\\",
    "json": '{"tenant_id": "other", "$where": "1"}',
    "path": "../../../../etc/passwd",
    "format": "%s %d {0} {__class__} ${HOME}",
    "newlines": "line\r\nline\rline\u2028line",
    "uuid_nil": "00000000-0000-0000-0000-000000000000",
}
EXTREME_NUMBERS: list[Any] = [
    0,
    -1,
    2**31,
    2**63,
    -(2**63) - 1,
    10**30,
    1e308,
    -1e308,
    5e-324,
    -0.0,
    0.5,
    float("nan"),
    float("inf"),
    float("-inf"),
    True,
    "7",
]
WRONG_TYPED: list[Any] = [123, -1.5, True, False, None, "text", [], {}, [1, "a"], {"a": {"b": 1}}]


def text_matching(pattern: str, rng: random.Random) -> str | None:
    """A string matching a JSON-schema ``pattern`` (the regex subset schemas use:
    literals, classes, ranges, repeats, groups, alternation, anchors); None when
    the pattern uses anything else."""
    from re import _constants as c  # type: ignore[attr-defined]
    from re import _parser  # type: ignore[attr-defined]

    categories = {
        c.CATEGORY_DIGIT: "0123456789",
        c.CATEGORY_WORD: "abcdefghijklmnopqrstuvwxyz0123456789_",
        c.CATEGORY_SPACE: " ",
    }

    def emit(items: Any) -> str:
        out = []
        for op, arg in items:
            if op is c.LITERAL:
                out.append(chr(arg))
            elif op is c.ANY:
                out.append(rng.choice("abcxyz"))
            elif op is c.IN:
                choices: list[str] = []
                for sub_op, sub_arg in arg:
                    if sub_op is c.NEGATE:
                        raise ValueError("negated class")
                    if sub_op is c.LITERAL:
                        choices.append(chr(sub_arg))
                    elif sub_op is c.RANGE:
                        choices += [chr(x) for x in range(sub_arg[0], min(sub_arg[1], sub_arg[0] + 40) + 1)]
                    elif sub_op is c.CATEGORY:
                        choices += list(categories.get(sub_arg, "a"))
                out.append(rng.choice(choices or ["a"]))
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
                low, high, sub = arg
                high = low + 6 if high is c.MAXREPEAT else high
                out.append("".join(emit(sub) for _ in range(rng.randint(low, max(low, min(high, low + 6))))))
            elif op is c.SUBPATTERN:
                out.append(emit(arg[-1]))
            elif op is c.BRANCH:
                out.append(emit(rng.choice(arg[1])))
            elif op is c.AT:
                continue
            elif op is c.CATEGORY:
                out.append(rng.choice(categories.get(arg, "a")))
            else:
                raise ValueError(op)
        return "".join(out)

    try:
        value = emit(_parser.parse(pattern))
    except (ValueError, re.error, TypeError, IndexError):
        return None
    return value if re.search(pattern, value) else None


def resolve_refs(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        ref = schema["$ref"]
        target: Any = root
        for part in ref.lstrip("#/").split("/"):
            target = target.get(part, {})
        schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


@dataclass
class Pools:
    """What one tenant's generated arguments draw from."""

    tenant_index: int
    own_ids: list[str] = field(default_factory=list)
    foreign_ids: list[str] = field(default_factory=list)
    # id -> its kind (episode, fact, rule, ...), to pair an id with a matching type argument.
    kinds: dict[str, str] = field(default_factory=dict)
    counter: Iterator[int] = field(default_factory=itertools.count)

    def secret(self) -> str:
        return f"S3CR3T{self.tenant_index}K{next(self.counter)}"


class Generator:
    """Valid-looking values for a JSON schema, from a seeded random source (so
    Hypothesis can drive it), with names steering the domain: ids come from
    known pools (own and foreign), content carries the tenant's secret marker."""

    ID_NAMES = re.compile(r"(^id$|_id$|Id$|^ids$|_ids$)")
    FREE_ID_NAMES = {"session_id", "conversation_id", "request_id", "trace_id", "doc_id"}
    QUERY_NAMES = {"query", "topic", "trigger_prompt", "q", "search", "question", "prompt"}

    def __init__(self, rng: random.Random, pools: Pools, *, foreign_id_rate: float = 0.25) -> None:
        self.rng = rng
        self.pools = pools
        self.foreign_id_rate = foreign_id_rate

    def arguments(self, schema: dict[str, Any], *, optional_rate: float = 0.5) -> dict[str, Any]:
        schema = resolve_refs(schema, schema)
        required = set(schema.get("required", []))
        out: dict[str, Any] = {}
        properties = schema.get("properties", {})
        for name, prop in properties.items():
            if name in NOT_GENERATED:
                continue
            if name in required or self.rng.random() < optional_rate:
                prop = resolve_refs(prop, schema)
                # A declared default is a valid value by definition.
                use_default = "default" in prop and prop["default"] is not None and self.rng.random() < 0.5
                out[name] = prop["default"] if use_default else self.value(prop, name, schema)
        # Pair a known id with the type argument that names its kind, so calls
        # reach the code behind the lookup instead of stopping at NOT_FOUND.
        for value in list(out.values()):
            kind = self.pools.kinds.get(value) if isinstance(value, str) else None
            if kind is None:
                continue
            for name, prop in properties.items():
                if kind in resolve_refs(prop, schema).get("enum", ()) and name in out:
                    out[name] = kind
        return out

    def an_id(self, name: str = "id") -> str:
        pools = self.pools
        roll = self.rng.random()
        # rule_id -> rules first; plain id -> any kind.
        wanted = name.split("_")[0]

        def pick(ids: list[str]) -> str:
            typed = [i for i in ids if pools.kinds.get(i) == wanted]
            return self.rng.choice(typed or ids)

        if pools.foreign_ids and roll < self.foreign_id_rate:
            return pick(pools.foreign_ids)
        if pools.own_ids and roll < 0.9:
            return pick(pools.own_ids)
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def text(self, name: str, schema: dict[str, Any]) -> str:
        if "pattern" in schema:
            matching = text_matching(schema["pattern"], self.rng)
            if matching is not None:
                lo, hi = schema.get("minLength", 0), schema.get("maxLength", len(matching))
                if lo <= len(matching) <= hi:
                    return matching
        n = self.rng.randint(2, 8)
        words = " ".join(self.rng.choice(WORDS) for _ in range(n))
        if name in self.QUERY_NAMES:
            value = words
        elif name in {"scope", "butler", "collection"}:
            value = self.rng.choice(SCOPES)
        elif name in {"tag", "tags", "label", "labels", "entity", "entities"}:
            value = self.rng.choice(WORDS)
        elif name in {"subject", "predicate", "key", "name", "title"}:
            value = self.rng.choice(WORDS) + "_" + self.rng.choice(WORDS)
        else:
            value = f"{words} {self.pools.secret()}"
        lo, hi = schema.get("minLength", 0), schema.get("maxLength")
        if hi is not None:
            value = value[: max(int(hi), 0)]
        while len(value) < lo:
            value += " " + self.rng.choice(WORDS)
        return value

    def number(self, schema: dict[str, Any], integer: bool) -> float | int:
        lo = schema.get("minimum", schema.get("exclusiveMinimum", 0 if not integer else 1))
        hi = schema.get("maximum", schema.get("exclusiveMaximum", 20 if integer else 1))
        if "exclusiveMinimum" in schema and "minimum" not in schema:
            lo = lo + (1 if integer else 1e-6)
        if "exclusiveMaximum" in schema and "maximum" not in schema:
            hi = hi - (1 if integer else 1e-6)
        if integer:
            return self.rng.randint(int(math.ceil(lo)), max(int(math.ceil(lo)), int(min(hi, lo + 50))))
        return round(self.rng.uniform(lo, hi), 3)

    def value(self, schema: dict[str, Any], name: str, root: dict[str, Any]) -> Any:
        schema = resolve_refs(schema, root)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [resolve_refs(o, root) for o in schema[key]]
                non_null = [o for o in options if o.get("type") != "null"]
                pick = self.rng.choice(non_null) if non_null and self.rng.random() < 0.85 else self.rng.choice(options)
                return self.value(pick, name, root)
        if "allOf" in schema:
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(resolve_refs(part, root))
            return self.value(merged, name, root)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = self.rng.choice([k for k in kind if k != "null"] or kind)
        if kind == "string" or (kind is None and self.ID_NAMES.search(name)):
            if self.ID_NAMES.search(name):
                if name in self.FREE_ID_NAMES:
                    return f"{name.split('_')[0]}-{self.rng.randint(1, 50)}"
                return self.an_id(name)
            return self.text(name, schema)
        if kind == "integer":
            return self.number(schema, True)
        if kind == "number":
            return self.number(schema, False)
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        if kind == "array":
            item = schema.get("items", {"type": "string"})
            lo = schema.get("minItems", 0)
            hi = min(schema.get("maxItems", 3), lo + 3)
            count = self.rng.randint(lo, max(lo, hi))
            items = [self.value(item, name.rstrip("s"), root) for _ in range(count)]
            return list(dict.fromkeys(items)) if schema.get("uniqueItems") else items
        if kind == "object" or "properties" in schema:
            if "properties" in schema:
                return self.arguments({**schema, "$defs": root.get("$defs", {})}, optional_rate=0.4)
            return {self.rng.choice(WORDS): self.rng.choice(WORDS) for _ in range(self.rng.randint(0, 2))}
        return self.text(name, schema)


MUTATIONS = (
    "valid",
    "wrong_type",
    "missing_required",
    "extra_key",
    "nasty_string",
    "all_strings_nasty",
    "extreme_number",
    "unknown_tool",
    "no_arguments",
)


def mutate(rng: random.Random, tool: ToolSpec, gen: Generator, mutation: str) -> tuple[str, dict[str, Any], str]:
    """A call (tool name, arguments, detail) of the given mutation class."""
    props = tool.schema.get("properties", {})
    args = gen.arguments(tool.schema)
    names = [n for n in props if n not in NOT_GENERATED]
    if mutation == "unknown_tool":
        return tool.name + rng.choice(["_x", "s", "!", ""]) + rng.choice(["", "\x00", " "]), args, ""
    if mutation == "no_arguments":
        return tool.name, {}, ""
    if mutation == "missing_required":
        required = [n for n in tool.schema.get("required", []) if n in args]
        if required:
            victim = rng.choice(required)
            del args[victim]
            return tool.name, args, victim
        mutation = "extra_key"
    if mutation == "extra_key":
        key = rng.choice(["extra", "__proto__", "constructor", "$where", "contents", "x" * 300, "\x00"])
        args[key] = rng.choice(WRONG_TYPED + ["value"])
        return tool.name, args, key
    if not names:
        return tool.name, args, ""
    if mutation == "wrong_type":
        victim = rng.choice(names)
        args[victim] = rng.choice(WRONG_TYPED)
        return tool.name, args, victim
    if mutation == "nasty_string":
        victim = rng.choice(names)
        label = rng.choice(sorted(NASTY_STRINGS))
        args[victim] = NASTY_STRINGS[label]
        return tool.name, args, f"{victim}={label}"
    if mutation == "all_strings_nasty":
        label = rng.choice(sorted(NASTY_STRINGS))
        for name in names:
            if isinstance(args.get(name), str) or name in tool.schema.get("required", []):
                args[name] = NASTY_STRINGS[label]
        return tool.name, args, label
    if mutation == "extreme_number":
        victim = rng.choice(names)
        args[victim] = rng.choice(EXTREME_NUMBERS)
        return tool.name, args, f"{victim}={args[victim]!r}"
    return tool.name, args, ""
