"""The HTTP surfaces beside MCP, called in-process through Django's test client:
the REST route, roampal's hooks, the langmem store and the admin."""

from __future__ import annotations

import contextlib
import json
import random
import time
from typing import Any

from tests.harness.generators.arguments import WORDS, Generator
from tests.harness.surfaces.answers import Answer, error_code
from tests.harness.surfaces.in_process import InProcessClients

SURFACES = ("rest", "hooks", "langmem store", "admin")
# The surfaces that take a request body, where a tenant selector can be sent.
SELECTOR_SURFACES = ("rest", "hooks", "langmem store")
HOOK_PATHS = ("/api/hooks/get-context", "/api/hooks/stop", "/api/search", "/api/ingest")
ROAMPAL_COLLECTIONS = ["books", "working", "history", "patterns", "memory_bank"]
ADMIN_ACTIONS = ("list", "search", "change", "review", "bulk", "export", "events", "conflicts", "dashboard")


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
