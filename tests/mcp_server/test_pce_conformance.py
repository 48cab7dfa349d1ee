"""The pce dialect as an upstream client tries it (held-out conformance cases),
through a real MCP client and the plain HTTP route: claim ids that name no
claim of the tenant, scopes read across dialects, and policy checks that report
a would-be conflict instead of refusing."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from mcp_server.dialects.pce import schemas
from memory.models import Memory, OutcomeReport
from policy.document import SEED_EXAMPLE_YAML
from policy.models import PolicyVersion
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

AT = "2025-06-01T12:00:00Z"


async def ok(client: Any, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, f"{name}: {result.content}"
    return result.structured_content


async def fails(client: Any, name: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert result.is_error, f"{name} unexpectedly succeeded: {result.structured_content}"
    assert result.structured_content is None
    return json.loads(result.content[0].text)["error"]


async def post(token: str, path: str, body: dict[str, Any]) -> httpx.Response:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return await client.post(path, content=json.dumps(body).encode(), headers=headers)


# --- claim ids that are not the tenant's claims ---------------------------------------------------


async def test_feedback_on_an_id_that_is_no_claim_of_the_tenant_is_unknown_claim(member, outsider, mcp_client_for):
    async with mcp_client_for(outsider, "pce") as client:
        theirs = (await ok(client, "pce_memory_upsert", text="Their deploy runs on Fridays", provenance={"at": AT}))[
            "data"
        ]["id"]
    async with mcp_client_for(member, "memory") as client:
        episode = await client.call_tool(
            "memory_store_episode", {"content": "Talked about deploys", "butler": "general"}
        )
        assert not episode.is_error, episode.content
    stored = await Memory.objects.filter(kind="episode").afirst()
    assert stored is not None
    episode_id = stored.id
    ids = [
        "clm_V184a1e4P25rXdbmPAku",  # the shape upstream's ids have
        "clm_nope",
        "nope",
        str(uuid.uuid4()),
        "clm_" + uuid.uuid4().hex,
        theirs,  # another tenant's claim
        "clm_" + episode_id.hex,  # one of the tenant's memories, but not a claim
    ]
    async with mcp_client_for(member, "pce") as client:
        for claim_id in ids:
            for name in ("pce.memory.feedback", "pce_memory_feedback"):
                error = await fails(client, name, claim_id=claim_id, signal="helpful")
                assert error["code"] == "UNKNOWN_CLAIM", (claim_id, error)
                assert "UUID" not in error["message"] and error["details"] == {"claim_id": claim_id}
    for claim_id in ids:
        response = await post(member.token, "/api/pce/pce_memory_feedback", {"claim_id": claim_id, "signal": "harmful"})
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "UNKNOWN_CLAIM"
    assert not await OutcomeReport.objects.aexists()


async def test_feedback_on_the_tenants_own_claim_still_applies(member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        claim = (await ok(client, "pce.memory.upsert", text="Deploys run on Fridays", provenance={"at": AT}))["data"]
        await ok(client, "pce.memory.feedback", claim_id=claim["id"], signal="helpful")
        await ok(client, "pce.memory.feedback", claim_id=claim["id"].removeprefix("clm_"), signal="harmful")
    assert await OutcomeReport.objects.acount() == 1  # the same one-minute bucket: applied once


# --- scopes across dialects -----------------------------------------------------------------------


async def test_what_pce_shows_as_a_scope_it_accepts_as_a_filter(member, mcp_client_for):
    async with mcp_client_for(member, "memory") as client:
        for scope, content in (
            ("global", "The staging cluster is in Frankfurt"),
            ("health", "The staging cluster is blue"),
        ):
            stored = await client.call_tool(
                "memory_store_fact",
                {"subject": "staging", "predicate": f"fact_{scope}", "content": content, "scope": scope},
            )
            assert not stored.is_error, stored.content
    async with mcp_client_for(member, "pce") as client:
        await ok(
            client, "pce.memory.upsert", text="The staging cluster runs nightly", scope="session", provenance={"at": AT}
        )

        async def found(scope: list[str] | None) -> dict[str, str]:
            arguments: dict[str, Any] = {"query": "staging cluster", "top_k": 50}
            if scope is not None:
                arguments["scope"] = scope
            data = (await ok(client, "pce.memory.search", **arguments))["data"]
            Draft202012Validator(schemas.SEARCH_RESPONSE).validate(data)
            return {item["claim"]["text"]: item["claim"]["scope"] for item in data["items"]}

        everything = await found(None)
        project = await found(["project"])
        global_ = await found(["global"])
        session = await found(["session"])
        both = await found(["session", "project"])
        principle = await found(["principle"])
    assert everything == {
        "The staging cluster is in Frankfurt": "project",
        "The staging cluster is blue": "project",
        "The staging cluster runs nightly": "session",
    }
    # Every claim shown as `project` is found by filtering on `project`.
    assert project == {text: scope for text, scope in everything.items() if scope == "project"}
    assert global_ == {"The staging cluster is in Frankfurt": "project"}
    assert session == {"The staging cluster runs nightly": "session"}
    assert both == everything and principle == {}


async def test_an_unknown_scope_is_still_invalid_scope(member, mcp_client_for):
    async with mcp_client_for(member, "pce") as client:
        error = await fails(client, "pce.memory.search", query="x", scope=["galaxy"])
        upsert = await fails(client, "pce.memory.upsert", text="x", scope="global", provenance={"at": AT})
    assert error["code"] == "INVALID_SCOPE" and upsert["code"] == "INVALID_SCOPE"


# --- policy.apply: checks report, they do not refuse ----------------------------------------------


async def test_the_seed_example_policy_applies_to_a_fresh_tenant(owner, mcp_client_for):
    async with mcp_client_for(owner, "pce") as client:
        checked = await ok(client, "pce.memory.policy.apply", yaml=SEED_EXAMPLE_YAML, validate_only=True)
        dry = await ok(client, "pce_memory_policy_apply", yaml=SEED_EXAMPLE_YAML, dry_run=True)
        applied = await ok(client, "pce.memory.policy.apply", yaml=SEED_EXAMPLE_YAML)
    for body in (checked, dry):
        Draft202012Validator(schemas.POLICY_APPLY_RESPONSE).validate(body["data"])
        assert "would_conflict" not in body["data"], body
        assert body["policy_version"] == "0.0.0"
    # The example is the default policy: a dry run of it would change nothing.
    assert "would_change" not in checked["data"]
    assert dry["data"]["would_change"] == {"keys": [], "memories_changing_visibility": 0, "visibility": []}
    Draft202012Validator(schemas.POLICY_APPLY_RESPONSE).validate(applied["data"])
    assert applied["data"]["version"] == applied["policy_version"] == "0.1.0"
    assert await PolicyVersion.objects.filter(is_current=True, version="0.1.0").aexists()


async def test_a_dry_run_reports_the_keys_and_visibility_applying_would_change(owner, mcp_client_for):
    """What the policy engine's dry run reports (docs/policy.md), in the answer:
    the key paths that differ and each use tag's change of a class's visibility
    with the memories of that class."""
    yaml = SEED_EXAMPLE_YAML.replace("alpha: 0.65", "alpha: 0.5").replace(
        "internal: { allow: ['answer:task','tool:*'] }", "internal: { allow: [] }"
    )
    async with mcp_client_for(owner, "pce") as client:
        await ok(
            client, "pce.memory.upsert", text="an internal decision", boundary_class="internal", provenance={"at": AT}
        )
        dry = await ok(client, "pce.memory.policy.apply", yaml=yaml, dry_run=True)
    Draft202012Validator(schemas.POLICY_APPLY_RESPONSE).validate(dry["data"])
    changed = dry["data"]["would_change"]
    assert changed["keys"] == ["boundary_classes.internal.allow", "retrieval.hybrid.alpha"], changed
    assert changed["memories_changing_visibility"] == 1
    assert {
        "use_tag": "answer:task",
        "boundary_class": "internal",
        "before": "visible",
        "after": "denied",
        "memories": 1,
    } in changed["visibility"]
    assert dry["policy_version"] == "0.0.0"  # nothing applied


async def test_the_seed_example_request_applies_over_plain_http(owner):
    """The example request exactly as the spec prints it (its YAML starts with a newline)."""
    body = {"yaml": "\n" + SEED_EXAMPLE_YAML}
    checked = await post(owner.token, "/api/pce/pce_memory_policy_apply", {**body, "validate_only": True})
    applied = await post(owner.token, "/api/pce/pce.memory.policy.apply", body)
    again = await post(owner.token, "/api/pce/pce_memory_policy_apply", {**body, "dry_run": True})
    assert checked.status_code == 200 and "would_conflict" not in checked.json()["data"], checked.text
    assert applied.status_code == 200 and applied.json()["data"] == {"version": "0.1.0"}, applied.text
    assert again.status_code == 200, again.text
    assert again.json()["data"]["would_conflict"]["code"] == "CONFLICT"


@pytest.mark.parametrize("mode", ["validate_only", "dry_run"])
async def test_a_check_of_a_version_that_is_not_newer_reports_the_conflict(owner, mcp_client_for, mode):
    async with mcp_client_for(owner, "pce") as client:
        await ok(client, "pce.memory.policy.apply", yaml=SEED_EXAMPLE_YAML.replace("version: 0.1", "version: 0.2.0"))
        same = await ok(client, "pce.memory.policy.apply", yaml=SEED_EXAMPLE_YAML, **{mode: True})
        stale = await ok(
            client,
            "pce.memory.policy.apply",
            yaml=SEED_EXAMPLE_YAML.replace("version: 0.1", "version: 0.3.0"),
            expected_version="0.1.0",
            **{mode: True},
        )
        newer = await ok(
            client,
            "pce.memory.policy.apply",
            yaml=SEED_EXAMPLE_YAML.replace("version: 0.1", "version: 0.3.0"),
            **{mode: True},
        )
        # Applying for real still refuses.
        refused = await fails(client, "pce.memory.policy.apply", yaml=SEED_EXAMPLE_YAML)
        invalid = await fails(
            client, "pce.memory.policy.apply", yaml="version: 1.0.0\nscopes: [nope]\n", **{mode: True}
        )
    for body in (same, stale, newer):
        Draft202012Validator(schemas.POLICY_APPLY_RESPONSE).validate(body["data"])
        assert body["policy_version"] == "0.2.0"
    assert same["data"]["version"] == "0.1.0"
    assert same["data"]["would_conflict"]["code"] == "CONFLICT"
    assert "not newer" in same["data"]["would_conflict"]["message"]
    assert "stale" in stale["data"]["would_conflict"]["message"]
    assert "would_conflict" not in newer["data"]
    assert refused["code"] == "CONFLICT"
    assert invalid["code"] == "INVALID_POLICY"  # a check still refuses a policy that is not valid
    assert await PolicyVersion.objects.filter(is_current=True).acount() == 1
    assert (await PolicyVersion.objects.aget(is_current=True)).version == "0.2.0"
