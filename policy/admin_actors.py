"""Who an audit row names, in words: a principal's name, with the admin login
linked to it when that is another name. Both audit logs' admin pages (memory
events, policy events) show actors this way instead of a principal's UUID."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from policy.models import Principal


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
