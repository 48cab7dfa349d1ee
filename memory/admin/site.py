"""The admin site speaks as memproj, not as a generic Django site."""

from django.contrib import admin

from policy.loginlock import AdminLoginForm

admin.site.site_header = "memproj administration"
admin.site.site_title = "memproj admin"
admin.site.index_title = "Memories, tenants and access"
# Nothing is served at "/" (the service answers MCP and API clients), so no
# "View site" link: the header's "Dashboard" link (templates/admin/base_site.html)
# leads to the per-tenant dashboards instead.
admin.site.site_url = None  # type: ignore[assignment]
# A login locked after too many failures says so (policy/loginlock.py).
admin.site.login_form = AdminLoginForm
