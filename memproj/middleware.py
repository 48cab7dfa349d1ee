"""Django's middleware, served on the event loop outside the admin.

Under ASGI, Django runs each method of a ``MiddlewareMixin`` middleware
(``process_request``, ``process_response``, ``process_view``) through
``sync_to_async``: a hop to a thread that Django starts for the request and
back, twice per middleware, because such a method may read the database (the
session's save, the user's look-up). Outside the admin none of them does: no
other route reads the session, the user or the messages, and CSRF checks the
cookie, not the session. There the same methods run where the request already
is, on the event loop; on the admin's paths they keep Django's hops. What a
response carries (the security headers, X-Frame-Options, Content-Length,
cookies) is unchanged: the same methods run, in the same order, only without
the hops. Under WSGI (and Django's test client) nothing changes at all."""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.auth.middleware import AuthenticationMiddleware as _Authentication
from django.contrib.messages.middleware import MessageMiddleware as _Messages
from django.contrib.sessions.middleware import SessionMiddleware as _Sessions
from django.http import HttpRequest, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrameOptions
from django.middleware.common import CommonMiddleware as _Common
from django.middleware.csrf import CsrfViewMiddleware as _Csrf
from django.middleware.security import SecurityMiddleware as _Security

from mcp_server.http import coded_path as on_the_loop


class OnTheLoop:
    """Mixed into a Django ``MiddlewareMixin`` middleware: in async mode, its
    methods run on the event loop for every path but the admin's."""

    async_mode: bool

    def __init__(self, get_response: Any) -> None:
        super().__init__(get_response)  # type: ignore[call-arg]
        if self.async_mode and hasattr(self, "process_view"):
            # Django adapts a sync process_view with a thread hop of its own
            # (BaseHandler.adapt_method_mode); an async one it awaits as it is.
            sync_view = getattr(self, "process_view")  # noqa: B009 - the base class's, which mypy cannot type here

            async def process_view(request: HttpRequest, view: Any, args: Any, kwargs: Any) -> HttpResponse | None:
                if on_the_loop(request):
                    return sync_view(request, view, args, kwargs)  # type: ignore[no-any-return]
                return await sync_to_async(sync_view, thread_sensitive=True)(request, view, args, kwargs)  # type: ignore[no-any-return]

            setattr(self, "process_view", process_view)  # noqa: B010 - the instance's, in async mode only

    async def __acall__(self, request: HttpRequest) -> HttpResponse:
        if not on_the_loop(request):
            return await super().__acall__(request)  # type: ignore[misc, no-any-return]
        response = None
        if hasattr(self, "process_request"):
            response = self.process_request(request)
        response = response or await self.get_response(request)  # type: ignore[attr-defined]
        if hasattr(self, "process_response"):
            response = self.process_response(request, response)
        return response  # type: ignore[no-any-return]


class SecurityMiddleware(OnTheLoop, _Security):
    pass


class SessionMiddleware(OnTheLoop, _Sessions):
    pass


class CommonMiddleware(OnTheLoop, _Common):
    pass


class CsrfViewMiddleware(OnTheLoop, _Csrf):
    pass


class AuthenticationMiddleware(OnTheLoop, _Authentication):
    pass


class MessageMiddleware(OnTheLoop, _Messages):
    pass


class XFrameOptionsMiddleware(OnTheLoop, _XFrameOptions):
    pass
