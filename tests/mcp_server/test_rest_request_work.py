"""What the plain HTTP tool route (``POST /api/<toolset>/<tool>``) does per
request besides the tool, through the service's ASGI router: a token verified
a moment ago is taken from the token cache the MCP endpoints use, and Django's
middleware runs on the event loop outside the admin, with the same answer
headers; the admin keeps Django's worker-thread hops."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware

from policy.models import ApiToken
from policy.services import tokens
from policy.tokencache import token_cache_clear
from tests.conftest import Identity
from tests.harness.surfaces.answers import SECURITY_HEADERS
from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = "/api/memory/memory_search"


async def _posts(identity: Any, count: int) -> list[httpx.Response]:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {identity.token}"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return [await client.post(SEARCH, json={"query": f"deploy {i}"}, headers=headers) for i in range(count)]


def _count_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tokens looked up in the database from now on, in order."""
    looked_up: list[str] = []
    lookup = tokens._authenticate

    def counted(token: str) -> Any:
        looked_up.append(token)
        return lookup(token)

    token_cache_clear()
    monkeypatch.setattr(tokens, "_authenticate", counted)
    return looked_up


async def test_the_rest_route_verifies_a_token_once_per_cache_window(member, monkeypatch):
    """Three calls with one token read the token's row once, as over MCP; each is answered."""
    looked_up = _count_lookups(monkeypatch)
    answers = await _posts(member, 3)
    assert [a.status_code for a in answers] == [200, 200, 200], answers[-1].text
    assert looked_up == [member.token]


async def test_a_refused_token_is_looked_up_each_time_and_told_so(member, monkeypatch):
    """Unknown tokens are never cached: each call looks it up and is refused with the refused-token challenge."""
    looked_up = _count_lookups(monkeypatch)
    stranger = Identity(member.token[:-4] + "zzzz", member.caller)
    answers = await _posts(stranger, 2)
    assert [a.status_code for a in answers] == [401, 401]
    assert all('error="invalid_token"' in a.headers["www-authenticate"] for a in answers)
    assert looked_up == [stranger.token] * 2


async def test_a_revoked_token_is_refused_at_once_though_it_was_just_verified(member):
    """The cache never outlives a revocation: the call right after it is refused."""
    token_cache_clear()
    [served] = await _posts(member, 1)
    assert served.status_code == 200, served.text
    await sync_to_async(tokens.token_revoke)(ApiToken.objects.filter(id=member.caller.token_id))
    [refused] = await _posts(member, 1)
    assert refused.status_code == 401
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]


def _record_threads(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[int]]:
    """The threads Django's middleware methods run in, by method."""
    seen: dict[str, set[int]] = {}
    for cls, name in (
        (SecurityMiddleware, "process_request"),
        (CsrfViewMiddleware, "process_view"),
        (XFrameOptionsMiddleware, "process_response"),
    ):
        original = getattr(cls, name)

        def recorded(self: Any, *args: Any, _original: Any = original, _name: str = name) -> Any:
            seen.setdefault(_name, set()).add(threading.get_ident())
            return _original(self, *args)

        monkeypatch.setattr(cls, name, recorded)
    return seen


async def test_django_middleware_runs_on_the_event_loop_outside_the_admin(member, monkeypatch):
    """The tool route's answer carries every header Django's middleware adds,
    and no middleware method left the event loop's thread for it."""
    seen = _record_threads(monkeypatch)
    [answer] = await _posts(member, 1)
    assert answer.status_code == 200, answer.text
    for name, value in SECURITY_HEADERS.items():
        assert answer.headers.get(name) == value, name
    assert int(answer.headers["content-length"]) == len(answer.content)
    assert seen == {name: {threading.get_ident()} for name in ("process_request", "process_view", "process_response")}


async def test_the_admin_keeps_djangos_thread_hops(db, monkeypatch):
    """The admin's pages (sessions, the user, CSRF) still run the middleware in
    Django's request thread, and its login page answers with the same headers."""
    from memproj.asgi import Router

    seen = _record_threads(monkeypatch)
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        page = await client.get("/admin/login/")
    assert page.status_code == 200
    assert "csrftoken" in page.cookies
    for name, value in SECURITY_HEADERS.items():
        assert page.headers.get(name) == value, name
    assert set(seen) == {"process_request", "process_view", "process_response"}
    assert all(threading.get_ident() not in threads for threads in seen.values())
