"""Every answer the server writes itself outside the admin is coded JSON, never
Django's bare HTML or empty pages: a wrong method on any route of the URL
configuration (405 with ``Allow``), an unknown path (404), an unreadable
request (400) and an unexpected failure (500), also under DEBUG. The routes
come from the URL configuration itself, so a route added later is covered
without touching this file. The admin, a browser UI, keeps Django's pages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseServerError
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver, path, resolve
from django.utils.regex_helper import normalize

import memproj.urls
from mcp_server.http import ADMIN_PREFIX, coded_answer, not_found, server_error
from mcp_server.registry import TOOLSETS

if TYPE_CHECKING:
    # What the test client answers with (a stub-only name): a response plus the client's additions.
    from django.test.client import _MonkeyPatchedWSGIResponse as Answer

pytestmark = pytest.mark.django_db

# A value for each URL parameter a route names; any other parameter gets "x".
SAMPLES = {"toolset": sorted(TOOLSETS)[0]}
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# The dialects' HTTP surfaces, each with its own error body (docs/connecting.md);
# every other route answers the plain {"error": {"code", "message", "details"}}.
DIALECT_PREFIX = "/api/"


def _walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, URLPattern]]:
    for entry in patterns:
        regex = prefix + entry.pattern.regex.pattern.removeprefix("^")
        if isinstance(entry, URLResolver):
            if not ("/" + regex).startswith(ADMIN_PREFIX):
                yield from _walk(entry.url_patterns, regex)
        else:
            yield regex, entry


def served_routes() -> list[str]:
    """A concrete path for every route of the URL configuration but the admin's."""
    routes = []
    for regex, entry in _walk(get_resolver().url_patterns, ""):
        template, params = normalize("^" + regex)[0]
        route = "/" + template % {name: SAMPLES.get(name, "x") for name in params}
        if route.startswith(ADMIN_PREFIX):
            continue
        # A parameter whose sample the route refuses: add one to SAMPLES.
        assert resolve(route).func is entry.callback, (regex, route)
        routes.append(route)
    return routes


ROUTES = served_routes()


def _answers(client: Client, route: str) -> dict[str, Answer]:
    return {method: client.generic(method, route) for method in METHODS}


def _plain_error(response: HttpResponse | Answer) -> dict[str, Any]:
    """The body of a coded error on a route that belongs to no dialect."""
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    body = json.loads(response.content)
    assert set(body) == {"error", "request_id"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


def test_the_walk_finds_the_plain_routes():
    # The walk itself works: the routes the brief names are among the ones it found.
    first = SAMPLES["toolset"]
    assert {"/", "/healthz", f"/.well-known/oauth-protected-resource/mcp/{first}"} <= set(ROUTES)
    assert any(route.startswith(DIALECT_PREFIX) for route in ROUTES)


@pytest.mark.parametrize("route", ROUTES)
def test_a_wrong_method_is_a_coded_405_with_allow(client, route):
    answers = _answers(client, route)
    refused = {method: answer for method, answer in answers.items() if answer.status_code == 405}
    assert refused, f"{route} answers every method: {sorted(answers)}"
    for method, answer in refused.items():
        allow = answer.get("Allow", "")
        allowed = [name.strip() for name in allow.split(",") if name.strip()]
        assert allowed and method not in allowed, (route, method, allow)
        assert answer["Content-Type"].startswith("application/json"), (route, method)
        if route.startswith(DIALECT_PREFIX):
            continue  # the dialect's own body; test_every_answer_is_json checks it names a code
        error = _plain_error(answer)
        assert error["code"] == "METHOD_NOT_ALLOWED", (route, method)
        assert error["details"] == {"allow": allow}
        assert method in error["message"] and all(name in error["message"] for name in allowed), error


@pytest.mark.parametrize("route", ROUTES)
def test_every_answer_is_json(client, route):
    """Fails if a route (or Django in front of it) answers HTML or an empty body."""
    for method, answer in _answers(client, route).items():
        assert answer["Content-Type"].startswith("application/json"), (route, method, answer.content[:200])
        body = json.loads(answer.content)
        if answer.status_code >= 400:
            error = body.get("error")
            code = error.get("code") if isinstance(error, dict) else body.get("code")
            assert isinstance(code, str) and code, (route, method, body)
        assert b"<html" not in answer.content.lower() and b"Traceback" not in answer.content


UNKNOWN = ["/no/such/path", "/healthz/", "/.well-known/nothing", "/api/no/such/route", "/static-ish"]


@pytest.mark.parametrize("debug", [False, True])
def test_an_unknown_path_is_a_coded_404(client, settings, debug):
    # Under DEBUG Django writes its HTML debug page instead of calling handler404.
    settings.DEBUG = debug
    for route in UNKNOWN:
        answer = client.get(route)
        assert answer.status_code == 404, route
        error = _plain_error(answer)
        assert error["code"] == "NOT_FOUND" and route in error["message"], error


@pytest.mark.parametrize("debug", [False, True])
def test_an_unreadable_request_is_a_coded_400(client, settings, debug):
    settings.DEBUG = debug
    answer = client.get("/healthz", HTTP_HOST="not-an-allowed-host.example")
    assert answer.status_code == 400
    assert _plain_error(answer)["code"] == "INVALID_ARGUMENT"


def _boom(request: HttpRequest) -> HttpResponse:
    raise ValueError("an unforeseen failure with a secret in it")


def _database_gone(request: HttpRequest) -> HttpResponse:
    raise OperationalError("connection refused")


# The project's URL configuration plus two views that fail, for the 500 tests.
urlpatterns = [*memproj.urls.urlpatterns, path("boom", _boom), path("database-gone", _database_gone)]
handler400 = memproj.urls.handler400
handler403 = memproj.urls.handler403
handler404 = memproj.urls.handler404
handler500 = memproj.urls.handler500


@pytest.mark.urls(__name__)
@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_failure_is_a_coded_500_without_its_traceback(settings, debug):
    # Under DEBUG Django writes its technical 500 page, traceback and all.
    settings.DEBUG = debug
    client = Client(raise_request_exception=False)
    answer = client.get("/boom")
    assert answer.status_code == 500
    assert _plain_error(answer)["code"] == "INTERNAL"
    assert b"secret" not in answer.content and b"Traceback" not in answer.content


@pytest.mark.urls(__name__)
def test_a_database_failure_is_a_coded_503_with_retry_after():
    answer = Client(raise_request_exception=False).get("/database-gone")
    assert answer.status_code == 503 and answer["Retry-After"] == "5"
    assert _plain_error(answer)["code"] == "STORAGE_ERROR"


def test_the_admin_keeps_django_pages():
    factory = RequestFactory()
    page = not_found(factory.get(f"{ADMIN_PREFIX}no-such-page/"), Http404())
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
    failure = server_error(factory.get(f"{ADMIN_PREFIX}policy/"))
    assert failure.status_code == 500 and failure["Content-Type"].startswith("text/html")
    # The admin's logout takes POST only: its bare 405 stays as Django wrote it.
    logout = HttpResponseNotAllowed(["POST", "OPTIONS"])
    assert coded_answer(factory.get(f"{ADMIN_PREFIX}logout/"), logout).content == b""
    # Outside the admin the same answers are coded.
    assert json.loads(coded_answer(factory.get("/x"), HttpResponseNotAllowed(["POST"])).content)["error"]["code"] == (
        "METHOD_NOT_ALLOWED"
    )
    html = HttpResponseServerError("<html><body>Traceback ...</body></html>")
    assert _plain_error(coded_answer(factory.get("/x"), html))["code"] == "INTERNAL"
