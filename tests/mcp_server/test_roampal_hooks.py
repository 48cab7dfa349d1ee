"""roampal v0.3.5's hook server (get-context, stop, search, ingest): authentication,
upstream's input limits, no CORS, tenant isolation; and the Claude Code hook
commands run the way Claude Code runs them, against a live uvicorn."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from django.test import Client as DjangoClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memory import api
from memory.models import Exchange, Memory
from tests.conftest import call
from tests.mcp_server.test_transports import ROOT, http_server  # noqa: F401 - the live-server fixture

pytestmark = pytest.mark.django_db(transaction=True)
HOOK = ROOT / "scripts" / "claude_hooks" / "roampal_hook.py"


def post(identity, path: str, body: object, token: str | None = None, **extra):
    headers: dict[str, Any] = {}
    if identity is not None or token is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token or identity.token}"
    raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return DjangoClient().post(path, data=raw, content_type="application/json", **headers, **extra)


@pytest.mark.parametrize("path", ["/api/hooks/get-context", "/api/hooks/stop", "/api/search", "/api/ingest"])
def test_unauthenticated_hook_calls_are_refused(path, member):
    missing = post(None, path, {"query": "x"})
    wrong = post(None, path, {"query": "x"}, token="mp_not-a-token")
    assert missing.status_code == wrong.status_code == 401
    assert missing["WWW-Authenticate"] == "Bearer" and "Bearer <token>" in missing.json()["error"]
    assert Exchange.objects.count() == 0 and Memory.objects.count() == 0
    assert DjangoClient().get(path, HTTP_AUTHORIZATION=f"Bearer {member.token}").status_code == 405


def test_no_cors_headers_even_for_a_browser_origin(member):
    answer = post(member, "/api/search", {"days_back": 1}, HTTP_ORIGIN="http://evil.example")
    preflight = DjangoClient().options(
        "/api/search", HTTP_ORIGIN="http://evil.example", HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST"
    )
    assert answer.status_code == 200 and preflight.status_code == 405
    for response in (answer, preflight):
        assert not [h for h in response.headers if h.lower().startswith("access-control-")]


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"query": "x" * 2001}, "query"),
        ({"days_back": 0}, "days_back"),
        ({"days_back": 366}, "days_back"),
        ({"query": "x", "limit": 101}, "limit"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "sort_by": "best"}, "sort_by"),
        ({"id": "x" * 201}, "id"),
        ({"query": "x", "conversation_id": "c" * 201}, "conversation_id"),
        ({"query": "x", "collections": ["secrets"]}, "collections"),
        ({"query": "x", "tenant": "tenant-b"}, "tenant"),
        ({}, "Provide at least one of: query, days_back"),
    ],
)
def test_search_input_limits(member, body, fragment):
    answer = post(member, "/api/search", body)
    assert answer.status_code == 422 and fragment in answer.json()["error"]


def test_search_endpoint_shapes_and_id_lookup(member):
    stored = api.memory_bank_store(caller=member.caller, content="User's timezone is CET", importance=0.9)
    ident = api.display_id(stored)
    by_query = post(member, "/api/search", {"query": "which timezone", "limit": 100}).json()
    by_id = post(member, "/api/search", {"id": ident}).json()
    by_days = post(member, "/api/search", {"days_back": 1, "sort_by": "recency"}).json()
    assert by_query["results"][0]["id"] == ident and "final_rank_score" in by_query["results"][0]
    assert by_id["results"][0]["importance"] == 0.9 and by_days["count"] == 1
    assert post(member, "/api/search", {"id": "patterns_000000000000"}).json() == {"count": 0, "results": []}


def test_ingest_json_and_raw_markdown_and_limits(member):
    markdown = "# Runbook\n\nDeploys go through make release.\n\n## Rollback\n\nUse make rollback on the build host."
    answer = post(member, "/api/ingest", {"title": "runbook", "content": markdown, "tags": ["ops"]})
    assert answer.status_code == 202 and answer.json()["chunks"] == 2
    raw = DjangoClient().post(
        "/api/ingest?title=notes",
        data="Plain text notes about the rollback procedure.",
        content_type="text/markdown",
        HTTP_AUTHORIZATION=f"Bearer {member.token}",
    )
    assert raw.status_code == 202
    chunks = Memory.objects.filter(collection="books").order_by("created_at")
    assert chunks.count() == 3 and {c.kind for c in chunks} == {"document"}
    # Embedded by the worker (eager in tests): semantic search finds them.
    assert all(c.embedding_status == "ready" for c in chunks)
    found = post(member, "/api/search", {"query": "how do I roll back", "collections": ["books"]}).json()
    assert "rollback" in found["results"][0]["content"]
    before = Memory.objects.count()
    big = DjangoClient().post(
        "/api/ingest?title=big",
        data="x",
        content_type="text/plain",
        HTTP_AUTHORIZATION=f"Bearer {member.token}",
        CONTENT_LENGTH=str(api.BOOK_MAX_BYTES + 1),
    )
    assert big.status_code == 413
    no_title = DjangoClient().post(
        "/api/ingest", data="text", content_type="text/plain", HTTP_AUTHORIZATION=f"Bearer {member.token}"
    )
    assert no_title.status_code == 422 and Memory.objects.count() == before


def test_hook_endpoints_are_tenant_isolated(member, outsider):
    api.memory_bank_store(caller=member.caller, content="Member's secret project is Falcon")
    post(member, "/api/ingest", {"title": "falcon", "content": "Falcon design notes"})
    post(member, "/api/hooks/get-context", {"query": "Falcon", "conversation_id": "s1"})
    post(member, "/api/hooks/stop", {"conversation_id": "s1", "user_message": "Falcon?", "assistant_response": "Yes."})
    theirs = post(outsider, "/api/hooks/get-context", {"query": "Falcon project", "conversation_id": "s1"}).json()
    assert theirs["user_facts"] == [] and theirs["relevant_memories"] == [] and theirs["scoring_required"] is False
    assert post(outsider, "/api/search", {"query": "Falcon", "limit": 100}).json()["count"] == 0
    assert post(outsider, "/api/search", {"days_back": 365}).json()["count"] == 0
    member_id = api.display_id(Memory.objects.filter(collection="memory_bank").get())
    assert post(outsider, "/api/search", {"id": member_id}).json()["count"] == 0
    stopped = post(outsider, "/api/hooks/stop", {"conversation_id": "s1", "assistant_response": "other"}).json()
    assert stopped["scoring_complete"] is True
    assert Exchange.objects.filter(tenant_id=outsider.caller.tenant_id).count() == 1
    assert Memory.objects.filter(tenant_id=outsider.caller.tenant_id).count() == 1


def test_get_context_answers_upstream_shape_and_scoring_prompt(member):
    fact = api.memory_bank_store(caller=member.caller, content="User deploys with make release", always_inject=True)
    first = post(member, "/api/hooks/get-context", {"query": "how to deploy", "conversation_id": "c"}).json()
    assert set(first) == {
        "formatted_injection",
        "user_facts",
        "relevant_memories",
        "context_summary",
        "scoring_required",
        "scoring_prompt",
        "scoring_prompt_simple",
        "context_only",
        "scoring_exchange",
        "scoring_memories",
    }
    fid = api.display_id(fact)
    assert first["scoring_required"] is False and first["scoring_exchange"] is None
    assert first["formatted_injection"].startswith("You have persistent memory about this user")
    assert "you DO remember.\n\n═══ KNOWN CONTEXT ═══\n• " in first["formatted_injection"]
    assert f"• User deploys with make release [id:{fid}] (0m, memory_bank)" in first["formatted_injection"]
    post(member, "/api/hooks/stop", {"conversation_id": "c", "user_message": "how?", "assistant_response": "make"})
    second = post(member, "/api/hooks/get-context", {"query": "thanks", "conversation_id": "c"}).json()
    assert second["scoring_required"] is True and second["context_only"].startswith("You have persistent memory")
    assert second["scoring_exchange"] == {"user": "how to deploy", "assistant": "make"}
    assert second["scoring_memories"] == [
        {"id": fid, "content": "User deploys with make release", "content_hint": "User deploys with make release"}
    ]
    prompt = second["scoring_prompt"]
    assert prompt.startswith("<roampal-score-required>\nScore the previous exchange before responding.")
    assert f'"{fid}": "___"' in prompt and "how to deploy" not in prompt and "make release" not in prompt
    assert second["formatted_injection"].startswith(prompt)
    assert second["scoring_prompt_simple"].startswith(
        "<roampal-score-required>\nScore the memories listed in SCORING REFERENCE above."
    )
    long = api.memory_bank_store(caller=member.caller, content="A" * 40, always_inject=True)
    hint = api.collection_ids(member.caller, [api.display_id(long)])
    from mcp_server.dialects.roampal.texts import content_hint

    assert content_hint(next(iter(hint.values())).content) == "A" * 30 + "..."


# --- The Claude Code hook commands, against a live server ------------------------------------------


def run_hook(base: str, token: str, command: str, event: dict) -> str:
    proc = subprocess.run(
        [sys.executable, str(HOOK), command],
        input=json.dumps(event).encode(),
        env={"MEMPROJ_URL": base, "MEMPROJ_TOKEN": token, "MEMPROJ_HOOK_TIMEOUT": "120", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        timeout=60,
    )
    # A hook never fails the session (exit 0); a healthy call says nothing on stderr either.
    assert proc.returncode == 0 and not proc.stderr, proc.stderr.decode()
    return proc.stdout.decode()


def write_transcript(path: Path, turns: list[tuple[str, str]]) -> None:
    lines = []
    for user, assistant in turns:
        lines.append({"type": "user", "message": {"role": "user", "content": user}})
        lines.append(
            {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": assistant}]}}
        )
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


async def score_over_http(base: str, token: str, **arguments) -> dict:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http, Client(streamable_http_client(f"{base}/mcp/roampal/", http_client=http)) as client:
        return await call(client, "score_response", **arguments)


async def test_five_turn_session_through_the_claude_code_hooks(http_server, member, tmp_path):  # noqa: F811
    from asgiref.sync import sync_to_async

    base, token = http_server, member.token
    seeded = await sync_to_async(api.working_store)(
        caller=member.caller, content="Deploys go through make release on the build host", outcome_score=0.7
    )
    wid = await sync_to_async(api.display_id)(seeded)
    transcript = tmp_path / "session.jsonl"
    session = {"session_id": "3f1c9a2e-claude-session", "transcript_path": str(transcript), "cwd": str(tmp_path)}
    turns: list[tuple[str, str]] = []

    def prompt(text: str) -> str:
        return run_hook(
            base, token, "user-prompt-submit", {**session, "hook_event_name": "UserPromptSubmit", "prompt": text}
        )

    def answer(user: str, text: str, active: bool = False) -> str:
        if not active:
            turns.append((user, text))
            write_transcript(transcript, turns)
        return run_hook(base, token, "stop", {**session, "hook_event_name": "Stop", "stop_hook_active": active})

    # Turn 1: the memory is injected with its id; nothing to score yet.
    injected = await sync_to_async(prompt)("How do I deploy the service?")
    assert injected.startswith("You have persistent memory") and f"[id:{wid}] (" in injected
    assert "<roampal-score-required>" not in injected
    assert await sync_to_async(answer)("How do I deploy the service?", "Run make release on the build host.") == ""

    # Turn 2: the prompt asks for scores by id; the model scores the memory "worked".
    injected = await sync_to_async(prompt)("Thanks, that worked. How about staging?")
    assert injected.startswith("<roampal-score-required>") and f'"{wid}": "___"' in injected
    scored = await score_over_http(base, token, outcome="worked", memory_scores={wid: "worked"})
    assert scored["updated"] == 2  # the memory, and the stored exchange of turn 1
    assert (
        await sync_to_async(answer)("Thanks, that worked. How about staging?", "Staging deploys use make release too.")
        == ""
    )
    row = await Memory.objects.aget(pk=seeded.pk)
    assert (row.collection, row.applied_count, round(row.outcome_score, 4)) == ("working", 1, 0.9)

    # Turn 3: scored "worked" again -> score 1.0 with 2 uses: promoted to history.
    injected = await sync_to_async(prompt)("Great. Does deploy need a tag first?")
    assert f'"{wid}": "___"' in injected
    await score_over_http(base, token, outcome="worked", memory_scores={wid: "worked"})
    row = await Memory.objects.aget(pk=seeded.pk)
    assert (row.collection, row.kind, row.applied_count) == ("history", "episode", 0)
    await sync_to_async(answer)("Great. Does deploy need a tag first?", "Yes, tag the release before make release.")

    # Turn 4: the moved memory is injected as history under its new prefix. The
    # model does not score: the Stop hook blocks once and asks for the scores.
    injected = await sync_to_async(prompt)("ok, what about deploy rollbacks?")
    hid = "history_" + seeded.id.hex[:12]
    assert f"[id:{hid}] (" in injected and "history)" in injected
    blocked = await sync_to_async(answer)("ok, what about deploy rollbacks?", "Use make rollback.")
    assert json.loads(blocked)["decision"] == "block" and "score_response" in json.loads(blocked)["reason"]
    await score_over_http(base, token, outcome="partial", memory_scores={hid: "failed"})
    assert await sync_to_async(answer)("", "", active=True) == ""  # stop_hook_active: no second record

    # Turn 5: the failed score shows in the injection's data; the lifecycle demoted nothing yet.
    injected = await sync_to_async(prompt)("Which host do deploys with make release run on?")
    row = await Memory.objects.aget(pk=seeded.pk)
    assert (row.collection, row.applied_count, round(row.outcome_score, 4)) == ("history", 1, 0.7)
    # Score 0.7 after one failed use: Wilson 0, not proven.
    assert re.search(rf"\[id:{hid}\] \(\d+m, history\)", injected)
    exchanges = [e async for e in Exchange.objects.filter(tenant_id=member.caller.tenant_id).order_by("id")]
    assert len(exchanges) == 5 and [e.scored_at is not None for e in exchanges] == [True, True, True, False, False]
    assert exchanges[0].transcript.count("\n") >= 1


def test_ingest_limit_holds_on_the_live_asgi_app(http_server, member):  # noqa: F811
    headers = {"Authorization": f"Bearer {member.token}", "Content-Type": "text/plain"}
    declared = httpx.post(
        f"{http_server}/api/ingest?title=big",
        content=b"x" * (api.BOOK_MAX_BYTES + 70 * 1024),
        headers=headers,
        timeout=60,
    )
    assert declared.status_code == 413

    def chunked():
        for _ in range(12):
            yield b"y" * (1024 * 1024)

    streamed = httpx.post(f"{http_server}/api/ingest?title=big", content=chunked(), headers=headers, timeout=60)
    assert streamed.status_code == 413
    small = httpx.post(f"{http_server}/api/ingest?title=small", content=b"A short note.", headers=headers, timeout=60)
    assert small.status_code == 202
    assert Memory.objects.filter(collection="books").count() == 1
