"""One ASGI app: Django (admin, health) plus the MCP streamable-HTTP endpoints
at /mcp/<toolset>/ for every dialect. Django has no lifespan support, so this
router owns the lifespan and runs each MCP session manager inside it."""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memproj.settings.base")
django.setup()

from memproj.embedded import ensure_for_settings  # noqa: E402

ensure_for_settings()  # the web process needs the database and the broker

from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from mcp.server.transport_security import TransportSecuritySettings  # noqa: E402

from mcp_server.server import build_server  # noqa: E402
from mcp_server.toolsets import TOOLSETS  # noqa: E402
from memory.embeddings import warm_up  # noqa: E402

Scope = dict[str, Any]


class Router:
    def __init__(self) -> None:
        self.django = ASGIStaticFilesHandler(get_asgi_application())
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=settings.MEMPROJ_MCP_ALLOWED_HOSTS,
            allowed_origins=[f"http://{h}" for h in settings.MEMPROJ_MCP_ALLOWED_HOSTS]
            + [f"https://{h}" for h in settings.MEMPROJ_MCP_ALLOWED_HOSTS],
        )
        self.servers = {name: build_server(name, http=True) for name in TOOLSETS}
        # Stateless JSON responses: any web process can answer any request, so
        # the HTTP tier scales out behind a plain load balancer.
        self.mcp_apps = {
            name: server.streamable_http_app(
                streamable_http_path=f"/mcp/{name}",
                stateless_http=True,
                json_response=True,
                transport_security=security,
            )
            for name, server in self.servers.items()
        }

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        path: str = scope.get("path", "")
        if path.startswith("/mcp/"):
            name = path[len("/mcp/") :].strip("/")
            app = self.mcp_apps.get(name)
            if app is not None:
                await app(dict(scope, path=f"/mcp/{name}", raw_path=f"/mcp/{name}".encode()), receive, send)
                return
        await self.django(scope, receive, send)

    async def _lifespan(self, receive: Any, send: Any) -> None:
        async with AsyncExitStack() as stack:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for server in self.servers.values():
                    await stack.enter_async_context(server.session_manager.run())
                warm_up()
                await send({"type": "lifespan.startup.complete"})
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await stack.aclose()
                await send({"type": "lifespan.shutdown.complete"})


application = Router()
