"""What every dialect (toolset) shares: the argument contract, caller resolution
and elevation, and the error guard. A dialect module declares a ``Dialect`` with
its own error vocabulary and decorates module-level tool functions with
``@dialect.tool()``; this module makes sure that

- every advertised ``inputSchema`` carries ``additionalProperties: false`` and its
  real bounds, and the server enforces exactly that schema (no silent dropping of
  unknown arguments, no coercion of ``true`` into ``1``) before a tool runs;
- a tenant selector (``tenant``, ``tenant_id``, ``tenantId``, ``tenant_slug``) is
  refused with the dialect's authorization error unless the caller may elevate,
  and an elevation is audited; only such callers see ``tenant`` / ``elevate`` in
  the schema;
- upstream argument aliases are translated before validation;
- a tool error's text is exactly what the dialect renders (no SDK prefix), it
  carries no structured content, and no traceback, pydantic dump or internal
  detail ever reaches a client;
- a write tool (``writes=True``) called with an idempotency key (the request's
  ``_meta``, or the ``Idempotency-Key`` header of the plain HTTP surface) runs
  through ``memory.services.idempotency``: a retry replays the first answer;
- in a dialect that ``logs_refusals`` (pce), every tool error answered to an
  authenticated caller is appended to the log of refused calls once the call
  is over (``DialectServer._log_refusal``), without changing the answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar
from urllib.parse import parse_qsl

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, InterfaceError, close_old_connections
from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError as SchemaError
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, CallToolResult, TextContent
from mcp_types import Tool as MCPTool
from pydantic import AnyHttpUrl, ValidationError

import memproj
from mcp_server.auth import MemprojTokenVerifier, current_caller

# A dialect's plain HTTP routes (roampal's hooks, langmem's store endpoint) use
# the site's HTTP plumbing through this module as well, so that a dialect
# imports only mcp_server.dialect and memory.api (tests/test_layers.py).
from mcp_server.http import (  # noqa: F401 - re-exported for the dialects' routes
    CREDENTIALS_REFUSED,
    REFUSED_CHALLENGE,
    STORAGE_MESSAGE,
    bearer_caller,
    bearer_token,
    idempotent_response,
    idempotent_view,
    in_worker_thread,
    rate_limit_charge,
    refused_value,
    retry_later,
    retryable,
    storage_failure,
)
from memory import api
from policy.caller import Caller
from policy.errors import DomainError, PermissionDenied, StorageUnavailable
from policy.services.tokens import caller_for_target_tenant

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

TENANT_SELECTORS = ("tenant", "tenant_id", "tenantId", "tenant_slug")
ELEVATE = "elevate"
ELEVATION_SCHEMA = {
    "tenant": {
        "type": "string",
        "maxLength": 100,
        "description": "Admins with the 'elevate' scope only, with elevate=true: act on another tenant (slug or id).",
    },
    ELEVATE: {"type": "boolean", "description": "Confirm an explicit cross-tenant elevation."},
}
DEFAULT_PAYLOAD_LIMIT = 256 * 1024  # bytes of JSON arguments
# Where an MCP request's _meta carries a write's idempotency key, and the flag a
# replayed answer carries in its result _meta.
IDEMPOTENCY_META_KEYS = ("idempotency_key", "io.memproj/idempotency-key")
REPLAYED_META_KEY = "io.memproj/idempotent-replay"
# Where a tool error's result _meta carries the core code behind the dialect's text.
ERROR_CODE_META_KEY = "io.memproj/error-code"


@dataclass(frozen=True)
class CallSelection:
    """Per call: the authenticated caller and any tenant selection it asked for."""

    caller: Caller
    tenant: str | None
    elevate: bool


_selection: contextvars.ContextVar[CallSelection | None] = contextvars.ContextVar("dialect_selection", default=None)
_acting: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("dialect_caller", default=None)
_call_as: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("dialect_call_as", default=None)
_authenticated: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("dialect_authenticated", default=None)
_http_idempotency_key: contextvars.ContextVar[str | None] = contextvars.ContextVar("dialect_http_key", default=None)
# The error renderer of the tool being called, when it speaks otherwise than its
# dialect (the Memento server's plain-text tools beside the specification's JSON ones).
_tool_renderer: contextvars.ContextVar[ErrorRenderer | None] = contextvars.ContextVar(
    "dialect_tool_renderer", default=None
)


@dataclass(frozen=True)
class KeyedCall:
    """A write tool's call that carries an idempotency key: the key's scope
    (surface and tool), the request it identifies, and the tool's own
    conversion of its return value into the answer the client sees."""

    key: str
    scope: str
    request: dict[str, Any]
    convert: Callable[[Any], Any]


_keyed: contextvars.ContextVar[KeyedCall | None] = contextvars.ContextVar("dialect_keyed", default=None)


def _run_keyed(keyed: KeyedCall, caller: Caller, run: Callable[[], Any]) -> CallToolResult:
    """The write and its key in one transaction; a replay is flagged in _meta."""
    outcome = api.idempotent(
        caller=caller,
        scope=keyed.scope,
        key=keyed.key,
        request=keyed.request,
        run=lambda: keyed.convert(run()).model_dump(mode="json", by_alias=True, exclude_none=True),
    )
    result = CallToolResult.model_validate(outcome.answer)
    if outcome.replayed:
        result = result.model_copy(update={"meta": {**(result.meta or {}), REPLAYED_META_KEY: True}})
    return result


def authenticated_caller() -> Caller | None:
    """The caller of the current call as authenticated (before elevation), for
    error renderers that need the tenant (e.g. its policy version)."""
    return _acting.get() or _authenticated.get()


def _preload_policy(caller: Caller) -> None:
    close_old_connections()
    try:
        caller.policy  # noqa: B018 - cached on the caller for the rest of the call
    except (DatabaseError, InterfaceError):
        logger.warning("could not load the policy of tenant %s", caller.tenant_id)
    finally:
        close_old_connections()


# Per-connection options (langmem's namespace template, ...): HTTP query
# parameters of the endpoint, or the stdio launcher's flags.
connection_options: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "dialect_connection_options", default=None
)


def query_options(query_string: bytes | str) -> Mapping[str, str]:
    """A dialect's per-connection options from an endpoint's query string (the
    last of a repeated parameter wins): the MCP endpoint's and /api's. Raw
    bytes are read as the ASGI scope carries them (latin-1; the options
    themselves are percent-encoded UTF-8). A percent-encoded byte that is not
    UTF-8 stays a lone surrogate (surrogateescape) for the dialect to refuse:
    decoded with replacement, %FF and %FE were both U+FFFD, one value. A
    blank parameter (``?tenant=``, a bare ``?tenant``) is an option too, so
    that an endpoint taking none refuses it rather than never seeing it."""
    if isinstance(query_string, bytes):
        query_string = query_string.decode("latin-1")
    return dict(parse_qsl(query_string, keep_blank_values=True, errors="surrogateescape"))


class DialectFailure(ToolError):
    """A failure already rendered in the dialect's vocabulary; ``code`` is the
    core or dialect code behind it."""

    def __init__(self, text: str, code: str = "INTERNAL") -> None:
        super().__init__(text)
        self.text = text
        self.code = code

    def result(self) -> CallToolResult:
        """The tool error: the dialect's exact text and no structured content.
        Structured content would be a second, message-less answer with the core
        code rather than the dialect's, and clients (the MCP Inspector) validate
        it against the tool's outputSchema even when isError is set, showing a
        schema complaint instead of the message. The core code travels in
        ``_meta`` (ERROR_CODE_META_KEY) for the plain HTTP surface's status and
        for clients of a dialect whose text names none (roampal's `Error: ...`)."""
        return CallToolResult(
            content=[TextContent(type="text", text=self.text)],
            is_error=True,
            _meta={ERROR_CODE_META_KEY: self.code},
        )


ErrorRenderer = Callable[[str, str, Mapping[str, Any]], str]


def bracketed(code: str, message: str, details: Mapping[str, Any]) -> str:
    """The `memory` dialect's (and the default) rendering: ``[CODE] message``."""
    return f"[{code}] {message}"


@dataclass
class ToolSpec:
    fn: Callable[..., Any]
    name: str
    payload_limit: int
    timeout: float | None
    aliases: Mapping[str, str]
    input_schema: Mapping[str, Any] | None
    description: str | None = None
    writes: bool = False
    # This tool's errors, if not in its dialect's vocabulary (``Dialect.render_error``).
    render_error: ErrorRenderer | None = None
    # The name its idempotency keys are scoped by: one tool registered under two
    # spellings (pce's pce.memory.upsert and pce_memory_upsert) is one tool, so a
    # key sent to either replays the other's answer; the first spelling registered.
    key_name: str = ""


@dataclass
class Dialect:
    """One tool dialect: a name (the toolset), server instructions, its error
    vocabulary, and its tools. ``render_error(code, message)`` turns a core code
    (INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, EMBEDDING_ERROR,
    STORAGE_ERROR, INTERNAL, or a dialect's own) into the exact text of the
    tool error."""

    name: str
    instructions: str
    render_error: ErrorRenderer = bracketed
    # A schema violation of these arguments gets this code instead of
    # INVALID_ARGUMENT (e.g. pce's INVALID_SCOPE for `scope`).
    argument_codes: Mapping[str, str] = field(default_factory=dict)
    # The HTTP status of an error text on the plain HTTP surface (mcp_server/rest.py),
    # for a dialect whose specification names its own; None: by the core code
    # (``rest.CORE_HTTP_STATUS``).
    http_status: Callable[[str], int] | None = None
    # Resolve the tenant policy before validating, so that every answer,
    # errors included, can name the policy version (pce-memory's envelope).
    preload_policy: bool = False
    tools: list[ToolSpec] = field(default_factory=list)
    # Optional: adapt the advertised tools to this connection's options
    # (``dialect.options()``), e.g. langmem offers only the permitted actions and
    # puts the configured instructions in the description. It only shapes what
    # tools/list shows; the tool itself still checks what it is sent. Raising a
    # DomainError refuses the listing with the dialect's error text.
    adapt_tools: Callable[[list[MCPTool]], list[MCPTool]] | None = None
    # Optional: the dotted name of the module holding the dialect's own plain
    # HTTP routes (roampal's hooks, langmem's LangGraph store): its
    # ``urlpatterns`` are served at the site root (mcp_server.registry), and its
    # ``body_limits`` (path -> bytes), if any, replace the default request body
    # limit on those paths. A name, not the module: the routes render with the
    # dialect's tools, so they import the module that declares the dialect.
    routes: str | None = None
    # Whether the endpoint takes per-connection options (langmem's namespace
    # template, which its tools check themselves). A dialect that takes none
    # refuses any: a `?tenant=` would otherwise be silently ignored, and a
    # misconfigured client would read and write the token's tenant unawares.
    takes_connection_options: bool = False
    # Whether a refused call of an authenticated caller (any tool error) is
    # written to the log of refused calls (``memory.api.refused_call_record``),
    # after the answer is decided and outside the call's transaction: pce-memory's
    # spec logs every call, and a refusal is no audit event (it changed nothing).
    logs_refusals: bool = False

    def tool(
        self,
        name: str | None = None,
        *,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        timeout: float | None = None,
        aliases: Mapping[str, str] | None = None,
        input_schema: Mapping[str, Any] | None = None,
        description: str | None = None,
        writes: bool = False,
        render_error: ErrorRenderer | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]:
        """Register a sync tool function. ``aliases`` maps upstream argument
        names to this tool's (e.g. butlers' ``memory_id`` -> ``id``);
        ``input_schema`` advertises and enforces an upstream's schema verbatim instead
        of the one derived from the signature; ``description`` replaces the
        docstring (upstream texts kept as constants). ``writes`` marks a tool that
        stores something: it honours an idempotency key; read tools ignore one.
        ``render_error`` writes this tool's errors, every one of them (its
        arguments' refusals included), when it speaks otherwise than its dialect."""

        def decorate(fn: Callable[P, R]) -> Callable[P, R]:
            spelled = name or fn.__name__
            first = next((spec for spec in self.tools if getattr(spec.fn, "__wrapped__", None) is fn), None)
            self.tools.append(
                ToolSpec(
                    fn=self._guard(fn),
                    name=spelled,
                    key_name=first.key_name if first is not None else spelled,
                    payload_limit=payload_limit,
                    timeout=timeout,
                    aliases=dict(aliases or {}),
                    description=description,
                    input_schema=input_schema,
                    writes=writes,
                    render_error=render_error,
                )
            )
            return fn

        return decorate

    def caller(self) -> Caller:
        """The caller the current tool call acts as (after any audited elevation)."""
        acting = _acting.get()
        if acting is None:
            raise RuntimeError("dialect.caller() called outside a tool call")
        return acting

    def options(self) -> Mapping[str, str]:
        return connection_options.get() or {}

    def failure(self, code: str, message: str, details: Mapping[str, Any] | None = None) -> DialectFailure:
        render = _tool_renderer.get() or self.render_error
        return DialectFailure(render(code, message, details or {}), code)

    def _guard(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Runs in the tool's worker thread: fresh DB connections, the caller
        resolved (elevation audited), and every exception rendered."""

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            close_old_connections()
            try:
                selection = _selection.get()
                if selection is None:
                    raise PermissionDenied("no credentials: send Authorization: Bearer <token>.")
                if not self.takes_connection_options and self.options():
                    names = ", ".join(repr(name[:50]) for name in sorted(self.options())[:5])
                    raise api.InvalidArgument(
                        f"unknown connection option {names}; this endpoint takes none "
                        "(the tenant and principal come from the token)."
                    )
                acting = resolve_caller(selection)
                token = _acting.set(acting)
                try:
                    keyed = _keyed.get()
                    if keyed is not None:
                        return _run_keyed(keyed, acting, lambda: fn(*args, **kwargs))  # type: ignore[return-value]
                    return fn(*args, **kwargs)
                finally:
                    _acting.reset(token)
            except DialectFailure:
                raise
            except DomainError as exc:
                raise self.failure(exc.code, str(exc), getattr(exc, "details", None)) from exc
            except (DatabaseError, InterfaceError) as exc:
                refused = refused_value(exc)
                if refused is not None:
                    raise self.failure(refused.code, str(refused)) from exc
                logger.warning("storage failure in %s.%s: %r", self.name, fn.__name__, exc)
                raise self.failure(
                    StorageUnavailable.code, "the memory store is unavailable right now; retry in a few seconds."
                ) from exc
            except Exception as exc:
                logger.exception("unexpected failure in %s.%s", self.name, fn.__name__)
                raise self.failure("INTERNAL", "unexpected internal error; it has been logged.") from exc
            finally:
                close_old_connections()

        return wrapper


def resolve_caller(selection: CallSelection) -> Caller:
    """The tenant rule of every dialect: the token's tenant, unless an admin elevates (audited in the target tenant)."""
    acting = caller_for_target_tenant(caller=selection.caller, tenant=selection.tenant, elevate=selection.elevate)
    if acting.elevated_from is not None:
        api.elevation_audit(caller=acting)
    return acting


def _is_json_integer(checker: Any, instance: Any) -> bool:
    """JSON Schema counts 1.0 as an integer; so do we, but only within the range a
    JSON number holds exactly (2**53): ``-1e308`` is not an integer any tool can use."""
    if isinstance(instance, bool):
        return False
    if isinstance(instance, int):
        return True
    return isinstance(instance, float) and instance.is_integer() and abs(instance) <= 2**53


ArgumentValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_json_integer),
)


def strict_schema(parameters: dict[str, Any]) -> dict[str, Any]:
    schema = dict(parameters)
    schema["additionalProperties"] = False
    schema.setdefault("properties", {})
    return schema


# How much of a client's name (an argument, a key, a tool) an error quotes: a
# name is the client's, as long as the body limit allows, and a refusal that
# echoed it whole would send back (and log) up to that much again.
NAME_EXCERPT_CHARS = 50
# How many of a list of the client's names an error quotes.
NAMES_QUOTED = 3


def shown(name: object) -> str:
    """A client's name as an error quotes it: at most ``NAME_EXCERPT_CHARS``
    characters, the cut marked with an ellipsis."""
    text = str(name)
    return text if len(text) <= NAME_EXCERPT_CHARS else text[: NAME_EXCERPT_CHARS - 3] + "..."


def quoted_names(names: Sequence[object]) -> str:
    """The first ``NAMES_QUOTED`` names, each quoted short, and how many more."""
    listed = ", ".join(repr(shown(name)) for name in names[:NAMES_QUOTED])
    more = len(names) - NAMES_QUOTED
    return f"{listed} and {more} more" if more > 0 else listed


def _describe(error: SchemaError, schema: Mapping[str, Any]) -> str:
    """A schema violation as a sentence that names the argument and never echoes
    the (possibly huge or hostile) value, nor more than an excerpt of a key."""
    where = ".".join(shown(p) for p in error.absolute_path) or "arguments"
    if "propertyNames" in error.absolute_schema_path:
        # The violation is a key's, and the path names the object holding it.
        where = f"a key of {where}"
    rule, expected = error.validator, error.validator_value
    if rule == "additionalProperties":
        # The object that has the extra key: the arguments, or one nested in them
        # (pce's provenance), whose own schema says which keys it takes.
        holder = error.schema if isinstance(error.schema, Mapping) else schema
        allowed = sorted(holder.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        unknown = quoted_names(extra) or "an argument"
        if error.absolute_path:
            return f"unknown key {unknown} in {where}; it takes: {', '.join(allowed) or 'no keys'}."
        return f"unknown argument {unknown}; this tool takes: {', '.join(allowed)}."
    if rule == "required":
        missing = [r for r in expected if isinstance(error.instance, dict) and r not in error.instance]
        return f"missing required argument {', '.join(repr(m) for m in missing)}."
    messages = {
        "type": lambda: f"{where} must be of type {expected if isinstance(expected, str) else ' or '.join(expected)}.",
        "minimum": lambda: f"{where} must be >= {expected}.",
        "maximum": lambda: f"{where} must be <= {expected}.",
        "exclusiveMinimum": lambda: f"{where} must be > {expected}.",
        "exclusiveMaximum": lambda: f"{where} must be < {expected}.",
        "minLength": lambda: f"{where} must be at least {expected} characters.",
        "maxLength": lambda: f"{where} is over the limit of {expected} characters.",
        "minItems": lambda: f"{where} must have at least {expected} items.",
        "maxItems": lambda: f"{where} allows at most {expected} items.",
        "minProperties": lambda: f"{where} must have at least {expected} entries.",
        "maxProperties": lambda: f"{where} allows at most {expected} entries.",
        "enum": lambda: f"{where} must be one of {', '.join(map(str, expected))}.",
        "const": lambda: f"{where} must be {expected!r}.",
        "pattern": lambda: f"{where} must match {expected}.",
    }
    if rule in messages:
        return messages[rule]()
    if rule in ("anyOf", "oneOf"):
        # e.g. `str | None`: report the first branch that is not null.
        for branch in error.context or []:
            if branch.validator != "type" or branch.validator_value != "null":
                return _describe(branch, schema)
    return f"{where} is not valid ({rule})."


def _text_problem(value: Any, where: str = "") -> str | None:
    """NUL and lone surrogates pass JSON Schema but not PostgreSQL or UTF-8;
    NaN and the infinities, which Python's JSON readers take and JSON has not,
    pass its bounds (``NaN < 0`` and ``NaN > 1`` are both false) and then fail
    the tool's own parsing outside the error guard."""
    name = where or "arguments"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} must be a finite number."
    if isinstance(value, str):
        if "\x00" in value:
            return f"{name} must not contain NUL characters."
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return f"{name} is not valid Unicode text (it contains a lone surrogate)."
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{shown(key)}" if where else shown(key)
            problem = _text_problem(key, name) or _text_problem(item, inner)
            if problem:
                return problem
    if isinstance(value, list):
        for index, item in enumerate(value):
            problem = _text_problem(item, f"{name}[{index}]")
            if problem:
                return problem
    return None


def _as_sent(data: dict[str, Any]) -> dict[str, Any]:
    return data


class _CodedCallParams:
    """Server middleware: a ``tools/call`` whose params are not a tool name and
    an arguments object is refused with the dialect's INVALID_ARGUMENT, where the
    SDK answers a bare "Invalid request parameters" that names no field and no
    code. It replaces the SDK's default middleware, which only opens
    OpenTelemetry spans for an exporter memproj does not install."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.request_id is not None:
            problem = self._problem(ctx.params)
            if problem is not None:
                raise self._refusal(problem)
        try:
            return await call_next(ctx)
        except ValidationError as exc:
            # The SDK's check of a request's params against the MCP schema (a
            # _meta that is no object, a progressToken that is neither a string
            # nor an integer, ...), which it answers "Invalid request
            # parameters", naming no field and no code. A tool's own failures
            # never get here: they are results (DialectServer.call_tool).
            if ctx.request_id is None:
                raise
            raise self._refusal(self._schema_problem(ctx.method, exc)) from exc

    def _refusal(self, problem: str) -> MCPError:
        message = self.dialect.render_error("INVALID_ARGUMENT", problem, {})
        return MCPError(code=INVALID_PARAMS, message=message, data={"code": "INVALID_ARGUMENT"})

    @staticmethod
    def _schema_problem(method: str, exc: ValidationError) -> str:
        """Where the params miss the MCP schema, without the value sent."""
        first = exc.errors(include_url=False, include_input=False)[0] if exc.error_count() else None
        if first is None:
            return f"the params of {shown(method)} do not fit the MCP specification."
        # The SDK validates the whole request, so its locations start at the message.
        loc = [str(part) for part in first["loc"]]
        where = ".".join(shown(part) for part in (loc[1:] if loc[:1] == ["params"] else loc)) or "params"
        return f"the params of {shown(method)} do not fit the MCP specification: {where}: {first['msg']}."

    @staticmethod
    def _problem(params: Any) -> str | None:
        if not isinstance(params, Mapping):
            return 'tools/call takes params as an object: {"name": "<tool>", "arguments": {...}}.'
        if not isinstance(params.get("name"), str):
            return "tools/call needs the tool's name as a string in params.name."
        if params.get("arguments") is not None and not isinstance(params["arguments"], Mapping):
            return "a tool's arguments must be a JSON object (params.arguments)."
        return None


class DialectServer(MCPServer[Any]):
    """An MCPServer that applies the dialect's argument contract and error rendering."""

    def __init__(self, dialect: Dialect, *, static_caller: Caller | None, **kwargs: Any) -> None:
        super().__init__(
            f"memproj-{dialect.name}",
            version=memproj.__version__,
            instructions=dialect.instructions,
            log_level="WARNING",
            **kwargs,
        )
        self.dialect = dialect
        self.static_caller = static_caller
        self._lowlevel_server.middleware = [_CodedCallParams(dialect)]
        self.specs: dict[str, ToolSpec] = {}
        self.validators: dict[str, Any] = {}
        for spec in dialect.tools:
            self.add_tool(spec.fn, name=spec.name, description=spec.description)
            tool = self._tool_manager.get_tool(spec.name)
            assert tool is not None
            tool.parameters = strict_schema(dict(spec.input_schema or tool.parameters))
            # The arguments were validated against the schema as sent: the SDK's
            # lenient pre-parse would turn a string that looks like JSON into an
            # object after that check (a crash, or a silently different value).
            object.__setattr__(tool.fn_metadata, "pre_parse_json", _as_sent)
            self.specs[spec.name] = spec
            self.validators[spec.name] = ArgumentValidator(tool.parameters)

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None, context: Any = None) -> Any:
        """No dialect offers prompts: an unknown prompt is invalid params in the
        dialect's error vocabulary (the SDK answered JSON-RPC code 0 and logged
        a traceback)."""
        if self._prompt_manager.get_prompt(name) is None:
            message = f"there is no prompt {name[:100]!r}; prompts/list names the ones this server offers."
            text = self.dialect.render_error(api.InvalidArgument.code, message, {})
            raise MCPError(INVALID_PARAMS, text, {"code": api.InvalidArgument.code})
        return await super().get_prompt(name, arguments, context)

    def _caller(self) -> Caller:
        override = _call_as.get()
        if override is not None:
            return override
        return current_caller(static_caller=self.static_caller, toolset=self.dialect.name)

    async def call_as(
        self, caller: Caller, name: str, arguments: dict[str, Any], *, idempotency_key: str | None = None
    ) -> Any:
        """A tool call on behalf of an already authenticated caller (a plain HTTP
        surface of a dialect), with the same contract and error rendering;
        ``idempotency_key`` is the request's Idempotency-Key header."""
        if not caller.may_use_toolset(self.dialect.name):
            refused = self._error(
                PermissionDenied.code, f"this token is not allowed to use the {self.dialect.name!r} toolset."
            )
            await self._log_refusal(caller, name, arguments, refused, None, surface="http")
            return refused
        token = _call_as.set(caller)
        key_token = _http_idempotency_key.set(idempotency_key)
        try:
            return await self.call_tool(name, arguments)
        finally:
            _http_idempotency_key.reset(key_token)
            _call_as.reset(token)

    async def list_tools(self) -> list[MCPTool]:
        try:
            caller = self._caller()
        except DomainError as exc:
            raise MCPError(code=INVALID_REQUEST, message=self.dialect.render_error(exc.code, str(exc), {})) from exc
        tools = await super().list_tools()
        if self.dialect.adapt_tools is not None:
            try:
                tools = self.dialect.adapt_tools(tools)
            except DomainError as exc:
                raise MCPError(code=INVALID_REQUEST, message=self.dialect.render_error(exc.code, str(exc), {})) from exc
        if not caller.may_elevate:
            return tools
        return [
            tool.model_copy(
                update={
                    "input_schema": {
                        **tool.input_schema,
                        "properties": {**tool.input_schema.get("properties", {}), **ELEVATION_SCHEMA},
                    }
                }
            )
            for tool in tools
        ]

    def _error(self, code: str, message: str, details: Mapping[str, Any] | None = None) -> CallToolResult:
        return self.dialect.failure(code, message, details).result()

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        spec = self.specs.get(name)
        if spec is None:
            refused = self._error(
                "INVALID_ARGUMENT", f"unknown tool {shown(name)!r}; available: {', '.join(sorted(self.specs))}."
            )
            if self.dialect.logs_refusals:
                try:
                    known: Caller | None = self._caller()
                except DomainError:
                    known = None  # no credentials (or not for this toolset): nobody to log
                await self._log_refusal(known, name, arguments, refused, context)
            return refused
        try:
            caller = self._caller()
        except DomainError as exc:
            return self._error(exc.code, str(exc))
        token = _authenticated.set(caller)
        renderer = _tool_renderer.set(spec.render_error)
        try:
            if self.dialect.preload_policy and caller.policy_if_kept() is None:
                await sync_to_async(_preload_policy, thread_sensitive=False)(caller)
            result = await self._checked_call(spec, caller, name, arguments, context)
        finally:
            _tool_renderer.reset(renderer)
            _authenticated.reset(token)
        # After the call, its transaction committed or rolled back (the tool's
        # worker thread is done with it): the refusal's row is its own.
        await self._log_refusal(caller, name, arguments, result, context)
        return result

    async def _log_refusal(
        self,
        caller: Caller | None,
        name: str,
        arguments: object,
        result: object,
        context: Any,
        *,
        surface: str | None = None,
    ) -> None:
        """The one refusal hook: a tool error answered to an authenticated caller
        of a dialect that ``logs_refusals`` is appended to the log of refused
        calls, in a worker thread of its own, on autocommit. The answer is
        already decided and stays as it is whatever the write does."""
        if not self.dialect.logs_refusals or caller is None:
            return
        if not isinstance(result, CallToolResult) or not result.is_error:
            return
        try:
            fields = _refusal_fields(result, context)
            await sync_to_async(_record_refusal, thread_sensitive=False)(
                caller=caller,
                toolset=self.dialect.name,
                tool=name,
                surface=surface or ("http" if _call_as.get() is not None else "mcp"),
                # Names only (the service keeps the first few, each cut short), never values.
                argument_names=arguments.keys() if isinstance(arguments, Mapping) else (),
                **fields,
            )
        except Exception:  # the log never changes the answer (refused_call_record logs its own failures)
            logger.warning("could not log a refused call of %s.%s", self.dialect.name, shown(name), exc_info=True)

    async def _checked_call(
        self, spec: ToolSpec, caller: Caller, name: str, arguments: dict[str, Any], context: Any
    ) -> Any:
        """The argument contract, then the tool."""
        if not isinstance(arguments, dict):
            return self._error("INVALID_ARGUMENT", "arguments must be a JSON object.")
        try:
            # Bounded before anything below walks the arguments recursively.
            api.nesting(arguments, field="arguments")
        except DomainError as exc:
            return self._error(exc.code, str(exc))
        # Measured as compact JSON, the least a client can send them in: with
        # json.dumps' ", " and ": " a payload of many short items sent under the
        # limit was refused as over it.
        compact = json.dumps(arguments, ensure_ascii=False, default=str, separators=(",", ":"))
        if len(compact.encode("utf-8", "surrogatepass")) > spec.payload_limit:
            return self._error(
                "INVALID_ARGUMENT", f"the arguments exceed this tool's payload limit of {spec.payload_limit} bytes."
            )
        arguments = dict(arguments)
        selectors = {key: arguments.pop(key) for key in TENANT_SELECTORS if key in arguments}
        elevate = arguments.pop(ELEVATE, False)
        if selectors and not caller.may_elevate:
            return self._error(
                PermissionDenied.code,
                f"the tenant is taken from your token; remove {', '.join(sorted(selectors))}: only admin tokens with "
                "the 'elevate' scope may name a tenant.",
            )
        if len(selectors) > 1 or not isinstance(elevate, bool):
            return self._error("INVALID_ARGUMENT", "name the target tenant once, with tenant=<slug> and elevate=true.")
        tenant = next(iter(selectors.values()), None)
        if tenant is not None and not isinstance(tenant, str):
            return self._error("INVALID_ARGUMENT", "tenant must be a string (a tenant slug or id).")
        for alias, canonical in spec.aliases.items():
            if alias in arguments:
                if canonical in arguments:
                    return self._error("INVALID_ARGUMENT", f"pass either {alias!r} or {canonical!r}, not both.")
                arguments[canonical] = arguments.pop(alias)
        problem = _text_problem(arguments)
        if problem:
            return self._error("INVALID_ARGUMENT", problem)
        tool = self._tool_manager.get_tool(name)
        assert tool is not None
        error = next(iter(sorted(self.validators[name].iter_errors(arguments), key=lambda e: e.path)), None)
        if error is not None:
            argument = str(error.absolute_path[0]) if error.absolute_path else ""
            code = self.dialect.argument_codes.get(argument, "INVALID_ARGUMENT")
            return self._error(code, _describe(error, tool.parameters), {"argument": argument} if argument else {})
        keyed: KeyedCall | None = None
        if spec.writes:
            key, problem = self._idempotency_key(context)
            if key is not None or problem:
                problem = problem or api.idempotency_key_problem(key)
                if problem:
                    return self._error("INVALID_ARGUMENT", problem)
                assert isinstance(key, str)
                surface = "http" if _call_as.get() is not None else "mcp"
                request: dict[str, Any] = {"arguments": arguments, "tenant": tenant}
                if self.dialect.options():
                    # The connection's options are part of the request: langmem's
                    # namespace decides where a write goes, so the same key and
                    # arguments sent for another namespace are another request.
                    request["options"] = dict(self.dialect.options())
                keyed = KeyedCall(
                    key=key,
                    scope=f"{surface}:{self.dialect.name}.{spec.key_name or name}",
                    request=request,
                    convert=tool.fn_metadata.convert_result,
                )
        key_token = _keyed.set(keyed)
        token = _selection.set(CallSelection(caller=caller, tenant=tenant, elevate=elevate))
        try:
            if spec.timeout is None:
                return await super().call_tool(name, arguments, context)
            # A worker thread cannot be interrupted: answer at the deadline and
            # let the (transactional) call finish or roll back on its own.
            running = asyncio.ensure_future(super().call_tool(name, arguments, context))
            return await asyncio.wait_for(asyncio.shield(running), spec.timeout * settings.MEMPROJ_TOOL_TIMEOUT_SCALE)
        except TimeoutError:
            return self._error("TIMEOUT", f"{name} did not finish within {spec.timeout:g} s; retry later.")
        except ToolError as exc:
            cause: BaseException | None = exc
            while cause is not None and not isinstance(cause, DialectFailure):
                cause = cause.__cause__
            if isinstance(cause, DialectFailure):
                return cause.result()
            logger.error("tool %s failed outside the guard: %r", name, exc)
            return self._error("INTERNAL", "unexpected internal error; it has been logged.")
        finally:
            _selection.reset(token)
            _keyed.reset(key_token)

    def _idempotency_key(self, context: Any) -> tuple[object | None, str | None]:
        """The key this call was sent with: the plain HTTP surface's header, or
        the MCP request's _meta (either spelling; both must then agree)."""
        header = _http_idempotency_key.get()
        if header is not None:
            return header, None
        try:
            meta = context.request_context.meta if context is not None else None
        except ValueError:  # no request behind this call (in-process)
            meta = None
        if not isinstance(meta, Mapping):
            return None, None
        sent = [meta[name] for name in IDEMPOTENCY_META_KEYS if name in meta]
        if any(value != sent[0] for value in sent):
            return None, f"send one idempotency key: {' and '.join(IDEMPOTENCY_META_KEYS)} differ."
        return (sent[0] if sent else None), None


def _refusal_fields(result: CallToolResult, context: Any) -> dict[str, Any]:
    """What the log keeps of a tool error: the code the client was answered,
    the core code behind it, the message, and the request id. A dialect whose
    error text is a JSON envelope (pce's ``{"error": {"code", "message"},
    "request_id", ...}``) is read from it; otherwise the text is the message
    and the request id is the JSON-RPC request's, if any."""
    core = str((result.meta or {}).get(ERROR_CODE_META_KEY) or "INTERNAL")
    text = " ".join(getattr(block, "text", "") for block in result.content)
    fields: dict[str, Any] = {"code": core, "core_code": core, "message": text, "request_id": None}
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict):
        fields["code"] = str(error.get("code") or core)
        fields["message"] = str(error.get("message") or "")
        if isinstance(parsed.get("request_id"), str):
            fields["request_id"] = parsed["request_id"]
    if fields["request_id"] is None and context is not None:
        with contextlib.suppress(AttributeError, ValueError):  # no request behind this call (in-process)
            fields["request_id"] = context.request_context.request_id
    return fields


def _record_refusal(**fields: Any) -> None:
    close_old_connections()
    try:
        api.refused_call_record(**fields)
    finally:
        close_old_connections()


def build_server(dialect: Dialect, *, static_caller: Caller | None = None, http: bool = False) -> DialectServer:
    kwargs: dict[str, Any] = {}
    if http:
        public_url = settings.MEMPROJ_PUBLIC_URL.rstrip("/")
        kwargs["token_verifier"] = MemprojTokenVerifier()
        kwargs["auth"] = AuthSettings(
            issuer_url=AnyHttpUrl(public_url),
            resource_server_url=AnyHttpUrl(f"{public_url}/mcp/{dialect.name}"),
            required_scopes=[],
            # memproj's tokens are not issued per resource (no RFC 8707 audience):
            # MemprojTokenVerifier and current_caller check a token's toolsets.
            validate_token_resource=False,
        )
    return DialectServer(dialect, static_caller=static_caller, **kwargs)
