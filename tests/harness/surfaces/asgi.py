"""httpx's in-process transport over one of the service's ASGI apps. Light on
purpose (no Django import): test modules that spawn processes import it too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx


def asgi_transport(app: Callable[..., Awaitable[None]], **options: Any) -> httpx.ASGITransport:
    """The apps annotate scope and messages as the dicts servers pass; httpx
    declares MutableMapping, which a dict-typed app does not match."""
    return httpx.ASGITransport(app=app, **options)
