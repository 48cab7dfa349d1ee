"""Bearer-token verification for the HTTP transport and caller resolution for
every transport. The tenant always comes from the token, never from arguments."""

from __future__ import annotations

import uuid
from dataclasses import replace

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from policy.caller import Caller
from policy.errors import PermissionDenied
from policy.services.tokens import token_authenticate_cached, token_cached_caller


def _authenticate_in_thread(token: str) -> Caller | None:
    close_old_connections()
    try:
        return token_authenticate_cached(token)
    finally:
        close_old_connections()


async def verified_caller(token: str) -> Caller | None:
    """The caller a bearer token stands for, or None if it is refused: every
    transport's one check. A token verified within the token cache's window
    needs no worker thread and no query (policy/tokencache.py)."""
    caller = token_cached_caller(token)
    if caller is None:
        caller = await sync_to_async(_authenticate_in_thread, thread_sensitive=False)(token)
    return caller


class MemprojTokenVerifier:
    """mcp TokenVerifier: our hashed API tokens, with the resolved caller kept in claims."""

    async def verify_token(self, token: str) -> AccessToken | None:
        caller = await verified_caller(token)
        if caller is None:
            return None
        return AccessToken(
            token=token,
            client_id=str(caller.principal_id),
            scopes=sorted(caller.scopes),
            subject=str(caller.principal_id),
            # The token's id travels on to the caller: audit events name the token of the call.
            claims={
                "tenant_id": str(caller.tenant_id),
                "role": caller.role,
                "token_id": str(caller.token_id) if caller.token_id else "",
            },
        )


def _caller_from_access_token(access: AccessToken) -> Caller:
    claims = access.claims or {}
    return Caller(
        tenant_id=uuid.UUID(claims["tenant_id"]),
        principal_id=uuid.UUID(access.client_id),
        role=claims.get("role", "member"),
        scopes=frozenset(access.scopes),
        token_id=uuid.UUID(claims["token_id"]) if claims.get("token_id") else None,
    )


def current_caller(*, static_caller: Caller | None, toolset: str) -> Caller:
    """HTTP: the caller behind this request's bearer token. stdio / in-process:
    the caller of the token the server was started with."""
    access = get_access_token()
    # A copy of the static caller per call: its tenant policy (Caller.policy) is
    # then resolved per request, so a long-lived stdio server sees a new policy.
    caller = _caller_from_access_token(access) if access is not None else (static_caller and replace(static_caller))
    if caller is None:
        raise PermissionDenied("no credentials: send Authorization: Bearer <token> (or set MEMPROJ_TOKEN for stdio).")
    if not caller.may_use_toolset(toolset):
        raise PermissionDenied(f"this token is not allowed to use the {toolset!r} toolset.")
    return caller
