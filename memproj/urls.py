from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path, re_path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

import memproj
from mcp_server.http import coded_error, retry_later
from mcp_server.registry import TOOLSETS, dialect_urlpatterns
from mcp_server.rest import tool_call
from memory.admin.dashboard import dashboard, dashboard_index
from memproj.readiness import DATABASE_BOUND_SECONDS, readiness_checks, unready_because
from policy.models import ApiToken


@csrf_exempt  # no session, no state: a write is answered 405, not a CSRF page
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers. It touches no dependency, so a database
    outage does not get the process restarted; ``readyz`` takes it out of rotation."""
    return JsonResponse({"status": "ok"})


@csrf_exempt  # no session, no state: a write is answered 405, not a CSRF page
@require_safe
async def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness, for a load balancer's health check: 200 while the database
    answers, else a retryable 503 naming the dependency that failed
    (``memproj.readiness``). Async, so a probe holds no request thread."""
    checks = await readiness_checks()
    failed = unready_because(checks)
    if not failed:
        return JsonResponse({"status": "ready", "checks": checks})
    message = (
        f"not ready: {', '.join(failed)} did not answer within {DATABASE_BOUND_SECONDS:g} s; "
        "this process is out of rotation until it does."
    )
    return retry_later(coded_error(request, "STORAGE_ERROR", message, 503, {"failed": failed, "checks": checks}))


@csrf_exempt  # no session, no state: a write is answered 405, not a CSRF page
@require_safe
def service_index(request: HttpRequest) -> JsonResponse:
    """What a person or a client opening the server's root finds: where each
    surface is, so ``curl http://127.0.0.1:8000/`` answers instead of a 404."""
    public_url = settings.MEMPROJ_PUBLIC_URL.rstrip("/")
    return JsonResponse(
        {
            "service": "memproj",
            "version": memproj.__version__,
            "mcp": {name: f"{public_url}/mcp/{name}/" for name in sorted(TOOLSETS)},
            "http_tools": f"{public_url}/api/<toolset>/<tool>",
            "admin": f"{public_url}/admin/",
            "health": f"{public_url}/healthz",
            "readiness": f"{public_url}/readyz",
            "authorization": "Bearer token from `manage.py issue_token` or the admin's API tokens",
        }
    )


@csrf_exempt  # no session, no state: a write is answered 405, not a CSRF page
@require_safe
def protected_resource_metadata(request: HttpRequest, toolset: str) -> HttpResponse:
    """OAuth 2.0 Protected Resource Metadata (RFC 9728) for /mcp/<toolset>: the
    document the ``resource_metadata`` URL of the MCP endpoints' 401
    ``WWW-Authenticate`` header points to (the SDK builds that URL as
    /.well-known/oauth-protected-resource + the resource path). memproj's bearer
    tokens are issued by ``manage.py issue_token`` or the admin, not by an OAuth
    authorization server, so the document names none."""
    if toolset not in TOOLSETS:
        # Coded JSON naming the toolsets, also under DEBUG (whose 404 is an HTML page).
        message = f"no MCP toolset {toolset[:100]!r}; the toolsets are {', '.join(sorted(TOOLSETS))}."
        return coded_error(request, "NOT_FOUND", message, 404, {"toolsets": sorted(TOOLSETS)})
    public_url = settings.MEMPROJ_PUBLIC_URL.rstrip("/")
    response = JsonResponse(
        {
            "resource": f"{public_url}/mcp/{toolset}",
            "resource_name": f"memproj memory service, {toolset} dialect",
            "bearer_methods_supported": ["header"],
            "scopes_supported": [*ApiToken.Scope.values, *(f"toolset:{name}" for name in sorted(TOOLSETS))],
        }
    )
    # Public metadata, fetched by browser-based MCP clients too (RFC 9728 section 3).
    response["Access-Control-Allow-Origin"] = "*"
    return response


urlpatterns = [
    path("", service_index, name="service_index"),
    # The review dashboard lives under /admin/ and uses the admin's login.
    path("admin/dashboard/", admin.site.admin_view(dashboard_index), name="memproj_dashboard_index"),
    path("admin/dashboard/<slug:slug>/", admin.site.admin_view(dashboard), name="memproj_dashboard"),
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("readyz", readyz),
    # The dialects' own routes (roampal's hook server, langmem's LangGraph store),
    # before the generic tool route, which would otherwise take /api/hooks/<name>.
    *dialect_urlpatterns(),
    path("api/<slug:toolset>/<str:tool>", tool_call, name="tool_call"),
    re_path(
        r"^\.well-known/oauth-protected-resource/mcp/(?P<toolset>[A-Za-z0-9_.-]+)/?$",
        protected_resource_metadata,
        name="oauth_protected_resource",
    ),
]

# Clients get a coded JSON error, never Django's HTML page, on every path but
# the admin's, which keeps Django's pages (with mcp_server.http.coded_errors,
# the middleware that codes Django's bare answers such as require_safe's 405).
handler400 = "mcp_server.http.bad_request"
handler403 = "mcp_server.http.permission_denied"
handler404 = "mcp_server.http.not_found"
handler500 = "mcp_server.http.server_error"
