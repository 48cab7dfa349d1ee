"""Reliability suite (issue 15): isolation, fuzzing, faults and load, over every
registered toolset (``mcp_server.registry.TOOLSETS``), with tools and their
argument schemas discovered through MCP ``tools/list``.

    python bench/reliability.py                  # full sizes (make reliability)
    python bench/reliability.py --small          # the CI size (seconds, not minutes)
    python bench/reliability.py --parts isolation,fuzz

Everything runs on loopback against a private stack under ``var/reliability/``
(its own embedded PostgreSQL and Redis, never the dev database): the isolation
and fuzzing parts call the tools in-process (``mcp.Client(build_server(...))``);
the fault and load parts start a ``make run``-style stack (memproj.serve:
uvicorn + Celery worker + beat) and speak MCP over HTTP. Each part prints a
table and the script exits 1 when a check fails: the figures are reported as
they are, failures included.

The pieces are importable: tests/reliability/ runs them at the CI size.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import itertools
import json
import math
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BASE_DIR = Path(__file__).resolve().parent.parent
if str(BASE_DIR) not in sys.path:
    sys.path.insert(0, str(BASE_DIR))

# ----------------------------------------------------------------------------------------
# Values: what a caller may send, generated from each tool's inputSchema
# ----------------------------------------------------------------------------------------

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


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
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
        schema = _resolve(schema, schema)
        required = set(schema.get("required", []))
        out: dict[str, Any] = {}
        properties = schema.get("properties", {})
        for name, prop in properties.items():
            if name in NOT_GENERATED:
                continue
            if name in required or self.rng.random() < optional_rate:
                prop = _resolve(prop, schema)
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
                if kind in _resolve(prop, schema).get("enum", ()) and name in out:
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
        schema = _resolve(schema, root)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                options = [_resolve(o, root) for o in schema[key]]
                non_null = [o for o in options if o.get("type") != "null"]
                pick = self.rng.choice(non_null) if non_null and self.rng.random() < 0.85 else self.rng.choice(options)
                return self.value(pick, name, root)
        if "allOf" in schema:
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                merged.update(_resolve(part, root))
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


# ----------------------------------------------------------------------------------------
# Answers: how an MCP answer is judged
# ----------------------------------------------------------------------------------------

# Text that only an internal failure produces; never for a client's eyes.
INTERNAL_DETAIL = re.compile(
    r"Traceback \(most recent|File \"|validation errors? for |input_value=|errors\.pydantic\.dev|"
    r"psycopg|django\.|site-packages|IntegrityError|OperationalError|DataError|"
    r"UnicodeEncodeError|ValueError\(|KeyError|TypeError",
)
_TOOL_PREFIX = re.compile(r"^Error executing tool [^:]*(: )?")
_CODE_PATTERNS = (
    re.compile(r"^\[([A-Z][A-Z0-9_]{2,})\]"),
    re.compile(r"^([A-Z][A-Z0-9_]{2,})(?::|\s[-\u2014]\s|\s*$)"),
    re.compile(r'"code"\s*:\s*"?([A-Za-z0-9_.-]+)"?'),
    # langmem speaks Python's vocabulary, as LangMem raises: `ValueError: ...`, `ConfigurationError: ...`.
    re.compile(r"^([A-Z][A-Za-z]+(?:Error|Exception)):\s"),
)


@dataclass
class Answer:
    outcome: str  # ok | error | hang | exception
    text: str = ""
    code: str | None = None
    structured: Any = None
    seconds: float = 0.0
    # The core code behind a tool error (its result _meta), whatever the dialect's text calls it.
    core_code: str | None = None

    @property
    def internal_detail(self) -> bool:
        return bool(INTERNAL_DETAIL.search(self.text))


# A tool error's result _meta key for the core code behind the dialect's text
# (mcp_server.dialect.ERROR_CODE_META_KEY; spelled out so the bench needs no Django).
ERROR_CODE_META_KEY = "io.memproj/error-code"


def error_code(text: str, structured: Any = None) -> str | None:
    """The dialect's error code in an error answer, in any of the shapes the
    dialects use: ``[CODE] message``, ``CODE: message``, or a JSON body with
    ``code`` / ``error.code`` (in the text or, for an HTTP body, the parsed body)."""
    if isinstance(structured, dict):
        err = structured.get("error", structured)
        if isinstance(err, dict) and err.get("code"):
            return str(err["code"])
    body = _TOOL_PREFIX.sub("", text.strip(), count=1).strip()
    for pattern in _CODE_PATTERNS:
        found = pattern.search(body)
        if found:
            return found.group(1)
    return None


def json_strings_in_optional_text(clients: InProcessClients, who: str) -> list[tuple[str, str, str, Answer]]:
    """Every optional string parameter of every tool given text that happens to
    be JSON (an object, an array): it is text like any other and must be
    accepted or refused with a clear code, never crash the call."""
    out = []
    rng = random.Random(15)
    for toolset in clients.toolsets:
        for tool in clients.tools[toolset]:
            required = set(tool.schema.get("required", []))
            base = Generator(rng, Pools(0)).arguments(tool.schema, optional_rate=0.0)
            for name, prop in tool.schema.get("properties", {}).items():
                prop = _resolve(prop, tool.schema)
                types = {o.get("type") for o in prop.get("anyOf", [prop])}
                if name in required or name in NOT_GENERATED or "string" not in types or "enum" in prop:
                    continue
                for text in ('{"note": "json text"}', '["a", "b"]'):
                    answer = clients.call(who, toolset, tool.name, {**base, name: text})
                    out.append((toolset, tool.name, name, answer))
    return out


def answer_from_result(result: Any, seconds: float) -> Answer:
    text = " ".join(getattr(block, "text", "") or "" for block in result.content)
    if result.is_error:
        # An error result carries no structured content: the code is the one in
        # the dialect's text, else (roampal's `Error: ...` names none) the core
        # code in the result's _meta.
        core = (result.meta or {}).get(ERROR_CODE_META_KEY)
        return Answer("error", text, error_code(text) or core, result.structured_content, seconds, core)
    return Answer("ok", text, None, result.structured_content, seconds)


def answer_text(answer: Answer) -> str:
    return answer.text + " " + json.dumps(answer.structured, default=str, ensure_ascii=False)


# ----------------------------------------------------------------------------------------
# In-process MCP clients (isolation and fuzzing)
# ----------------------------------------------------------------------------------------


def warm_up_embedder() -> None:
    """Load the embedding model before the first timed call: loading torch can
    take a minute on a busy machine, which is not a hang of the call that pays it."""
    from memory.embeddings import EmbeddingUnavailable, embed_one

    with contextlib.suppress(EmbeddingUnavailable):
        embed_one("warm up")


@dataclass
class ToolSpec:
    toolset: str
    name: str
    schema: dict[str, Any]


class InProcessClients:
    """Open ``mcp.Client(build_server(toolset, static_caller=...))`` sessions on a
    private event loop thread, so synchronous code (a Hypothesis state machine,
    Django ORM checks in the calling thread) can call tools one at a time."""

    def __init__(self, callers: dict[str, Any], toolsets: Sequence[str]) -> None:
        self.callers = callers
        self.toolsets = list(toolsets)
        self.clients: dict[tuple[str, str], Any] = {}
        self.tools: dict[str, list[ToolSpec]] = {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="mcp-clients", daemon=True)
        self._closing: asyncio.Event | None = None
        self._holder: concurrent.futures.Future[None] | None = None

    def __enter__(self) -> InProcessClients:
        warm_up_embedder()
        self.thread.start()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(ready), self.loop)
        ready.result(timeout=300)
        return self

    async def _hold(self, ready: concurrent.futures.Future[None]) -> None:
        # Sessions are entered and left in this one task (anyio's rule).
        from mcp import Client

        from mcp_server.server import build_server

        self._closing = asyncio.Event()
        try:
            async with contextlib.AsyncExitStack() as stack:
                for who, caller in self.callers.items():
                    for toolset in self.toolsets:
                        client = Client(build_server(toolset, static_caller=caller))
                        self.clients[(who, toolset)] = await stack.enter_async_context(client)
                first = next(iter(self.callers))
                for toolset in self.toolsets:
                    listed = await self.clients[(first, toolset)].list_tools()
                    self.tools[toolset] = [ToolSpec(toolset, t.name, dict(t.input_schema)) for t in listed.tools]
                ready.set_result(None)
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    def __exit__(self, *exc: object) -> None:
        if self._closing is not None:
            self.loop.call_soon_threadsafe(self._closing.set)
        if self._holder is not None:
            with contextlib.suppress(Exception):
                self._holder.result(timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    def call(self, who: str, toolset: str, name: str, arguments: dict[str, Any], timeout: float = 60) -> Answer:
        client = self.clients[(who, toolset)]
        started = time.perf_counter()
        future = asyncio.run_coroutine_threadsafe(client.call_tool(name, arguments), self.loop)
        try:
            result = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return Answer("hang", f"no answer in {timeout:g} s", seconds=time.perf_counter() - started)
        except Exception as exc:  # a protocol-level error: JSON-RPC error or a broken session
            text = f"{type(exc).__name__}: {exc}"
            code = getattr(getattr(exc, "error", None), "code", None)
            return Answer(
                "exception", text, str(code) if code is not None else None, None, time.perf_counter() - started
            )
        return answer_from_result(result, time.perf_counter() - started)


# ----------------------------------------------------------------------------------------
# The HTTP surfaces beside MCP (isolation): REST route, roampal hooks, langmem store, admin
# ----------------------------------------------------------------------------------------

SURFACES = ("rest", "hooks", "langmem store", "admin")
# The surfaces that take a request body, where a tenant selector can be sent.
SELECTOR_SURFACES = ("rest", "hooks", "langmem store")
HOOK_PATHS = ("/api/hooks/get-context", "/api/hooks/stop", "/api/search", "/api/ingest")
ROAMPAL_COLLECTIONS = ["books", "working", "history", "patterns", "memory_bank"]
ADMIN_ACTIONS = ("list", "search", "change", "review", "bulk", "export", "events", "conflicts", "dashboard")


def http_identities(prefix: str, people: dict[str, tuple[int, str, Any]]) -> dict[str, tuple[str, Any, str]]:
    """For each identity of :func:`identities`: another bearer token of the same
    principal (for the HTTP endpoints), a staff login linked to that principal
    (the admin: a tenant admin reaches their tenant, a member nothing unless the
    tenant allows review) and its tenant's slug. who -> (token, user, slug)."""
    from django.contrib.auth.models import User

    from policy.services.tokens import token_issue

    out = {}
    for who, (index, _, caller) in people.items():
        role = "admin" if who.endswith("admin") else "member"
        slug = f"{prefix}-t{index}"
        issued = token_issue(tenant_slug=slug, principal_name=f"{role}{index}", role=role)
        principal = issued.api_token.principal
        assert principal.id == caller.principal_id
        user = User.objects.create_user(username=f"{prefix}-{who}", password=uuid.uuid4().hex, is_staff=True)
        principal.user = user
        principal.save(update_fields=["user"])
        out[who] = (issued.token, user, slug)
    return out


class HttpSurfaces:
    """Calls on the HTTP endpoints beside MCP, in-process through Django's test
    client (the same views, URL routing and middleware as the served app):
    ``POST /api/<toolset>/<tool>``, the roampal hooks, the langmem store and the
    admin as a staff user. Each call answers an :class:`Answer` (ok = HTTP 2xx/3xx)."""

    def __init__(self, clients: InProcessClients, logins: dict[str, tuple[str, Any, str]]) -> None:
        from django.test import Client

        self.clients = clients
        self.logins = logins
        self.http: dict[str, Any] = {}
        for who, (_, user, _) in logins.items():
            client = Client(HTTP_HOST="localhost")
            client.force_login(user)
            self.http[who] = client

    def foreign_slugs(self, who: str) -> list[str]:
        own = self.logins[who][2]
        return sorted({slug for _, _, slug in self.logins.values()} - {own})

    def call(
        self, who: str, surface: str, rng: random.Random, gen: Generator, selector: tuple[str, str] | None = None
    ) -> tuple[str, Any, Answer]:
        """(what was called, what was sent, the answer)."""
        token = self.logins[who][0]
        bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
        if surface == "rest":
            toolset = rng.choice(self.clients.toolsets)
            tool = rng.choice(self.clients.tools[toolset])
            body: Any = gen.arguments(tool.schema)
            if selector:
                body[selector[0]] = selector[1]
            return self._post(who, f"/api/{toolset}/{tool.name}", body, bearer)
        if surface == "hooks":
            path = rng.choice(HOOK_PATHS)
            body = self._hook_body(path, rng, gen)
            if selector:
                body[selector[0]] = selector[1]
            return self._post(who, path, body, bearer)
        if surface == "langmem store":
            body = {"ops": [self._store_op(rng, gen) for _ in range(rng.randint(1, 3))]}
            if selector:
                (body if rng.random() < 0.5 else body["ops"][0])[selector[0]] = selector[1]
            return self._post(who, "/api/langmem/store/", body, bearer)
        if surface == "admin":
            return self._admin(who, rng, gen)
        raise ValueError(surface)

    def _post(self, who: str, path: str, body: Any, headers: dict[str, str]) -> tuple[str, Any, Answer]:
        started = time.perf_counter()
        response = self.http[who].post(path, data=json.dumps(body), content_type="application/json", **headers)
        return path, body, self._answer(response, started)

    @staticmethod
    def _answer(response: Any, started: float) -> Answer:
        if getattr(response, "streaming", False):
            text = b"".join(response.streaming_content).decode("utf-8", "replace")
        else:
            text = response.content.decode("utf-8", "replace")
        ok = response.status_code < 400
        code = None
        if not ok:
            with contextlib.suppress(ValueError):
                payload = json.loads(text)
                code = error_code(json.dumps(payload), payload) or str(response.status_code)
        return Answer("ok" if ok else "error", text, code, None, time.perf_counter() - started)

    def _hook_body(self, path: str, rng: random.Random, gen: Generator) -> dict[str, Any]:
        conversation = f"conv-{rng.randint(1, 4)}"
        if path == "/api/hooks/get-context":
            return {"query": gen.text("query", {}), "conversation_id": conversation}
        if path == "/api/hooks/stop":
            return {
                "conversation_id": conversation,
                "user_message": gen.text("content", {}),
                "assistant_response": gen.text("content", {}),
            }
        if path == "/api/search":
            body: dict[str, Any] = {"query": gen.text("query", {}), "limit": rng.randint(1, 20)}
            if rng.random() < 0.4:
                body["id"] = gen.an_id()
            if rng.random() < 0.4:
                body["collections"] = rng.sample(ROAMPAL_COLLECTIONS, rng.randint(1, 3))
            if rng.random() < 0.3:
                body = {"days_back": rng.randint(1, 30), "limit": 10}
            return body
        return {"title": f"book {rng.choice(WORDS)}", "content": gen.text("content", {}), "tags": [rng.choice(WORDS)]}

    def _store_op(self, rng: random.Random, gen: Generator) -> dict[str, Any]:
        namespace = ["notes", rng.choice(WORDS)]
        key = rng.choice(WORDS)
        kind = rng.choice(["get", "put", "put", "search", "list_namespaces"])
        if kind == "get":
            return {"op": "get", "namespace": namespace, "key": key}
        if kind == "put":
            value = None if rng.random() < 0.15 else {"content": gen.text("content", {})}
            return {"op": "put", "namespace": namespace, "key": key, "value": value}
        if kind == "search":
            return {"op": "search", "namespace_prefix": namespace[:1], "query": gen.text("query", {}), "limit": 10}
        return {"op": "list_namespaces", "prefix": None, "limit": 50}

    def _admin(self, who: str, rng: random.Random, gen: Generator) -> tuple[str, Any, Answer]:
        """A staff request: lists, searches (for words and for other tenants'
        secrets), detail pages and review actions on own and foreign memory
        ids, bulk actions and exports over mixed ids, the event log, conflicts
        and the dashboard of any tenant."""
        from django.urls import reverse

        client = self.http[who]
        action = rng.choice(ADMIN_ACTIONS)
        started = time.perf_counter()
        memories = reverse("admin:memory_memory_changelist")
        sent: Any
        if action == "list":
            sent = memories
            response = client.get(memories)
        elif action == "search":
            # Another tenant's secret marker as the search term: nothing of theirs may come back.
            other = rng.randrange(3)
            sent = {"q": rng.choice([rng.choice(WORDS), f"S3CR3T{other}K"])}
            response = client.get(memories, sent)
        elif action in ("change", "review"):
            memory_id = gen.an_id()
            if action == "change":
                sent = reverse("admin:memory_memory_change", args=[memory_id])
                response = client.get(sent)
            else:
                sent = {"memory": memory_id, "action": rng.choice(["confirm", "retract", "restore", "reembed"])}
                response = client.post(reverse("admin:memory_memory_review", args=[memory_id]), sent)
        elif action in ("bulk", "export"):
            ids = list({gen.an_id() for _ in range(rng.randint(1, 4))})
            name = "export_csv" if action == "export" else rng.choice(["action_retract", "action_confirm"])
            sent = {"action": name, "_selected_action": ids}
            response = client.post(memories, sent)
        elif action == "events":
            sent = reverse("admin:memory_memoryevent_changelist")
            response = client.get(sent)
        elif action == "conflicts":
            sent = reverse("admin:memory_conflictcandidate_changelist")
            response = client.get(sent)
        else:
            slug = rng.choice([s for _, _, s in self.logins.values()])
            sent = reverse("memproj_dashboard", args=[slug])
            response = client.get(sent)
        return f"admin {action}", sent, self._answer(response, started)


# ----------------------------------------------------------------------------------------
# Database views (Django must be set up by the caller)
# ----------------------------------------------------------------------------------------


def tenant_tables() -> list[tuple[str, str, list[str]]]:
    """Every table with a tenant column: (table, primary key, columns to compare).
    Found from the model registry, so tables added later are covered too; vector
    and tsvector columns are derived and left out."""
    from django.apps import apps
    from django.db import connection

    found = []
    with connection.cursor() as cursor:
        for model in apps.get_models():
            fields = {f.name: f for f in model._meta.concrete_fields}
            tenant = fields.get("tenant")
            if tenant is None or not tenant.is_relation:
                continue
            table = model._meta.db_table
            cursor.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND udt_name NOT IN ('vector', 'tsvector') ORDER BY ordinal_position",
                [table],
            )
            columns = [row[0] for row in cursor.fetchall()]
            found.append((table, model._meta.pk.column, columns))
    return found


class Digests:
    """One md5 per (table, tenant) over every compared column of every row."""

    def __init__(self) -> None:
        from django.db import connection

        parts = []
        for table, pk, columns in tenant_tables():
            cols = ", ".join(f"{connection.ops.quote_name(c)}::text" for c in columns)
            parts.append(
                f"SELECT '{table}' AS t, tenant_id::text, count(*), "  # noqa: S608 - names from the model registry
                f"md5(string_agg(concat_ws('|', {cols}), E'\\n' ORDER BY {connection.ops.quote_name(pk)})) "
                f"FROM {connection.ops.quote_name(table)} GROUP BY tenant_id"
            )
        self.sql = " UNION ALL ".join(parts)

    def take(self) -> dict[tuple[str, str], tuple[int, str]]:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(self.sql)
            return {(t, tenant): (n, digest) for t, tenant, n, digest in cursor.fetchall()}


def memory_ids_by_tenant(kinds: dict[str, str] | None = None) -> dict[str, set[str]]:
    """tenant id -> its memory ids (and, into ``kinds``, id -> kind)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT tenant_id::text, id::text, kind FROM memory_memory")
        out: dict[str, set[str]] = defaultdict(set)
        for tenant, pk, kind in cursor.fetchall():
            out[tenant].add(pk)
            if kinds is not None:
                kinds[pk] = kind
    return out


CONSISTENCY_CHECKS = {
    "memory rows without their 'stored' audit event": (
        "SELECT count(*) FROM memory_memory m WHERE NOT EXISTS (SELECT 1 FROM memory_memoryevent e "
        "WHERE e.memory_id = m.id AND e.event_type = 'stored')"
    ),
    "rows marked embedded without a vector": (
        "SELECT count(*) FROM memory_memory WHERE embedding_status = 'ready' AND embedding IS NULL"
    ),
    "superseded facts without a successor": (
        "SELECT count(*) FROM memory_memory WHERE validity = 'superseded' AND superseded_by_id IS NULL"
    ),
    "rows with NUL or an empty content": "SELECT count(*) FROM memory_memory WHERE btrim(content) = ''",
    "rows whose tenant differs from their principal's": (
        "SELECT count(*) FROM memory_memory m JOIN policy_principal p ON p.id = m.principal_id "
        "WHERE p.tenant_id <> m.tenant_id"
    ),
}


def consistency_problems(run_sql: Callable[[str], int] | None = None) -> dict[str, int]:
    if run_sql is None:
        from django.db import connection

        def run_sql(sql: str) -> int:
            with connection.cursor() as cursor:
                cursor.execute(sql)
                return int(cursor.fetchone()[0])

    return {label: run_sql(sql) for label, sql in CONSISTENCY_CHECKS.items()}


# ----------------------------------------------------------------------------------------
# Part 1: isolation (a Hypothesis state machine over every toolset's tools)
# ----------------------------------------------------------------------------------------


@dataclass
class IsolationReport:
    calls: int = 0
    errors: int = 0
    leaks: list[str] = field(default_factory=list)
    foreign_changes: list[str] = field(default_factory=list)
    selector_calls: int = 0
    selectors_accepted: list[str] = field(default_factory=list)
    per_toolset: Counter[str] = field(default_factory=Counter)


class IsolationRun:
    """The checks behind the state machine: before and after each call, a digest
    of every tenant-scoped row of the tenants other than the caller's; after it,
    the answer searched for their secrets and ids. ``strict`` raises on the
    first leak or foreign change (Hypothesis then reports the call sequence)."""

    def __init__(
        self,
        clients: InProcessClients,
        identities: dict[str, tuple[int, str]],
        *,
        strict: bool,
        surfaces: HttpSurfaces | None = None,
    ) -> None:
        # identities: who -> (tenant index, tenant id)
        self.clients = clients
        self.surfaces = surfaces
        # Every served dialect over MCP, and the HTTP surfaces beside it, equally likely.
        self.endpoints = [*clients.toolsets, *(SURFACES if surfaces is not None else ())]
        self.identities = identities
        self.strict = strict
        self.digests = Digests()
        self.report = IsolationReport()
        self.pools = {who: Pools(index) for who, (index, _) in identities.items()}
        self.ids = memory_ids_by_tenant()
        self.tenant_index = {tenant: index for index, tenant in identities.values()}

    def _refresh_pools(self) -> None:
        kinds: dict[str, str] = {}
        self.ids = memory_ids_by_tenant(kinds)
        for who, (_, tenant) in self.identities.items():
            pools = self.pools[who]
            pools.kinds = kinds
            pools.own_ids = sorted(self.ids.get(tenant, ()))[-200:]
            pools.foreign_ids = sorted(i for t, ids in self.ids.items() if t != tenant for i in ids)[-200:]

    def _others(self, snapshot: dict[tuple[str, str], tuple[int, str]], tenant: str) -> dict[Any, Any]:
        return {k: v for k, v in snapshot.items() if k[1] != tenant}

    def _fail(self, bucket: list[str], message: str) -> None:
        bucket.append(message)
        if self.strict:
            raise AssertionError(message)

    def random_call(self, rng: random.Random, *, foreign_ids: bool = False) -> None:
        who = rng.choice(sorted(self.identities))
        endpoint = rng.choice(self.endpoints)
        if self.report.calls % 10 == 0:
            self._refresh_pools()
        gen = Generator(rng, self.pools[who], foreign_id_rate=0.9 if foreign_ids else 0.25)
        before = self.digests.take()
        if endpoint in SURFACES:
            assert self.surfaces is not None
            name, args, answer = self.surfaces.call(who, endpoint, rng, gen)
        else:
            tool = rng.choice(self.clients.tools[endpoint])
            name, args = f"{endpoint}.{tool.name}", gen.arguments(tool.schema)
            answer = self.clients.call(who, endpoint, tool.name, args)
        after = self.digests.take()
        self.report.calls += 1
        self.report.per_toolset[endpoint] += 1
        self.report.errors += answer.outcome != "ok"
        self._check(who, f"{endpoint}: {name}", args, answer, before, after)

    def _check(
        self,
        who: str,
        name: str,
        args: Any,
        answer: Answer,
        before: dict[tuple[str, str], tuple[int, str]],
        after: dict[tuple[str, str], tuple[int, str]],
    ) -> None:
        """The answer holds nothing of another tenant (content, memory ids, for
        the admin its slug) and no other tenant's rows changed."""
        _, tenant = self.identities[who]
        sent = json.dumps(args, default=str)
        text = answer_text(answer)
        label = f"{who} {name}({sent[:300]})"
        index = self.identities[who][0]
        for found in SECRET_RE.finditer(text):
            if int(found.group(1)) != index and found.group(0) not in sent:
                self._fail(self.report.leaks, f"{label} -> another tenant's content {found.group(0)}")
        for found in set(UUID_RE.findall(text)) - set(UUID_RE.findall(sent)):
            owner = next((t for t, ids in self.ids.items() if found in ids), None)
            if owner is not None and owner != tenant:
                self._fail(self.report.leaks, f"{label} -> another tenant's memory id {found}")
        if self.surfaces is not None and name.startswith("admin"):
            for slug in self.surfaces.foreign_slugs(who):
                if slug in text and slug not in sent:
                    self._fail(self.report.leaks, f"{label} -> another tenant's slug {slug}")
        changed = {
            k
            for k in set(self._others(before, tenant)) | set(self._others(after, tenant))
            if before.get(k) != after.get(k)
        }
        if changed:
            self._fail(self.report.foreign_changes, f"{label} changed {sorted(changed)}")

    def selector_call(self, rng: random.Random) -> None:
        """A tenant selector naming another tenant must be refused and change nothing."""
        who = rng.choice(sorted(self.identities))
        _, tenant = self.identities[who]
        others = sorted({t for _, t in self.identities.values()} - {tenant})
        endpoint = rng.choice([e for e in self.endpoints if e not in SURFACES or e in SELECTOR_SURFACES])
        selector = rng.choice(TENANT_SELECTORS)
        target = rng.choice(others)
        gen = Generator(rng, self.pools[who])
        before = self.digests.take()
        if endpoint in SURFACES:
            assert self.surfaces is not None
            name, args, answer = self.surfaces.call(who, endpoint, rng, gen, selector=(selector, target))
        else:
            tool = rng.choice(self.clients.tools[endpoint])
            args = gen.arguments(tool.schema)
            args[selector] = target
            if rng.random() < 0.5:
                args["elevate"] = True
            name = f"{endpoint}.{tool.name}"
            answer = self.clients.call(who, endpoint, tool.name, args)
        after = self.digests.take()
        self.report.selector_calls += 1
        self.report.per_toolset[endpoint] += 1
        label = f"{who} {name}({json.dumps(args, default=str)[:300]}) with {selector}"
        if answer.outcome == "ok":
            # Accepted (the argument contract is missing): it acted on the
            # caller's own tenant, whose rows it may change; never a foreign one.
            self.report.selectors_accepted.append(label)
            before, after = self._others(before, tenant), self._others(after, tenant)
        if before != after:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            self._fail(self.report.foreign_changes, f"{label} ({answer.outcome}) changed {changed}")


def make_isolation_machine(run: IsolationRun) -> type:
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, rule

    class IsolationMachine(RuleBasedStateMachine):
        # One rule with a weighted choice rather than three rules: Hypothesis'
        # swarm testing switches whole rules off per example, which at CI sizes
        # can leave a kind of call out entirely.
        # A true Random seeded by Hypothesis: what the generator draws depends on
        # the database (known ids), which Hypothesis' own choice sequence forbids.
        @rule(
            kind=st.sampled_from(["call"] * 6 + ["foreign ids"] * 3 + ["tenant selector"]),
            rng=st.randoms(use_true_random=True),
        )
        def step(self, kind: str, rng: random.Random) -> None:
            if kind == "tenant selector":
                run.selector_call(rng)
            else:
                run.random_call(rng, foreign_ids=kind == "foreign ids")

    return IsolationMachine


def run_isolation_machine(run: IsolationRun, *, examples: int, steps: int, seed: int | None = None) -> None:
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    machine = make_isolation_machine(run)
    options = settings(
        # No shrinking: each step depends on the database the earlier ones left,
        # so a shrunk sequence replays differently; the failing one is printed whole.
        phases=[Phase.explicit, Phase.reuse, Phase.generate],
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=seed is not None,
        suppress_health_check=list(HealthCheck),
    )
    run_state_machine_as_test(machine, settings=options)


def selector_matrix(
    clients: InProcessClients,
    who: str,
    other_tenant: str,
    *,
    toolsets: Sequence[str] | None = None,
    selectors: Sequence[str] = TENANT_SELECTORS,
) -> list[tuple[str, str, str, Answer]]:
    """Every tool (of every toolset) with every tenant selector naming another tenant."""
    out = []
    rng = random.Random(15)
    for toolset in toolsets or clients.toolsets:
        for tool in clients.tools[toolset]:
            for selector in selectors:
                args = Generator(rng, Pools(0)).arguments(tool.schema, optional_rate=0.0)
                args[selector] = other_tenant
                out.append((toolset, tool.name, selector, clients.call(who, toolset, tool.name, args)))
    return out


# ----------------------------------------------------------------------------------------
# Part 2: fuzzing
# ----------------------------------------------------------------------------------------


INTERNAL_CODES = {"INTERNAL", "INTERNAL_ERROR", "-32603"}


@dataclass
class FuzzReport:
    calls: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)
    samples: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, toolset: str, kind: str, sample: str) -> None:
        self.outcomes[(toolset, kind)] += 1
        if len(self.samples[(toolset, kind)]) < 5:
            self.samples[(toolset, kind)].append(sample[:400])

    def count(self, kind: str, toolset: str | None = None) -> int:
        return sum(n for (t, k), n in self.outcomes.items() if k == kind and (toolset is None or t == toolset))


def fuzz(
    clients: InProcessClients, who: str, *, calls_per_toolset: int, seed: int = 15, timeout: float = 30
) -> FuzzReport:
    """Calls of every mutation class on every tool; each answer is classified:
    ok, coded error, uncoded error, internal detail (a traceback or validation
    dump), a crash (the SDK's bare 'Error executing tool'), a hang, or a
    protocol exception."""
    report = FuzzReport()
    rng = random.Random(seed)
    pools = Pools(0)
    for toolset in clients.toolsets:
        tools = clients.tools[toolset]
        for i in range(calls_per_toolset):
            if i % 25 == 0:
                ids = memory_ids_by_tenant(pools.kinds)
                pools.own_ids = sorted(itertools.chain.from_iterable(ids.values()))[-100:]
            tool = tools[i % len(tools)] if i < len(tools) * 2 else rng.choice(tools)
            mutation = MUTATIONS[i % len(MUTATIONS)] if i < len(MUTATIONS) * len(tools) else rng.choice(MUTATIONS)
            name, args, detail = mutate(rng, tool, Generator(rng, pools), mutation)
            answer = clients.call(who, toolset, name, args, timeout=timeout)
            report.calls[toolset] += 1
            sample = f"{mutation} {name} {detail!r}: {answer.text[:300]}"
            if answer.outcome == "ok":
                report.add(toolset, "ok", sample)
            elif answer.outcome == "hang":
                report.add(toolset, "hang", sample)
            elif answer.internal_detail:
                report.add(toolset, "internal detail", sample)
            elif answer.outcome == "exception":
                report.add(toolset, "protocol exception", sample)
            elif _TOOL_PREFIX.sub("", answer.text.strip()).strip() == "":
                report.add(toolset, "crash", sample)
            elif answer.code is None:
                report.add(toolset, "uncoded error", sample)
            elif answer.code.upper() in INTERNAL_CODES or answer.core_code == "INTERNAL":
                # Coded, but the call crashed: input the schema let through broke a tool.
                report.add(toolset, "internal error", sample)
            else:
                report.add(toolset, "coded error", sample)
    return report


# ----------------------------------------------------------------------------------------
# Parts 3 and 4: a make-run stack over HTTP (faults and load)
# ----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeEmbeddingEndpoint:
    """A loopback OpenAI-compatible ``POST /v1/embeddings`` endpoint that the
    suite controls, so embedder faults are injected for real into a running
    stack (MEMPROJ_EMBEDDER=openai pointed here). In mode ``ok`` it computes
    real vectors with the packaged MiniLM (in this process); ``error`` answers
    HTTP 500 with an exception's text; ``malformed`` answers 200 with broken
    JSON or vectors of the wrong size (alternately); ``hang`` accepts the
    request and never answers (until the mode changes)."""

    MODES = ("ok", "error", "malformed", "hang")

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from memory.embeddings import LocalEmbedder

        self.mode = "ok"
        self.requests: Counter[str] = Counter()  # mode -> requests answered (or held) in it
        self._model = LocalEmbedder()
        self._lock = threading.Lock()
        self._model_lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet: thousands of requests
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                endpoint.answer(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, name="fake-embedder", daemon=True)

    def start(self) -> FakeEmbeddingEndpoint:
        self._model.embed(["warm up"])  # load before the stack's first (bounded) request
        self._thread.start()
        return self

    def stop(self) -> None:
        self.mode = "ok"  # releases held requests
        self.server.shutdown()
        self.server.server_close()

    def answer(self, handler: Any, body: bytes) -> None:
        mode = self.mode
        with self._lock:
            self.requests[mode] += 1
            n = self.requests[mode]
        if mode == "hang":
            # Hold the connection without a byte of answer, as a stuck server does.
            while self.mode == "hang":
                time.sleep(0.1)
            mode = "error"  # the client gave up long ago; anything goes
        try:
            if mode == "ok":
                request = json.loads(body)
                texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
                with self._model_lock:  # one forward pass at a time
                    vectors = self._model.embed([str(t) for t in texts])
                data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
                payload = json.dumps({"object": "list", "data": data, "model": request.get("model", "")}).encode()
                status = 200
            elif mode == "error":
                payload = b'{"error": {"message": "RuntimeError: CUDA error: device-side assert triggered"}}'
                status = 500
            elif n % 2:
                payload, status = b'{"object": "list", "data": [{"index": 0, "embedding": [0.1, 0.2,', 200
            else:
                payload, status = b'{"object": "list", "data": [{"index": 0, "embedding": [0.5, 0.5]}]}', 200
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)
        except OSError:  # the client hung up (it timed out on a held request)
            return


class Stack:
    """A private `make run`: embedded PostgreSQL and Redis under ``var_dir``,
    migrations, tokens, and memproj.serve (uvicorn + Celery worker + beat)."""

    def __init__(
        self,
        var_dir: Path,
        *,
        port: int | None = None,
        worker_concurrency: int = 1,
        embedder: FakeEmbeddingEndpoint | None = None,
        env_overrides: dict[str, str] | None = None,
    ) -> None:
        self.var_dir = var_dir.resolve()
        self.embedder = embedder
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.supervisor: subprocess.Popen[bytes] | None = None
        self.log_path = self.var_dir / "serve.log"
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CELERY_", "DATABASE_URL", "MEMPROJ_TEST", "PYTEST", "DJANGO_SETTINGS"))
        }
        env.update(
            DJANGO_SETTINGS_MODULE="memproj.settings.base",
            MEMPROJ_VAR_DIR=str(self.var_dir),
            PORT=str(self.port),
            MEMPROJ_PUBLIC_URL=self.url,
            MEMPROJ_PG_SHARED_BUFFERS=os.environ.get("MEMPROJ_RELIABILITY_SHARED_BUFFERS", "128MB"),
            MEMPROJ_WORKER_CONCURRENCY=str(worker_concurrency),
            PYTHONPATH=str(BASE_DIR),
            PYTHONUNBUFFERED="1",
            LOG_LEVEL="WARNING",
            # A message whose worker was killed before the ack is redelivered after
            # this long (300 s in make run); short here so recovery fits the run.
            CELERY_VISIBILITY_TIMEOUT="30",
            CELERY_UNACKED_RESTORE_INTERVAL="5",
        )
        env.update(env_overrides or {})
        self.env = env
        self.use_embedder(embedder)

    def use_embedder(self, embedder: FakeEmbeddingEndpoint | None) -> None:
        """Serve with the fake endpoint (embedder faults) or the packaged model
        in-process, as `make run` does; takes effect at the next start."""
        self.embedder = embedder
        for key in ("MEMPROJ_EMBEDDER", "MEMPROJ_EMBEDDING_API_BASE"):
            self.env.pop(key, None)
        if embedder is not None:
            self.env.update(MEMPROJ_EMBEDDER="openai", MEMPROJ_EMBEDDING_API_BASE=embedder.url)

    def run(self, *args: str, timeout: float = 600, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [sys.executable, *args],
            cwd=BASE_DIR,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def prepare(self) -> None:
        """Start the private servers and give every run a fresh database: the
        stack is scratch, and a database left by an older checkout may carry a
        migration history that no longer matches (migrations get re-chained)."""
        import psycopg

        self.var_dir.mkdir(parents=True, exist_ok=True)
        self.var_dir.chmod(0o755)
        self.run("-m", "memproj.embedded", "start")
        with psycopg.connect(
            host=str(self.var_dir / "pgdata"), dbname="postgres", autocommit=True, **self.superuser()
        ) as conn:
            conn.execute("DROP DATABASE IF EXISTS memproj WITH (FORCE)")
        self.run("-m", "memproj.embedded", "start")  # creates (and sets up) the database again
        self.run("manage.py", "migrate", "--noinput")

    def issue_token(self, tenant: str, principal: str, *, rate_limit: int | None = None) -> str:
        """A token in ``tenant``; with ``rate_limit``, the tenant's policy allows
        that many calls a minute (the fault scenarios measure durability, and a
        faster server would otherwise meet the default limit instead of the fault)."""
        token = (
            self.run("manage.py", "issue_token", "--tenant", tenant, "--principal", principal).strip().splitlines()[-1]
        )
        if rate_limit is not None:
            from policy.document import SEED_EXAMPLE_YAML

            document = f"{SEED_EXAMPLE_YAML}rate_limit:\n  limit: {int(rate_limit)}\n  window_seconds: 60\n"
            self.run("manage.py", "policy_apply", "--tenant", tenant, "--file", "-", stdin=document)
        return token

    def start(self, *, timeout: float = 300) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.supervisor = subprocess.Popen(
            [sys.executable, "-m", "memproj.serve"], cwd=BASE_DIR, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        self.wait_healthy(timeout)
        self.wait_for_worker(timeout)
        self.warm_up(timeout)

    def warm_up(self, timeout: float) -> None:
        """/healthz answers before the web process has loaded the embedding model
        (it loads in the background); one search waits for it, so that model
        loading is not mistaken for a slow write in the first scenario."""
        import httpx

        token = self.issue_token("warm-up", "warm-up")

        async def search() -> Answer:
            async with httpx.AsyncClient(timeout=timeout) as http:
                return await mcp_call(http, f"{self.url}/mcp/memory", token, "memory_search", {"query": "warm up"})

        answer = asyncio.run(search())
        if answer.outcome != "ok":
            raise RuntimeError(f"the stack does not answer MCP calls: {answer.text}\n{self.log_tail()}")

    def wait_healthy(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            if self.supervisor is not None and self.supervisor.poll() is not None:
                break
            time.sleep(0.5)
        raise RuntimeError(f"the stack did not become healthy; see {self.log_path}:\n{self.log_tail()}")

    def workers_ready(self) -> int:
        """How many times a worker has logged that it is ready (one per start)."""
        try:
            return self.log_path.read_text(errors="replace").count(" ready.")
        except FileNotFoundError:
            return 0

    def wait_for_worker(self, timeout: float, *, ready_before: int = 0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.child("worker") is not None and self.workers_ready() > ready_before:
                return
            time.sleep(0.5)
        raise RuntimeError(f"the worker did not start; see {self.log_path}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def child(self, name: str) -> Any:
        """The supervisor's child process named web, worker or beat (psutil)."""
        import psutil

        if self.supervisor is None:
            return None
        marker = {"web": "memproj.serve web", "worker": " worker", "beat": " beat"}[name]
        try:
            for proc in psutil.Process(self.supervisor.pid).children():
                with contextlib.suppress(psutil.Error):
                    if marker in " ".join(proc.cmdline()):
                        return proc
        except psutil.NoSuchProcess:
            return None
        return None

    def stop_serving(self) -> None:
        """Stop memproj.serve (web, worker, beat); the database and broker stay up."""
        if self.supervisor is not None and self.supervisor.poll() is None:
            self.supervisor.send_signal(signal.SIGTERM)
            try:
                self.supervisor.wait(60)
            except subprocess.TimeoutExpired:
                self.supervisor.kill()
                self.supervisor.wait()

    def stop(self) -> None:
        self.stop_serving()
        with contextlib.suppress(Exception):
            self.run("-m", "memproj.embedded", "stop", timeout=120)

    # Faults -------------------------------------------------------------------------

    def kill_worker(self) -> None:
        worker = self.child("worker")
        if worker is not None:
            os.kill(worker.pid, signal.SIGKILL)

    def kill_web(self) -> None:
        web = self.child("web")
        if web is not None:
            os.kill(web.pid, signal.SIGKILL)

    def wait_for_web(self, timeout: float = 120) -> None:
        """Until the supervisor's new web process answers."""
        self.wait_healthy(timeout)

    def stop_broker(self) -> None:
        pid = int((self.var_dir / "redis.pid").read_text().strip())
        os.kill(pid, signal.SIGTERM)
        import psutil

        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).wait(30)

    def start_broker(self) -> None:
        self.run("-c", "from memproj.embedded import ensure_redis; ensure_redis()")

    def superuser(self) -> dict[str, str]:
        """The embedded superuser authenticates with its password (memproj/embedded.py)."""
        from memproj.embedded import SUPERUSER_ROLE, role_password

        return {"user": SUPERUSER_ROLE, "password": role_password(SUPERUSER_ROLE, self.var_dir)}

    def stop_postgres(self) -> None:
        self.run("-c", "from memproj.embedded import stop_postgres; print(stop_postgres())")

    def start_postgres(self) -> None:
        self.run("-c", "from memproj.embedded import ensure_postgres; ensure_postgres()")

    def sql(self, query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(host=str(self.var_dir / "pgdata"), dbname="memproj", **self.superuser()) as conn:
            return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


async def mcp_call(
    http: Any, url: str, token: str, name: str, arguments: dict[str, Any], *, idempotency_key: str = ""
) -> Answer:
    """One tools/call over streamable HTTP (stateless JSON responses)."""
    import httpx

    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if idempotency_key:
        params["_meta"] = {"idempotency_key": idempotency_key}
    body = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": "tools/call", "params": params}
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    started = time.perf_counter()
    try:
        response = await http.post(url, json=body, headers=headers)
    except httpx.TimeoutException:
        return Answer("hang", "timeout", seconds=time.perf_counter() - started)
    except httpx.HTTPError as exc:
        return Answer("exception", f"{type(exc).__name__}: {exc}", seconds=time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if response.status_code != 200:
        text = f"HTTP {response.status_code}: {response.text[:300]}"
        code = None
        with contextlib.suppress(ValueError):
            payload = response.json()
            code = error_code(json.dumps(payload), payload)
        return Answer("error", text, code, None, seconds)
    try:
        payload = response.json()
    except ValueError:
        return Answer("error", f"not JSON: {response.text[:300]}", None, None, seconds)
    if "error" in payload:
        return Answer("error", json.dumps(payload["error"]), str(payload["error"].get("code")), payload, seconds)
    result = payload.get("result", {})
    text = " ".join(block.get("text", "") for block in result.get("content", []))
    if result.get("isError"):
        core = (result.get("_meta") or {}).get(ERROR_CODE_META_KEY)
        return Answer("error", text, error_code(text) or core, None, seconds, core)
    return Answer("ok", text, None, result.get("structuredContent"), seconds)


@dataclass
class FaultReport:
    fault: str
    writes: int = 0  # distinct writes (markers)
    attempts: int = 0
    accepted: int = 0  # writes answered ok (on some attempt)
    error_answers: int = 0
    bare_http_errors: int = 0  # an HTTP error status without a code
    uncoded_errors: int = 0  # an error answer without the dialect's code
    no_answer: int = 0  # no answer: the client's 30 s passed or the connection was lost
    lost: int = 0  # accepted, but a search for its own text does not find it
    committed_but_error: int = 0  # a write stored although every attempt was answered with an error
    # Writes with more than one row: each write's attempts carry one idempotency key,
    # so a retry after a lost answer must replay the first answer, not store again.
    duplicates: int = 0
    # Writes stored although no attempt got an answer (every one timed out or lost
    # its connection): reported, not a failure, the service never said "error".
    committed_unanswered: int = 0
    follow_ups_pending: int = 0
    recovered_in: float = 0.0
    worker_back: bool = True  # a worker is running after recovery (the supervisor restarted it)
    samples: list[str] = field(default_factory=list)
    # Embedder faults: writes stored without a vector (embedded later by the worker), and
    # the searches made while the fault was on (they must degrade to keyword, promptly).
    embedded_later: int = 0
    fault_reads: int = 0
    fault_read_errors: int = 0
    fault_reads_found: int = 0  # searches for an accepted marker that found it (by keyword)
    fault_read_p95_ms: float = 0.0
    fault_read_max_ms: float = 0.0

    @property
    def passed(self) -> bool:
        return not (self.lost or self.committed_but_error or self.duplicates or self.follow_ups_pending)

    @property
    def answers_true(self) -> bool:
        """Every error answer coded and none for a committed write."""
        return not (self.committed_but_error or self.bare_http_errors or self.uncoded_errors)


WRITE_KINDS = ("fact", "rule", "episode")


def write_arguments(kind: str, marker: str) -> tuple[str, dict[str, Any]]:
    if kind == "fact":
        return "memory_store_fact", {"subject": marker, "predicate": "status", "content": f"{marker} is tracked"}
    if kind == "rule":
        return "memory_store_rule", {"content": f"Always mention {marker} before sending"}
    return "memory_store_episode", {"content": f"Worked on {marker} today", "butler": "ops"}


@dataclass
class Read:
    started: float  # time.monotonic()
    marker: str
    answer: Answer

    @property
    def found(self) -> bool:
        return self.marker in answer_text(self.answer)


async def read_load(stack: Stack, token: str, accepted: Callable[[], list[str]], stop_at: float) -> list[Read]:
    """One reader searching for markers whose write was accepted (episodes):
    found by keyword even while no query can be embedded."""
    import httpx

    reads: list[Read] = []
    rng = random.Random(15)
    url = f"{stack.url}/mcp/memory"
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5)) as http:
        while time.monotonic() < stop_at:
            markers = accepted()
            if not markers:
                await asyncio.sleep(0.2)
                continue
            marker = rng.choice(markers[-50:])
            started = time.monotonic()
            answer = await mcp_call(http, url, token, "memory_search", {"query": marker, "limit": 5})
            reads.append(Read(started, marker, answer))
    return reads


async def write_load(
    stack: Stack,
    token: str,
    *,
    run_id: str,
    clients: int,
    seconds: float,
    retries: int,
    timeline: Callable[[float], Any] | None = None,
    answers: dict[str, list[Answer]] | None = None,
) -> dict[str, list[Answer]]:
    """Writers storing unique markers; like a real client, a write answered with
    an error is retried (same content) up to ``retries`` times."""
    import httpx

    answers: dict[str, list[Answer]] = {} if answers is None else answers
    counter = itertools.count()
    url = f"{stack.url}/mcp/memory"
    stop_at = time.monotonic() + seconds

    async def writer(http: Any) -> None:
        while time.monotonic() < stop_at:
            n = next(counter)
            marker = f"{run_id}x{n}"
            name, args = write_arguments(WRITE_KINDS[n % 3], marker)
            answers[marker] = []
            for attempt in range(retries + 1):
                # One key per write, as a careful client sends: a retry after a lost answer stores nothing twice.
                answer = await mcp_call(http, url, token, name, args, idempotency_key=marker)
                answers[marker].append(answer)
                if answer.outcome == "ok":
                    break
                await asyncio.sleep(min(0.25 * 2**attempt, 2))

    async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5)) as http:
        tasks = [asyncio.create_task(writer(http)) for _ in range(clients)]
        if timeline is not None:
            tasks.append(asyncio.create_task(timeline(stop_at)))
        await asyncio.gather(*tasks)
    return answers


def pending_follow_ups(stack: Stack, run_id: str) -> int:
    pending = stack.sql(
        "SELECT count(*) FROM memory_memory WHERE content LIKE %s AND embedding_status <> 'ready'", [f"%{run_id}x%"]
    )[0][0]
    # The outbox of issue 15 item 1 (any table named *followup* / *outbox* with a done_at column).
    for (table,) in stack.sql(
        "SELECT table_name FROM information_schema.columns WHERE column_name = 'done_at' "
        "AND (table_name LIKE '%%followup%%' OR table_name LIKE '%%outbox%%')"
    ):
        pending += stack.sql(
            f'SELECT count(*) FROM "{table}" WHERE done_at IS NULL AND memory_id IN '  # noqa: S608
            "(SELECT id FROM memory_memory WHERE content LIKE %s)",
            [f"%{run_id}x%"],
        )[0][0]
    return int(pending)


# The embedder faults need the stack to embed through the fake endpoint
# (Stack(embedder=FakeEmbeddingEndpoint())); each lists the endpoint's modes,
# spread evenly over the fault window.
EMBEDDER_FAULTS: dict[str, tuple[str, ...]] = {
    "embedder errors": ("error",),
    "embedder malformed JSON": ("malformed",),
    "embedder hang": ("hang",),
    # The CI size: the three in turn within one window.
    "embedder errors/malformed/hang": ("error", "malformed", "hang"),
}
FAULTS = ("worker SIGKILL", "web SIGKILL", "broker stop/restart", "PostgreSQL stop/restart")


def fault_scenario(stack: Stack, token: str, fault: str, *, seconds: float, clients: int, drain: float) -> FaultReport:
    """Writes under load; the fault starts at a quarter of the run and is
    repaired at the half (the worker is restarted by the supervisor itself).
    During an embedder fault a reader searches for accepted writes too. Then
    wait for the follow-ups to drain and count."""
    run_id = f"rel{uuid.uuid4().hex[:8]}"
    report = FaultReport(fault)
    steps: list[Callable[[], None]]
    end_fault: Callable[[], None] | None
    if fault in EMBEDDER_FAULTS:
        endpoint = stack.embedder
        if endpoint is None:
            raise ValueError(f"{fault!r} needs a stack that embeds through the fake endpoint")

        def set_mode(mode: str) -> Callable[[], None]:
            return lambda: setattr(endpoint, "mode", mode)

        steps, end_fault = [set_mode(m) for m in EMBEDDER_FAULTS[fault]], set_mode("ok")
        step_modes: list[str] = list(EMBEDDER_FAULTS[fault])
    else:
        inject: dict[str, tuple[Callable[[], None], Callable[[], None] | None]] = {
            "worker SIGKILL": (stack.kill_worker, None),
            # Writes in flight lose their answer; their retries (same key) must not store twice.
            "web SIGKILL": (stack.kill_web, stack.wait_for_web),
            "broker stop/restart": (stack.stop_broker, stack.start_broker),
            "PostgreSQL stop/restart": (stack.stop_postgres, stack.start_postgres),
        }
        first, end_fault = inject[fault]
        steps = [first]
        step_modes = []
    window: list[float] = []  # when the fault was in place, and when it was repaired

    async def timeline(stop_at: float) -> None:
        begin = stop_at - seconds
        await asyncio.sleep(max(0.0, begin + seconds * 0.25 - time.monotonic()))
        # Down for a quarter of the run at least, counted from when the fault is
        # in place (stopping a server takes a while), so writes do meet it.
        for i, step in enumerate(steps):
            await asyncio.to_thread(step)
            if i == 0:
                window.append(time.monotonic())
                fault_over = max(window[0] + max(seconds * 0.25, 2.0), begin + seconds * 0.5)
            step_over = window[0] + (fault_over - window[0]) * (i + 1) / len(steps)
            await asyncio.sleep(max(0.0, step_over - time.monotonic()))
            if step_modes and stack.embedder is not None:
                # A mode counts only once the endpoint has met a request in it: on a
                # busy machine the circuit breaker's cooldown can outlast a short step.
                while stack.embedder.requests[step_modes[i]] == 0 and time.monotonic() < stop_at - 1.0:
                    await asyncio.sleep(0.1)
        if end_fault is not None:
            await asyncio.to_thread(end_fault)
        window.append(time.monotonic())

    answers: dict[str, list[Answer]] = {}
    reads: list[Read] = []

    def accepted() -> list[str]:
        # Every kind: writes that differ by their marker are never merged.
        return [m for m, attempts in list(answers.items()) if attempts and attempts[-1].outcome == "ok"]

    async def reader(stop_at: float) -> None:
        reads.extend(await read_load(stack, token, accepted, stop_at))

    async def both(stop_at: float) -> None:
        await asyncio.gather(timeline(stop_at), reader(stop_at))

    asyncio.run(
        write_load(
            stack,
            token,
            run_id=run_id,
            clients=clients,
            seconds=seconds,
            retries=3,
            timeline=both if fault in EMBEDDER_FAULTS else timeline,
            answers=answers,
        )
    )
    if fault in EMBEDDER_FAULTS and len(window) == 2:
        during = sorted(r.answer.seconds for r in reads if window[0] <= r.started <= window[1])
        faulty = [r for r in reads if window[0] <= r.started <= window[1]]
        report.fault_reads = len(faulty)
        report.fault_read_errors = sum(r.answer.outcome != "ok" for r in faulty)
        report.fault_reads_found = sum(r.found for r in faulty)
        if during:
            report.fault_read_p95_ms = during[min(len(during) - 1, int(len(during) * 0.95))] * 1000
            report.fault_read_max_ms = during[-1] * 1000
        for r in faulty:
            if r.answer.outcome != "ok" and len(report.samples) < 4:
                report.samples.append(f"search {r.marker}: {r.answer.outcome} {r.answer.text[:200]}")
    recovery_started = time.monotonic()
    deadline = recovery_started + drain
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if pending_follow_ups(stack, run_id) == 0 and stack.child("worker") is not None:
                break
        time.sleep(1)
    report.recovered_in = time.monotonic() - recovery_started
    report.worker_back = stack.child("worker") is not None
    report.follow_ups_pending = pending_follow_ups(stack, run_id)
    report.embedded_later = stack.sql(
        "SELECT count(DISTINCT m.id) FROM memory_memory m JOIN memory_followup f ON f.memory_id = m.id "
        "WHERE f.kind = 'embed' AND m.content LIKE %s",
        [f"%{run_id}x%"],
    )[0][0]
    # Rows the writes made: not the facts and rules consolidation derives from a
    # cluster of episodes (beat, every 30 min), which quote an episode's content.
    found = stack.sql(
        "SELECT content, kind, validity, embedding_status, created_at, id FROM memory_memory m "
        "WHERE content LIKE %s AND NOT EXISTS "
        "(SELECT 1 FROM memory_memorylink l WHERE l.from_memory_id = m.id AND l.kind = 'derived_from')",
        [f"%{run_id}x%"],
    )
    by_marker: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
    for row in found:
        by_marker[re.search(rf"({run_id}x\d+)", row[0]).group(1)].append(row)  # type: ignore[union-attr]
    rows = Counter({marker: len(same) for marker, same in by_marker.items()})
    # Lost is what a user would call lost: an acknowledged write a search for its own text does not find.
    texts = {
        marker: write_arguments(WRITE_KINDS[int(marker.rsplit("x", 1)[1]) % 3], marker)[1]["content"]
        for marker, attempts in answers.items()
        if any(a.outcome == "ok" for a in attempts)
    }
    not_found = set(asyncio.run(texts_not_found(stack, token, list(texts.values()))))
    for marker, attempts in answers.items():
        ok = sum(a.outcome == "ok" for a in attempts)
        report.writes += 1
        report.attempts += len(attempts)
        report.accepted += ok > 0
        for answer in attempts:
            if answer.outcome != "ok":
                report.error_answers += 1
                if answer.outcome in ("hang", "exception"):
                    report.no_answer += 1
                elif answer.code is None and answer.text.startswith("HTTP 5"):
                    report.bare_http_errors += 1
                elif answer.code is None:
                    report.uncoded_errors += 1
                if len(report.samples) < 4:
                    report.samples.append(f"{marker}: {answer.outcome} {answer.text[:200]}")
        present = rows.get(marker, 0)
        report.lost += ok > 0 and texts[marker] in not_found
        report.duplicates += present > 1
        if ok == 0 and present:
            if any(a.outcome in ("hang", "exception") for a in attempts):
                report.committed_unanswered += 1
            else:
                report.committed_but_error += 1
        if present > max(ok, 1) and len(report.samples) < 4:
            # What the extra rows are (kind, validity, when) tells a retry from a second writer.
            report.samples.append(f"{marker}: {len(attempts)} attempts, rows {[r[1:] for r in by_marker[marker]]}")
    return report


async def texts_not_found(
    stack: Stack, token: str, texts: Sequence[str], *, clients: int = 8, limit: int = 10
) -> list[str]:
    """The texts that a ``memory_search`` for the text itself does not return:
    what a user calls lost, whatever rows the database holds."""
    import httpx

    pending = list(dict.fromkeys(texts))
    missing: list[str] = []
    url = f"{stack.url}/mcp/memory"

    async def searcher(http: Any) -> None:
        while pending:
            text = pending.pop()
            for attempt in range(4):
                answer = await mcp_call(http, url, token, "memory_search", {"query": text, "limit": limit})
                if answer.outcome == "ok":
                    break
                await asyncio.sleep(0.5 * 2**attempt)
            if text not in answer_text(answer):
                missing.append(text)

    async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=5)) as http:
        await asyncio.gather(*(searcher(http) for _ in range(clients)))
    return missing


def deadlocks_so_far(stack: Stack) -> int:
    """PostgreSQL's own count of transactions it aborted as deadlock victims."""
    return int(stack.sql("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")[0][0])


# A write-heavy stack for contention runs: every beat sweep each minute, and the
# drain sweep racing the worker's own follow-up tasks after two seconds.
CONTENTION_ENV = {
    **{
        name: "* * * * *"
        for name in (
            "MEMPROJ_BEAT_FOLLOWUPS",
            "MEMPROJ_BEAT_EMBEDDINGS_RETRY",
            "MEMPROJ_BEAT_CONSOLIDATE",
            "MEMPROJ_BEAT_EXPIRE",
            "MEMPROJ_BEAT_DECAY",
            "MEMPROJ_BEAT_MATURITY",
            "MEMPROJ_BEAT_LIFECYCLE",
        )
    },
    "MEMPROJ_FOLLOWUP_GRACE_SECONDS": "2",
    "MEMPROJ_EMBED_RETRY_GRACE_SECONDS": "2",
    "MEMPROJ_CONSOLIDATE_SETTLE_HOURS": "0",
}


@dataclass
class ContentionReport:
    writers: int
    seconds: float
    writes: int = 0
    accepted: int = 0
    error_answers: int = 0
    reads: int = 0  # memento searches and memory recalls beside the writers (their access bookkeeping writes)
    read_errors: int = 0
    deadlocks: int = 0  # pg_stat_database.deadlocks during the run
    merged: int = 0  # superseded by the conflict check as the same statement (the text stays findable)
    open_candidates: int = 0  # near-identical pairs left for review
    replaced_by_key: int = 0  # keyed facts superseded by a newer write of the same subject+predicate
    lost: int = 0  # accepted, not found by a search for its own text, and retired by no audited rule
    follow_ups_pending: int = 0
    samples: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (self.error_answers or self.read_errors or self.deadlocks or self.lost or self.follow_ups_pending)


def contention_write(run_id: str, n: int, accepted_memento: Sequence[str]) -> tuple[str, str, dict[str, Any]]:
    """The n-th write of a contention run: (toolset, tool, arguments). A mix
    that makes every write path meet the others in one tenant: restatements
    (the worker merges them), near-identical facts differing in a date (left
    for review), keyed facts sharing a subject+predicate (fact-key lock and
    supersession), rules and episodes (the sweeps and consolidation)."""
    marker = f"{run_id}x{n}"
    slot = n % 8
    if slot == 0 and accepted_memento:
        return "memento", "store_memory", {"content": accepted_memento[-1 - (n // 8) % len(accepted_memento)]}
    if slot == 1:
        day = 2 + 7 * ((n // 8) % 4)
        return "memento", "store_memory", {"content": f"Deploy key {run_id}k{n // 32} was rotated on 2026-11-{day:02d}"}
    if slot in (0, 2, 3):
        return "memento", "store_memory", {"content": f"Service {marker} is owned by team {n % 13}"}
    if slot == 4:
        return "memory", "memory_store_fact", {"subject": marker, "predicate": "status", "content": f"{marker} is live"}
    if slot == 5:
        return "memory", "memory_store_rule", {"content": f"Always page {marker} before a release"}
    if slot == 6:
        return "memory", "memory_store_episode", {"content": f"Deployed {marker} to staging", "butler": "ops"}
    group = f"{run_id}g{n % 5}"
    return "memory", "memory_store_fact", {"subject": group, "predicate": "owner", "content": f"{group} is {marker}"}


def contention_scenario(stack: Stack, token: str, *, writers: int, seconds: float, drain: float) -> ContentionReport:
    """``writers`` concurrent clients of one tenant write for ``seconds`` (four
    more read) while the worker checks conflicts and the beat sweeps run; then, once every
    follow-up is done, each acknowledged write is searched for by its own text."""
    import httpx

    run_id = f"ct{uuid.uuid4().hex[:6]}"
    report = ContentionReport(writers, seconds)
    deadlocks_before = deadlocks_so_far(stack)
    accepted: list[tuple[str, dict[str, Any]]] = []
    accepted_memento: list[str] = []
    counter = itertools.count()
    stop_at = time.monotonic() + seconds

    async def writer(http: Any) -> None:
        while time.monotonic() < stop_at:
            toolset, name, args = contention_write(run_id, next(counter), accepted_memento)
            report.writes += 1
            answer = await mcp_call(http, f"{stack.url}/mcp/{toolset}", token, name, args)
            if answer.outcome != "ok":
                report.error_answers += 1
                if len(report.samples) < 6:
                    report.samples.append(f"{name}: {answer.outcome} {answer.text[:200]}")
                continue
            report.accepted += 1
            accepted.append((name, args))
            if name == "store_memory" and "Service" in args["content"]:
                accepted_memento.append(args["content"])

    async def reader(http: Any, index: int) -> None:
        # Reads that write: memento's search moves accessed_at, memory_recall bumps reference counts.
        memento = ("memento", "search_memories", "query")
        toolset, name, query = memento if index % 2 else ("memory", "memory_recall", "topic")
        while time.monotonic() < stop_at:
            if not accepted_memento:
                await asyncio.sleep(0.2)
                continue
            answer = await mcp_call(http, f"{stack.url}/mcp/{toolset}", token, name, {query: accepted_memento[-1]})
            report.reads += 1
            if answer.outcome != "ok":
                report.read_errors += 1
                if len(report.samples) < 6:
                    report.samples.append(f"{name}: {answer.outcome} {answer.text[:200]}")

    async def run() -> None:
        limits = httpx.Limits(max_connections=writers + 8)
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=5), limits=limits) as http:
            await asyncio.gather(*(writer(http) for _ in range(writers)), *(reader(http, i) for i in range(4)))

    asyncio.run(run())
    deadline = time.monotonic() + drain
    while pending_follow_ups(stack, run_id) and time.monotonic() < deadline:
        time.sleep(1)
    report.follow_ups_pending = pending_follow_ups(stack, run_id)
    report.deadlocks = deadlocks_so_far(stack) - deadlocks_before
    like = [f"%{run_id}%"]
    report.merged = stack.sql(
        "SELECT count(*) FROM memory_memoryevent e JOIN memory_memory m ON m.id = e.memory_id "
        "WHERE e.event_type = 'superseded' AND e.payload->>'reason' = 'duplicate' AND m.content LIKE %s",
        like,
    )[0][0]
    report.open_candidates = stack.sql(
        "SELECT count(*) FROM memory_conflictcandidate c JOIN memory_memory m ON m.id = c.memory_id "
        "WHERE c.status = 'open' AND m.content LIKE %s",
        like,
    )[0][0]
    replaced = {
        content
        for (content,) in stack.sql(
            "SELECT m.content FROM memory_memory m JOIN memory_memoryevent e ON e.memory_id = m.id "
            "WHERE m.validity = 'superseded' AND e.event_type = 'superseded' "
            "AND e.payload->>'reason' = 'same subject and predicate' AND m.content LIKE %s",
            like,
        )
    }
    texts = [args["content"] for _, args in accepted]
    missing = asyncio.run(texts_not_found(stack, token, texts))
    report.replaced_by_key = len(replaced)
    lost = [text for text in missing if text not in replaced]
    report.lost = len(lost)
    report.samples += [f"not found: {text}" for text in lost[:4]]
    return report


@dataclass
class LoadReport:
    clients: int
    seconds: float
    calls: int = 0
    errors: int = 0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    samples: list[str] = field(default_factory=list)

    @property
    def per_second(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0


def load(stack: Stack, tokens: Sequence[str], *, clients: int, seconds: float) -> LoadReport:
    """N concurrent HTTP MCP clients for T seconds, half stores, half searches."""
    import httpx

    report = LoadReport(clients, seconds)
    web = stack.child("web")
    report.rss_start_mib = web.memory_info().rss / 2**20 if web else 0.0
    latencies: list[float] = []
    url = f"{stack.url}/mcp/memory"

    async def client(i: int, http: Any, stop_at: float) -> None:
        token = tokens[i % len(tokens)]
        rng = random.Random(i)
        while time.monotonic() < stop_at:
            if rng.random() < 0.5:
                name, args = write_arguments(rng.choice(WRITE_KINDS), f"load{uuid.uuid4().hex[:10]}")
            else:
                name, args = "memory_search", {"query": " ".join(rng.sample(WORDS, 3)), "limit": 10}
            answer = await mcp_call(http, url, token, name, args)
            report.calls += 1
            latencies.append(answer.seconds)
            if answer.outcome != "ok":
                report.errors += 1
                if len(report.samples) < 4:
                    report.samples.append(f"{name}: {answer.text[:200]}")

    async def main() -> None:
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(timeout=60, limits=limits) as http:
            stop_at = time.monotonic() + seconds
            await asyncio.gather(*(client(i, http, stop_at) for i in range(clients)))

    asyncio.run(main())
    web = stack.child("web")
    report.rss_end_mib = web.memory_info().rss / 2**20 if web else 0.0
    if latencies:
        ordered = sorted(latencies)
        report.p50_ms = statistics.median(ordered) * 1000
        report.p95_ms = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000
    return report


# ----------------------------------------------------------------------------------------
# Tables and the command
# ----------------------------------------------------------------------------------------


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(c) for c in header]] + [[f"{c:.1f}" if isinstance(c, float) else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = [f"\n## {title}", "  ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells[1:]]
    return "\n".join(lines)


# Calls a minute the fault and load tenants may make: far above what the load
# sends, so a 429 can only mean a rate-limit bug, never a server fast enough to
# reach the default policy's 1,000 (CI met it once the server got faster).
FAULT_RATE_LIMIT = 1_000_000

FULL = {
    "isolation_examples": 50,
    "isolation_steps": 200,
    "fuzz_calls": 5000,
    "fault_seconds": 60.0,
    "fault_clients": 8,
    "drain_seconds": 180.0,
    "load_clients": 32,
    "load_seconds": 60.0,
    "contention_writers": 32,
    "contention_seconds": 125.0,
}
SMALL = {
    "isolation_examples": 2,
    "isolation_steps": 30,
    "fuzz_calls": 90,
    "fault_seconds": 12.0,
    "fault_clients": 3,
    "drain_seconds": 180.0,
    "load_clients": 4,
    "load_seconds": 8.0,
    "contention_writers": 32,
    "contention_seconds": 65.0,
}
PARTS = ("isolation", "fuzz", "faults", "load", "contention")


def setup_django(stack: Stack) -> None:
    """This process uses the stack's embedded servers as the service would (the
    embedded default under MEMPROJ_VAR_DIR, with the service's database role);
    follow-ups run eagerly here, the in-process parts need no worker."""
    for key in ("DATABASE_URL", "CELERY_BROKER_URL"):
        os.environ.pop(key, None)
    os.environ.update(
        MEMPROJ_VAR_DIR=str(stack.var_dir),
        CELERY_TASK_ALWAYS_EAGER="true",
        DJANGO_SETTINGS_MODULE="memproj.settings.base",
        LOG_LEVEL="WARNING",
    )
    import logging

    import django

    import memproj.embedded

    # Stack.superuser imported it already, with the default var/ of its import time.
    memproj.embedded.VAR_DIR = stack.var_dir
    django.setup()
    # The admin and hook surfaces answer many refusals (403/404/422), each logged
    # with a traceback by django.request; server errors (500) are still logged.
    logging.getLogger("django.request").setLevel(logging.ERROR)
    from django.conf import settings

    # Never the dev database: a DATABASE_URL in .env would win over the embedded default.
    host = str(settings.DATABASES["default"].get("HOST", ""))
    if not host.startswith(str(stack.var_dir)):
        raise SystemExit(f"refusing to run against a database outside {stack.var_dir}: host {host!r}")


def identities(prefix: str, tenants: int = 3) -> dict[str, tuple[int, str, Any]]:
    """A member and an admin (without the elevation scope) in each tenant."""
    from policy.services.tokens import token_authenticate, token_issue

    out = {}
    for index in range(tenants):
        for role in ("member", "admin"):
            issued = token_issue(tenant_slug=f"{prefix}-t{index}", principal_name=f"{role}{index}", role=role)
            caller = token_authenticate(issued.token)
            assert caller is not None
            out[f"t{index}-{role}"] = (index, str(caller.tenant_id), caller)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", action="store_true", help="the CI size")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {', '.join(PARTS)}")
    parser.add_argument("--faults", default="", help="comma-separated subset of the faults (default: all)")
    parser.add_argument("--var-dir", default=str(BASE_DIR / "var" / "reliability"))
    parser.add_argument("--keep-running", action="store_true", help="leave the private servers running")
    for key in FULL:
        parser.add_argument(f"--{key.replace('_', '-')}", type=float, help=f"override (full {FULL[key]:g})")
    options = parser.parse_args(argv)
    size = dict(SMALL if options.small else FULL)
    for key in FULL:
        if getattr(options, key) is not None:
            size[key] = type(FULL[key])(getattr(options, key))
    parts = [p for p in options.parts.split(",") if p]
    # Two worker processes, as `make run` starts (MEMPROJ_WORKER_CONCURRENCY); the
    # CI-size tests keep one to spare the shared cores.
    stack = Stack(Path(options.var_dir), worker_concurrency=2)
    print(f"memproj reliability suite ({'small' if options.small else 'full'} size), private stack in {stack.var_dir}")
    stack.prepare()
    setup_django(stack)
    from mcp_server.registry import TOOLSETS

    failures: list[str] = []
    run_id = uuid.uuid4().hex[:6]
    fake_embedder: FakeEmbeddingEndpoint | None = None
    try:
        if "isolation" in parts or "fuzz" in parts:
            people = identities(f"iso{run_id}")
            logins = http_identities(f"iso{run_id}", people)
            callers = {who: caller for who, (_, _, caller) in people.items()}
            with InProcessClients(callers, sorted(TOOLSETS)) as clients:
                tool_counts = {ts: len(tools) for ts, tools in clients.tools.items()}
                print(f"toolsets: {', '.join(f'{ts} ({n} tools)' for ts, n in tool_counts.items())}")
                if "isolation" in parts:
                    failures += _isolation_part(clients, people, HttpSurfaces(clients, logins), size)
                if "fuzz" in parts:
                    failures += _fuzz_part(clients, size)
        if "faults" in parts or "load" in parts:
            if "faults" in parts:
                # Embedder faults are injected through a fake OpenAI-compatible endpoint.
                fake_embedder = FakeEmbeddingEndpoint().start()
                stack.use_embedder(fake_embedder)
            stack.start()
            tokens = [
                stack.issue_token(f"http{run_id}-t{i}", f"agent{i}", rate_limit=FAULT_RATE_LIMIT) for i in range(3)
            ]
            if "faults" in parts:
                failures += _faults_part(stack, tokens[0], size, [f for f in options.faults.split(",") if f])
            if "load" in parts:
                if stack.embedder is not None:
                    # The load is measured as `make run` serves: the packaged model in-process.
                    stack.stop_serving()
                    stack.use_embedder(None)
                    stack.start()
                failures += _load_part(stack, tokens, size)
        if "contention" in parts:
            # Every beat sweep each minute, as CONTENTION_ENV says, on the packaged model.
            stack.stop_serving()
            stack.use_embedder(None)
            stack.env.update(CONTENTION_ENV)
            stack.start()
            token = stack.issue_token(f"ct{run_id}", "agent", rate_limit=FAULT_RATE_LIMIT)
            failures += _contention_part(stack, token, size)
    finally:
        if fake_embedder is not None:
            fake_embedder.stop()
        if options.keep_running:
            if stack.supervisor is not None:
                stack.supervisor.send_signal(signal.SIGTERM)
                stack.supervisor.wait(60)
        else:
            stack.stop()
    print(table("Summary", ["check", "result"], [[f, "FAIL"] for f in failures] or [["all checks", "pass"]]))
    return 1 if failures else 0


def _isolation_part(
    clients: InProcessClients, people: dict[str, tuple[int, str, Any]], surfaces: HttpSurfaces, size: dict[str, Any]
) -> list[str]:
    run = IsolationRun(
        clients, {who: (i, tenant) for who, (i, tenant, _) in people.items()}, strict=False, surfaces=surfaces
    )
    started = time.monotonic()
    run_isolation_machine(run, examples=size["isolation_examples"], steps=size["isolation_steps"])
    elapsed = time.monotonic() - started
    r = run.report
    print(
        table(
            "Isolation (Hypothesis state machine, 3 tenants x member/admin, every toolset over MCP, "
            "REST route, roampal hooks, langmem store, admin)",
            ["calls", "selector calls", "error answers", "leaks", "foreign rows changed", "selectors accepted", "s"],
            [
                [
                    r.calls,
                    r.selector_calls,
                    r.errors,
                    len(r.leaks),
                    len(r.foreign_changes),
                    len(r.selectors_accepted),
                    elapsed,
                ]
            ],
        )
    )
    print(table("Isolation calls per endpoint", ["endpoint", "calls"], sorted(r.per_toolset.items())))
    for line in (r.leaks + r.foreign_changes + r.selectors_accepted)[:8]:
        print("  e.g.", line[:300])
    failures = []
    if r.leaks:
        failures.append(f"isolation: {len(r.leaks)} leaks")
    if r.foreign_changes:
        failures.append(f"isolation: {len(r.foreign_changes)} calls changed another tenant's rows")
    if r.selectors_accepted:
        failures.append(f"isolation: {len(r.selectors_accepted)} tenant selectors accepted")
    return failures


def _fuzz_part(clients: InProcessClients, size: dict[str, Any]) -> list[str]:
    who = next(iter(clients.callers))
    started = time.monotonic()
    report = fuzz(clients, who, calls_per_toolset=size["fuzz_calls"])
    elapsed = time.monotonic() - started
    kinds = [
        "ok",
        "coded error",
        "uncoded error",
        "internal detail",
        "internal error",
        "crash",
        "hang",
        "protocol exception",
    ]
    rows = [[ts, report.calls[ts], *(report.count(k, ts) for k in kinds)] for ts in clients.toolsets]
    print(table(f"Fuzzing ({elapsed:.0f} s)", ["toolset", "calls", *kinds], rows))
    for (ts, kind), samples in sorted(report.samples.items()):
        if kind in {"ok", "coded error"}:
            continue
        for sample in samples[:2]:
            print(f"  {ts} {kind}: {sample[:240]!r}")
    problems = consistency_problems()
    print(table("Database consistency after fuzzing", ["check", "rows"], list(problems.items())))
    failures = [f"fuzz: {report.count(k)} {k}" for k in kinds[2:] if report.count(k)]
    failures += [f"consistency: {n} {label}" for label, n in problems.items() if n]
    return failures


def _faults_part(stack: Stack, token: str, size: dict[str, Any], only: Sequence[str] = ()) -> list[str]:
    reports = []
    faults = [*FAULTS, *(list(EMBEDDER_FAULTS)[:3] if stack.embedder is not None else [])]
    for fault in [f for f in faults if f in only] if only else faults:
        print(f"  fault: {fault} ...", flush=True)
        reports.append(
            fault_scenario(
                stack,
                token,
                fault,
                seconds=size["fault_seconds"],
                clients=size["fault_clients"],
                drain=size["drain_seconds"],
            )
        )
    header = [
        "fault",
        "writes",
        "attempts",
        "accepted",
        "error answers",
        "no answer",
        "uncoded",
        "bare HTTP 5xx",
        "lost",
        "committed but error",
        "duplicates",
        "committed, no answer",
        "follow-ups pending",
        "worker back",
        "recovery s",
    ]
    rows = [
        [
            r.fault,
            r.writes,
            r.attempts,
            r.accepted,
            r.error_answers,
            r.no_answer,
            r.uncoded_errors,
            r.bare_http_errors,
            r.lost,
            r.committed_but_error,
            r.duplicates,
            r.committed_unanswered,
            r.follow_ups_pending,
            "yes" if r.worker_back else "NO",
            r.recovered_in,
        ]  # fmt: skip
        for r in reports
    ]
    print(table("Faults under a write load (memory toolset over HTTP, client retries up to 3x)", header, rows))
    embedder = [r for r in reports if r.fault in EMBEDDER_FAULTS]
    if embedder:
        print(
            table(
                "Embedder faults: writes embedded later, searches while the fault was on (keyword fallback)",
                ["fault", "writes embedded later", "searches", "errors", "found by keyword", "p95 ms", "max ms"],
                [
                    [
                        r.fault,
                        r.embedded_later,
                        r.fault_reads,
                        r.fault_read_errors,
                        r.fault_reads_found,
                        r.fault_read_p95_ms,
                        r.fault_read_max_ms,
                    ]  # fmt: skip
                    for r in embedder
                ],
            )
        )
    for r in reports:
        for sample in r.samples[:2]:
            print(f"  {r.fault}: {sample}")
    failures = []
    for r in embedder:
        if r.fault_read_errors:
            failures.append(f"faults/{r.fault}: {r.fault_read_errors} searches answered an error")
        if not r.fault_reads:
            failures.append(f"faults/{r.fault}: no search ran while the fault was on")
    for r in reports:
        for label, n in (
            ("lost writes", r.lost),
            ("error answers for committed writes", r.committed_but_error),
            ("duplicated writes", r.duplicates),
            ("follow-ups not done", r.follow_ups_pending),
            ("bare HTTP errors", r.bare_http_errors),
            ("error answers without a code", r.uncoded_errors),
            ("worker not running after recovery", int(not r.worker_back)),
        ):
            if n:
                failures.append(f"faults/{r.fault}: {n} {label}")
    return failures


def _load_part(stack: Stack, tokens: Sequence[str], size: dict[str, Any]) -> list[str]:
    r = load(stack, tokens, clients=size["load_clients"], seconds=size["load_seconds"])
    print(
        table(
            "Load (HTTP MCP clients, 50% store / 50% search)",
            ["clients", "seconds", "calls", "calls/s", "errors", "p50 ms", "p95 ms", "web RSS MiB start", "end"],
            [
                [
                    r.clients,
                    r.seconds,
                    r.calls,
                    r.per_second,
                    r.errors,
                    r.p50_ms,
                    r.p95_ms,
                    r.rss_start_mib,
                    r.rss_end_mib,
                ]
            ],
        )
    )
    for sample in r.samples[:3]:
        print("  e.g.", sample)
    return [f"load: {r.errors} errors"] if r.errors else []



def _contention_part(stack: Stack, token: str, size: dict[str, Any]) -> list[str]:
    writers, seconds = int(size["contention_writers"]), float(size["contention_seconds"])
    r = contention_scenario(stack, token, writers=writers, seconds=seconds, drain=size["drain_seconds"])
    print(
        table(
            "Contention (one tenant, MCP HTTP writers, worker conflict checks, every beat sweep each minute; "
            "lost = acknowledged, not found by a search for its own text, retired by no audited rule)",
            ["writers", "s", "writes", "accepted", "error answers", "reads", "read errors", "deadlocks",
             "merged (same statement)",
             "open candidates", "replaced by key", "lost", "follow-ups pending"],
            [[r.writers, r.seconds, r.writes, r.accepted, r.error_answers, r.reads, r.read_errors, r.deadlocks,
              r.merged, r.open_candidates, r.replaced_by_key, r.lost, r.follow_ups_pending]],
        )
    )
    for sample in r.samples[:4]:
        print("  e.g.", sample)
    return [] if r.passed else [f"contention: {r}"]


if __name__ == "__main__":
    sys.exit(main())
