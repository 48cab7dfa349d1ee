"""Other systems' ids for a tenant's memories (memory.models.MemoryAlias).

An import keeps each upstream id as an alias: a roampal client's
``memory_bank_1a2b3c4d``, a pce-memory client's ``clm_V184a1e4P25rXdbmPAku``, a
mem0 or Memento UUID. ``memory_pk`` is the core's id resolution: a memory's own
UUID or any alias the tenant holds names the memory, so every tool that takes an
id takes the id the client already had. ``aliases_of`` gives a dialect the
upstream id to show back for the memories it answers with."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from django.db import connection

from memory.errors import InvalidArgument
from memory.models import MemoryAlias
from policy.caller import Caller

ALIAS_MAX_CHARS = 300
_ALIASES_OF_SQL = (
    "SELECT memory_id, alias FROM memory_memoryalias WHERE memory_id = ANY(%s) AND system = %s ORDER BY id"
)


def _as_uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError):
        return None


def alias_targets(*, tenant_id: uuid.UUID, aliases: Iterable[str], system: str | None = None) -> dict[str, uuid.UUID]:
    """alias -> memory id for the aliases the tenant holds (one query). Where
    two systems gave the same string, the alias recorded first wins."""
    values = sorted({a for a in aliases if isinstance(a, str) and 0 < len(a) <= ALIAS_MAX_CHARS})
    if not values:
        return {}
    rows = MemoryAlias.objects.filter(tenant_id=tenant_id, alias__in=values)
    if system is not None:
        rows = rows.filter(system=system)
    found: dict[str, uuid.UUID] = {}
    for alias, memory_id in rows.order_by("id").values_list("alias", "memory_id"):
        found.setdefault(alias, memory_id)
    return found


def memory_alias_target(caller: Caller, value: object, *, system: str | None = None) -> uuid.UUID | None:
    """The memory an alias names in the caller's tenant, or None."""
    if not isinstance(value, str) or not value.strip() or "\x00" in value:  # no stored text holds NUL
        return None
    found = alias_targets(tenant_id=caller.tenant_id, aliases=[value.strip()], system=system)
    return next(iter(found.values()), None)


def memory_pk(caller: Caller, value: object, *, system: str | None = None) -> uuid.UUID:
    """The memory an id names in the caller's tenant: an alias the tenant holds
    (an imported memory's upstream id) or the memory's own UUID. An id that is
    neither is refused as validation.memory_id refuses it; a UUID that names
    nothing comes back as it is, for the caller's own not-found answer."""
    target = memory_alias_target(caller, value, system=system)
    if target is not None:
        return target
    pk = _as_uuid(value)
    if pk is None:
        raise InvalidArgument(f"id must be a UUID such as the ids returned by store and search (got {value!r}).")
    return pk


def aliases_of(memory_ids: Sequence[uuid.UUID], *, system: str) -> dict[uuid.UUID, str]:
    """memory id -> its id in ``system`` (the first recorded), for the memories that have one."""
    if not memory_ids:
        return {}
    found: dict[uuid.UUID, str] = {}
    # A fixed statement (every answer of pce's tools asks): no queryset built and compiled per call.
    with connection.cursor() as cursor:
        cursor.execute(_ALIASES_OF_SQL, [list(memory_ids), system])
        for memory_id, alias in cursor.fetchall():
            found.setdefault(memory_id, alias)
    return found
