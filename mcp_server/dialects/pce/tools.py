"""The `pce` dialect (the pce-memory MCP Tools Spec v0.1): claims with
provenance, active contexts, feedback, boundary validation and policy apply.

Each tool is served under the spec's dotted name (`pce.memory.activate`) and
the underscore name the published pce-memory switched to (`pce_memory_activate`)
because several clients refuse dots in tool names (the Anthropic API accepts
only [a-zA-Z0-9_-]). Requests are checked against the spec's JSON Schemas
verbatim (schemas.py). Every success is the envelope
`{"data", "policy_version", "request_id", "trace_id"}`, every failure the tool
error whose text is `{"error": {"code", "message", "details"}, "request_id",
"trace_id", "policy_version"}`; `HTTP_STATUS` gives each code's status for the
plain HTTP surface (/api/pce/<tool>)."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from mcp_server.dialect import Dialect, DialectFailure, authenticated_caller
from mcp_server.dialects.pce import schemas
from memory import api

INSTRUCTIONS = """\
pce-memory: project knowledge as claims with provenance.
1. Call pce.memory.activate with the task as q before you work; put the claims in your context.
   (A read-only token cannot build an active context: call pce.memory.search instead.)
2. Before generating or sending text outside, call pce.memory.boundary.validate; if allowed=false,
   send the redacted text instead.
3. After a decision is made, store it with pce.memory.upsert (text, kind, scope, provenance.at required).
4. When a claim helped or misled you, send pce.memory.feedback (helpful / harmful / outdated / duplicate).
Scopes: session (7 days), project (120 days), principle (permanent) by default; boundary classes
public / internal / pii / secret decide which use tags (allow) may see a claim.
"""

# Core codes -> the spec's error vocabulary.
CODES = {
    "INVALID_ARGUMENT": "VALIDATION_ERROR",
    "NOT_FOUND": "UNKNOWN_CLAIM",
    "PERMISSION_DENIED": "UNAUTHORIZED",
    "EMBEDDING_ERROR": "INTERNAL",
    "STORAGE_ERROR": "INTERNAL",
    "TIMEOUT": "INTERNAL",
}
HTTP_STATUS = {
    "VALIDATION_ERROR": 422,
    "INVALID_SCOPE": 422,
    "INVALID_BOUNDARY": 422,
    "INVALID_POLICY": 422,
    "BOUNDARY_DENIED": 403,
    "DUPLICATE": 409,
    "CONFLICT": 409,
    "UNKNOWN_CLAIM": 404,
    "GONE": 410,
    "POLICY_MISSING": 424,
    "RATE_LIMIT": 429,
    "QUOTA_EXCEEDED": 403,
    "UNAUTHORIZED": 401,
    "INTERNAL": 500,
}
# Payload limits (bytes) and timeouts (seconds) per tool, as the spec sets them.
LIMITS = {
    "activate": (16 * 1024, 15.0),
    "search": (32 * 1024, 10.0),
    "upsert": (64 * 1024, 10.0),
    "feedback": (4 * 1024, 3.0),
    "boundary.validate": (32 * 1024, 5.0),
    "policy.apply": (128 * 1024, 10.0),
}
# The tools that store something (an idempotency key applies to them).
WRITES = frozenset({"activate", "upsert", "feedback", "policy.apply"})
# The spec: feedback is idempotent per (claim_id, ts_bucket); a bucket is one
# UTC minute, so a client's retry within the minute is applied once.
FEEDBACK_BUCKET_SECONDS = 60
# The places of a claim's score: those the ranking orders by.
SCORE_PLACES = 12
ACTIVE_CONTEXT_PREFIX = "ac_"
CLAIM_PREFIX = "clm_"
# The import that keeps pce-memory's claim ids (manage.py import_memories --from pce).
IMPORTED_FROM = "pce"


def _policy_version() -> str:
    caller = authenticated_caller()
    policy = caller.__dict__.get("policy") if caller is not None else None
    return policy.version if policy is not None else ""


def render_error(code: str, message: str, details: Mapping[str, Any]) -> str:
    return json.dumps(
        {
            "error": {"code": CODES.get(code, code), "message": message, "details": dict(details)},
            "request_id": str(uuid.uuid4()),
            "trace_id": str(uuid.uuid4()),
            "policy_version": _policy_version(),
        },
        ensure_ascii=False,
    )


def http_status(text: str) -> int:
    try:
        return HTTP_STATUS.get(json.loads(text)["error"]["code"], 500)
    except (ValueError, KeyError, TypeError):
        return 500


dialect = Dialect(
    "pce",
    INSTRUCTIONS,
    render_error=render_error,
    argument_codes={"scope": "INVALID_SCOPE", "boundary_class": "INVALID_BOUNDARY"},
    preload_policy=True,
    http_status=http_status,
    # The spec logs every call: a refused one goes to the log of refused calls.
    logs_refusals=True,
)

F = TypeVar("F", bound=Callable[..., Any])


def pce_tool(short: str, schema: Mapping[str, Any]) -> Callable[[F], F]:
    """One tool under both spellings, with the spec's schema, payload limit and timeout."""
    payload_limit, timeout = LIMITS[short]
    limits: dict[str, Any] = {"payload_limit": payload_limit, "timeout": timeout, "writes": short in WRITES}
    dotted = dialect.tool(f"pce.memory.{short}", input_schema=schema, **limits)
    underscored = dialect.tool("pce_memory_" + short.replace(".", "_"), input_schema=schema, **limits)

    def register(fn: F) -> F:
        dotted(underscored(fn))
        return fn

    return register


def envelope(data: dict[str, Any]) -> dict[str, Any]:
    version = dialect.caller().policy.version
    return {"data": data, "policy_version": version, "request_id": str(uuid.uuid4()), "trace_id": str(uuid.uuid4())}


def claim_id(memory_id: uuid.UUID) -> str:
    """A claim's id: the pce-memory id it was imported with, else clm_<32 hex>."""
    return claim_ids([memory_id])[memory_id]


def claim_ids(memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Every listed memory's claim id, from one look-up of the imported ids."""
    imported = api.aliases_of(memory_ids, system=IMPORTED_FROM)
    return {memory_id: imported.get(memory_id) or CLAIM_PREFIX + memory_id.hex for memory_id in memory_ids}


def unknown_claim(value: str) -> DialectFailure:
    return dialect.failure(
        "UNKNOWN_CLAIM",
        f"no claim {value!r} in this tenant; find claim ids with pce.memory.search.",
        {"claim_id": value},
    )


def memory_id_of(value: str) -> uuid.UUID:
    """`clm_<32 hex>` back to the core id (a bare UUID is accepted as well). Any
    other id (upstream's `clm_<base62>`, a typo) names no claim of this tenant:
    UNKNOWN_CLAIM like an id that is well formed but not found, never a
    complaint about UUIDs. A claim imported from pce-memory keeps its upstream id."""
    imported = api.memory_alias_target(dialect.caller(), value)
    if imported is not None:
        return imported
    try:
        return uuid.UUID(value[len(CLAIM_PREFIX) :] if value.startswith(CLAIM_PREFIX) else value)
    except ValueError:
        raise unknown_claim(value) from None


def _require_policy() -> None:
    caller = dialect.caller()
    if not api.policy_is_applied(tenant_id=caller.tenant_id):
        raise dialect.failure("POLICY_MISSING", "no policy is applied to this tenant; run pce.memory.policy.apply.")


def _audit(tool: str, **payload: Any) -> None:
    api.tool_call_audit(caller=dialect.caller(), tool=tool, payload=payload)


# The spec's date-time (RFC 3339), an evidence's `at`; a leap second is one too.
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def _date_time(value: object) -> bool:
    if not isinstance(value, str) or _DATE_TIME.fullmatch(value) is None:
        return False
    seconds = value[17:19].replace("60", "59")
    try:
        datetime.fromisoformat(value[:17] + seconds + value[19:].upper().replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def _provenance(memory: Any) -> dict[str, Any] | None:
    """The claim's provenance object. pce's upsert checked the one it stored, but
    another dialect's metadata may hold any JSON under that key (a LangGraph
    item's attribute), and a read that took it for an object failed whole."""
    provenance = memory.metadata.get("provenance") if isinstance(memory.metadata, dict) else None
    return provenance if isinstance(provenance, dict) and provenance else None


def _claim(memory: Any, ids: Mapping[uuid.UUID, str]) -> dict[str, Any]:
    return {
        "id": ids[memory.id],
        "text": memory.content,
        "kind": api.claim_kind_of(memory),
        "scope": api.claim_scope_of(memory.scope),
        "boundary_class": memory.boundary_class,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
    }


def _evidences(memory: Any, ids: Mapping[uuid.UUID, str]) -> list[dict[str, Any]]:
    """The provenance as the spec's evidence: `at` only when it is a date-time and
    `source_id` only when it is text (the git commit, else the URL)."""
    provenance = _provenance(memory)
    if provenance is None:
        return []
    evidence: dict[str, Any] = {"id": ids[memory.id], "source_type": "provenance", "snippet": memory.content[:200]}
    if _date_time(provenance.get("at")):
        evidence["at"] = provenance["at"]
    git = provenance.get("git")
    commit = git.get("commit") if isinstance(git, dict) else None
    source = commit if isinstance(commit, str) and commit else provenance.get("url")
    if isinstance(source, str) and source:
        evidence["source_id"] = source
    return [evidence]


def _scored(item: Any, include_meta: bool, ids: Mapping[uuid.UUID, str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "claim": _claim(item.memory, ids),
        # To the places the ranking orders by (memory.selectors.activation._order):
        # two scores equal at fewer places but ordered by the hidden digits
        # showed a tie broken against created_at, where the spec breaks ties
        # by created_at descending.
        "score": round(item.score, SCORE_PLACES),
        "evidences": _evidences(item.memory, ids),
        "reason": item.reason,
    }
    if include_meta:
        out["scores"] = {k: round(v, 6) for k, v in item.breakdown.__dict__.items()}
    return out


def _scored_page(items: Sequence[Any], include_meta: bool) -> list[dict[str, Any]]:
    ids = claim_ids([item.memory.id for item in items])
    return [_scored(item, include_meta, ids) for item in items]


def _use_tags(allow: list[str] | None) -> list[str] | None:
    tags = allow or None
    if tags is not None and not api.boundary_for(dialect.caller().policy, tags).visible:
        raise dialect.failure(
            "BOUNDARY_DENIED",
            f"the use tags {tags} may see no boundary class under policy {dialect.caller().policy.version}.",
            {"allow": tags},
        )
    return tags


# --- 2.1 activate ---------------------------------------------------------------------------------
@pce_tool("activate", schemas.ACTIVATE_REQUEST)
def activate(
    q: str,
    scope: list[str] | None = None,
    allow: list[str] | None = None,
    top_k: int | None = None,
    cursor: str | None = None,
    include_meta: bool = False,
) -> dict[str, Any]:
    """Build an active context (AC) for a query under the tenant policy: the claims to put at the
    top of your prompt, ranked by hybrid relevance x critic (utility, confidence, recency), within
    the boundary your use tags (allow) may see. Page with next_cursor; an expired AC answers 410.
    An AC is stored, so a read-only token is refused (UNAUTHORIZED): use pce.memory.search."""
    _require_policy()
    caller = dialect.caller()
    page = api.claims_activate(
        caller=caller,
        query=q,
        query_field="q",
        top_k=top_k,
        scopes=scope,
        use_tags=_use_tags(allow),
        cursor=cursor,
    )
    context = page.context
    assert context is not None
    retrieval = caller.policy.retrieval
    data: dict[str, Any] = {
        "active_context_id": ACTIVE_CONTEXT_PREFIX + context.id.hex,
        "claims": _scored_page(page.items, include_meta),
        "claims_count": len(page.items),
        "expires_at": context.expires_at.isoformat(),
        "has_more": page.has_more,
        "policy_version": caller.policy.version,
        "provenance": [p for item in page.items if (p := _provenance(item.memory)) is not None],
        "scoring_params": {
            "alpha": retrieval.alpha,
            "k_txt": retrieval.k_txt,
            "k_vec": retrieval.k_vec,
            "k_final": retrieval.k_final,
            "rerank": {
                "use_quality": retrieval.use_quality,
                "recency_half_life_days": retrieval.recency_half_life_days,
            },
        },
    }
    if page.next_cursor:
        data["next_cursor"] = page.next_cursor
    _audit("activate", q=q[:200], allow=allow, scope=scope, claims=[c["claim"]["id"] for c in data["claims"]])
    return envelope(data)


# --- 2.2 search -----------------------------------------------------------------------------------
@pce_tool("search", schemas.SEARCH_REQUEST)
def search(
    query: str,
    top_k: int | None = None,
    scope: list[str] | None = None,
    allow: list[str] | None = None,
    cursor: str | None = None,
    include_meta: bool = False,
) -> dict[str, Any]:
    """Recall known premises, conventions and prohibitions without building an active context.
    Same ranking as activate; score descending, ties by created_at descending."""
    caller = dialect.caller()
    page = api.claims_search(
        caller=caller, query=query, top_k=top_k, scopes=scope, use_tags=_use_tags(allow), cursor=cursor
    )
    data: dict[str, Any] = {
        "items": _scored_page(page.items, include_meta),
        "has_more": page.has_more,
        "policy_version": caller.policy.version,
    }
    if page.next_cursor:
        data["next_cursor"] = page.next_cursor
    _audit("search", query=query[:200], allow=allow, scope=scope, claims=[i["claim"]["id"] for i in data["items"]])
    return envelope(data)


# --- 2.3 upsert -----------------------------------------------------------------------------------
@pce_tool("upsert", schemas.UPSERT_REQUEST)
def upsert(
    text: str,
    provenance: dict[str, Any],
    kind: str = "fact",
    scope: str = "project",
    boundary_class: str = "internal",
    entities: list[dict[str, Any]] | None = None,
    relations: list[dict[str, Any]] | None = None,
    content_hash: str | None = None,
) -> dict[str, Any]:
    """Register an important fragment (fact / preference / task / policy_hint) with its provenance
    (provenance.at required). Idempotent by content_hash: the same normalized text returns the same
    clm_ id and changes nothing. Entities with the same canonical_key are merged."""
    caller = dialect.caller()
    try:
        result = api.claim_upsert(
            caller=caller,
            text=text,
            provenance=provenance,
            kind=kind,
            scope=scope,
            boundary_class=boundary_class,
            entities=[
                api.EntityInput(
                    ref=e["id"],
                    type=e["type"],
                    name=e["name"],
                    canonical_key=e.get("canonical_key", ""),
                    attrs=e.get("attrs"),
                )
                for e in entities or []
            ],
            relations=[
                api.RelationInput(src_ref=r["src_id"], dst_ref=r["dst_id"], type=r["type"], props=r.get("props"))
                for r in relations or []
            ],
            content_hash=content_hash,
        )
    except api.Duplicate as exc:
        # The core names the existing memory by its id; pce names a claim by its clm_ id.
        existing = exc.details.get("existing_id")
        raise dialect.failure(
            "DUPLICATE", str(exc), {"existing_id": claim_id(uuid.UUID(existing))} if existing else {}
        ) from exc
    data = {"id": claim_id(result.memory.id), "policy_version": caller.policy.version}
    _audit(
        "upsert",
        claim=data["id"],
        created=result.created,
        boundary_class=boundary_class,
        scope=scope,
        provenance=provenance,
    )
    return envelope(data)


# --- 2.4 feedback ---------------------------------------------------------------------------------
@pce_tool("feedback", schemas.FEEDBACK_REQUEST)
def feedback(claim_id: str, signal: str, score: float | None = None) -> dict[str, Any]:
    """Update the critic with a signal on a claim: helpful (adopted), harmful (rejected), outdated,
    duplicate. Idempotent per (claim_id, one-minute bucket): a retry within the minute counts once."""
    caller = dialect.caller()
    bucket = int(datetime.now().timestamp()) // FEEDBACK_BUCKET_SECONDS
    try:
        outcome = api.memory_feedback(
            caller=caller,
            memory_id=memory_id_of(claim_id),
            signal=signal,
            kinds=api.CLAIM_MEMORY_KINDS,
            idempotency_key=f"pce:{bucket}",
            reason=None if score is None else f"score {score}",
        )
    except api.NotFound as exc:  # another tenant's claim, an episode, a deleted claim
        raise unknown_claim(claim_id) from exc
    _audit("feedback", claim=claim_id, signal=signal, score=score, applied=outcome.applied)
    return envelope({"ok": True, "policy_version": caller.policy.version})


# --- 2.5 boundary.validate ------------------------------------------------------------------------
@pce_tool("boundary.validate", schemas.BOUNDARY_VALIDATE_REQUEST)
def boundary_validate(payload: str, allow: list[str] | None = None, scope: str | None = None) -> dict[str, Any]:
    """Check a payload before you generate or send it (redact-before-send): allowed says whether
    your use tags (allow) may send it under the policy; redacted is the text to send instead."""
    caller = dialect.caller()
    check = api.boundary_validate(caller.policy, payload, allow or None)
    _audit(
        "boundary.validate",
        allowed=check.allowed,
        boundary_class=check.boundary_class,
        findings=dict(check.findings),
        allow=allow,
        scope=scope,
    )
    return envelope(
        {
            "allowed": check.allowed,
            "reason": check.reason,
            "redacted": check.redacted,
            "policy_version": caller.policy.version,
        }
    )


# --- 2.6 policy.apply -----------------------------------------------------------------------------
@pce_tool("policy.apply", schemas.POLICY_APPLY_REQUEST)
def policy_apply(
    yaml: str,
    dry_run: bool = False,
    validate_only: bool = False,
    expected_version: str | None = None,
    signature: str | None = None,
    approver: str | None = None,
) -> dict[str, Any]:
    """Apply a policy (invariants, use tags, redaction rules, retrieval parameters) to this tenant.
    Tenant admins only; versioned (semver), GitOps approval recommended (approver). dry_run reports
    what would change; validate_only only checks. Neither refuses a version that could not be applied
    now (not newer than the current one, or a stale expected_version): the answer's would_conflict
    says so."""
    result = api.policy_apply(
        caller=dialect.caller(),
        yaml=yaml,
        dry_run=dry_run,
        validate_only=validate_only,
        expected_version=expected_version,
        signature=signature,
        approver=approver,
    )
    # Like every pce call, a check or a dry run too (the policy's own history has it as well).
    _audit(
        "policy.apply",
        version=result.version,
        applied=result.applied,
        dry_run=result.dry_run,
        validate_only=result.validate_only,
        changes=len(result.changes),
    )
    data: dict[str, Any] = {"version": result.version}
    if result.conflict is not None:
        # A check or a dry run reports what applying would meet instead of refusing.
        data["would_conflict"] = {"code": "CONFLICT", "message": result.conflict}
    if result.visibility is not None:
        data["would_change"] = {
            "keys": [change["path"] for change in result.changes],
            "memories_changing_visibility": result.visibility["memories_changing_visibility"],
            "visibility": result.visibility["changes"],
        }
    return {
        "data": data,
        "policy_version": result.version if result.applied else result.previous_version,
        "request_id": str(uuid.uuid4()),
        "trace_id": str(uuid.uuid4()),
    }
