"""What the plain HTTP tool route (``POST /api/<toolset>/<tool>``) does per
request besides the tool, through the service's ASGI router: Django's
middleware runs on the event loop outside the admin, with the same answer
headers; the admin keeps Django's worker-thread hops."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware

from tests.harness.surfaces.asgi import asgi_transport

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = "/api/memory/memory_search"
# What Django's middleware adds to an answer of the tool route.
MIDDLEWARE_HEADERS = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}


async def _posts(identity: Any, count: int) -> list[httpx.Response]:
    from memproj.asgi import Router

    headers = {"Authorization": f"Bearer {identity.token}"}
    async with httpx.AsyncClient(transport=asgi_transport(Router()), base_url="http://testserver") as client:
        return [await client.post(SEARCH, json={"query": f"deploy {i}"}, headers=headers) for i in range(count)]


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
    for name, value in MIDDLEWARE_HEADERS.items():
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
    for name, value in MIDDLEWARE_HEADERS.items():
        assert page.headers.get(name) == value, name
    assert set(seen) == {"process_request", "process_view", "process_response"}
    assert all(threading.get_ident() not in threads for threads in seen.values())
