from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import path

from mcp_server.rest import tool_call
from memory.admin.dashboard import dashboard, dashboard_index


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [
    # The review dashboard lives under /admin/ and uses the admin's login.
    path("admin/dashboard/", admin.site.admin_view(dashboard_index), name="memproj_dashboard_index"),
    path("admin/dashboard/<slug:slug>/", admin.site.admin_view(dashboard), name="memproj_dashboard"),
    path("admin/", admin.site.urls),
    path("healthz", healthz),
    path("api/<slug:toolset>/<str:tool>", tool_call, name="tool_call"),
]
