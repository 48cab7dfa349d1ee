"""The pce-memory MCP Tools Spec v0.1 through the real MCP SDK: every tool under both
spellings, answers validated against the spec's JSON Schemas, every error code
with its HTTP status, idempotency, active contexts, ranking and boundaries."""

from __future__ import annotations

import json
import math
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from jsonschema import Draft202012Validator

from mcp_server.dialects.pce import schemas
from mcp_server.dialects.pce.tools import HTTP_STATUS
from memory.models import Entity, Memory, MemoryEvent, OutcomeReport
from memory.validation import content_hash
from policy.document import SEED_EXAMPLE_YAML as SEED_POLICY
from tests.mcp_server import test_transports

pytestmark = pytest.mark.django_db(transaction=True)
http_server = test_transports.http_server  # the live uvicorn fixture

AT = "2025-06-01T12:00:00Z"
ENVELOPE_KEYS = {"data", "policy_version", "request_id", "trace_id"}
SPELLINGS = [("pce.memory.", "."), ("pce_memory_", "_")]


def tool(prefix: str, short: str) -> str:
    return prefix + (short if prefix.endswith(".") else short.replace(".", "_"))


async def ok(client, name: str, schema: dict, **arguments) -> dict:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, f"{name}: {result.content}"
    body = result.structured_content
    assert set(body) == ENVELOPE_KEYS
    Draft202012Validator(schema).validate(body["data"])
    return body["data"]


async def fails(client, name: str, **arguments) -> dict:
    result = await client.call_tool(name, arguments)
    assert result.is_error, f"{name} unexpectedly succeeded"
    body = json.loads(result.content[0].text)  # the text is exactly the spec's error JSON
    assert set(body) == {"error", "request_id", "trace_id", "policy_version"}
    assert set(body["error"]) == {"code", "message", "details"}
    return body


@pytest.fixture(scope="module", autouse=True)
def _warm_embedder():
    """Serving processes load the model at start-up; the spec's per-tool timeouts
    (upsert 10 s) are about calls, not about loading a model in the first one."""
    from memory.embeddings import warm_up

    warm_up()


@pytest.fixture
def pce(mcp_client_for):
    return lambda identity: mcp_client_for(identity, "pce")


@pytest.mark.parametrize(("prefix", "_"), SPELLINGS)
async def test_tools_are_served_under_both_spellings_with_the_seed_schemas(prefix, _, member, pce):
    async with pce(member) as client:
        tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
    for short, schema in [
        ("activate", schemas.ACTIVATE_REQUEST),
        ("search", schemas.SEARCH_REQUEST),
        ("upsert", schemas.UPSERT_REQUEST),
        ("feedback", schemas.FEEDBACK_REQUEST),
        ("boundary.validate", schemas.BOUNDARY_VALIDATE_REQUEST),
        ("policy.apply", schemas.POLICY_APPLY_REQUEST),
    ]:
        assert tools[tool(prefix, short)] == schema


@pytest.mark.parametrize(("prefix", "_"), SPELLINGS)
async def test_upsert_is_idempotent_by_normalized_text_and_checks_the_hash(prefix, _, member, pce):
    text = "Stripe webhookは10分ドリフトを許容"
    async with pce(member) as client:
        first = await ok(
            client,
            tool(prefix, "upsert"),
            schemas.UPSERT_RESPONSE,
            text=text,
            kind="fact",
            scope="project",
            boundary_class="internal",
            provenance={"at": AT, "git": {"commit": "abc1234"}},
            content_hash=content_hash(text),
        )
        rows = await Memory.objects.acount()
        again = await ok(
            client,
            tool(prefix, "upsert"),
            schemas.UPSERT_RESPONSE,
            text="  Stripe   webhookは10分ドリフトを許容\r\n",
            provenance={"at": AT},
        )
        wrong = await fails(
            client, tool(prefix, "upsert"), text="other", provenance={"at": AT}, content_hash="sha256:" + "0" * 64
        )
        no_at = await fails(client, tool(prefix, "upsert"), text="x", provenance={"git": {"commit": "abc1234"}})
        bad_commit = await fails(
            client, tool(prefix, "upsert"), text="x", provenance={"at": AT, "git": {"commit": "XYZ"}}
        )
        conflict = await fails(client, tool(prefix, "upsert"), text=text, kind="task", provenance={"at": AT})
    assert first["id"].startswith("clm_") and again["id"] == first["id"]
    assert await Memory.objects.acount() == rows
    assert wrong["error"]["code"] == "VALIDATION_ERROR" and "content_hash" in wrong["error"]["message"]
    assert no_at["error"]["code"] == "VALIDATION_ERROR" and "'at'" in no_at["error"]["message"]
    assert bad_commit["error"]["code"] == "VALIDATION_ERROR"
    assert conflict["error"]["code"] == "DUPLICATE" and conflict["error"]["details"]["existing_id"] == first["id"]
    assert "kind fact, scope project" in conflict["error"]["message"]


async def test_entities_with_one_canonical_key_merge(member, pce):
    stripe = {"id": "e1", "type": "Artifact", "name": "Stripe", "canonical_key": "vendor:stripe", "attrs": {"a": 1}}
    api = {"id": "e2", "type": "Concept", "name": "Cancel API"}
    async with pce(member) as client:
        await ok(
            client,
            "pce.memory.upsert",
            schemas.UPSERT_RESPONSE,
            text="Stripe sends webhooks",
            provenance={"at": AT},
            entities=[stripe, api],
            relations=[{"id": "r1", "src_id": "e1", "dst_id": "e2", "type": "calls"}],
        )
        await ok(
            client,
            "pce.memory.upsert",
            schemas.UPSERT_RESPONSE,
            text="Stripe retries for three days",
            provenance={"at": AT},
            entities=[{**stripe, "name": "stripe", "attrs": {"b": 2}}],
        )
    entities = [e async for e in Entity.objects.filter(canonical_key="vendor:stripe")]
    assert len(entities) == 1 and entities[0].attrs == {"a": 1, "b": 2}
    assert await entities[0].claims.acount() == 2


async def test_activate_ranks_pages_and_expires(member, pce):
    async with pce(member) as client:
        topics = [
            "Cancel API endpoints are named POST /subscriptions/{id}/cancel",
            "Cancel requests are processed asynchronously by a worker queue",
            "A cancelled subscription keeps access until the period ends",
            "Cancel API naming follows the verb-as-subresource convention",
            "Refunds after cancel are issued through the billing service",
            "The cancel endpoint requires an idempotency key header",
            "Cancel webhooks notify the CRM within five minutes",
            "Cancel reasons are stored as an enum on the subscription",
        ]
        for text in topics:
            await ok(
                client, "pce.memory.upsert", schemas.UPSERT_RESPONSE, text=text, scope="project", provenance={"at": AT}
            )
        first = await ok(
            client,
            "pce.memory.activate",
            schemas.ACTIVATE_RESPONSE,
            q="cancel API naming convention",
            scope=["project"],
            allow=["answer:task"],
            top_k=2,
            include_meta=True,
        )
        second = await ok(
            client,
            "pce.memory.activate",
            schemas.ACTIVATE_RESPONSE,
            q="cancel API",
            top_k=2,
            cursor=first["next_cursor"],
        )
        with time_machine.travel(timezone.now() + timedelta(hours=2)):
            gone = await fails(client, "pce.memory.activate", q="cancel API", cursor=second["next_cursor"])
    assert first["active_context_id"].startswith("ac_") and first["has_more"] is True
    assert first["claims_count"] == 2 and second["has_more"] is True
    assert len(first["claims"]) == 2 and len(second["claims"]) == 2
    assert not {c["claim"]["id"] for c in first["claims"]} & {c["claim"]["id"] for c in second["claims"]}
    for item in first["claims"]:
        s = item["scores"]
        assert item["score"] == pytest.approx(s["combined"] * s["g"], abs=1e-5)
        assert s["combined"] == pytest.approx(0.65 * s["vector"] + 0.35 * s["text"], abs=1e-5)
        expected_g = (0.6 + 0.4 / (1 + math.exp(-s["utility"]))) * (0.5 + 0.5 * s["confidence"])
        expected_g *= (0.3 + 0.7 * s["recency"]) * s["quality"]
        assert s["g"] == pytest.approx(expected_g, abs=1e-5)
        assert all(0.0 <= s[k] <= 1.0 for k in ("text", "vector", "combined", "confidence", "quality", "recency"))
    scores = [c["score"] for c in first["claims"] + second["claims"]]
    assert scores == sorted(scores, reverse=True)
    assert gone["error"]["code"] == "GONE" and HTTP_STATUS["GONE"] == 410


async def test_feedback_is_idempotent_per_claim_and_minute(member, pce):
    async with pce(member) as client:
        claim = await ok(
            client, "pce.memory.upsert", schemas.UPSERT_RESPONSE, text="Use UTC in logs", provenance={"at": AT}
        )
        # The three within one UTC minute, however slow the machine: from the start of the next one.
        next_minute = timezone.now().replace(second=0, microsecond=0) + timedelta(minutes=1)
        with time_machine.travel(next_minute, tick=True):
            for _ in range(3):
                await ok(
                    client, "pce_memory_feedback", schemas.FEEDBACK_RESPONSE, claim_id=claim["id"], signal="helpful"
                )
        unknown = await fails(client, "pce.memory.feedback", claim_id="clm_" + "0" * 32, signal="helpful")
    memory = await Memory.objects.aget(pk=claim["id"].removeprefix("clm_"))
    assert memory.utility == pytest.approx(0.10) and memory.confidence == pytest.approx(1.0)
    assert memory.applied_count == 1 and await OutcomeReport.objects.acount() == 1
    assert unknown["error"]["code"] == "UNKNOWN_CLAIM"


async def test_feedback_deltas_follow_upstream(member, pce):
    async with pce(member) as client:
        ids = {}
        for signal in ("harmful", "outdated", "duplicate"):
            ids[signal] = (
                await ok(
                    client, "pce.memory.upsert", schemas.UPSERT_RESPONSE, text=f"claim {signal}", provenance={"at": AT}
                )
            )["id"]
            await ok(client, "pce.memory.feedback", schemas.FEEDBACK_RESPONSE, claim_id=ids[signal], signal=signal)
    rows = {s: await Memory.objects.aget(pk=i.removeprefix("clm_")) for s, i in ids.items()}
    assert (rows["harmful"].utility, rows["harmful"].confidence) == (pytest.approx(-0.2), pytest.approx(0.9))
    assert (rows["outdated"].utility, rows["outdated"].confidence) == (pytest.approx(0.0), pytest.approx(0.8))
    assert (rows["duplicate"].utility, rows["duplicate"].confidence) == (pytest.approx(-0.05), pytest.approx(1.0))


async def test_pii_claim_is_redacted_for_an_allowed_tag_and_hidden_otherwise_secret_never(member, pce):
    async with pce(member) as client:
        await ok(
            client,
            "pce.memory.upsert",
            schemas.UPSERT_RESPONSE,
            text="Contact the billing owner at alice@example.com or +1 415-555-0100",
            boundary_class="pii",
            provenance={"at": AT},
        )
        await ok(
            client,
            "pce.memory.upsert",
            schemas.UPSERT_RESPONSE,
            text="Billing owner deploy key sk-abcdefghijklmnopqrstuvwx",
            boundary_class="secret",
            provenance={"at": AT},
        )
        lookup = await ok(
            client, "pce.memory.search", schemas.SEARCH_RESPONSE, query="billing owner", allow=["tool:contact-lookup"]
        )
        answer = await ok(client, "pce.memory.search", schemas.SEARCH_RESPONSE, query="billing owner")
    texts = [i["claim"]["text"] for i in lookup["items"]]
    assert len(texts) == 1 and "alice@example.com" not in texts[0] and "[REDACTED" in texts[0]
    assert answer["items"] == []


async def test_boundary_validate_redacts_before_send(member, pce):
    payload = "Mail bob@example.com the AWS key AKIAABCDEFGHIJKLMNOP"
    async with pce(member) as client:
        denied = await ok(client, "pce.memory.boundary.validate", schemas.BOUNDARY_VALIDATE_RESPONSE, payload=payload)
        pii = await ok(
            client,
            "pce_memory_boundary_validate",
            schemas.BOUNDARY_VALIDATE_RESPONSE,
            payload="Mail bob@example.com",
            allow=["tool:contact-lookup"],
        )
        plain = await ok(
            client, "pce.memory.boundary.validate", schemas.BOUNDARY_VALIDATE_RESPONSE, payload="Deploy on Friday"
        )
    assert denied["allowed"] is False and "secret" in denied["reason"]
    assert "AKIA" not in denied["redacted"] and "bob@example.com" not in denied["redacted"]
    assert pii["allowed"] is True and "bob@example.com" not in pii["redacted"]
    assert plain["allowed"] is True and plain["redacted"] == "Deploy on Friday"


async def test_policy_apply_codes_and_the_seed_example(member, owner, pce):
    async with pce(member) as client:
        refused = await fails(client, "pce.memory.policy.apply", yaml=SEED_POLICY.replace("0.1", "0.2", 1))
    async with pce(owner) as client:
        applied = await ok(
            client,
            "pce_memory_policy_apply",
            schemas.POLICY_APPLY_RESPONSE,
            yaml=SEED_POLICY.replace("version: 0.1", "version: 0.2.0"),
            approver="alice",
        )
        invalid = await fails(client, "pce.memory.policy.apply", yaml="version: 1.0.0\nscopes: [nope]\n")
        closed = SEED_POLICY.replace("version: 0.1", "version: 0.3.0").replace("allow: ['*']", "allow: []")
        await ok(client, "pce.memory.policy.apply", schemas.POLICY_APPLY_RESPONSE, yaml=closed)
        denied = await fails(client, "pce.memory.search", query="anything", allow=["share:external"])
    assert refused["error"]["code"] == "UNAUTHORIZED" and HTTP_STATUS["UNAUTHORIZED"] == 401
    assert applied["version"] == "0.2.0"
    assert invalid["error"]["code"] == "INVALID_POLICY" and invalid["policy_version"] == "0.2.0"
    assert denied["error"]["code"] == "BOUNDARY_DENIED" and HTTP_STATUS["BOUNDARY_DENIED"] == 403


async def test_scope_boundary_and_missing_policy_codes(member, pce):
    from policy.models import PolicyVersion

    async with pce(member) as client:
        scope = await fails(client, "pce.memory.activate", q="x", scope=["galaxy"])
        boundary = await fails(client, "pce.memory.upsert", text="x", boundary_class="top", provenance={"at": AT})
        await PolicyVersion.objects.all().adelete()
        missing = await fails(client, "pce.memory.activate", q="x")
    assert scope["error"]["code"] == "INVALID_SCOPE" and HTTP_STATUS["INVALID_SCOPE"] == 422
    assert boundary["error"]["code"] == "INVALID_BOUNDARY"
    assert missing["error"]["code"] == "POLICY_MISSING" and HTTP_STATUS["POLICY_MISSING"] == 424


async def test_japanese_examples_are_found_by_keyword_and_by_vector(member, pce, mcp_client_for):
    texts = ["解約APIの命名規約: POST /subscriptions/{id}/cancel は非同期", "Stripe webhookは10分ドリフトを許容"]
    async with pce(member) as client:
        ids = [
            (await ok(client, "pce.memory.upsert", schemas.UPSERT_RESPONSE, text=t, provenance={"at": AT}))["id"]
            for t in texts
        ]
        activated = await ok(client, "pce.memory.activate", schemas.ACTIVATE_RESPONSE, q="解約APIの命名規約")
    assert activated["claims"][0]["claim"]["id"] == ids[0]
    async with mcp_client_for(member) as memory:
        for query, wanted in (("命名規約", ids[0]), ("ドリフト", ids[1])):
            for mode in ("keyword", "semantic"):
                found = await memory.call_tool("memory_search", {"query": query, "mode": mode, "types": ["fact"]})
                top = [r["id"].replace("-", "") for r in found.structured_content["results"]]
                if mode == "keyword":  # CJK bigrams: the keyword channel splits Japanese
                    assert top[:1] == [wanted.removeprefix("clm_")], (query, top)
        # Vector search: the identical sentence is its own nearest neighbour.
        semantic = await memory.call_tool(
            "memory_search", {"query": "Stripe webhookは10分ドリフトを許容", "mode": "semantic", "types": ["fact"]}
        )
    assert semantic.structured_content["results"][0]["id"].replace("-", "") == ids[1].removeprefix("clm_")


async def test_every_call_is_audited(member, pce):
    async with pce(member) as client:
        await ok(client, "pce.memory.upsert", schemas.UPSERT_RESPONSE, text="Audit me", provenance={"at": AT})
        await ok(client, "pce.memory.search", schemas.SEARCH_RESPONSE, query="audit")
        await ok(client, "pce.memory.boundary.validate", schemas.BOUNDARY_VALIDATE_RESPONSE, payload="hello")
    tools = [e.payload["tool"] async for e in MemoryEvent.objects.filter(event_type="tool_call").order_by("id")]
    assert tools == ["upsert", "search", "boundary.validate"]


async def test_http_surface_answers_with_the_seed_status(http_server, member):
    import httpx

    url = http_server
    headers = {"Authorization": f"Bearer {member.token}"}
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        stored = await http.post(
            "/api/pce/pce.memory.upsert", json={"text": "HTTP claim", "provenance": {"at": AT}}, headers=headers
        )
        unknown = await http.post(
            "/api/pce/pce_memory_feedback", json={"claim_id": "clm_" + "1" * 32, "signal": "helpful"}, headers=headers
        )
        invalid = await http.post("/api/pce/pce.memory.activate", json={"q": "x", "scope": ["nope"]}, headers=headers)
        anonymous = await http.post("/api/pce/pce.memory.search", json={"query": "x"})
        fetched = await http.get("/api/pce/pce.memory.search", headers=headers)
    assert stored.status_code == 200 and set(stored.json()) == ENVELOPE_KEYS
    assert (fetched.status_code, fetched.headers["allow"], fetched.json()["error"]["code"]) == (
        405,
        "POST",
        "METHOD_NOT_ALLOWED",
    )
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "UNKNOWN_CLAIM")
    assert (invalid.status_code, invalid.json()["error"]["code"]) == (422, "INVALID_SCOPE")
    assert anonymous.status_code == 401
    # Every answer carries the policy engine's rate-limit headers (the 429 path: tests/policy/test_ratelimit.py).
    assert all(h in stored.headers for h in ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"))


async def test_an_unexpected_failure_is_internal_and_says_nothing_of_it(member, pce, monkeypatch):
    from memory import api

    def broken(**_):
        raise RuntimeError("connection string postgres://secret")

    monkeypatch.setattr(api, "claims_search", broken)
    async with pce(member) as client:
        body = await fails(client, "pce.memory.search", query="anything")
    assert body["error"]["code"] == "INTERNAL" and HTTP_STATUS["INTERNAL"] == 500
    assert "secret" not in json.dumps(body)
