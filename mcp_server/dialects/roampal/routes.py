"""roampal v0.3.5's hook server, on the service's own ASGI app (Django views):
``POST /api/hooks/get-context`` (UserPromptSubmit: the KNOWN CONTEXT block and
the scoring prompt), ``POST /api/hooks/stop`` (Stop: the exchange is stored),
``POST /api/search`` (upstream's SearchRequest and its input limits) and
``POST /api/ingest`` (books, 10 MB).

Unlike upstream (which trusts localhost), every call needs
``Authorization: Bearer <token>``; the tenant is the token's. No CORS headers
are ever sent: browsers get nothing. Glue only: memory.api does the work,
texts.py renders, and ``/api/search`` finds what search_memory finds
(tools.find)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from functools import wraps
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from mcp_server.dialect import (
    CREDENTIALS_REFUSED,
    REFUSED_CHALLENGE,
    STORAGE_MESSAGE,
    bearer_caller,
    bearer_token,
    idempotent_view,
    in_worker_thread,
    query_options,
    refused_value,
    retry_later,
    retryable,
    shown,
    storage_failure,
)
from mcp_server.dialects.roampal import texts as text
from mcp_server.dialects.roampal.tools import find
from memory import api
from memory.api import Caller, DomainError

logger = logging.getLogger(__name__)

HOOK_BODY_LIMIT = 2 * 1024 * 1024  # a prompt, an answer and a transcript tail
INGEST_LIMIT = api.BOOK_MAX_BYTES  # upstream v0.3.5: 10 MB per document, 413 above it
INGEST_BODY_LIMIT = INGEST_LIMIT + 64 * 1024  # a JSON body: the document and its few other fields
TOOLSET = "roampal"
STATUS = {"INVALID_ARGUMENT": 422, "NOT_FOUND": 404, "PERMISSION_DENIED": 403, "QUOTA_EXCEEDED": 403, "CONFLICT": 409}
# roampal's hook answers carry ``{"error": "<message>"}``; ``code`` is added
# beside it so a client can branch on the kind of error.
# UNAUTHENTICATED: no token was sent; INVALID_TOKEN: the token sent was refused.
UNAUTHENTICATED, REFUSED = "UNAUTHENTICATED", "INVALID_TOKEN"
INVALID, TOO_LARGE = "INVALID_ARGUMENT", "PAYLOAD_TOO_LARGE"

View = Callable[[HttpRequest, Caller], HttpResponse]
AsyncView = Callable[[HttpRequest], Coroutine[Any, Any, HttpResponse]]


def _error_payload(message: str, code: str) -> dict[str, str]:
    return {"error": message, "code": code}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> bytes:
    """These routes' error body, for the errors answered before a route runs
    (the rate limiter's 429): the shape of every other error they answer."""
    return json.dumps(_error_payload(message, code)).encode()


def _error(status: int, message: str, code: str = INVALID, **headers: str) -> JsonResponse:
    response = JsonResponse(_error_payload(message, code), status=status)
    for key, value in headers.items():
        response[key] = value
    return response


def unauthenticated(header: str) -> JsonResponse:
    """The 401 of a request whose ``Authorization`` header names no caller: a
    refused token is told so, a missing one is asked for."""
    if bearer_token(header):
        return _error(401, CREDENTIALS_REFUSED, REFUSED, **{"WWW-Authenticate": REFUSED_CHALLENGE})
    return _error(
        401,
        "send Authorization: Bearer <token> (a memproj API token).",
        UNAUTHENTICATED,
        **{"WWW-Authenticate": "Bearer"},
    )


def _caller(request: HttpRequest) -> Caller | JsonResponse:
    header = request.headers.get("Authorization", "")
    caller = bearer_caller(header)
    if caller is None:
        return unauthenticated(header)
    if not caller.may_use_toolset(TOOLSET):
        return _error(403, "this token is not allowed to use the roampal toolset.", "PERMISSION_DENIED")
    return caller


def _read_body(request: HttpRequest, limit: int) -> bytes | JsonResponse:
    """Refuse by Content-Length before reading; then read at most limit + 1
    bytes, so a body without (or lying about) its length is cut off too."""
    try:
        declared = int(request.headers.get("Content-Length") or 0)
    except ValueError:
        return _error(400, "Content-Length must be a number.")
    if declared > limit:
        return _error(413, f"the body is over the limit of {limit} bytes.", TOO_LARGE)
    data = request.read(limit + 1)
    if len(data) > limit:
        return _error(413, f"the body is over the limit of {limit} bytes.", TOO_LARGE)
    return data


def _query_refusal(request: HttpRequest, allowed: tuple[str, ...]) -> JsonResponse | None:
    """A query parameter these routes do not take is refused, never ignored:
    ``?tenant=other`` (or ``?tenant=``, ``?tenant``) must not look as if it
    chose a tenant. Only a raw document's ``?title=`` is read (``ingest``)."""
    query = request.META.get("QUERY_STRING", "")
    names = [name for name, _ in parse_qsl(query, keep_blank_values=True, errors="replace")]
    unknown = [name for name in names if name not in allowed]
    if not unknown and (names or not query.strip("&")):
        return None
    name = shown(unknown[0]) if unknown else shown(query)
    takes = f"it takes only {', '.join('?' + a + '=' for a in allowed)}" if allowed else "it takes none"
    return _error(
        422,
        f"query parameter {name!r} is not taken here; {takes} (the tenant and principal come from the token).",
    )


def hook_view(limit: int = HOOK_BODY_LIMIT, query: tuple[str, ...] = ()) -> Callable[[View], AsyncView]:
    """POST only, authenticated, bounded body, no query parameter but those
    named in ``query``, errors as coded JSON and never a traceback; a storage
    failure (authentication reads the database too) is a 503 with Retry-After."""

    def decorate(view: View) -> AsyncView:
        @csrf_exempt
        @in_worker_thread
        @wraps(view)
        def wrapper(request: HttpRequest) -> HttpResponse:
            if request.method != "POST":
                return _error(405, "use POST.", "METHOD_NOT_ALLOWED", Allow="POST")
            try:
                caller = _caller(request)
                if isinstance(caller, JsonResponse):
                    return caller
                refusal = _query_refusal(request, query)
                if refusal is not None:
                    return refusal
                return view(request, caller)
            except ValidationError as exc:
                first = exc.errors()[0]
                # A location may be the client's key (an unknown field): quoted short.
                where = ".".join(shown(p) for p in first["loc"]) or "body"
                return _error(422, f"{where}: {first['msg']}")
            except Exception as exc:
                domain = exc if isinstance(exc, DomainError) else refused_value(exc)
                if domain is not None:
                    if retryable(domain.code):
                        return retry_later(_error(503, str(domain), domain.code))
                    return _error(STATUS.get(domain.code, 400), str(domain), domain.code)
                if storage_failure(exc):
                    logger.warning("storage failure in %s: %r", view.__name__, exc)
                    return retry_later(_error(503, STORAGE_MESSAGE, "STORAGE_ERROR"))
                logger.exception("unexpected failure in %s", view.__name__)
                return _error(500, "unexpected internal error; it has been logged.", "INTERNAL")

        return wrapper

    return decorate


def _json(request: HttpRequest, model: type[BaseModel], limit: int = HOOK_BODY_LIMIT) -> BaseModel | JsonResponse:
    body = _read_body(request, limit)
    if isinstance(body, JsonResponse):
        return body
    try:
        data = api.json_document(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return _error(400, "the body must be a JSON object.")
    except api.InvalidArgument as exc:
        if str(exc) != api.TOO_DEEP_TO_READ:
            raise  # a key twice: 422, as any body read and found invalid
        # JSON these routes cannot read at all: a bad request, as one that is no JSON.
        return _error(400, str(exc), exc.code)
    api.nesting(data)
    if not isinstance(data, dict):
        return _error(400, "the body must be a JSON object.")
    _storable_text(data, "")
    return model.model_validate(data)


def _storable_text(value: object, where: str) -> None:
    """Every string of a body, keys too, is text (no NUL, no lone surrogate),
    also in a field the route reads no further (get-context's
    recent_messages), which took "\\ud800" without a word."""
    if isinstance(value, str):
        api.encodable(value, field=where or "the body")
    elif isinstance(value, dict):
        for key, item in value.items():
            api.encodable(key, field=f"a key of {where or 'the body'}")
            _storable_text(item, f"{where}.{shown(key)}" if where else shown(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _storable_text(item, f"{where}[{index}]")


def _json_integer(value: object) -> object:
    """An integer as the tools' schemas read one (mcp_server.dialect): ``true``
    is no number and ``"5"`` no integer, where pydantic's lax mode would take
    them as 1 and 5. An integral float (``5.0``) is still an integer, as there."""
    if isinstance(value, (bool, str)):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


JsonInt = Annotated[int, BeforeValidator(_json_integer)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_max_length=HOOK_BODY_LIMIT)


class GetContextRequest(_Strict):
    query: Annotated[str, Field(max_length=2000)] = ""
    conversation_id: Annotated[str | None, Field(max_length=200)] = None
    recent_messages: Annotated[list[Any] | None, Field(max_length=50)] = None


class StopRequest(_Strict):
    # An empty conversation id or answer is refused by the core with the words
    # of a blank one (memory.api.exchange_complete), not with pydantic's.
    conversation_id: Annotated[str, Field(max_length=200)]
    user_message: Annotated[str, Field(max_length=100_000)] = ""
    assistant_response: Annotated[str, Field(max_length=200_000)]
    transcript: Annotated[str | None, Field(max_length=1_000_000)] = None


class SearchRequest(_Strict):
    """roampal v0.3.5's SearchRequest with its Field constraints."""

    query: Annotated[str | None, Field(max_length=2000)] = ""
    days_back: Annotated[JsonInt | None, Field(ge=1, le=365)] = None
    id: Annotated[str | None, Field(max_length=200)] = None
    conversation_id: Annotated[str | None, Field(max_length=200)] = None
    collections: Annotated[
        list[Literal["books", "working", "history", "patterns", "memory_bank"]] | None, Field(max_length=5)
    ] = None
    limit: Annotated[JsonInt, Field(ge=1, le=100)] = 10
    metadata_filters: dict[str, Any] | None = None
    sort_by: Annotated[str | None, Field(pattern=r"^(relevance|recency|score)$")] = None


class IngestRequest(_Strict):
    """Upstream's ingest body (v0.3.5: content, title defaulting to "Untitled",
    source, chunk_size, chunk_overlap), plus tags. The content's limit is
    INGEST_LIMIT bytes of UTF-8, checked by the view (413 above), so the
    character bound here is only the body's own."""

    title: Annotated[str, Field(min_length=1, max_length=200)] = "Untitled"
    content: Annotated[str, Field(max_length=INGEST_BODY_LIMIT)]
    source: Annotated[str, Field(max_length=1000)] = ""
    chunk_size: JsonInt | None = None  # bounds: memory.api.book_ingest's
    chunk_overlap: JsonInt | None = None
    tags: Annotated[list[Annotated[str, Field(max_length=64)]] | None, Field(max_length=20)] = None


DEFAULT_CONVERSATION = "default"


@hook_view()
@idempotent_view("http:roampal.hooks.get-context", HOOK_BODY_LIMIT)  # it opens an exchange
def get_context(request: HttpRequest, caller: Caller) -> HttpResponse:
    body = _json(request, GetContextRequest)
    if isinstance(body, JsonResponse):
        return body
    assert isinstance(body, GetContextRequest)
    now = timezone.now()
    conversation = body.conversation_id or DEFAULT_CONVERSATION
    pending = api.exchange_pending_scoring(caller=caller, conversation_id=conversation)
    context = api.known_context(caller=caller, query=body.query)
    scoring_memories = None
    if pending is not None:
        found = api.collection_ids(caller, [str(pk) for pk in pending.surfaced_ids])
        scoring_memories = [
            {
                "id": api.display_id(m),
                "content": text.memory_text(m),
                "content_hint": text.content_hint(text.memory_text(m)),
            }
            for m in found.values()
        ]
    ids = [m["id"] for m in scoring_memories or []]
    # A read-only token gets the context but records no exchange (it writes nothing).
    if caller.has_scope("write"):
        api.exchange_open(
            caller=caller,
            conversation_id=conversation,
            user_message=body.query,
            surfaced_ids=context.memory_ids,
            scores=pending,
        )
    prompt = text.scoring_prompt(ids) if pending is not None else ""
    block = text.known_context_block(context, now)
    facts = [text.shape(h, now) for h in context.user_facts]
    relevant = [text.shape(h, now) for h in context.relevant]
    return JsonResponse(
        {
            "formatted_injection": "\n\n".join(part for part in (prompt, block) if part),
            "user_facts": facts,
            "relevant_memories": relevant,
            "context_summary": f"{len(facts)} user facts, {len(relevant)} relevant memories",
            "scoring_required": pending is not None,
            "scoring_prompt": prompt,
            "scoring_prompt_simple": text.scoring_prompt_simple(ids) if pending is not None else "",
            # Upstream v0.3.5: the memory context without the scoring prompt (the
            # OpenCode plugin puts it in the system prompt, the prompt in the user turn).
            "context_only": block,
            "scoring_exchange": (
                {"user": pending.user_message, "assistant": pending.assistant_response} if pending else None
            ),
            "scoring_memories": scoring_memories,
        }
    )


@hook_view()
@idempotent_view("http:roampal.hooks.stop", HOOK_BODY_LIMIT)
def stop(request: HttpRequest, caller: Caller) -> HttpResponse:
    body = _json(request, StopRequest)
    if isinstance(body, JsonResponse):
        return body
    assert isinstance(body, StopRequest)
    done = api.exchange_complete(
        caller=caller,
        conversation_id=body.conversation_id,
        user_message=body.user_message,
        assistant_response=body.assistant_response,
        transcript=body.transcript or "",
    )
    return JsonResponse(
        {
            "stored": True,
            "doc_id": api.display_id(done.memory),
            # Ours: every memory the exchange was stored as, doc_id first (more than
            # one when it is longer than one memory holds; each is searchable).
            "doc_ids": [api.display_id(m) for m in done.memories],
            "scoring_complete": done.scoring_complete,
            "should_block": not done.scoring_complete,
            "block_message": "" if done.scoring_complete else text.BLOCK_MESSAGE,
        }
    )


@hook_view()
def search(request: HttpRequest, caller: Caller) -> HttpResponse:
    body = _json(request, SearchRequest)
    if isinstance(body, JsonResponse):
        return body
    assert isinstance(body, SearchRequest)
    now = timezone.now()
    hits = find(
        caller,
        query=body.query,
        days_back=body.days_back,
        id=body.id,
        collections=body.collections,
        metadata=body.metadata_filters,
        sort_by=body.sort_by,
        limit=body.limit,
        now=now,
    )
    return JsonResponse({"count": len(hits), "results": [text.shape(h, now) for h in hits]})


@hook_view(limit=INGEST_LIMIT, query=("title",))
@idempotent_view("http:roampal.ingest", INGEST_BODY_LIMIT)
def ingest(request: HttpRequest, caller: Caller) -> HttpResponse:
    """A text or Markdown document as ``books``: upstream's JSON ``{content,
    title?, source?, chunk_size?, chunk_overlap?}`` (plus ``tags``), or the raw
    document with ``?title=``; up to 10 MB of UTF-8 either way. Chunks are
    stored at once and embedded by the worker (202: keyword-searchable now,
    semantic as the worker catches up)."""
    chunking: dict[str, Any] = {}
    source = ""
    if request.content_type == "application/json":
        if _query_refusal(request, ()) is not None:
            # A ?title= beside a JSON body (which names its own) would be dropped unread.
            return _error(
                422, "a JSON body takes no query parameter: its title goes in the body (?title= names a raw document)."
            )
        body = _json(request, IngestRequest, limit=INGEST_BODY_LIMIT)
        if isinstance(body, JsonResponse):
            return body
        assert isinstance(body, IngestRequest)
        title, content, tags, source = body.title, body.content, body.tags, body.source
        chunking = {
            name: value
            for name, value in (("chunk_size", body.chunk_size), ("chunk_overlap", body.chunk_overlap))
            if value is not None
        }
        if len(content.encode("utf-8", "surrogatepass")) > INGEST_LIMIT:
            return _error(413, f"the document is over the limit of {INGEST_LIMIT} bytes (10 MB); split it.", TOO_LARGE)
    else:
        raw = _read_body(request, INGEST_LIMIT)
        if isinstance(raw, JsonResponse):
            return raw
        try:
            content = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _error(415, "send UTF-8 text or Markdown.", "UNSUPPORTED_MEDIA_TYPE")
        # Read as connection options are: request.GET decodes a byte that is
        # not UTF-8 as U+FFFD, and the title was stored so.
        title, tags = query_options(request.META.get("QUERY_STRING", "")).get("title", "").strip(), None
        if not title:
            return _error(422, "title: name the document with ?title=...")
        try:
            title.encode("utf-8")
        except UnicodeEncodeError:
            return _error(422, "title: ?title= is not UTF-8 text (percent-encode UTF-8).")
    result = api.book_ingest(caller=caller, title=title, text=content, tags=tags, source=source, **chunking)
    ids = [f"books_{pk.hex[:12]}" for pk in result.chunk_ids]
    return JsonResponse(
        # success / doc_ids: upstream's answer; ids / status: ours (embedding is queued).
        {
            "success": True,
            "title": result.title,
            "chunks": len(ids),
            "doc_ids": ids,
            "ids": ids,
            "status": "queued for embedding",
        },
        status=202,
    )


urlpatterns = [
    path("api/hooks/get-context", get_context),
    path("api/hooks/stop", stop),
    path("api/search", search),
    path("api/ingest", ingest),
]
# The ingest endpoint's 10 MB document travels inside a JSON envelope.
body_limits = {"/api/ingest": INGEST_BODY_LIMIT}
# Every route's error body, for what is refused before it runs (a rate limit).
route_errors = {f"/{route.pattern}": error_body for route in urlpatterns}
# Every route's 401, which the router answers before the body is read.
unauthenticated_answers = {f"/{route.pattern}": unauthenticated for route in urlpatterns}
