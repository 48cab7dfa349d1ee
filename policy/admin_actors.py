"""Who an audit row names, in words: a principal's name, with the admin login
linked to it when that is another name, and the API token of its call by its
prefix, name and whether it is revoked. Both audit logs' admin pages (memory
events, policy events) show actors and tokens this way instead of UUIDs."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from policy.models import ApiToken, Principal


def principal_label(principal: Principal) -> str:
    login = principal.user.get_username() if principal.user else ""
    return principal.name if not login or login == principal.name else f"{principal.name} (login {login})"


def principal_labels(principal_ids: Iterable[uuid.UUID | None]) -> dict[uuid.UUID, str]:
    """The labels of these principals, in one query; a deleted one is missing."""
    wanted = {pk for pk in principal_ids if pk is not None}
    if not wanted:
        return {}
    principals = Principal.objects.filter(pk__in=wanted).select_related("user").only("id", "name", "user")
    return {principal.pk: principal_label(principal) for principal in principals}


def missing_principal_label(principal_id: uuid.UUID) -> str:
    return f"deleted principal {str(principal_id)[:8]}"


def token_label(token: ApiToken) -> str:
    """A token in words: its prefix (which identifies it and reveals nothing
    usable), its name, and whether it is revoked."""
    name = f" {token.name}" if token.name else ""
    revoked = " (revoked)" if token.revoked_at else ""
    return f"{token.prefix}…{name}{revoked}"


def missing_token_label(token_id: uuid.UUID) -> str:
    return f"deleted token {str(token_id)[:8]}"


def token_labels(token_ids: Iterable[uuid.UUID | None]) -> dict[uuid.UUID, str]:
    """The labels of these tokens, in one query; a deleted one is missing."""
    wanted = {pk for pk in token_ids if pk is not None}
    if not wanted:
        return {}
    tokens = ApiToken.objects.filter(pk__in=wanted).only("id", "prefix", "name", "revoked_at")
    return {token.pk: token_label(token) for token in tokens}


def event_token_label(token_id: uuid.UUID | None, labels: dict[uuid.UUID, str]) -> str:
    """An audit row's token in words: none for the admin's and commands' callers,
    and a deleted token by the start of its id (its events outlive it)."""
    if token_id is None:
        return "no token"
    return labels.get(token_id) or missing_token_label(token_id)
