"""The project's system checks (``manage.py check``; the web process logs the
same warnings when it starts, since uvicorn runs no checks)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register

PUBLIC_SECRET_KEY = Warning(
    "DJANGO_SECRET_KEY is the former public default (memproj-dev-insecure-change-me): anyone who can reach the "
    "admin can forge a login signed with it.",
    hint="Remove it (an old .env file may still set it) to have a key generated for this install, or set a long "
    "random value (python -c 'import secrets; print(secrets.token_urlsafe(50))').",
    id="memproj.W001",
)


@register(Tags.security)
def secret_key_check(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    return [PUBLIC_SECRET_KEY] if settings.SECRET_KEY == settings.INSECURE_SECRET_KEY else []
