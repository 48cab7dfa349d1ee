"""The JSON Schemas of the pce-memory MCP Tools Spec v0.1, verbatim but
for two additions: the read filters' extra scope `global` (FILTER_SCOPES) and
policy.apply's `would_conflict`. The request schemas are what the `pce` dialect
advertises and enforces, the response schemas are what the tests validate
every answer against."""

from __future__ import annotations

from typing import Any

SCOPES = ["session", "project", "principle"]
# A read's scope filter (activate, search) also takes the memory dialect's
# `global`, since claims stored there show as `project` (the one addition to
# the spec's schemas; see memory.claims.claim_scopes).
FILTER_SCOPES = [*SCOPES, "global"]
KINDS = ["fact", "preference", "task", "policy_hint"]
BOUNDARY_CLASSES = ["public", "internal", "pii", "secret"]

PROVENANCE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "at": {"type": "string", "format": "date-time"},
        "actor": {"type": "string"},
        "git": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "commit": {"type": "string", "pattern": "^[0-9a-f]{7,40}$"},
                "repo": {"type": "string"},
                "url": {"type": "string", "format": "uri"},
                "files": {"type": "array", "items": {"type": "string"}},
            },
        },
        "url": {"type": "string", "format": "uri"},
        "note": {"type": "string"},
        "signed": {"type": "boolean"},
    },
    "required": ["at"],
}

ENTITY: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string"},
        "type": {"enum": ["Actor", "Artifact", "Event", "Concept"]},
        "name": {"type": "string"},
        "canonical_key": {"type": "string"},
        "attrs": {"type": "object"},
    },
    "required": ["id", "type", "name"],
}

RELATION: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string"},
        "src_id": {"type": "string"},
        "dst_id": {"type": "string"},
        "type": {"type": "string"},
        "props": {"type": "object"},
        "evidence_claim_id": {"type": "string"},
    },
    "required": ["id", "src_id", "dst_id", "type"],
}

CLAIM: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string"},
        "text": {"type": "string"},
        "kind": {"enum": KINDS},
        "scope": {"enum": SCOPES},
        "boundary_class": {"enum": BOUNDARY_CLASSES},
        "created_at": {"type": "string", "format": "date-time"},
        "updated_at": {"type": "string", "format": "date-time"},
    },
    "required": ["id", "text", "kind", "scope", "boundary_class", "created_at", "updated_at"],
}

SCORING: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        name: {"type": "number"}
        for name in ("text", "vector", "combined", "utility", "confidence", "quality", "recency", "g")
    },
}

EVIDENCE: dict[str, Any] = {
    "type": "object",
    "additionalProperties": True,
    "properties": {
        "id": {"type": "string"},
        "source_type": {"type": "string"},
        "source_id": {"type": "string"},
        "snippet": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
    },
}

DEFINITIONS = {
    "provenance": PROVENANCE,
    "entity": ENTITY,
    "relation": RELATION,
    "claim": CLAIM,
    "scoring": SCORING,
    "evidence": EVIDENCE,
    "scored_item": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "claim": {"$ref": "#/definitions/claim"},
            "score": {"type": "number"},
            "scores": {"$ref": "#/definitions/scoring"},
            "evidences": {"type": "array", "items": {"$ref": "#/definitions/evidence"}},
            "reason": {"type": "string"},
        },
        "required": ["claim", "score"],
    },
}


def _with_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "definitions": DEFINITIONS}


ACTIVATE_REQUEST = _with_definitions(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "q": {"type": "string"},
            "scope": {"type": "array", "items": {"enum": FILTER_SCOPES}},
            "allow": {"type": "array", "items": {"type": "string"}},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 50},
            "cursor": {"type": "string"},
            "include_meta": {"type": "boolean", "default": False},
        },
        "required": ["q"],
    }
)

ACTIVATE_RESPONSE = _with_definitions(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "active_context_id": {"type": "string", "pattern": "^ac_[A-Za-z0-9]+$"},
            "claims": {"type": "array", "items": {"$ref": "#/definitions/scored_item"}},
            "claims_count": {"type": "integer", "minimum": 0},
            "expires_at": {"type": "string", "format": "date-time"},
            "next_cursor": {"type": "string"},
            "has_more": {"type": "boolean"},
            "policy_version": {"type": "string"},
            "provenance": {"type": "array", "items": {"type": "object"}},
            "scoring_params": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "alpha": {"type": "number"},
                    "k_txt": {"type": "integer"},
                    "k_vec": {"type": "integer"},
                    "k_final": {"type": "integer"},
                    "rerank": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "use_quality": {"type": "boolean"},
                            "recency_half_life_days": {"type": "number"},
                        },
                    },
                },
            },
        },
        "required": ["active_context_id", "claims", "policy_version"],
    }
)

SEARCH_REQUEST = _with_definitions(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "query": {"type": "string"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 50},
            "scope": {"type": "array", "items": {"enum": FILTER_SCOPES}},
            "allow": {"type": "array", "items": {"type": "string"}},
            "cursor": {"type": "string"},
            "include_meta": {"type": "boolean", "default": False},
        },
        "required": ["query"],
    }
)

SEARCH_RESPONSE = _with_definitions(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "items": {"type": "array", "items": {"$ref": "#/definitions/scored_item"}},
            "next_cursor": {"type": "string"},
            "has_more": {"type": "boolean"},
            "policy_version": {"type": "string"},
        },
        "required": ["items", "policy_version"],
    }
)

UPSERT_REQUEST = _with_definitions(
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "text": {"type": "string"},
            "kind": {"enum": KINDS},
            "scope": {"enum": SCOPES},
            "boundary_class": {"enum": BOUNDARY_CLASSES},
            "entities": {"type": "array", "items": {"$ref": "#/definitions/entity"}},
            "relations": {"type": "array", "items": {"$ref": "#/definitions/relation"}},
            "provenance": {"$ref": "#/definitions/provenance"},
            "content_hash": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
        },
        "required": ["text", "provenance"],
    }
)

UPSERT_RESPONSE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "pattern": "^clm_[A-Za-z0-9]+$"},
        "policy_version": {"type": "string"},
    },
    "required": ["id", "policy_version"],
}

FEEDBACK_REQUEST = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "claim_id": {"type": "string"},
        "signal": {"enum": ["helpful", "harmful", "outdated", "duplicate"]},
        "score": {"type": "number", "minimum": -1, "maximum": 1},
    },
    "required": ["claim_id", "signal"],
}

FEEDBACK_RESPONSE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"ok": {"type": "boolean"}, "policy_version": {"type": "string"}},
    "required": ["ok", "policy_version"],
}

BOUNDARY_VALIDATE_REQUEST = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "payload": {"type": "string"},
        "allow": {"type": "array", "items": {"type": "string"}},
        "scope": {"enum": SCOPES},
    },
    "required": ["payload"],
}

BOUNDARY_VALIDATE_RESPONSE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "allowed": {"type": "boolean"},
        "reason": {"type": "string"},
        "redacted": {"type": "string"},
        "policy_version": {"type": "string"},
    },
    "required": ["allowed", "policy_version"],
}

POLICY_APPLY_REQUEST = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "yaml": {"type": "string"},
        "dry_run": {"type": "boolean"},
        "validate_only": {"type": "boolean"},
        "expected_version": {"type": "string"},
        "signature": {"type": "string"},
        "approver": {"type": "string"},
    },
    "required": ["yaml"],
}

POLICY_APPLY_RESPONSE = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "version": {"type": "string"},
        # Not in the spec: a check or dry run reports the conflict applying would meet.
        "would_conflict": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"code": {"const": "CONFLICT"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        },
        # Not in the spec: what a dry run would change (the policy engine's report).
        "would_change": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "keys": {"type": "array", "items": {"type": "string"}},
                "memories_changing_visibility": {"type": "integer"},
                "visibility": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "use_tag": {"type": "string"},
                            "boundary_class": {"type": "string"},
                            "before": {"type": "string"},
                            "after": {"type": "string"},
                            "memories": {"type": "integer"},
                        },
                    },
                },
            },
            "required": ["keys", "memories_changing_visibility", "visibility"],
        },
    },
    "required": ["version"],
}
